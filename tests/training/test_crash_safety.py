"""What is on disk after a crash: training checkpoints, the model save and prepared
data sets. The crash tests kill a real subprocess (``CSE_TEST_CRASH_AT``, see
``crash_points``) at the named moment and run it again."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from contrastive_sentence_embeddings.runs.crash_points import CRASH_ENV_VAR, CRASH_EXIT_CODE
from contrastive_sentence_embeddings.pipelines.datasets import AtomicParquetDataset, SentenceEncoderDataset
from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import (
    BEST_WEIGHTS,
    TRAINER_STATE,
    TrainingConfig,
    release_checkpoints,
    tokenize_sentences,
    train,
)

WORKER = Path(__file__).with_name("crash_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def sentences_for_test(n: int = 64) -> list[str]:
    subjects = ["the cat", "a dog", "my neighbour", "the old train", "a small bird", "the teacher", "our team",
                "the river"]
    verbs = ["watches", "follows", "finds", "paints", "hears", "remembers", "carries", "greets"]
    objects = ["the red house", "a quiet street", "the morning news", "two green apples", "the long bridge",
               "an empty room", "the final match", "a paper boat"]
    return [f"{subjects[i % 8]} {verbs[(i // 8) % 8]} {objects[(i * 3) % 8]} today" for i in range(n)]


def run_worker(tiny_bert_dir, workdir: Path, crash_at: str | None = None, *options: str):
    sentences = workdir / "sentences.txt"
    if not sentences.exists():
        sentences.write_text("\n".join(sentences_for_test()), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.pop(CRASH_ENV_VAR, None)
    if crash_at:
        env[CRASH_ENV_VAR] = crash_at
    command = [sys.executable, str(WORKER), str(tiny_bert_dir), str(sentences), str(workdir / "checkpoints"),
               str(workdir / "models" / "crash-test"), str(workdir / "result.json"), *options]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_a_kill_inside_a_checkpoint_resumes_from_the_previous_one(tiny_bert_dir, tmp_path):
    straight = tmp_path / "straight"
    straight.mkdir()
    done = run_worker(tiny_bert_dir, straight)
    assert done.returncode == 0, done.stderr
    expected = json.loads((straight / "result.json").read_text())

    work = tmp_path / "crashed"
    (work / "checkpoints").mkdir(parents=True)
    (work / "checkpoints" / "notes.txt").write_text("the user's own file")
    # Killed in the step-4 checkpoint, after the accelerate state, before trainer_state.json.
    killed = run_worker(tiny_bert_dir, work, "checkpoint:after_accelerate_state@2")
    assert killed.returncode == CRASH_EXIT_CODE, killed.stderr
    assert (work / "checkpoints" / "step-2" / TRAINER_STATE).is_file()
    assert not (work / "checkpoints" / "step-4").exists()  # never published half-written

    rerun = run_worker(tiny_bert_dir, work)
    assert rerun.returncode == 0, rerun.stderr
    assert "removing an incomplete checkpoint" in rerun.stderr
    assert "at step 2 " in rerun.stderr and "resumed from" in rerun.stderr
    assert json.loads((work / "result.json").read_text()) == expected  # the same final model
    assert (work / "models" / "crash-test" / METADATA_FILE).is_file()
    # The model is published, so the checkpoint is gone; the user's file is not.
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == ["notes.txt"]


def test_a_kill_between_the_model_saves_renames_never_loses_the_model(tiny_bert_dir, tmp_path, caplog):
    first = run_worker(tiny_bert_dir, tmp_path)
    assert first.returncode == 0, first.stderr
    model = tmp_path / "models" / "crash-test"
    old_saved_at = json.loads((model / METADATA_FILE).read_text())["saved_at"]
    old_mtime = (model / METADATA_FILE).stat().st_mtime_ns

    # A file system without an atomic folder swap: old model moved aside, then killed.
    killed = run_worker(tiny_bert_dir, tmp_path, "model_save:between_renames", "two-renames")
    assert killed.returncode == CRASH_EXIT_CODE, killed.stderr
    assert not model.exists()  # the window the recovery is for
    assert (tmp_path / "checkpoints" / "step-6").is_dir()  # kept: the model is not published yet
    assert len(list((tmp_path / "models").glob(".crash-test.replaced-*"))) == 1

    caplog.set_level("WARNING")
    dataset = SentenceEncoderDataset(str(model))
    assert dataset.exists()  # recovery runs first
    assert "was completed (the new model" in caplog.text
    assert (model / METADATA_FILE).stat().st_mtime_ns > old_mtime
    assert json.loads((model / METADATA_FILE).read_text())["saved_at"] >= old_saved_at
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["crash-test"]

    # A rerun resumes from the kept checkpoint at its last step and publishes the model.
    rerun = run_worker(tiny_bert_dir, tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert "at step 6 " in rerun.stderr
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_with_an_atomic_swap_the_model_folder_is_never_missing(tiny_bert_dir, tmp_path, caplog):
    assert run_worker(tiny_bert_dir, tmp_path).returncode == 0
    model = tmp_path / "models" / "crash-test"
    killed = run_worker(tiny_bert_dir, tmp_path, "model_save:after_exchange")
    assert killed.returncode == CRASH_EXIT_CODE, killed.stderr
    assert (model / METADATA_FILE).is_file()  # swapped in one step
    leftovers = list((tmp_path / "models").glob(".crash-test.saving-*"))
    assert len(leftovers) == 1  # the previous model, swapped out
    caplog.set_level("WARNING")
    SentenceEncoderDataset(str(model)).load()
    assert "removed 1 leftover folder(s) of interrupted saves" in caplog.text
    assert not leftovers[0].exists()


# --- in-process checks of the checkpoint store ------------------------------------------
def train_tiny(tiny_bert, tokenizer, checkpoint_dir, dev_scorer=None, **settings):
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    settings = {"batch_size": 8, "learning_rate": 1e-3, "device": "cpu", "log_every": 1, "max_steps": 4,
                "eval_every": 2, "checkpoint_dir": str(checkpoint_dir), **settings}
    config = TrainingConfig(**settings)
    return train(model, tokenizer, tokenize_sentences(tokenizer, sentences_for_test(), 32), config, dev_scorer)


def test_a_corrupt_checkpoint_is_reported_and_set_aside(tiny_bert, tokenizer, tmp_path, caplog):
    checkpoint = tmp_path / "checkpoints"
    train_tiny(tiny_bert, tokenizer, checkpoint, max_steps=2)
    (checkpoint / "step-2" / TRAINER_STATE).write_text("")  # what a full disk leaves
    caplog.set_level("WARNING")
    result = train_tiny(tiny_bert, tokenizer, checkpoint, max_steps=2)
    assert result.steps == 2
    assert f"corrupt checkpoint {checkpoint / 'step-2'}" in caplog.text
    assert "JSONDecodeError" in caplog.text
    aside = list(checkpoint.glob("step-2.corrupt-*"))
    assert len(aside) == 1 and (aside[0] / TRAINER_STATE).read_text() == ""  # kept as evidence
    assert (checkpoint / "step-2" / TRAINER_STATE).stat().st_size > 0  # a fresh one


def test_release_deletes_only_what_the_trainer_wrote(tiny_bert, tokenizer, tmp_path):
    checkpoint = tmp_path / "checkpoints"
    checkpoint.mkdir()
    (checkpoint / "unrelated.txt").write_text("keep me")
    (checkpoint / "step-99").mkdir()  # looks like a checkpoint but is not the trainer's
    train_tiny(tiny_bert, tokenizer, checkpoint)
    assert (checkpoint / "step-4").is_dir()  # kept after training
    removed = release_checkpoints(checkpoint)
    assert [p.name for p in removed] == ["step-4"]
    assert sorted(p.name for p in checkpoint.iterdir()) == ["step-99", "unrelated.txt"]


def test_checkpoint_weights_are_loaded_as_weights_only(tiny_bert, tokenizer, tmp_path):
    checkpoint = tmp_path / "checkpoints"
    train_tiny(tiny_bert, tokenizer, checkpoint, max_steps=2)
    # A pickled object that is not a tensor: torch.load(weights_only=True) must refuse it.
    torch.save({"payload": pickle.loads(pickle.dumps(Path("/tmp")))}, checkpoint / "step-2" / BEST_WEIGHTS)
    with pytest.raises(pickle.UnpicklingError, match="[Ww]eights only"):
        train_tiny(tiny_bert, tokenizer, checkpoint, max_steps=2)


def test_a_nan_dev_score_stops_training_instead_of_keeping_step_0(tiny_bert, tokenizer, tmp_path):
    def nan_scorer(encode):
        return {"stsb_dev": float("nan"), "sickr_dev": 50.0, "dev_avg": float("nan")}

    with pytest.raises(FloatingPointError, match="dev score stsb_dev is nan at step 0"):
        train_tiny(tiny_bert, tokenizer, tmp_path / "checkpoints", dev_scorer=nan_scorer)


def test_a_nan_loss_stops_training_and_names_the_steps_it_was_summed_over(tiny_bert, tokenizer, tmp_path):
    """The loss is summed on the device and read at log rows (no per-step host sync): a
    NaN at step 3 is still caught before anything is scored or saved, naming the window."""
    from contrastive_sentence_embeddings.training.methods import ContrastiveModel

    calls = {"n": 0}
    original = ContrastiveModel.forward

    def nan_at_step_3(self, **batch):
        outputs = original(self, **batch)
        calls["n"] += 1
        if calls["n"] == 3:
            outputs["loss"] = outputs["loss"] * float("nan")
        return outputs

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ContrastiveModel, "forward", nan_at_step_3)
        with pytest.raises(FloatingPointError, match=r"loss became nan in steps 1-4"):
            train_tiny(tiny_bert, tokenizer, tmp_path / "checkpoints", max_steps=4, log_every=10, eval_every=0)
    assert not (tmp_path / "checkpoints" / "step-4").exists()  # nothing of the diverged run was published


# --- prepared data sets ----------------------------------------------------------------
def test_a_kill_during_a_parquet_save_leaves_the_previous_file_intact(tmp_path):
    target = tmp_path / "data" / "wiki_sentences.parquet"
    AtomicParquetDataset(filepath=str(target)).save(pd.DataFrame({"sentence": ["a good row"]}))
    script = (
        "import pandas as pd\n"
        "from contrastive_sentence_embeddings.pipelines.datasets import AtomicParquetDataset\n"
        f"AtomicParquetDataset(filepath={str(target)!r}).save(pd.DataFrame({{'sentence': ['new'] * 1000}}))\n"
    )
    env = {**os.environ, CRASH_ENV_VAR: "dataset_save:before_replace",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    killed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == CRASH_EXIT_CODE, killed.stderr
    assert pd.read_parquet(target)["sentence"].tolist() == ["a good row"]
    # Without the crash the new table replaces it, and no temporary file stays.
    AtomicParquetDataset(filepath=str(target)).save(pd.DataFrame({"sentence": ["new"] * 3}))
    assert pd.read_parquet(target)["sentence"].tolist() == ["new"] * 3
    assert [p.name for p in target.parent.iterdir() if p.name != target.name] == \
        [p.name for p in target.parent.glob(".wiki_sentences.parquet.writing-*")]
