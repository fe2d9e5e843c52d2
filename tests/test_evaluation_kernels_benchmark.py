"""``benchmarks/evaluation_kernels.py``: one STS evaluation in a fresh process under each
attention setting, and sentence-transformers' encode beside it (device_check.sh part 2
runs it on a lent GPU). Here in its CPU mode, with a tiny encoder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "evaluation_kernels.py"


def sorted_batch_shapes(lengths: list[int], batch_size: int) -> int:
    """Distinct (rows, width) shapes of ``lengths`` sorted longest first, batched
    ``batch_size`` at a time, each batch padded to its longest: how the library's
    evaluation batches (encoders/encoding.py's module docstring)."""
    ordered = sorted(lengths, reverse=True)
    return len({(len(ordered[begin:begin + batch_size]), ordered[begin])
                for begin in range(0, len(ordered), batch_size)})


def test_the_shapes_counted_are_those_of_the_library_s_batches(tiny_bert, tokenizer, mirror_dir):
    kernels = load_script(SCRIPT)
    _, sentences = kernels.sts_inputs(mirror_dir)
    sentences = sentences[:700]
    encoder = SentenceEncoder(tiny_bert, tokenizer, "mean", batch_size=64, device=torch.device("cpu"))
    with kernels.InputShapes(tiny_bert) as shapes:
        encoder.encode(sentences)
    lengths = [len(ids) for ids in encoder.tokenize(sentences)]
    assert len(shapes.seen) == sorted_batch_shapes(lengths, 64) > 3
    assert {rows for rows, _ in shapes.seen} == {64, 700 % 64}
    encoder.encode(sentences)  # after the context: no longer counted
    assert len(shapes.seen) == sorted_batch_shapes(lengths, 64)


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
    assert rows["peer"]["batch_shapes"] > 10  # sentence-transformers sorts by characters, pads per batch too
    assert "| no-cudnn |" in done.stdout


def test_an_unknown_setting_is_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--settings", "default,cudnn-only"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown ['cudnn-only']" in done.stderr
