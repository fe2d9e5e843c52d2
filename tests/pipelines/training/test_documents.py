"""``kedro run --pipelines=declutr`` end to end with a tiny random encoder: raw data ->
long documents -> sampled spans -> DeCLUTR (contrastive + MLM) -> saved model ->
STS metrics -> leaderboard row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.helpers import ScratchProject, assert_loads_like_sentence_transformers, base_parameters

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory, mirror_dir, tiny_bert_dir):
    # 112 documents in batches of 40: 2 steps an epoch, 2 epochs, each with its own spans.
    declutr = base_parameters("declutr", batch_size=40, epochs=2, max_steps=None, eval_every=2,
                              log_every=1)
    declutr["seeds"] = None  # one run (seeds: tests/pipelines/test_pipeline_registry.py)
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir,
                             {"encoder": str(tiny_bert_dir), "declutr": declutr})
    scratch.run(["declutr"])
    yield scratch
    scratch.close()


def test_the_saved_model_is_the_bare_encoder_and_loads_everywhere(project):
    from transformers import AutoModel

    path = project.root / "data/06_models/declutr"
    metadata = json.loads((path / "cse_metadata.json").read_text())
    assert metadata["method"] == "declutr" and metadata["pooling"] == "mean"
    assert metadata["steps"] == 4 and metadata["train_documents"] == 112 and metadata["span_epochs"] == 3
    assert metadata["peak_memory_gib"] > 0
    assert not any(key.startswith(("cls.", "predictions")) for key in AutoModel.from_pretrained(path).state_dict())
    assert_loads_like_sentence_transformers(path)


def test_curve_has_both_loss_terms_metrics_and_leaderboard_row(project):
    curve = pd.read_csv(project.root / "data/08_reporting/training_curves/declutr.csv")
    dev = pd.read_csv(project.root / "data/08_reporting/dev_curves/declutr.csv")
    assert dev["step"].tolist() == [0, 2, 4] and dev["dev/dev_avg"].notna().all()  # no row where no evaluation ran
    assert curve["step"].max() == 4 and curve[["loss", "nt_xent", "mlm", "peak_memory_gib"]].notna().all().all()
    assert set(curve["epoch"]) == {0.0, 1.0}
    metrics = json.loads((project.root / "data/08_reporting/metrics/declutr.json").read_text())
    assert metrics["model"]["method"] == "declutr" and np.isfinite(metrics["sts_avg"])
    assert "declutr" in set(pd.read_csv(project.root / "data/08_reporting/leaderboard.csv")["model"])


def test_the_run_writes_its_scores_as_mteb_results(project):
    metrics = json.loads((project.root / "data/08_reporting/metrics/declutr.json").read_text())
    folder = project.root / "data/08_reporting/mteb/declutr"
    report = json.loads((folder / "export_report.json").read_text())
    assert report["model_name"] == "contrastive-sentence-embeddings/declutr"
    written = {p.stem: json.loads(p.read_text()) for p in folder.glob("results/*/*/*.json") if p.stem != "model_meta"}
    assert set(written) == set(report["written"]) == {"STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark"}
    assert written["STS12"]["scores"]["test"][0]["main_score"] == metrics["sts12"] / 100


def test_the_card_cites_only_the_data_whose_documents_were_kept(project):
    """The mirror's OpenWebText samples are all shorter than the documents DeCLUTR keeps:
    read, but none kept; the card's data sets name WikiText only, and its training
    parameters leave out what DeCLUTR never reads."""
    from contrastive_sentence_embeddings.publishing.model_card import split_front_matter

    report = json.loads((project.root / "data/08_reporting/data_report/long_documents.json").read_text())
    assert report["long_documents"]["rows_out_by_input"]["openwebtext"] == 0
    matter, body = split_front_matter((project.root / "data/06_models/declutr/README.md").read_text())
    assert matter["datasets"] == ["Salesforce/wikitext"]
    training = body.split("Training parameters", 1)[1].split("```", 2)[1]
    assert "max_length" not in training and "cut_fraction" in training
    assert "peak memory of the training process (RSS, GiB)" in body
