"""No model of an old setting stays where a loader finds it: after ``seeds`` changes
(null -> a list, a list -> null, a shorter list) or a method's parameters change, the
models the project saved for the old setting, and the MTEB results of runs the method no
longer has, are removed when the new run's model is saved, and the removal is logged;
anything the project did not write stays. Real tiny models saved by the real model data
set, MTEB results by the real results data set, and the hook as Kedro calls it with the
project's own catalog."""

from __future__ import annotations

import json
import logging

import pytest

from contrastive_sentence_embeddings.records import provenance
from contrastive_sentence_embeddings.configuration.blocks import run_blocks
from contrastive_sentence_embeddings.pipelines.datasets import ModelCardDataset, MtebResultsDataset, SentenceEncoderDataset
from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE
from contrastive_sentence_embeddings.training.hooks import StaleModelsHook
from contrastive_sentence_embeddings.training import saving
from contrastive_sentence_embeddings.training.run import TrainedEncoder
from contrastive_sentence_embeddings.training.saving import remove_stale_models
from tests.helpers import PROJECT_ROOT

TRAINING = {"learning_rate": 3e-05, "batch_size": 64, "max_steps": 120, "seed": 42,
            "checkpoint_dir": "data/07_model_output/checkpoints/simcse"}
BLOCK = {"kind": "simcse", "pooling": "mean", "seeds": [42, 43, 44], "max_examples": None,
         "method": {"temperature": 0.05}, "training": TRAINING}
WIKI = {"sentences": {"dataset": "wiki_sentences", "fingerprint": "wiki-1", "rows": 1000}}


def trained(tiny_bert, tokenizer, seed: int = 42, block: dict | None = None, **training) -> TrainedEncoder:
    """A SimCSE run's model with the metadata (and provenance) its training node gives it,
    from the seed's block of ``block`` (default :data:`BLOCK`) with ``training`` changed."""
    block = block or BLOCK
    block = {**block, "seeds": [seed], "training": {**block["training"], **training}}  # seeds: not the configuration
    run_block = run_blocks({"methods": ["simcse"], "simcse": block})[f"simcse.seed{seed}"]
    metadata = {"method": "simcse", "base_encoder": "tiny", "pooling": "mean", "seed": seed,
                "method_params": run_block["method"], "training": run_block["training"],
                "provenance": provenance.training_provenance(run_block, "tiny", WIKI)}
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
    # the run being saved now; another checkpoint folder is no difference.
    now = trained(None, None, 43, checkpoint_dir="elsewhere").metadata["provenance"]
    removed = remove_stale_models(root / "simcse", "simcse", {"simcse.seed42", "simcse.seed43", "simcse.seed45"},
                                  provenance=now, saving="simcse.seed43")
    assert sorted(p.name for p in (root / "simcse").iterdir()) == ["seed42", "seed43"]
    assert any("simcse.seed44: the seeds are now simcse.seed42, simcse.seed43, simcse.seed45" in m for m in removed)
    assert any("simcse.seed45: not the configuration simcse.seed43 is trained with now (other parameters: "
               "training.learning_rate 0.0001" in m for m in removed)


@pytest.mark.parametrize("change", [{"max_examples": 500}, {"method": {"temperature": 0.1}}],
                         ids=["max_examples", "temperature"])
def test_other_seeds_are_stale_exactly_when_the_average_over_seeds_leaves_them_out(models, change, tiny_bert,
                                                                                   tokenizer):
    """``--namespaces=simcse.seed42`` after a change of ``max_examples`` or of a method
    parameter: seed 43's model (the old setting) goes, by the same rule that leaves its
    metrics out of the average; with nothing changed, it stays and is averaged."""
    root, save = models
    save("simcse.seed43")
    runs = {f"simcse.seed{seed}" for seed in (42, 43, 44)}
    old = json.loads((root / "simcse" / "seed43" / METADATA_FILE).read_text())["provenance"]

    def averaged(new) -> list[str]:
        dated = (("simcse.seed43", "2027-01-01", old), ("simcse.seed42", "2027-01-02", new))  # seed 42 newest
        records = [{"model": {"name": name}, "evaluated_at": when, "provenance": record} for name, when, record in dated]
        return [record["model"]["name"] for record in provenance.runs_of_one_configuration(records)[0]]

    same = trained(tiny_bert, tokenizer, 42).metadata["provenance"]
    assert remove_stale_models(root / "simcse", "simcse", runs, same, saving="simcse.seed42") == []
    assert averaged(same) == ["simcse.seed43", "simcse.seed42"]

    changed = trained(tiny_bert, tokenizer, 42, block={**BLOCK, **change}).metadata["provenance"]
    removed = remove_stale_models(root / "simcse", "simcse", runs, changed, saving="simcse.seed42")
    assert len(removed) == 1 and "simcse.seed43: not the configuration" in removed[0]
    assert not (root / "simcse" / "seed43").exists()
    assert averaged(changed) == ["simcse.seed42"]


