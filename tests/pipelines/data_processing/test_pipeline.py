"""The raw_data and data_processing pipelines end to end, through Kedro, on the real
data sets of the offline mirror. Expected values are recomputed here from the raw
files by simpler means, not copied from a previous run."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pandas as pd
from datasets import load_from_disk
import pytest
import yaml

from contrastive_sentence_embeddings.data.raw_sources import RAW_SOURCES
from tests.helpers import ScratchProject

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir):
    """A copy of the project's configuration in a scratch folder, run once."""
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir)
    scratch.run(["raw_data", "data_processing"])
    params = yaml.safe_load((scratch.root / "conf/base/parameters_data_processing.yml").read_text())["data_processing"]
    yield scratch.root, params
    scratch.close()


def read_arrow(folder):
    """A prepared data set the catalog wrote as an ArrowDataset folder, as a table."""
    import datasets

    return datasets.load_from_disk(str(folder)).to_pandas()


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_raw_data_is_a_byte_identical_copy_of_the_mirror(project, mirror_dir):
    root, _ = project
    for source in RAW_SOURCES.values():
        expected = {p.relative_to(mirror_dir / source.mirror_subdir): sha256(p) for p in (mirror_dir / source.mirror_subdir).rglob("*") if p.is_file()}
        copied = {p.relative_to(root / "data/01_raw" / source.name): sha256(p) for p in (root / "data/01_raw" / source.name).rglob("*") if p.is_file()}
        assert copied == expected, source.name


def test_sampled_sentences(project, mirror_dir):
    root, params = project
    settings = params["wiki_sentences"]
    sentences = read_arrow(root / "data/05_model_input/wiki_sentences")
    assert len(sentences) == settings["n_sentences"]
    assert sentences["sentence"].str.casefold().is_unique
    assert not sentences["sentence"].str.contains("<unk>", regex=False).any()
    words = sentences["sentence"].str.split().map(len)
    assert words.between(settings["min_words"], settings["max_words"]).all()
    # Both inputs contribute, and every sentence can be found at its recorded line.
    sources = sentences["source"].str.rsplit(":", n=1).str[0]
    assert set(sources) == {"data/01_raw/wiki/wiki1m_head.txt", "data/01_raw/longdocs/wikitext-2.valid.txt", "data/01_raw/longdocs/wikitext-2.test.txt"}
    lines = {name: (root / name).read_text(encoding="utf-8").splitlines() for name in set(sources)}
    for sentence, source in sentences.sample(200, random_state=0)[["sentence", "source"]].values:
        name, number = source.rsplit(":", 1)
        line = " ".join(lines[name][int(number) - 1].split())
        if name.endswith("wiki1m_head.txt"):
            assert line == sentence
        else:  # WikiText lines are tokenised: compare the words without punctuation
            assert re.sub(r"\W+", "", sentence) in re.sub(r"\W+", "", line.replace("@-@", "-"))


def test_long_documents_and_their_spans(project, mirror_dir):
    root, params = project
    documents = load_from_disk(str(root / "data/03_primary/long_documents")).to_pandas()
    minimum = params["long_documents"]["min_doc_tokens"]
    assert (documents["n_tokens"] >= minimum).all()
    assert (documents["input_ids"].map(len) == documents["n_tokens"]).all()
    # The OpenWebText samples are all shorter than the CPU minimum: the filter drops them.
    assert documents["doc_id"].str.startswith("wikitext-2.").all()
    articles = sum(
        len(re.findall(r"^ = [^=].* = $", (mirror_dir / f"longdocs/wikitext-2.{s}.txt").read_text(), flags=re.M)) for s in ("valid", "test")
    )
    assert 0.8 * articles <= len(documents) <= articles

    spans = load_from_disk(str(root / "data/05_model_input/declutr_spans")).to_pandas()
    settings = params["declutr_spans"]
    lengths = dict(zip(documents["doc_id"], documents["n_tokens"]))
    assert set(spans["doc_id"]) <= set(lengths)
    assert (spans.groupby(["epoch", "doc_id"]).size() == settings["num_anchors"]).all()
    low, high = settings["min_length"], settings["max_length"]
    for row in spans.itertuples():
        assert low <= row.anchor_end - row.anchor_start <= high
        assert 0 <= row.anchor_start and row.anchor_end <= lengths[row.doc_id]
        for start, end in zip(row.positive_starts, row.positive_ends):
            assert low <= end - start <= high and 0 <= start and end <= lengths[row.doc_id]
            assert row.anchor_start - (end - start) <= start <= row.anchor_end
    for _, group in spans.groupby(["epoch", "doc_id"]):
        ordered = group.sort_values("anchor_start")
        gaps = ordered["anchor_start"].to_numpy()[1:] - ordered["anchor_end"].to_numpy()[:-1]
        assert (gaps >= settings["anchor_gap"]).all()


def test_stsb_pairs_match_a_direct_reading_of_the_file(project, mirror_dir):
    root, params = project
    pairs = read_arrow(root / "data/05_model_input/stsb_pairs")
    raw = pd.read_csv(mirror_dir / "sts/STSBenchmark/sts-train.csv", sep="\t", header=None, quoting=3, usecols=[4, 5, 6])
    above = raw[raw[4] > params["stsb_pairs"]["min_score"]]
    unordered = {tuple(sorted((a.casefold().strip(), b.casefold().strip()))) for a, b in zip(above[5], above[6])}
    assert len(pairs) == len(unordered)
    assert (pairs["score"] > 4).all() and set(pairs["split"]) == {"train"}


def test_nli_pairs_match_a_direct_reading_of_the_files(project, mirror_dir):
    root, _ = project
    pairs = read_arrow(root / "data/05_model_input/nli_pairs")
    expected = set()
    for split in ("dev", "test"):
        read = lambda name: (mirror_dir / f"nli/snli/{name}.{split}").read_text(encoding="utf-8").splitlines()  # noqa: E731
        for premise, hypothesis, label in zip(read("s1"), read("s2"), read("labels")):
            if label == "entailment":
                expected.add((" ".join(premise.split()).casefold(), " ".join(hypothesis.split()).casefold()))
    assert len(pairs) == len(expected)
    assert set(pairs["split"]) == {"snli/dev", "snli/test"}


def test_the_data_report_accounts_for_every_row(project):
    root, _ = project
    report = {}
    for path in (root / "data/08_reporting/data_report").glob("*.json"):  # one file per step, named after it
        step = json.loads(path.read_text())
        assert set(step) == {path.stem}
        report.update(step)
    assert set(report) == {"sentence_candidates", "wiki_sentences", "long_documents", "declutr_spans", "stsb_pairs", "nli_pairs"}
    for step, counts in report.items():
        assert counts["rows_dropped"] == sum(counts["dropped"].values()), step
        if step != "sentence_candidates":  # sentence splitting turns lines into sentences
            assert counts["rows_in"] == counts["rows_out"] + counts["rows_dropped"], step


def test_kedro_viz_builds_the_static_site(project):
    root, _ = project
    result = subprocess.run(
        [sys.executable, "-m", "kedro", "viz", "build"], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    graph = json.loads((root / "build/api/main").read_text())
    tasks = {node["name"] for node in graph["nodes"] if node["type"] == "task"}
    assert {"ingest_wiki", "sample_declutr_spans", "extract_nli_pairs"} <= tasks
    # The data sets sit in Kedro's data layers, raw -> ... -> reporting.
    assert {"raw", "intermediate", "primary", "model_input", "models", "reporting"} <= set(graph["layers"])
