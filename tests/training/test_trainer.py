import copy
import os
import json
import shutil

import pandas as pd
import pytest
import torch

from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import (
    TRAINER_STATE,
    TrainingConfig,
    build_optimizer,
    parameter_groups,
    slanted_triangular,
    tokenize_sentences,
    total_steps,
    train,
    warmup_then,
)
from tests.helpers import wiki_sentences


def test_slanted_triangular_by_hand():
    # 100 steps, cut at step 10, ratio 32: 1/32 at 0, 1 at the cut, back down to 1/32 at the end
    assert slanted_triangular(0, 100) == pytest.approx(1 / 32)
    assert slanted_triangular(5, 100) == pytest.approx((1 + 0.5 * 31) / 32)
    assert slanted_triangular(10, 100) == pytest.approx(1.0)
    assert slanted_triangular(55, 100) == pytest.approx((1 + 0.5 * 31) / 32)
    assert slanted_triangular(100, 100) == pytest.approx(1 / 32)


def test_warmup_then_linear_or_constant():
    assert [warmup_then(s, 10, 2, "linear") for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]
    assert warmup_then(9, 10, 2, "constant") == 1.0


def test_cosine_decay_by_hand():
    # 2 warm-up steps of 10, then 0.5 * (1 - cos(pi * remaining)), remaining = (10 - step) / 8
    assert warmup_then(1, 10, 2, "cosine") == 1.0
    assert warmup_then(2, 10, 2, "cosine") == pytest.approx(1.0)
    assert warmup_then(6, 10, 2, "cosine") == pytest.approx(0.5)
    assert warmup_then(4, 10, 2, "cosine") == pytest.approx(0.5 * (1 + 2 ** -0.5))
    assert warmup_then(10, 10, 2, "cosine") == pytest.approx(0.0)


def test_no_weight_decay_on_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3), torch.nn.BatchNorm1d(3))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["params"] == [model[0].weight] and decay["weight_decay"] == 0.1
    assert len(no_decay["params"]) == 5 and no_decay["weight_decay"] == 0.0


def test_steps_and_unknown_settings():
    assert total_steps(1000, TrainingConfig(batch_size=64, epochs=2)) == 30
    assert total_steps(1000, TrainingConfig(batch_size=64, epochs=2, max_steps=7)) == 7
    with pytest.raises(ValueError, match="unknown training parameter\\(s\\): lr"):
        TrainingConfig.from_params({"lr": 1})
    with pytest.raises(ValueError, match="unknown schedule .exponential."):
        TrainingConfig.from_params({"schedule": "exponential"})
    with pytest.raises(ValueError, match="unknown optimizer 'lamb'"):
        TrainingConfig.from_params({"optimizer": "lamb"})
    with pytest.raises(ValueError, match="unknown mixed_precision 'bf61'"):
        TrainingConfig.from_params({"mixed_precision": "bf61"})
    # YAML, Kedro's OmegaConf included, reads an unquoted `mixed_precision: no` as false
    assert TrainingConfig.from_params({"mixed_precision": False}).mixed_precision == "no"
    with pytest.raises(ValueError, match="unknown mixed_precision True"):
        TrainingConfig.from_params({"mixed_precision": True})


def test_sgd_has_momentum_and_the_same_decay_groups():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    optimizer = build_optimizer(model, TrainingConfig(optimizer="sgd", learning_rate=0.5, weight_decay=1e-6))
    assert isinstance(optimizer, torch.optim.SGD)
    assert [g["momentum"] for g in optimizer.param_groups] == [0.9, 0.9]
    assert [g["weight_decay"] for g in optimizer.param_groups] == [1e-6, 0.0]


def steps_of(model, optimiser, steps=3):
    for step in range(steps):
        torch.manual_seed(step)
        for parameter in model.parameters():
            parameter.grad = torch.randn_like(parameter)
        optimiser.step()


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_the_multi_tensor_update_is_the_per_parameter_loop_bit_for_bit(tiny_bert, optimizer):
    config = TrainingConfig(optimizer=optimizer, learning_rate=1e-3, weight_decay=0.01, fused_optimizer=False)
    models = [copy.deepcopy(tiny_bert) for _ in range(2)]
    ours = build_optimizer(models[0], config)
    extra = {"momentum": config.momentum} if optimizer == "sgd" else {}
    loop = type(ours)(parameter_groups(models[1], config.weight_decay), lr=config.learning_rate, foreach=False, **extra)
    assert ours.defaults["foreach"] is True and not ours.defaults.get("fused")
    for model, optimiser in zip(models, (ours, loop)):
        steps_of(model, optimiser)
    for mine, theirs in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(mine, theirs)


