"""``baseline``, ``evaluation`` (the transfer instances) and the leaderboard end to end through Kedro, on the real
evaluation data, with a tiny random encoder standing in for the default one."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE
from contrastive_sentence_embeddings.encoders.pooling import POOLING_METHODS
from tests.helpers import ScratchProject

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    overrides = {
        "encoder": str(tiny_bert_dir),
        "transfer_evaluation": {"baseline_poolings": ["mean"],
                                "evaluation": {"transfer": True, "transfer_tasks": ["TREC", "MRPC"], "k_folds": 3}},
    }
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir, overrides)
    scratch.run(["baseline"])
    yield scratch
    scratch.close()


def read_metrics(root, folder="metrics"):
    return {p.stem: json.loads(p.read_text()) for p in (root / "data/08_reporting" / folder).glob("*.json")}


def test_baseline_scores_every_pooling(project):
    metrics = read_metrics(project.root)
    assert set(metrics) == {f"baseline-{pooling}" for pooling in POOLING_METHODS}
    for name, result in metrics.items():
        assert result["model"]["method"] == "baseline"
        assert {"sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr", "sts_avg", "sts_avg_wmean",
                "alignment", "uniformity"} <= set(result), name
        assert "MR" not in result  # transfer tasks are off for the baseline by default
    assert metrics["baseline-mean"]["sts_avg"] == metrics["baseline-last_avg"]["sts_avg"]  # aliases
    assert metrics["baseline-mean"]["sts_avg"] != metrics["baseline-cls"]["sts_avg"]


def test_each_pooling_gets_its_mteb_results_folder(project):
    """``kedro run --pipelines=baseline`` writes MTEB's result files of every pooling,
    each holding the metrics file's scores on MTEB's 0-1 scale."""
    metrics = read_metrics(project.root)
    folders = {p.name: p for p in (project.root / "data/08_reporting/mteb").iterdir()}
    assert set(folders) == set(metrics)
    for name, folder in folders.items():
        report = json.loads((folder / "export_report.json").read_text())
        assert report["run"] == name and report["revision"] == metrics[name]["model_fingerprint"]
        [stsb] = folder.glob("results/*/*/STSBenchmark.json")
        score = json.loads(stsb.read_text())["scores"]["test"][0]["main_score"]
        assert score == metrics[name]["stsb"] / 100
        assert "SICK-R" in report["not_written"]  # SentEval's SICK test split is not MTEB's SICK-R


def test_leaderboard_has_a_row_per_metrics_file(project):
    table = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv")
    assert sorted(table["model"]) == sorted(read_metrics(project.root))
    markdown = (project.root / "data/08_reporting/leaderboard.md").read_text()
    assert "| baseline-first_last_avg | baseline |" in markdown
    assert "Reported in the papers" in markdown and "Gao et al. 2021" in markdown
    assert (project.root / "data/08_reporting/alignment_uniformity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluation_pipeline_scores_trained_models_with_transfer(project, tiny_bert_dir):
    """A model where the catalog keeps scd's (data/06_models/scd), scored by its
    transfer instance, ``transfer.scd``, beside the baseline's transfer node."""
    model_dir = project.root / "data/06_models/scd"
    shutil.copytree(tiny_bert_dir, model_dir)
    (model_dir / METADATA_FILE).write_text(json.dumps(
        {"name": "scd", "method": "scd", "base_encoder": "tiny", "pooling": "cls_before_pooler", "seed": 7}))
    project.run(["evaluation"], node_names=["transfer.scd.evaluate", "baseline.transfer"])
    project.run(["leaderboard"])
    metrics = read_metrics(project.root, "metrics_full")
    assert set(metrics) == {"scd", "baseline-mean"}
    assert metrics["scd"]["model"]["seed"] == 7
    assert metrics["scd"]["model"]["path"] == "data/06_models/scd"  # relative to the project root
    for name in ("scd", "baseline-mean"):
        assert {"TREC", "MRPC", "MRPC_f1"} <= set(metrics[name]), name
        # STS is scored once, by the model's own evaluation (metrics/<name>.json), not again here
        assert "sts_avg" not in metrics[name] and "uniformity" not in metrics[name], name
    assert "TREC" not in read_metrics(project.root)["baseline-mean"]  # the STS-only file is untouched
    table = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv").set_index("model")
    assert len(table) == 6 and table.loc["scd", "method"] == "scd"
    assert table["TREC"].notna().sum() == 2  # the re-scored baseline-mean row gained its transfer columns
    # ... and kept its STS scores: the two files scored the same weights, so the row joins them
    assert table.loc["baseline-mean", "sts_avg"] == pytest.approx(read_metrics(project.root)["baseline-mean"]["sts_avg"],
                                                                  abs=1e-4)
    assert table.loc["scd", "TREC"] == pytest.approx(metrics["scd"]["TREC"], abs=1e-4)
