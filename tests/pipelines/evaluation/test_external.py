"""``kedro run --pipelines=external``: any encoder scored on the harness as its own
leaderboard row, through Kedro on the real evaluation data, with a tiny random encoder
standing in for the default one; and the leaderboard's ``reference`` row."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from contrastive_sentence_embeddings.configuration.blocks import ExternalConfig
from contrastive_sentence_embeddings.configuration.strict import ParameterError, parse_strict
from contrastive_sentence_embeddings.pipelines.parameter_blocks import external_block, validate_parameters
from contrastive_sentence_embeddings.configuration.loader import project_parameters
from tests.helpers import PROJECT_ROOT, ScratchProject

pytestmark = pytest.mark.integration

STS_KEYS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "sts_avg", "sts_avg_wmean", "alignment",
            "uniformity")


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    overrides = {"encoder": str(tiny_bert_dir),
                 "evaluation": {"transfer_tasks": ["TREC"], "k_folds": 3, "sts_bootstrap_resamples": 50},
                 "leaderboard": {"bootstrap_resamples": 200}}
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir, overrides)
    scratch.run(["baseline"])
    before = (scratch.root / "data/08_reporting/metrics/baseline-mean.json").read_bytes()
    # The project's own encoder, as a user would name a released model: the same folder, scored as a row of its own.
    scratch.run(["external"], params={"external": {"model": str(tiny_bert_dir), "name": "tiny-external"}})
    scratch.baseline_before = before
    yield scratch
    scratch.close()


def read(root, name, folder="metrics"):
    return json.loads((root / "data/08_reporting" / folder / f"{name}.json").read_text())


def board(root):
    return pd.read_csv(root / "data/08_reporting/leaderboard.csv").set_index("model")


def test_the_encoder_scored_as_an_external_row_equals_the_baseline_row_to_the_last_digit(project, tiny_bert_dir):
    external, baseline = read(project.root, "tiny-external"), read(project.root, "baseline-mean")
    assert external["model"]["method"] == "external" and external["model"]["pooling"] == "mean"
    assert external["model"]["path"] == str(tiny_bert_dir)
    assert external["model_fingerprint"] == baseline["model_fingerprint"]
    for key in STS_KEYS:
        assert external[key] == baseline[key], key  # exactly: the same encoding and scoring path
    assert external["provenance"]["parameters"] == {"encoder": str(tiny_bert_dir), "pooling": "mean"}
    # the baseline's own row is untouched
    assert (project.root / "data/08_reporting/metrics/baseline-mean.json").read_bytes() == project.baseline_before
    pairs = np.load(project.root / "data/07_model_output/sts_pairs/tiny-external.npz")
    assert len(pairs.files) > 0
    report = json.loads((project.root / "data/08_reporting/mteb/tiny-external/export_report.json").read_text())
    assert report["run"] == "tiny-external" and report["revision"] == external["model_fingerprint"]


def test_the_external_row_is_current_and_tested_against_the_baseline_of_its_encoder(project):
    table = board(project.root)
    row = table.loc["tiny-external"]
    assert row["method"] == "external" and row["status"] == "current", row["status_reason"]
    assert row["sts_avg"] == pytest.approx(table.loc["baseline-mean", "sts_avg"], abs=1e-4)
    # the same predictions: no difference, and the bootstrap cannot call it one
    assert row["delta_vs_base"] == 0 and row["p_vs_base"] == 1
    assert "external" in str(row["transfer_note"]) and "external.transfer=true" in str(row["transfer_note"])
    markdown = (project.root / "data/08_reporting/leaderboard.md").read_text()
    assert "| tiny-external | external |" in markdown
    summary = json.loads((project.root / "data/08_reporting/summary.json").read_text())
    assert summary["tiny-external"]["sts_avg"] == summary["baseline"]["mean"]
    assert "tasks_not_scored" not in summary["tiny-external"]  # an empty not_scored cell names no task


def test_a_reference_row_tests_every_other_row_against_it(project):
    project.run(["leaderboard"], params={"leaderboard": {"reference": "baseline-mean"}})
    table = board(project.root)
    assert set(table["reference"]) == {"baseline-mean"}
    assert table.loc["tiny-external", "delta_vs_ref"] == 0 and table.loc["tiny-external", "p_vs_ref"] == 1
    other = table.loc["baseline-cls"]
    assert other["delta_vs_ref"] == pytest.approx(other["sts_avg"] - table.loc["baseline-mean", "sts_avg"], abs=0.01)
    assert 0 < other["p_vs_ref"] <= 1
    assert table.loc["baseline-mean", "vs_ref_note"] == "n/a (the reference)"
    markdown = (project.root / "data/08_reporting/leaderboard.md").read_text()
    assert "vs baseline-mean" in markdown and "`leaderboard.reference`" in markdown
    summary = json.loads((project.root / "data/08_reporting/summary.json").read_text())
    assert summary["tiny-external"]["vs_ref"] == 0
    # the paper table and figure come with every leaderboard, against the same reference
    paper = (project.root / "data/08_reporting/paper_table.md").read_text()
    assert "| tiny-external (mean) |" in paper and "the reference row baseline-mean" in paper
    assert r"\begin{tabular}" in (project.root / "data/08_reporting/paper_table.tex").read_text()
    assert (project.root / "data/08_reporting/sts_comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_reference_that_names_no_row_says_so_in_every_row(project):
    project.run(["leaderboard"], params={"leaderboard": {"reference": "simcse"}})
    table = board(project.root)
    assert set(table["vs_ref_note"]) == {"no row simcse in this checkout"}
    assert table["p_vs_ref"].isna().all()


def test_the_transfer_tasks_join_the_external_row_and_it_stays_current(project, tiny_bert_dir):
    project.run(["external"], params={"external": {"model": str(tiny_bert_dir), "name": "tiny-transfer",
                                                   "transfer": True}})
    record = read(project.root, "tiny-transfer")
    assert "TREC" in record and record["sts_avg"] == read(project.root, "baseline-mean")["sts_avg"]
    row = board(project.root).loc["tiny-transfer"]
    assert row["status"] == "current", row["status_reason"]
    assert not math.isnan(row["TREC"])


def test_a_name_of_the_projects_own_rows_is_refused_before_scoring(project, tiny_bert_dir):
    before = (project.root / "data/08_reporting/metrics/baseline-mean.json").read_bytes()
    with pytest.raises(ValueError, match="baseline-mean.*name of the project's own rows"):
        project.run(["external"], params={"external": {"model": str(tiny_bert_dir), "name": "baseline-mean"}})
    with pytest.raises(ValueError, match="external.model is not set"):
        project.run(["external"])
    assert (project.root / "data/08_reporting/metrics/baseline-mean.json").read_bytes() == before


def test_the_block_is_parsed_strictly():
    assert ExternalConfig(model="org/some-model").row_name() == "external-some-model"
    assert ExternalConfig(model="/models/my model/").row_name() == "external-my-model"
    with pytest.raises(ParameterError, match="modle"):
        parse_strict(ExternalConfig, {"modle": "x"}, "external")
    with pytest.raises(ParameterError, match="external.pooling = 'max': must be one of cls, "):
        external_block({"model": "x", "pooling": "max"})
    with pytest.raises(ParameterError, match="external.pooling"):  # with the whole parameter set, before any node
        validate_parameters({**project_parameters(PROJECT_ROOT), "external": {"model": "x", "pooling": "max"}})
    with pytest.raises(ParameterError, match="external.name"):
        parse_strict(ExternalConfig, {"model": "x", "name": "a/b"}, "external")
