"""A training run's log lines and progress bar name the run (``simcse_decorrelation.seed42``),
not its kind: the hook names a training node's run, the fan-out hands the name to its
workers, and the trainer's progress bar shows it."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch

from contrastive_sentence_embeddings.training.fanout import TrainingJob
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.hooks import RunNameHook
from contrastive_sentence_embeddings.training.run_name import current_run, named_run
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train
from tests.helpers import wiki_sentences


def test_a_training_node_s_namespace_names_the_run_while_it_runs():
    hook = RunNameHook()
    node = SimpleNamespace(name="simcse_decorrelation.seed42.train", namespace="simcse_decorrelation.seed42",
                           tags={"training"})
    other = SimpleNamespace(name="baseline.evaluate", namespace="baseline", tags={"evaluation"})
    assert current_run() is None
    hook.before_node_run(other)
    assert current_run() is None  # not a training node
    hook.before_node_run(node)
    assert current_run("simcse") == "simcse_decorrelation.seed42"
    hook.on_node_error(node)
    assert current_run() is None and current_run("simcse") == "simcse"


def test_the_fan_out_job_carries_the_name_to_its_workers(tmp_path):
    with named_run("declutr.seed43"):
        job = TrainingJob("documents", "enc", {"kind": "declutr"}, {}, run_name=current_run())
    job.save(tmp_path)
    assert TrainingJob.load(tmp_path).run_name == "declutr.seed43"


def test_the_progress_bar_names_the_run(tiny_bert, tokenizer, mirror_dir, capsys):
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    examples = tokenize_sentences(tokenizer, wiki_sentences(mirror_dir, limit=16), 16)
    with named_run("simcse_decorrelation.seed42"):
        train(model, tokenizer, examples, TrainingConfig(batch_size=8, device="cpu", max_steps=1, log_every=1))
    assert "training simcse_decorrelation.seed42" in capsys.readouterr().err


def test_the_log_says_where_the_run_trains(tiny_bert, tokenizer, mirror_dir, caplog):
    import logging

    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
    examples = tokenize_sentences(tokenizer, wiki_sentences(mirror_dir, limit=16), 16)
    with caplog.at_level(logging.INFO), named_run("simcse.seed42"):
        train(model, tokenizer, examples, TrainingConfig(batch_size=8, device="cpu", max_steps=1, log_every=1))
    assert "training simcse.seed42 on cpu, mixed precision no" in caplog.text
