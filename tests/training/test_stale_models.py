"""No model of an old setting stays where a loader finds it: after ``seeds`` changes
(null -> a list, a list -> null, a shorter list) or a method's parameters change, the
models the project saved for the old setting are removed when the new run's model is
saved, and the removal is logged; anything the project did not write stays. Real tiny
models saved by the real model data set, and the hook as Kedro calls it with the
project's own catalog."""

from __future__ import annotations

import json
import logging

import pytest

from contrastive_sentence_embeddings.datasets import ModelCardDataset, SentenceEncoderDataset
from contrastive_sentence_embeddings.encoding import METADATA_FILE
from contrastive_sentence_embeddings.hooks import StaleModelsHook
from contrastive_sentence_embeddings.training.run import TrainedEncoder
from contrastive_sentence_embeddings.training.saving import remove_stale_models, run_configuration
from tests.helpers import PROJECT_ROOT

TRAINING = {"learning_rate": 3e-05, "batch_size": 64, "max_steps": 120, "seed": 42,
            "checkpoint_dir": "data/07_model_output/checkpoints/simcse"}


def trained(tiny_bert, tokenizer, seed: int = 42, **training) -> TrainedEncoder:
    metadata = {"method": "simcse", "base_encoder": "tiny", "pooling": "mean", "seed": seed,
                "method_params": {"temperature": 0.05},
                "training": {**TRAINING, "seed": seed, **training}}
    return TrainedEncoder(tiny_bert, tokenizer, "mean", metadata)


@pytest.fixture
def models(tmp_path, tiny_bert, tokenizer):
    """data/06_models in a scratch folder, and a function saving a run of SimCSE into it
    as the catalog's model data sets do (``simcse`` or ``simcse.seed<k>``)."""
    root = tmp_path / "data" / "06_models"

    def save(run: str, **training):
        seed = int(run.rsplit("seed", 1)[1]) if ".seed" in run else 42
        folder = root / run.replace(".", "/")
        SentenceEncoderDataset(str(folder), name=run).save(trained(tiny_bert, tokenizer, seed, **training))
        return folder

    return root, save


def loads(path) -> bool:
    from sentence_transformers import SentenceTransformer

    try:
        SentenceTransformer(str(path), device="cpu")
    except Exception:  # noqa: BLE001 - any refusal means "nothing loadable here"
        return False
    return True


def test_switching_to_seeds_removes_the_single_run_model_but_nothing_else(models, caplog):
    root, save = models
    single = save("simcse")
    ModelCardDataset(filepath=str(single / "README.md")).save("card of the single run")
    (single / "my_notes.txt").write_text("a user's file")  # not the project's: it stays
    assert loads(single)
    seed42 = save("simcse.seed42")  # saved into the old model's folder: both load now
    assert loads(single) and loads(seed42)
    with caplog.at_level(logging.WARNING):
        removed = remove_stale_models(single, "simcse", {"simcse.seed42", "simcse.seed43"})
    assert len(removed) == 1 and "simcse now runs over seeds" not in removed[0]
    assert f"removed the stale model {single}" in caplog.text and "my_notes.txt" in caplog.text
    assert sorted(p.name for p in single.iterdir()) == ["my_notes.txt", "seed42"]
    assert not loads(single) and loads(seed42)
    assert list(root.glob(".*")) == []  # nothing left half-way


def test_switching_back_to_one_run_removes_the_seed_models(models, caplog):
    root, save = models
    seeds = [save(f"simcse.seed{seed}") for seed in (42, 43)]
    foreign = root / "simcse" / "seed7"  # someone else's folder: no metadata of ours
    foreign.mkdir()
    (foreign / "weights.bin").write_text("not ours")
    with caplog.at_level(logging.WARNING):
        removed = remove_stale_models(root / "simcse", "simcse", {"simcse"})
    assert [message.split(" (")[0] for message in removed] == [f"removed the stale model {s}" for s in seeds]
    assert "simcse now runs once, without seeds" in caplog.text
    assert sorted(p.name for p in (root / "simcse").iterdir()) == ["seed7"]


def test_a_dropped_seed_and_a_seed_of_other_parameters_go(models):
    root, save = models
    for seed in (42, 43, 44):
        save(f"simcse.seed{seed}")
    save("simcse.seed45", learning_rate=1e-4)  # trained with another learning rate
    # seed 45's run is among the runs, but its weights come from other parameters than
    # the run being saved now; a different log_every or checkpoint folder is no difference.
    now = run_configuration(trained(None, None, 43, log_every=5, checkpoint_dir="elsewhere").metadata)
    removed = remove_stale_models(root / "simcse", "simcse", {"simcse.seed42", "simcse.seed43", "simcse.seed45"},
                                  configuration=now, saving="simcse.seed43")
    assert sorted(p.name for p in (root / "simcse").iterdir()) == ["seed42", "seed43"]
    assert any("simcse.seed44: the seeds are now simcse.seed42, simcse.seed43, simcse.seed45" in m for m in removed)
    assert any("simcse.seed45: trained with other parameters than simcse.seed43 now is" in m for m in removed)


def test_the_hook_removes_them_just_before_a_run_of_the_method_is_saved(models, tmp_path, tiny_bert, tokenizer,
                                                                        monkeypatch):
    """The hook as Kedro calls it, with the project's catalog (its model data sets) and
    parameters in which SimCSE runs with seeds [42]; other data sets and methods are
    left alone."""
    import yaml
    from kedro.io import DataCatalog

    root, save = models
    single = save("simcse")
    declutr = save("declutr")
    monkeypatch.chdir(tmp_path)
    catalog = DataCatalog.from_config(yaml.safe_load((PROJECT_ROOT / "conf/base/catalog.yml").read_text()))
    parameters = {"methods": ["simcse", "declutr"],
                  "simcse": {"kind": "simcse", "pooling": "mean", "seeds": [42]},
                  "declutr": {"kind": "declutr", "pooling": "mean"}}
    hook = StaleModelsHook()
    hook.after_catalog_created(catalog=catalog, parameters=parameters)
    hook.before_dataset_saved("simcse.metrics", {}, None)  # not a model: nothing happens
    assert loads(single)
    model = trained(tiny_bert, tokenizer, 42)
    hook.before_dataset_saved("simcse.seed42.model", model, None)
    catalog.save("simcse.seed42.model", model)
    assert not (single / METADATA_FILE).exists() and not loads(single)
    assert json.loads((single / "seed42" / METADATA_FILE).read_text())["name"] == "simcse.seed42"
    assert loads(declutr)  # another method's model

    # And back to one run: the seed's model goes, and the single run's save, which would
    # refuse a folder that does not look like a model, finds its folder empty.
    hook.after_catalog_created(catalog=catalog, parameters={**parameters, "simcse": {**parameters["simcse"],
                                                                                    "seeds": None}})
    model = trained(tiny_bert, tokenizer, 42)
    hook.before_dataset_saved("simcse.model", model, None)
    catalog.save("simcse.model", model)
    assert not (single / "seed42").exists() and loads(single)
