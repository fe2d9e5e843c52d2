"""Through Kedro, as a user runs it: a method trained here for two seeds records what
produced each result, the leaderboard calls its rows current, a committed record with
no model here carried, and the same rows stale once a parameter changes."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from contrastive_sentence_embeddings.records import provenance
from tests.helpers import PROJECT_ROOT, ScratchProject, base_parameters

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    simcse = base_parameters("simcse", max_steps=2, eval_every=2, batch_size=16)
    simcse.update(seeds=[1, 2], max_examples=64)
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir,
                             {"encoder": str(tiny_bert_dir), "simcse": simcse})
    # What a fresh clone holds: the repository's DeCLUTR record, and no model behind it.
    metrics = scratch.root / "data/08_reporting/metrics"
    metrics.mkdir(parents=True)
    shutil.copy(PROJECT_ROOT / "data/08_reporting/metrics/declutr.json", metrics)
    scratch.run(["simcse"])
    yield scratch
    scratch.close()


def leaderboard_rows(project) -> pd.DataFrame:
    return pd.read_csv(project.root / "data/08_reporting/leaderboard.csv", keep_default_na=False).set_index("model")


def test_the_model_and_every_metrics_record_say_what_produced_them(project):
    folder = project.root / "data/06_models/simcse/seed1"
    trained = json.loads((folder / "cse_metadata.json").read_text())["provenance"]
    block = trained["parameters"]
    assert block["training"]["seed"] == 1 and block["training"]["max_steps"] == 2 and block["seeds"] == [1, 2]
    assert trained["params_hash"] == provenance.params_hash(block) and trained["seed"] == 1
    assert trained["training"]["code"] == {"commit": "unknown", "dirty": None,  # the scratch copy is no repository
                                           "source_hash": provenance.source_hash()}
    sentences = trained["training"]["data"]["sentences"]
    assert sentences["dataset"] == "wiki_sentences" and sentences["rows"] > 64 and len(sentences["fingerprint"]) > 8

    record = json.loads((project.root / "data/08_reporting/metrics/simcse.seed1.json").read_text())
    recorded = record["provenance"]
    assert {key: recorded[key] for key in ("parameters", "params_hash", "config_hash", "seed", "training")} == \
        {key: trained[key] for key in ("parameters", "params_hash", "config_hash", "seed", "training")}
    assert recorded["model"] == {"path": "data/06_models/simcse/seed1", "fingerprint": record["model_fingerprint"]}
    scoring = recorded["evaluation"]
    assert set(scoring["data"]) == {"sts", "alignment"} and scoring["evaluated_at"] == record["evaluated_at"]
    assert scoring["settings_hash"] == provenance.sha256_of(scoring["settings"]) and "batch_size" not in \
        scoring["settings"]
    # how the encodings ran: beside the settings, not in their hash
    assert scoring["execution"] == {"device": "cpu", "precision": "cpu-fp32", "batch_size": 128,
                                    "attention_backends": ["flash", "efficient", "math"]}
    assert "attention_backends" not in scoring["settings"]
    summary = json.loads((project.root / "data/08_reporting/metrics/simcse.json").read_text())
    assert sorted(summary["provenance"]["runs"]) == ["simcse.seed1", "simcse.seed2"]
    assert summary["provenance"]["config_hash"] == recorded["config_hash"] and "left_out" not in summary


def test_the_leaderboard_tells_current_from_carried_and_why_cells_are_empty(project):
    rows = leaderboard_rows(project)
    for model in ("simcse", "simcse.seed1", "simcse.seed2"):
        assert rows.loc[model, "status"] == "current", rows.loc[model, "status_reason"]
    assert rows.loc["declutr", "status"] == "carried"
    # The committed DeCLUTR row (the results of record: one run per seed), no model here.
    committed = json.loads((PROJECT_ROOT / "data/08_reporting/metrics/declutr.json").read_text())
    runs = sorted((committed.get("provenance") or {}).get("runs") or {}) or ["declutr"]
    assert rows.loc["declutr", "status_reason"] == "; ".join(
        (f"{run}: " if run != "declutr" else "") + f"no model at data/06_models/{run.replace('.', '/')}"
        for run in runs)
    # The method's pipeline scored the baseline its `vs base` is tested against (a fresh
    # clone's row is complete); the empty-cell reasons are unit-tested in test_leaderboard.
    assert rows.loc["simcse", "vs_base_note"] == "" and float(rows.loc["simcse", "p_vs_base"]) <= 1
    assert rows.loc["baseline-cls_before_pooler", "status"] == "current"
    assert rows.loc["simcse", "transfer_note"] == "not run: kedro run --namespaces=transfer.simcse"
    markdown = (project.root / "data/08_reporting/leaderboard.md").read_text()
    own, carried = markdown.split("## Carried from the repository", 1)
    assert "| declutr |" in carried and "| declutr |" not in own


def test_a_changed_parameter_makes_the_rows_stale(project):
    project.run(["leaderboard"], params={"simcse": {"training": {"max_steps": 3}}})
    rows = leaderboard_rows(project)
    assert rows.loc["simcse.seed1", "status"] == "stale"
    assert rows.loc["simcse.seed1", "status_reason"] == "parameters changed: training.max_steps 2 -> 3"
    assert rows.loc["simcse", "status"] == "stale" and "simcse.seed2: parameters changed" in \
        rows.loc["simcse", "status_reason"]
    assert rows.loc["declutr", "status"] == "carried"
    project.run(["leaderboard"])  # today's parameters again: current again
    assert leaderboard_rows(project).loc["simcse.seed1", "status"] == "current"


def test_the_table_summary_and_paper_table_round_each_score_once(project):
    """leaderboard.csv holds each record's scores at full precision, so the summary and
    the paper table, which read it, round a score once: what the record rounds to."""
    rows = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv").set_index("model")
    summary = json.loads((project.root / "data/08_reporting/summary.json").read_text())
    paper = (project.root / "data/08_reporting/paper_table.md").read_text()
    for model in ("simcse", "simcse.seed1", "baseline-cls_before_pooler"):
        record = json.loads((project.root / f"data/08_reporting/metrics/{model}.json").read_text())
        for task in ("sts12", "sickr", "sts_avg"):
            assert rows.loc[model, task] == record[task], (model, task)  # the exact float, not 4 decimals
    simcse = json.loads((project.root / "data/08_reporting/metrics/simcse.json").read_text())
    assert summary["simcse"]["sts_avg"] == round(simcse["sts_avg"], 2)
    [line] = [line for line in paper.splitlines() if line.startswith("| simcse (n=2 seeds) |")]
    assert line.split("|")[-2].strip().split(" ")[0] == f"{simcse['sts_avg']:.2f}"
