"""A run that publishes a new model names the files still holding the replaced model's
scores: at the save (an info line when the run rewrites them, a warning when it does
not), and again at the end of a run that did not rewrite them. Nothing is deleted."""

from __future__ import annotations

import json
import logging

import pytest
from kedro.io import DataCatalog
from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.pipelines.datasets import AtomicJSONDataset, MtebResultsDataset, SentenceEncoderDataset
from contrastive_sentence_embeddings.evaluation.hooks import EarlierScoresHook
from contrastive_sentence_embeddings.encoders.fingerprint import model_fingerprint

HOOK_LOGGER = "contrastive_sentence_embeddings.evaluation.hooks"


def heard(caplog) -> list[logging.LogRecord]:
    """The hook's own records (a Kedro session earlier in the process may have set
    Kedro's loggers to INFO, so the catalog's "Saving data" lines are captured too)."""
    return [record for record in caplog.records if record.name == HOOK_LOGGER]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A checkout whose SimCSE model was scored (metrics, transfer metrics, MTEB folder),
    then retrained: the folder holds other weights than those scored."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "data/06_models/simcse"
    folder.mkdir(parents=True)
    (folder / "cse_metadata.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"4 steps")
    old = model_fingerprint(str(folder))
    scored = {"model": {"name": "simcse"}, "model_fingerprint": old, "sts_avg": 74.0}
    catalog = DataCatalog({
        "simcse.model": SentenceEncoderDataset(str(folder), name="simcse"),
        "simcse.metrics": AtomicJSONDataset(filepath=str(tmp_path / "data/08_reporting/metrics/simcse.json")),
        "simcse.metrics_full": AtomicJSONDataset(
            filepath=str(tmp_path / "data/08_reporting/metrics_full/simcse.json")),
        "simcse.mteb_results": MtebResultsDataset(str(tmp_path / "data/08_reporting/mteb/simcse")),
    })
    catalog.save("simcse.metrics", scored)
    catalog.save("simcse.metrics_full", {**scored, "transfer_avg": 80.0})
    catalog.save("simcse.mteb_results", {"export_report.json": {"run": "simcse", "revision": old}})
    (folder / "model.safetensors").write_bytes(b"12 steps")  # the retrained model, as the run publishes it
    hook = EarlierScoresHook()
    hook.after_catalog_created(catalog)
    return tmp_path, catalog, hook


def run_writing(*outputs: str) -> Pipeline:
    return Pipeline([Node(lambda: [None] * len(outputs) if len(outputs) > 1 else None, None, list(outputs),
                          name="stand_in")])


def test_a_run_that_trains_without_scoring_warns_at_the_save_and_at_its_end(project, caplog):
    root, catalog, hook = project
    before = {path: path.read_bytes() for path in (root / "data/08_reporting").rglob("*") if path.is_file()}
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER):
        hook.before_pipeline_run(run_writing("simcse.model"))  # kedro run --tags=training
        hook.after_dataset_saved("simcse.model")
        [at_save] = heard(caplog)
        assert at_save.levelno == logging.WARNING
        assert at_save.getMessage() == (
            "data/06_models/simcse now holds a newly trained model: data/08_reporting/metrics/simcse.json, "
            "data/08_reporting/metrics_full/simcse.json, data/08_reporting/mteb/simcse still hold the scores of the "
            "model it replaced (the leaderboard marks them stale: scores of an earlier model); run "
            "`kedro run --namespaces=simcse,card.simcse --tags=evaluation` and "
            "`kedro run --namespaces=transfer.simcse` to score the new model")
        caplog.clear()
        hook.on_pipeline_error()  # killed, or failed, before scoring it
        [at_end] = heard(caplog)
        assert at_end.levelno == logging.WARNING and at_end.getMessage().startswith(
            "This run replaced the model of simcse but did not score it again: data/08_reporting/metrics/simcse.json")
    # Nothing the hook judged was deleted or changed.
    assert {path: path.read_bytes() for path in (root / "data/08_reporting").rglob("*") if path.is_file()} == before


def test_a_run_that_scores_its_new_model_only_says_so_at_the_save(project, caplog):
    _, catalog, hook = project
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER):
        hook.before_pipeline_run(run_writing("simcse.model", "simcse.metrics", "simcse.metrics_full",
                                             "simcse.mteb_results"))
        hook.after_dataset_saved("simcse.model")
        [at_save] = heard(caplog)
        assert at_save.levelno == logging.INFO and "this run's evaluation rewrites them next" in at_save.getMessage()
        caplog.clear()
        new = model_fingerprint(str(catalog.get("simcse.model").filepath))
        for name in ("simcse.metrics", "simcse.metrics_full"):
            catalog.save(name, {"model": {"name": "simcse"}, "model_fingerprint": new})
            hook.after_dataset_saved(name)
        catalog.save("simcse.mteb_results", {"export_report.json": {"run": "simcse", "revision": new}})
        hook.after_dataset_saved("simcse.mteb_results")
        hook.after_pipeline_run()
        assert not heard(caplog)


def test_scores_of_the_model_now_there_are_no_reason_to_warn(project, caplog):
    root, catalog, hook = project
    (root / "data/06_models/simcse/model.safetensors").write_bytes(b"4 steps")  # retrained to the same weights
    with caplog.at_level(logging.INFO, logger=HOOK_LOGGER):
        hook.before_pipeline_run(run_writing("simcse.model"))
        hook.after_dataset_saved("simcse.model")
        hook.after_pipeline_run()
    assert not heard(caplog)
    assert json.loads((root / "data/08_reporting/metrics/simcse.json").read_text())["sts_avg"] == 74.0
