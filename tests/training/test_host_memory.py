import json
import platform
import subprocess
import sys
import textwrap

import pytest
import torch

from contrastive_sentence_embeddings.config import ParameterValueError, check_values
from contrastive_sentence_embeddings.training import trainer as trainer_module
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import (
    TrainingConfig,
    retains_freed_memory,
    tokenize_sentences,
    train,
)
from tests.helpers import wiki_sentences

ON_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# Rounds of eight 8 MiB blocks allocated, written and freed, the way a CPU training step
# allocates and frees its activations; minor page faults a round before and after the
# setting, in a process of its own (the setting is process-wide and stays).
FAULTS_PER_ROUND = textwrap.dedent("""
    import json, resource, torch
    from contrastive_sentence_embeddings.training.host_memory import keep_freed_memory

    def faults_per_round(rounds=5):
        def one_round():
            blocks = [torch.ones(2 * 2**20) for _ in range(8)]
            del blocks
        one_round()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(rounds):
            one_round()
        return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / rounds

    default = faults_per_round()
    kept = keep_freed_memory()
    print(json.dumps({"default": default, "kept": kept, "after": faults_per_round(), "again": keep_freed_memory()}))
""")


@pytest.mark.skipif(not ON_GLIBC, reason="the setting is glibc's malloc's")
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    done = subprocess.run([sys.executable, "-c", FAULTS_PER_ROUND], capture_output=True, text=True, check=True)
    faults = json.loads(done.stdout.strip().splitlines()[-1])
    assert faults["kept"] is True and faults["again"] is True
    # glibc's defaults hand the 64 MiB back to the kernel every round (16,384 pages of 4 KiB,
    # fewer faults where the kernel backs them with huge pages); kept, they are reused.
    assert faults["default"] >= 500
    assert faults["after"] <= faults["default"] / 20


def test_null_means_on_cpu_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert retains_freed_memory(TrainingConfig(), cpu) is True
    assert retains_freed_memory(TrainingConfig(), cuda) is False
    assert retains_freed_memory(TrainingConfig(retain_freed_memory=True), cuda) is True
    assert retains_freed_memory(TrainingConfig(retain_freed_memory=False), cpu) is False
    with pytest.raises(ParameterValueError, match="training.retain_freed_memory"):
        check_values(TrainingConfig, {"retain_freed_memory": "yes"}, "training")
    check_values(TrainingConfig, {"retain_freed_memory": None}, "training")


@pytest.mark.parametrize("setting, called", [(None, 1), (False, 0)])
def test_cpu_training_keeps_freed_memory_unless_turned_off(tiny_bert, tokenizer, mirror_dir, monkeypatch,
                                                           setting, called):
    calls = []
    monkeypatch.setattr(trainer_module, "keep_freed_memory", lambda: calls.append(1) or True)
    torch.manual_seed(0)
    model = ContrastiveModel(tiny_bert, "cls_before_pooler", build_method("simcse"))
    ids = tokenize_sentences(tokenizer, wiki_sentences(mirror_dir, min_words=5, limit=32), 32)
    train(model, tokenizer, ids, TrainingConfig(batch_size=16, max_steps=1, device="cpu", eval_every=0,
                                                retain_freed_memory=setting))
    assert len(calls) == called
