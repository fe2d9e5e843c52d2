"""The pairs family (CLSR) end to end through Kedro with a tiny random encoder: raw data -> STS-B pairs ->
frozen embeddings (cached) -> trained encoder network -> saved model -> STS metrics ->
leaderboard row; a second run reads the embeddings from the cache; the NLI variant
runs on the NLI entailment pairs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers import ScratchProject, assert_loads_like_sentence_transformers, base_parameters

pytestmark = pytest.mark.integration

SHORT = {"epochs": 4, "batch_size": 128, "eval_every": 8, "log_every": 4}


def clsr_params(variant: str) -> dict:
    return base_parameters(variant, **SHORT)


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    nli = clsr_params("clsr_nli")
    nli["max_examples"] = 600
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir,
                             {"encoder": str(tiny_bert_dir), "clsr_stsb": clsr_params("clsr_stsb"), "clsr_nli": nli})
    scratch.run(["clsr_stsb"])
    yield scratch
    scratch.close()


def metadata(project, run: str) -> dict:
    return json.loads((project.root / f"data/06_models/{run}/cse_metadata.json").read_text())


def test_the_model_curve_metrics_and_leaderboard_row(project):
    path = project.root / "data/06_models/clsr_stsb"
    saved = metadata(project, "clsr_stsb")
    assert saved["method"] == "clsr" and saved["pooling"] == "mean" and saved["frozen_encoder"]
    assert saved["train_pairs"] == 1036 and saved["steps"] == 4 * (1036 // 128)
    assert saved["embedding_cache"]["hit"] is False  # the first run encodes
    assert assert_loads_like_sentence_transformers(path).head is not None

    curve = pd.read_csv(project.root / "data/08_reporting/training_curves/clsr_stsb.csv")
    dev = pd.read_csv(project.root / "data/08_reporting/dev_curves/clsr_stsb.csv")
    assert dev["step"].tolist() == [0, 8, 16, 24, 32] and dev["dev/dev_avg"].notna().all()
    assert curve["step"].max() == saved["steps"] and curve["loss"].notna().all() and "nt_xent" in curve

    metrics = json.loads((project.root / "data/08_reporting/metrics/clsr_stsb.json").read_text())
    assert metrics["model"]["method"] == "clsr" and metrics["model"]["name"] == "clsr_stsb"
    assert np.isfinite(metrics["sts_avg"]) and np.isfinite(metrics["stsb"])
    table = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv")
    assert "clsr_stsb" in set(table["model"])
    assert list((project.root / "data/07_model_output/clsr_embedding_cache").glob("*.npy"))


def test_a_second_run_reads_the_embeddings_from_the_cache(project):
    first = metadata(project, "clsr_stsb")
    project.run(["clsr_stsb"], node_names=["clsr_stsb.embed_pairs", "clsr_stsb.train"])
    second = metadata(project, "clsr_stsb")
    assert second["embedding_cache"] == {"key": first["embedding_cache"]["key"], "hit": True}
    assert second["best_dev"] == pytest.approx(first["best_dev"])  # same data, same seed: the same run


def test_the_nli_variant_trains_on_entailment_pairs(project):
    project.run(["clsr_nli"])  # its own data step too: the clsr_stsb run extracted no NLI pairs
    saved = metadata(project, "clsr_nli")
    assert saved["name"] == "clsr_nli" and saved["pairs_dataset"] == "nli_pairs" and saved["train_pairs"] == 600
    assert saved["embedding_cache"]["hit"] is False