def test_adamw_is_fused_on_cpu_by_default_and_updates_as_the_loop_does(tiny_bert):
    config = TrainingConfig(learning_rate=1e-3, weight_decay=0.01)
    models = [copy.deepcopy(tiny_bert) for _ in range(2)]
    ours = build_optimizer(models[0], config, torch.device("cpu"))
    assert [group["fused"] for group in ours.param_groups] == [True, True]
    loop = torch.optim.AdamW(parameter_groups(models[1], config.weight_decay), lr=config.learning_rate, foreach=False)
    for model, optimiser in zip(models, (ours, loop)):
        steps_of(model, optimiser)
    moved = 0
    for start, mine, theirs in zip(tiny_bert.parameters(), models[0].parameters(), models[1].parameters()):
        # Float rounding only: the parameters moved by ~3e-3, the two updates agree to 1e-6.
        torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7)
        moved = max(moved, float((theirs - start).detach().abs().max()))
    assert moved > 1e-3


@pytest.fixture(scope="module")
def sentences(mirror_dir):
    return wiki_sentences(mirror_dir, min_words=5, limit=400)


def run(tiny_bert, tokenizer, sentences, **settings):
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    config = TrainingConfig(**{"batch_size": 16, "learning_rate": 1e-4, "device": "cpu", "log_every": 2, **settings})
    return train(model, tokenizer, tokenize_sentences(tokenizer, sentences, 32), config)


@pytest.mark.parametrize("loader_workers", [0, 1], ids=["in-process", "loader-worker"])
def test_an_interrupted_run_resumes_where_it_stopped(tiny_bert, tokenizer, sentences, tmp_path, monkeypatch,
                                                     loader_workers):
    # A row of the curve every 4 steps, a checkpoint every 6: the step-6 checkpoint falls
    # inside the window of the row at step 8 (steps 5 to 8). With a loader worker the
    # resumed run's loader starts mid-epoch in a new worker and must give the same batches.
    settings = dict(max_steps=12, eval_every=6, log_every=4, loader_workers=loader_workers)
    straight = run(tiny_bert, tokenizer, sentences, **settings)
    checkpoint = tmp_path / "checkpoint"
    # Crash at the 9th optimiser step; the last checkpoint is the one of step 6.
    calls = {"n": 0}
    original_step = torch.optim.AdamW.step

    def crashing_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 9:
            raise KeyboardInterrupt("simulated interruption")
        return original_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", crashing_step)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_bert, tokenizer, sentences, checkpoint_dir=str(checkpoint), **settings)
    monkeypatch.setattr(torch.optim.AdamW, "step", original_step)
    # The same checkpoint as a trainer without the saved loss window wrote it.
    older = tmp_path / "older_checkpoint"
    shutil.copytree(checkpoint, older)
    state_file = older / "step-6" / TRAINER_STATE
    state = json.loads(state_file.read_text())
    assert state["window"]["count"] == 2  # steps 5 and 6
    del state["window"]
    state_file.write_text(json.dumps(state))

    resumed = run(tiny_bert, tokenizer, sentences, checkpoint_dir=str(checkpoint), **settings)
    assert resumed.steps == 12
    for key, value in straight.best_state.items():
        assert torch.allclose(value, resumed.best_state[key], atol=1e-5), key
    # The curve too: the row at step 8 averages steps 5 to 8, two of them run before the interruption.
    losses = ["step", "epoch", "lr", "loss", "info_nce"]
    assert straight.curve["step"].tolist() == [4, 8, 12]
    pd.testing.assert_frame_equal(resumed.curve[losses], straight.curve[losses], rtol=1e-5)

    # An older checkpoint still resumes, its first row averaging the steps since the resume.
    from_older = run(tiny_bert, tokenizer, sentences, checkpoint_dir=str(older), **settings)
    assert from_older.steps == 12 and from_older.curve["step"].tolist() == [4, 8, 12]
    for key, value in straight.best_state.items():
        assert torch.allclose(value, from_older.best_state[key], atol=1e-5), key


def test_training_curve_has_loss_rate_and_speed(tiny_bert, tokenizer, sentences):
    result = run(tiny_bert, tokenizer, sentences, max_steps=6, eval_every=0)
    assert isinstance(result.curve, pd.DataFrame)
    assert result.curve["step"].tolist() == [2, 4, 6]
    assert {"loss", "info_nce", "lr", "examples_per_second"} <= set(result.curve.columns)
    assert (result.curve["examples_per_second"] > 0).all()


