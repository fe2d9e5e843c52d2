"""``benchmarks/evaluation_kernels.py``: one STS evaluation in a fresh process under each
attention setting, and sentence-transformers' encode beside it (device_check.sh part 2
runs it on a lent GPU). Here in its CPU mode, with a tiny encoder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from contrastive_sentence_embeddings.encoding import SentenceEncoder
from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "evaluation_kernels.py"


def test_batch_shapes_counts_the_shapes_an_evaluation_meets(tiny_bert, tokenizer, mirror_dir):
    kernels = load_script(SCRIPT)
    assert kernels.batch_shapes([3, 5, 1, 3, 5, 3, 4], 2) == 4  # (2, 5), (2, 4), (2, 3), (1, 1)
    assert kernels.batch_shapes([3, 3, 3, 3], 2) == 1
    # against the shapes the library's encoder actually runs, on real sentences
    _, sentences = kernels.sts_inputs(mirror_dir)
    sentences = sentences[:700]
    seen = set()
    encoder = SentenceEncoder(tiny_bert, tokenizer, "mean", batch_size=64, device=torch.device("cpu"))
    handle = tiny_bert.register_forward_pre_hook(lambda module, args, kwargs: seen.add(tuple(kwargs["input_ids"].shape)),
                                                 with_kwargs=True)
    try:
        encoder.encode(sentences)
    finally:
        handle.remove()
    assert kernels.batch_shapes([len(ids) for ids in encoder.tokenize(sentences)], 64) == len(seen) > 3


def test_each_setting_evaluates_twice_in_a_fresh_process_and_the_sides_agree(tmp_path):
    output = tmp_path / "kernels.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--encoder-config", "tiny", "--output",
                           str(output)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["git_commit"] and report["encoder_config"] == "tiny" and report["batch_size"] == 128
    assert report["sentences"] > 20000  # the 7 STS tasks' distinct sentences
    rows = {row["setting"]: row for row in report["rows"]}
    assert list(rows) == ["default", "no-cudnn", "peer"]
    assert rows["no-cudnn"]["backends"] == ["flash", "efficient", "math"] and rows["default"]["backends"] == "any"
    assert rows["peer"]["side"] == "sentence-transformers"
    for row in rows.values():
        assert row["attention_kernel"] == "_scaled_dot_product_flash_attention_for_cpu"  # no cuDNN on a CPU
        assert row["precision"] == "cpu-fp32" and row["peak_memory_gib"] is None
        assert row["first_seconds"] > 0 and row["repeat_seconds"] > 0
        assert abs(row["first_extra_seconds"] - (row["first_seconds"] - row["repeat_seconds"])) < 0.002
        assert row["sts_avg"] == row["sts_avg_repeat"]
    # the same encoder, sentences and batches: our two settings give the same scores to
    # the last digit on a CPU, and sentence-transformers' mean pooling the same up to rounding
    assert rows["default"]["sts_avg"] == rows["no-cudnn"]["sts_avg"]
    assert abs(rows["peer"]["sts_avg"] - rows["default"]["sts_avg"]) < 1e-3
    assert rows["default"]["batch_shapes"] == rows["no-cudnn"]["batch_shapes"] > 10
    assert "| no-cudnn |" in done.stdout


def test_an_unknown_setting_is_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--settings", "default,cudnn-only"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown ['cudnn-only']" in done.stderr
