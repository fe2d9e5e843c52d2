"""STS from the Hub: the converters on local files laid out like the Hub repositories
(``datasets.load_dataset`` redirected to them, so nothing reaches the network), and the
evaluation of the converted files: the pooled "all" score equal to the mirror's on the
same pairs, the scores a Hub copy cannot give left out and named in the report.

The Hub rows are made from the real mirror's pairs (a few per subset, shuffled as a
Hub copy would not keep SentEval's order), so both layouts hold the same pairs."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pytest

from contrastive_sentence_embeddings.configuration.strict import ParameterError, parse_strict
from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig
from contrastive_sentence_embeddings.data import sts_hub
from contrastive_sentence_embeddings.data.raw_file import RawFile, folder_partitions
from contrastive_sentence_embeddings.data.raw_sources import materialise_raw_source
from contrastive_sentence_embeddings.data.report import BadInputError, StepReport
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation import evaluator, sts
from tests.helpers import local_hub, write_hub_split

PER_SUBSET = 25  # pairs kept of each SentEval subset (and of STS-B / SICK)


def _rows(subsets: list[sts.StsSubset]) -> list[dict]:
    rows = [{"sentence1": a, "sentence2": b, "score": float(score)}
            for subset in subsets for a, b, score in zip(subset.sentence1, subset.sentence2, subset.scores)]
    random.Random(0).shuffle(rows)
    return rows


def _head(subset: sts.StsSubset, n: int = PER_SUBSET) -> sts.StsSubset:
    return sts.StsSubset(subset.task, subset.subset, subset.sentence1[:n], subset.sentence2[:n], subset.scores[:n])


@pytest.fixture(scope="module")
def small_mirror_suite(mirror_dir):
    """The first pairs of every subset of the real 7 test sets, as the mirror gives them."""
    suite = sts.read_sts_benchmark(folder_partitions(mirror_dir / "sts"), StepReport("t"))
    return {task: [_head(subset) for subset in subsets] for task, subsets in suite.items()}


@pytest.fixture(scope="module")
def hub_snapshot(small_mirror_suite, mirror_dir, tmp_path_factory):
    """Those pairs as the Hub repositories hold them: ``mteb/sts1X-sts`` and
    ``mteb/sickr-sts`` one ``test.jsonl.gz`` each (with an extra column the converter
    must ignore), ``mteb/stsbenchmark-sts`` parquet train/validation/test."""
    root = tmp_path_factory.mktemp("hub")
    for task in ("sts12", "sts13", "sts14", "sts15", "sts16", "sickr"):
        rows = [{**row, "split": "test"} for row in _rows(small_mirror_suite[task])]
        write_hub_split(root / sts_hub.HUB_REPOS[task], "test", rows)
    dev = sts.read_stsb_split(RawFile(mirror_dir / "sts" / sts.STSB_FILES["dev"]), "dev", StepReport("t"))
    splits = {"train": _rows([_head(dev, 10)]), "validation": _rows([_head(dev)]),
              "test": _rows(small_mirror_suite["stsb"])}
    for split, rows in splits.items():
        write_hub_split(root / sts_hub.HUB_REPOS["stsb"], split, rows, fmt="parquet")
    return root


@pytest.fixture(scope="module")
def converted(hub_snapshot, tmp_path_factory):
    """``materialise_raw_source('sts', mode='hub')`` on the snapshot, with one revision
    overridden: the staged folder and the ``load_dataset`` calls made."""
    with pytest.MonkeyPatch.context() as patch:
        calls = local_hub(patch, hub_snapshot, tmp_path_factory.mktemp("hf_cache"))
        stage = tmp_path_factory.mktemp("stage")
        files = materialise_raw_source("sts", mirror_dir=str(stage / "no-mirror"), mode="hub",
                                       hub_options={"revisions": {"sts13": "0123abc"}}, staging_dir=stage)
    return stage, files, calls


def _pairs(subsets) -> Counter:
    return Counter((a, b, float(s)) for subset in subsets for a, b, s in zip(subset.sentence1, subset.sentence2,
                                                                              subset.scores))


# --- the converters -------------------------------------------------------------------------
def test_hub_copies_become_the_mirror_layout_from_the_pinned_revisions(converted, small_mirror_suite):
    stage, files, calls = converted
    years = [f"STS1{y}-en-test/STS.{kind}.hub-pooled.txt" for y in range(2, 7) for kind in ("gs", "input")]
    assert sorted(files) == sorted([*years, "SICK/SICK_test_annotated.txt", "STSBenchmark/sts-dev.csv",
                                    "STSBenchmark/sts-test.csv", "STSBenchmark/sts-train.csv",
                                    sts_hub.PROVENANCE_FILE])
    requested = {(repo, split): revision for repo, split, revision in calls}
    for task, repo in sts_hub.HUB_REPOS.items():
        expected = "0123abc" if task == "sts13" else sts_hub.PINNED_REVISIONS[task]
        assert requested[(repo, "test")] == expected, task
    assert requested[("mteb/stsbenchmark-sts", "validation")] == sts_hub.PINNED_REVISIONS["stsb"]

    # read back by the evaluation's own readers: the same pairs and exactly the same scores
    converted_suite = sts.read_sts_benchmark(folder_partitions(stage), StepReport("t"), on_bad_input="error")
    for task, subsets in small_mirror_suite.items():
        assert _pairs(converted_suite[task]) == _pairs(subsets), task
        assert [s.pooled for s in converted_suite[task]] == [task in sts_hub.YEARS], task

    provenance = json.loads((stage / sts_hub.PROVENANCE_FILE).read_text())
    assert provenance["source"] == "hub"
    assert provenance["tasks"]["sts12"]["splits"]["test"]["rows"] == 5 * PER_SUBSET
    assert provenance["tasks"]["sts13"]["revision"] == "0123abc"


def test_rows_without_a_sentence_or_a_score_are_dropped_and_counted():
    rows = [{"sentence1": "a  man\tsings", "sentence2": "a man\nis singing", "score": 4},
            {"sentence1": " ", "sentence2": "x", "score": 1.0},
            {"sentence1": None, "sentence2": "x", "score": 1.0},
            {"sentence1": "a", "sentence2": "b", "score": None},
            {"sentence1": "a", "sentence2": "b", "score": "n/a"},
            {"sentence1": "a", "sentence2": "b", "score": float("nan")}]
    pairs, dropped = sts_hub.hub_pairs(rows, "repo split 'test'")
    assert pairs == [("a man sings", "a man is singing", 4.0)]
    assert dropped == {"blank sentence": 2, "score is not a number": 3}


def test_another_layout_is_an_error_naming_the_repository_and_its_columns():
    with pytest.raises(sts_hub.HubLayoutError, match=r"org/sick@abc split 'test': rows have no column\(s\) "
                                                     r"sentence1, sentence2, score \(columns: sentence_A"):
        sts_hub.hub_pairs([{"sentence_A": "a", "sentence_B": "b", "relatedness_score": 3.0}],
                          "org/sick@abc split 'test'")


def test_out_of_range_scores_are_left_to_the_reader_which_counts_them_per_line(tmp_path):
    sts_hub.write_pooled_year(tmp_path / "STS12-en-test", [("a", "b", 4.5), ("c", "d", 7.0), ("e", "f", 0.25)])
    report = StepReport("t")
    years = sts.read_sts_years(folder_partitions(tmp_path), report)
    assert years["STS12"][0].scores.tolist() == [4.5, 0.25]
    assert report.to_dict()["dropped"] == {"gold score outside 0-5": 1}
    assert report.to_dict()["examples"]["gold score outside 0-5"][0].endswith("STS.gs.hub-pooled.txt:2")


def test_options_are_parsed_strictly_and_a_replaced_repository_has_no_default_pin():
    with pytest.raises(ParameterError, match="raw_data.hub.sts.revison"):
        parse_strict(RawDataConfig, {"hub": {"sts": {"revison": {"sts12": "x"}}}}, "raw_data")
    with pytest.raises(ParameterError, match="unknown STS task\\(s\\) sts17"):
        parse_strict(RawDataConfig, {"hub": {"sts": {"revisions": {"sts17": "x"}}}}, "raw_data")
    options = sts_hub.StsHubOptions(repo_ids={"sickr": "someone/sick-test-only"}, revisions={"sts12": None})
    assert options.revision("sickr") is None  # our pin belongs to mteb/sickr-sts, not to this one
    assert options.revision("sts12") is None  # asked for the newest
    assert options.revision("sts14") == sts_hub.PINNED_REVISIONS["sts14"]


# --- the evaluation of converted files ----------------------------------------------------
def test_pooled_all_score_equals_the_mirrors_on_the_same_pairs(converted, small_mirror_suite, tiny_bert_dir):
    stage, _, _ = converted
    hub_suite = sts.read_sts_benchmark(folder_partitions(stage), StepReport("t"))
    encode = SentenceEncoder.load(str(tiny_bert_dir), "mean", device="cpu").encode
    from_mirror = sts.evaluate_sts(small_mirror_suite, encode)
    from_hub = sts.evaluate_sts(hub_suite, encode)
    for task in sts.STS_TASKS:
        assert from_hub[task] == pytest.approx(from_mirror[task], abs=1e-9), task
    assert from_hub["sts_avg"] == pytest.approx(from_mirror["sts_avg"], abs=1e-9)
    # the mirror's subsets give the weighted mean and per-subset scores; the Hub's cannot
    assert "sts12_wmean" in from_mirror and "sts12/MSRpar" in from_mirror and "sts_avg_wmean" in from_mirror
    assert not any(key.endswith("_wmean") and key[:5] in sts_hub.YEARS for key in from_hub)
    assert not any("/" in key for key in from_hub) and "sts_avg_wmean" not in from_hub
    assert from_hub["stsb_wmean"] == from_hub["stsb"]  # one set, not pooled: its own mean


def test_the_evaluator_marks_hub_data_in_every_metrics_file(converted, small_mirror_suite, tiny_bert_dir):
    stage, _, _ = converted
    settings = evaluator.EvaluationSettings(device="cpu", sts_bootstrap_resamples=20)
    data = evaluator.EvaluationData.read(folder_partitions(stage), {}, settings)
    result = evaluator.evaluate_models([evaluator.ModelSpec("tiny", str(tiny_bert_dir), "mean")], data,
                                       settings)["tiny"]
    assert all(np.isfinite(result[key]) for key in (*sts.STS_TASKS, "sts_avg", "alignment", "uniformity"))
    assert "sts12_wmean" not in result and "sts_avg_wmean" not in result
    report = result["evaluation_report"]
    assert report["sts_source"] == "hub"
    assert report["sts_hub"]["sts12"] == {"repo_id": "mteb/sts12-sts", "revision": sts_hub.PINNED_REVISIONS["sts12"]}
    unavailable = set(report["sts_unavailable"])
    assert {"sts12_wmean", "sts12/MSRpar", "sts13/FNWN", "sts16/question-question", "sts_avg_wmean"} <= unavailable
    assert not {"stsb_wmean", "sickr_wmean"} & unavailable
    assert any("sts12, sts13, sts14, sts15, sts16" in note and "sts12/MSRpar" in note for note in report["sts_notes"])
    assert any(note.startswith("sickr: mteb/sickr-sts is all of SICK") for note in report["sts_notes"])
    assert report["pairs"]["sts12"] == 5 * PER_SUBSET  # and the pair-count warnings as for any short set
    assert any(warning.startswith("sts12: evaluated on 125 pairs") for warning in report["warnings"])

    # the same evaluation on mirror files says so and lists nothing missing
    mirror = evaluator.EvaluationData(sts=small_mirror_suite)
    assert mirror.evaluation_report()["sts_source"] == "mirror"
    assert "sts_unavailable" not in mirror.evaluation_report()


def test_a_broken_provenance_file_is_an_error_naming_it(write_file, partitions):
    raw = write_file(sts_hub.PROVENANCE_FILE, "{not json")
    with pytest.raises(BadInputError, match=f"{sts_hub.PROVENANCE_FILE}: not a JSON provenance record"):
        sts.read_sts_provenance(partitions({sts_hub.PROVENANCE_FILE: raw}))
    assert sts.read_sts_provenance({}) == {"source": "mirror"}


def test_model_selection_on_hub_data_has_stsb_dev_only(converted, tiny_bert_dir, mirror_dir, tmp_path):
    stage, _, _ = converted
    scorer = sts.DevScorer(folder_partitions(stage))
    scores = scorer(SentenceEncoder.load(str(tiny_bert_dir), "mean", device="cpu").encode)
    assert list(scores) == ["stsb_dev"] and np.isfinite(scores["stsb_dev"])  # no dev_avg of one set
    # a mirror without its SICK trial file is still an error
    (tmp_path / "STSBenchmark").mkdir()
    (tmp_path / "STSBenchmark" / "sts-dev.csv").write_bytes((mirror_dir / "sts" / sts.STSB_FILES["dev"]).read_bytes())
    with pytest.raises(FileNotFoundError, match="SICK/SICK_trial.txt"):
        sts.DevScorer(folder_partitions(tmp_path))