def test_a_checkpoint_of_another_run_is_not_resumed(tiny_bert, tokenizer, sentences, tmp_path, caplog):
    checkpoint = tmp_path / "checkpoint"
    run(tiny_bert, tokenizer, sentences, max_steps=2, eval_every=2, checkpoint_dir=str(checkpoint))  # another run
    assert (checkpoint / "step-2").is_dir()
    result = run(tiny_bert, tokenizer, sentences, max_steps=4, eval_every=2, checkpoint_dir=str(checkpoint))
    assert result.steps == 4
    assert "holds a checkpoint of a different run" in caplog.text
    # The finished run's last checkpoint is kept until its model is saved (release_checkpoints).
    assert sorted(p.name for p in checkpoint.iterdir()) == ["step-4"]


class ScriptedDevScorer:
    """Dev scores that follow a script, one entry per evaluation (steps 0, 2, 4)."""

    def __init__(self, stsb, sick):
        self.scores = list(zip(stsb, sick))

    def __call__(self, encode):
        assert encode(["a sentence"]).shape[0] == 1
        stsb, sick = self.scores.pop(0)
        return {"stsb_dev": stsb, "sickr_dev": sick, "dev_avg": (stsb + sick) / 2}


@pytest.mark.parametrize("select_by, best_step", [("stsb_dev", 4), ("dev_avg", 0)])
def test_the_kept_weights_are_the_best_by_the_chosen_dev_score(tiny_bert, tokenizer, sentences, select_by, best_step,
                                                               caplog):
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    initial = {k: v.clone() for k, v in model.encoder.state_dict().items()}
    config = TrainingConfig(batch_size=16, learning_rate=1e-3, device="cpu", max_steps=4, eval_every=2,
                            select_by=select_by)
    dev = ScriptedDevScorer(stsb=[80.0, 80.5, 81.0], sick=[80.0, 78.0, 78.0])  # STS-B rises, SICK-R falls more
    result = train(model, tokenizer, tokenize_sentences(tokenizer, sentences, 32), config, dev)
    assert result.best_step == best_step
    kept_initial = all(torch.equal(initial[k], v) for k, v in result.best_state.items())
    assert kept_initial == (best_step == 0)
    assert ("kept weights are the starting ones" in caplog.text) == (best_step == 0)


def test_a_resumed_run_updates_with_the_kernel_it_is_configured_with(tiny_bert, tokenizer, sentences, tmp_path,
                                                                       monkeypatch):
    # A checkpoint written with the foreach update (fused_optimizer: false, as every CPU
    # checkpoint of an older version was) and resumed with the default: loading the
    # optimizer's state brings the saved flags back, the resumed steps must still be fused.
    settings = dict(max_steps=8, eval_every=4, log_every=4)
    checkpoint = tmp_path / "checkpoint"
    kernels, crash_at, original_step = [], [6], torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        kernels.append([(group["fused"], group["foreach"]) for group in self.param_groups])
        if len(kernels) in crash_at:
            raise KeyboardInterrupt("simulated interruption")
        return original_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_bert, tokenizer, sentences, checkpoint_dir=str(checkpoint), fused_optimizer=False, **settings)
    assert kernels[0] == [(None, True), (None, True)]
    kernels.clear()
    crash_at.clear()
    resumed = run(tiny_bert, tokenizer, sentences, checkpoint_dir=str(checkpoint), **settings)
    assert resumed.steps == 8 and len(kernels) == 4  # steps 5 to 8, from the step-4 checkpoint
    assert all(step == [(True, None), (True, None)] for step in kernels), kernels
    straight = run(tiny_bert, tokenizer, sentences, **settings)
    for key, value in straight.best_state.items():
        assert torch.allclose(value, resumed.best_state[key], atol=1e-5), key


def test_a_run_that_fails_releases_its_checkpoint_lock(tiny_bert, tokenizer, sentences, tmp_path):
    """The lock and its holder record beside checkpoint_dir are the run's while it trains,
    and gone when it fails as when it succeeds; the checkpoint it wrote stays to resume."""
    from contrastive_sentence_embeddings.runs.run_locks import live_holders
    from contrastive_sentence_embeddings.training import trainer as trainer_module

    checkpoint = tmp_path / "checkpoints" / "simcse"
    seen = []

    def failing_dev_score(encode):
        seen.append(live_holders(checkpoint.parent))  # held while training
        raise RuntimeError("the dev set broke")

    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    with pytest.raises(RuntimeError, match="the dev set broke"):
        train(model, tokenizer, tokenize_sentences(tokenizer, sentences[:64], 32),
              TrainingConfig(batch_size=8, max_steps=4, eval_every=2, checkpoint_dir=str(checkpoint), device="cpu"),
              failing_dev_score)
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0]["pid"] == os.getpid()
    assert live_holders(checkpoint.parent) == []
    assert checkpoint.resolve() not in trainer_module._CLAIMED