def test_a_model_saved_before_its_files_were_listed_leaves_only_its_own_files(models, caplog):
    """A root model whose metadata has no ``files`` (saved by an older version): only the
    files a save writes go; a user's file and folder stay, and the log names them."""
    root, save = models
    single = save("simcse")
    metadata = json.loads((single / METADATA_FILE).read_text())
    written = metadata.pop("files")
    (single / METADATA_FILE).write_text(json.dumps(metadata))
    (single / "my_notes.txt").write_text("a user's file")
    (single / "plots").mkdir()
    save("simcse.seed42")
    with caplog.at_level(logging.WARNING):
        remove_stale_models(single, "simcse", {"simcse.seed42"})
    assert sorted(p.name for p in single.iterdir()) == ["my_notes.txt", "plots", "seed42"]
    assert "left my_notes.txt, plots there, which the project did not write" in caplog.text
    assert len(written) > 5 and not any((single / name).exists() for name in written)


def test_an_interrupted_removal_is_cleaned_up_by_the_next(models, monkeypatch, caplog):
    """A removal stopped after its renames, before the deletion, leaves a
    ``.<name>.stale-*`` folder (a seed's inside the method's folder, the root model's
    beside it); the next removal deletes it first and says so."""
    root, save = models
    single = save("simcse")
    save("simcse.seed42")
    save("simcse.seed43")
    real_rmtree = saving.shutil.rmtree

    def interrupt_removal(monkeypatch):
        existing = {*root.rglob(".*.stale-*")}  # earlier leftovers: deleted for real

        def rmtree(path, *args, **kwargs):
            if path in existing:
                return real_rmtree(path, *args, **kwargs)
            raise KeyboardInterrupt  # the process stops after the renames, before the deletion

        monkeypatch.setattr(saving.shutil, "rmtree", rmtree)

    interrupt_removal(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        remove_stale_models(single, "simcse", {"simcse", "simcse.seed43"})
    seed_leftover, = single.glob(".seed42.stale-*")
    interrupt_removal(monkeypatch)
    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        remove_stale_models(single, "simcse", {"simcse.seed43"})
    assert not seed_leftover.exists() and f"leftover folder(s) of an interrupted removal of stale runs: " \
        f"{seed_leftover}" in caplog.text
    root_leftover, = root.glob(".simcse.stale-*")
    assert not loads(single)  # what makes it a model went first
    monkeypatch.setattr(saving.shutil, "rmtree", real_rmtree)
    removed = remove_stale_models(single, "simcse", {"simcse.seed43"})
    assert removed == [f"{single}: removed 1 leftover folder(s) of an interrupted removal of stale runs: "
                       f"{root_leftover}"]
    assert list(root.rglob(".*")) == [] and sorted(p.name for p in single.iterdir()) == ["seed43"]


def mteb_files(run: str) -> dict:
    return {"export_report.json": {"run": run}, f"results/cse__{run}/no_revision_available/STS12.json": {"x": 1}}


@pytest.mark.parametrize("to_seeds", [True, False], ids=["null->list", "list->null"])
def test_switching_seeds_removes_the_mteb_results_of_runs_no_longer_run(models, tmp_path, tiny_bert, tokenizer,
                                                                         monkeypatch, caplog, to_seeds):
    """Both directions through the hook and the project's catalog, with real saves: the
    results of the old setting go (only what the results data set wrote), and the new
    runs' results are saved where the catalog puts them."""
    import yaml
    from kedro.io import DataCatalog

    root, save = models
    monkeypatch.chdir(tmp_path)
    catalog = DataCatalog.from_config(yaml.safe_load((PROJECT_ROOT / "conf/base/catalog.yml").read_text()))
    seeded = {"methods": ["simcse"], "simcse": {"kind": "simcse", "pooling": "mean", "seeds": [42, 43]}}
    single = {"methods": ["simcse"], "simcse": {"kind": "simcse", "pooling": "mean", "seeds": None}}
    before, after = (single, seeded) if to_seeds else (seeded, single)
    old_runs = ["simcse"] if to_seeds else ["simcse.seed42", "simcse.seed43"]
    new_runs = ["simcse.seed42", "simcse.seed43"] if to_seeds else ["simcse"]
    results = tmp_path / "data" / "08_reporting" / "mteb" / "simcse"
    for run in old_runs:
        catalog.save(f"{run}.mteb_results", mteb_files(run))
    (results / "my_plot.png").write_text("a user's file")  # not the project's: it stays
    hook = StaleModelsHook()
    hook.after_catalog_created(catalog=catalog, parameters=before)
    for run in new_runs:
        hook.after_catalog_created(catalog=catalog, parameters=after)
        model = trained(tiny_bert, tokenizer, 42)
        with caplog.at_level(logging.WARNING):
            hook.before_dataset_saved(f"{run}.model", model, None)
        catalog.save(f"{run}.model", model)
        if run == "simcse" and not to_seeds:
            # a user's file keeps the folder: the save refuses it, naming it
            with pytest.raises(Exception, match="holds no export_report.json"):
                catalog.save(f"{run}.mteb_results", mteb_files(run))
            (results / "my_plot.png").unlink()  # the user moves it away; the empty folder is replaced
        catalog.save(f"{run}.mteb_results", mteb_files(run))
    for run in old_runs:
        folder = results.relative_to(tmp_path) / run.removeprefix("simcse").lstrip(".")
        assert f"removed the stale MTEB results {folder} (" in caplog.text
    for run in new_runs:
        assert catalog.load(f"{run}.mteb_results") == mteb_files(run)
    expected = {"my_plot.png", "seed42", "seed43"} if to_seeds else {"export_report.json", "results"}
    assert {p.name for p in results.iterdir()} == expected
    assert list(results.parent.glob(".*")) == [] and list(results.glob(".*")) == []
