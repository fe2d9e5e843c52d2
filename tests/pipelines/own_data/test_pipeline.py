"""Training on your own data, end to end through Kedro with a tiny random encoder, one
method of each data family: files written here -> the method's own preparation
(cleaned, filtered, counted in a data report) -> training -> saved model -> STS metrics
-> leaderboard row.

* SimCSE on a text file given only by ``--params "simcse.data.sentences=<path>"``
  (runtime parameters: they must reach the graph, which gains a preparation node);
* DeCLUTR on a folder of ``.txt`` documents, CLSR on a CSV of scored pairs, both set
  in ``conf/local`` as a user's machine would.
"""

from __future__ import annotations

import json
import random

import datasets
import pandas as pd
from datasets import load_from_disk
import pytest

from tests.helpers import ScratchProject, base_parameters

pytestmark = pytest.mark.integration

WORDS = ("river market stone winter garden letter engine harbour silver forest window candle mountain "
         "teacher orange bridge pocket thunder island kitchen").split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 12))).capitalize() + "."


def write_sentences(path, n: int = 60) -> int:
    """``n`` distinct sentences with bad lines between them: a blank line, a line that
    is neither UTF-8 nor the fallback Windows-1252 (0x81 is in neither) and a
    duplicate. Returns ``n``."""
    rng = random.Random(0)
    sentences = list(dict.fromkeys(sentence(rng) for _ in range(3 * n)))[:n]
    lines = [s.encode() for s in sentences]
    lines[10:10] = [b"", b"caf\x81 noir", sentences[0].encode()]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return n


def write_documents(folder, n: int = 6) -> None:
    rng = random.Random(1)
    folder.mkdir()
    for i in range(n):
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(3)]
        (folder / f"doc{i}.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    (folder / "short.txt").write_text("Too short to sample spans from.\n", encoding="utf-8")
    (folder / "README.md").write_text("not a document\n", encoding="utf-8")


def write_pairs(path, n: int = 48) -> int:
    """``n`` pairs scored above 3 and, among them, rows the source must filter or count:
    low scores, a non-numeric score, a missing second text. Returns ``n``."""
    rng = random.Random(2)
    rows = [(sentence(rng), sentence(rng), round(rng.uniform(3.5, 5.0), 2)) for _ in range(n)]
    rows += [(sentence(rng), sentence(rng), 1.0), (sentence(rng), sentence(rng), 2.5)]
    frame = pd.DataFrame(rows, columns=["query", "passage", "relevance"]).astype({"relevance": object})
    frame.loc[len(frame)] = [sentence(rng), sentence(rng), "high"]
    frame.loc[len(frame)] = [sentence(rng), None, 4.5]
    frame.to_csv(path, index=False)
    return n


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    root = tmp_path_factory.mktemp("project")
    simcse = base_parameters("simcse", max_steps=2, eval_every=2, batch_size=16, learning_rate=1e-4)
    simcse["seeds"] = None
    declutr = base_parameters("declutr", batch_size=2, epochs=1, max_steps=2, eval_every=2, log_every=1)
    declutr.update(seeds=None, data={"documents": {"path": "my_documents", "min_tokens": 100}})
    clsr = base_parameters("clsr_stsb", epochs=2, batch_size=16, eval_every=4, log_every=2)
    clsr["data"] = {"pairs": {"path": "my_pairs.csv", "column1": "query", "column2": "passage",
                              "score": "relevance", "min_score": 3.0}}
    spans = {"num_anchors": 2, "num_positives": 2, "min_length": 8, "max_length": 16, "anchor_gap": 0, "epochs": 1}
    scratch = ScratchProject(root, mirror_dir, {"encoder": str(tiny_bert_dir), "simcse": simcse,
                                                "declutr": declutr, "clsr_stsb": clsr,
                                                "data_processing": {"declutr_spans": spans}})
    scratch.sentences = write_sentences(root / "my_sentences.txt")
    write_documents(root / "my_documents")
    scratch.pairs = write_pairs(root / "my_pairs.csv")
    yield scratch
    scratch.close()


# One run per method, each only when a test asks for it.
@pytest.fixture(scope="module")
def simcse_run(project):
    # What `kedro run --pipelines=simcse --params "simcse.data.sentences=my_sentences.txt"` passes.
    project.run(["simcse"], params={"simcse": {"data": {"sentences": "my_sentences.txt"}}})
    return project


@pytest.fixture(scope="module")
def declutr_run(project):
    project.run(["declutr"])
    return project


@pytest.fixture(scope="module")
def clsr_run(project):
    project.run(["clsr_stsb"])
    return project


def report(project, step: str) -> dict:
    return json.loads((project.root / f"data/08_reporting/data_report/{step}.json").read_text())[step]


def metadata(project, method: str) -> dict:
    return json.loads((project.root / f"data/06_models/{method}/cse_metadata.json").read_text())


def on_the_leaderboard(project, method: str) -> bool:
    metrics = json.loads((project.root / f"data/08_reporting/metrics/{method}.json").read_text())
    table = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv")
    return metrics["model"]["name"] == method and method in set(table["model"])


def test_simcse_trains_on_a_text_file_given_by_runtime_params(simcse_run):
    project = simcse_run
    counts = report(project, "simcse.sentences")
    assert counts["source"] == "my_sentences.txt"
    assert counts["rows_in"] == project.sentences + 3 and counts["rows_out"] == project.sentences
    assert counts["dropped"] == {"blank sentence": 1, "duplicate": 1, "neither utf-8 nor cp1252": 1}
    assert counts["examples"]["neither utf-8 nor cp1252"] == ["my_sentences.txt:12 (byte 3)"]
    prepared = datasets.load_from_disk(str(project.root / "data/05_model_input/own/simcse/sentences")).to_pandas()
    assert len(prepared) == project.sentences and prepared["sentence"].is_unique
    saved = metadata(project, "simcse")
    assert saved["method"] == "simcse" and saved["train_sentences"] == project.sentences and saved["steps"] == 2
    assert on_the_leaderboard(project, "simcse")
    # Nothing of the built-in sentences was read or prepared: own data needs no mirror of them.
    assert not (project.root / "data/01_raw/wiki").exists()
    assert not (project.root / "data/05_model_input/wiki_sentences").exists()


def test_declutr_trains_on_a_folder_of_documents_with_their_own_spans(declutr_run):
    project = declutr_run
    documents = report(project, "declutr.documents")
    assert documents["rows_in"] == 7 and documents["rows_out"] == 6
    assert documents["dropped"] == {"fewer than 100 tokens": 1}
    assert documents["examples"]["fewer than 100 tokens"] == ["my_documents/short.txt"]
    spans = report(project, "declutr.spans")
    assert spans["rows_in"] == 6 and spans["rows_out"] == 6 and spans["anchor_rows"] == 12
    table = load_from_disk(str(project.root / "data/05_model_input/own/declutr/spans")).to_pandas()
    assert set(table["doc_id"]) == {f"doc{i}.txt" for i in range(6)}
    assert ((table["anchor_end"] - table["anchor_start"]).between(8, 16)).all()
    saved = metadata(project, "declutr")
    assert saved["method"] == "declutr" and saved["train_documents"] == 6 and saved["steps"] == 2
    assert on_the_leaderboard(project, "declutr")
    assert not (project.root / "data/03_primary/long_documents").exists()


def test_clsr_trains_on_scored_pairs_above_the_threshold(clsr_run):
    project = clsr_run
    counts = report(project, "clsr_stsb.pairs")
    assert counts["rows_in"] == project.pairs + 4 and counts["rows_out"] == project.pairs
    assert counts["dropped"] == {"passage: missing text": 1, "relevance: score is not a number": 1, "score <= 3": 2}
    saved = metadata(project, "clsr_stsb")
    assert saved["method"] == "clsr" and saved["train_pairs"] == project.pairs
    assert saved["pairs_dataset"] == "my_pairs.csv"
    assert on_the_leaderboard(project, "clsr_stsb")
    assert not (project.root / "data/05_model_input/stsb_pairs").exists()


def test_a_source_with_nothing_usable_stops_the_run_and_still_writes_its_data_report(project):
    """A gzip file named ``.txt`` (every line is bad): the run stops with an error naming
    the file and why, and the step's data report, marked stopped, says so in counts
    (written by the project's hook: the node returns nothing)."""
    import gzip

    (project.root / "packed.txt").write_bytes(gzip.compress("\n".join(
        sentence(random.Random(i)) for i in range(3000)).encode()))
    written = "data/08_reporting/data_report/simcse.sentences.json"
    (project.root / written).unlink(missing_ok=True)
    with pytest.raises(Exception, match=rf"packed.txt: not a text file: .*\(the counts: {written}\)") as error:
        project.run(["simcse"], params={"simcse": {"data": {"sentences": "packed.txt"}}},
                    node_names=["simcse.prepare_sentences"])
    counts = report(project, "simcse.sentences")
    assert counts["stopped"] == str(error.value).removesuffix(f" (the counts: {written})")
    assert counts["source"] == "packed.txt" and counts["rows_in"] > 0 and counts["rows_out"] == 0
