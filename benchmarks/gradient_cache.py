"""Gradient caching (``training.mini_batch_size``) on CPU: the peak memory of one SimCSE
step as the batch grows, with and without mini-batches, and the loss curve of a short
run both ways.

    python benchmarks/gradient_cache.py [--encoder small|<model name or folder>] [--mini-batch-size 64]

* memory: one training step (the real trainer, ``max_steps: 1``, no dev evaluation) at
  each batch size of ``--batches``, with ``mini_batch_size`` and without, each in a
  fresh process (peak RSS is a process's high-water mark); reported: the peak RSS of
  the process and its RSS before the step (model loaded), whose difference is the step's;
* loss curve: ``--steps`` steps at ``--curve-batch`` both ways, from the same weights
  and data order, dropout off (a step is then a deterministic function of the batch and
  the two curves must agree to round-off) and dropout on (the mini-batches draw other,
  equally distributed masks than one pass over the whole batch: the curves agree in
  distribution, not number for number).

The encoder is ``small`` (a random 4-layer BERT of hidden size 256 with the default
encoder's tokenizer, so the run takes minutes on a shared CPU) or any model the
project loads (``--encoder sentence-transformers/all-MiniLM-L6-v2``, the default
encoder). Sentences are random token ids of ``--length`` tokens (memory and the
equality of the curves do not depend on the text). Results go to
``benchmarks/results/gradient_cache.json`` with the command, machine, torch version
and git commit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results" / "gradient_cache.json"
GIB = 2 ** 30


def rss_peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # Linux: KiB


def rss_now_gib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / GIB


def build(encoder_name: str, seed: int = 0):
    from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, load_tokenizer
    from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method

    if encoder_name == "small":
        from transformers import BertConfig, BertModel

        tokenizer = load_tokenizer(DEFAULT_ENCODER)
        torch.manual_seed(seed)
        encoder = BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=256, num_hidden_layers=4,
                                       num_attention_heads=4, intermediate_size=1024, max_position_embeddings=128))
    else:
        from contrastive_sentence_embeddings.training.run import load_pretrained

        torch.manual_seed(seed)
        encoder, tokenizer = load_pretrained(encoder_name)
    return ContrastiveModel(encoder, "cls_before_pooler", build_method("simcse")), tokenizer


def sentences(tokenizer, count: int, length: int, seed: int = 1) -> list[list[int]]:
    """``count`` sentences of ``length`` tokens: [CLS] random word pieces [SEP]."""
    generator = torch.Generator().manual_seed(seed)
    low = max(tokenizer.all_special_ids) + 1
    body = torch.randint(low, tokenizer.vocab_size, (count, length - 2), generator=generator)
    return [[tokenizer.cls_token_id, *row.tolist(), tokenizer.sep_token_id] for row in body]


def train_run(encoder_name: str, batch: int, mini: int | None, steps: int, length: int, dropout: bool):
    from contrastive_sentence_embeddings.training.dropout import dropout_rate
    from contrastive_sentence_embeddings.training.trainer import TrainingConfig, train

    model, tokenizer = build(encoder_name)
    ids = sentences(tokenizer, batch * steps, length)
    config = TrainingConfig(batch_size=batch, mini_batch_size=mini, max_steps=steps, learning_rate=3e-5,
                            eval_every=0, log_every=1, device="cpu", max_length=length)
    before = rss_now_gib()
    if dropout:
        result = train(model, tokenizer, ids, config)
    else:
        with dropout_rate(model.encoder, 0.0):
            result = train(model, tokenizer, ids, config)
    return result, before


def memory_row(args) -> None:
    """One row, in this (fresh) process: printed as JSON."""
    torch.set_num_threads(args.threads)
    mini = args.row_mini or None
    start = time.perf_counter()
    result, before = train_run(args.encoder, args.row_batch, mini, 1, args.length, dropout=True)
    print(json.dumps({"batch_size": args.row_batch, "mini_batch_size": mini, "rss_before_step_gib": round(before, 3),
                      "peak_rss_gib": round(rss_peak_gib(), 3), "step_seconds": round(time.perf_counter() - start, 1),
                      "loss": float(result.curve["loss"].dropna().iloc[-1])}))


def curve(args) -> None:
    torch.set_num_threads(args.threads)
    out = {}
    for dropout in (False, True):
        losses = {}
        for mini in (None, args.mini_batch_size):
            result, _ = train_run(args.encoder, args.curve_batch, mini, args.steps, args.length, dropout)
            losses["whole_batch" if mini is None else "mini_batches"] = [
                float(v) for v in result.curve["loss"].dropna().tolist()]
        whole, cached = losses["whole_batch"], losses["mini_batches"]
        out["dropout_on" if dropout else "dropout_off"] = {
            **losses, "max_abs_difference": max(abs(a - b) for a, b in zip(whole, cached)),
            "max_relative_difference": max(abs(a - b) / abs(a) for a, b in zip(whole, cached))}
    print(json.dumps(out))


def child(args, *extra: str) -> dict:
    command = [sys.executable, __file__, "--encoder", args.encoder, "--length", str(args.length),
               "--threads", str(args.threads), "--mini-batch-size", str(args.mini_batch_size),
               "--steps", str(args.steps), "--curve-batch", str(args.curve_batch), *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from contrastive_sentence_embeddings.runs.project_paths import recorded_command
    from contrastive_sentence_embeddings.records.provenance import results_commit

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default="small")
    parser.add_argument("--batches", default="64,128,256,512,1024")
    parser.add_argument("--mini-batch-size", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--curve-batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--row-batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--row-mini", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--curve-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row_batch:
        return memory_row(args)
    if args.curve_only:
        return curve(args)

    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        for mini in (0, args.mini_batch_size):
            row = child(args, "--row-batch", str(batch), "--row-mini", str(mini))
            row["step_rss_gib"] = round(row["peak_rss_gib"] - row["rss_before_step_gib"], 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
    loss_curve = child(args, "--curve-only")
    print(json.dumps({k: {"max_relative_difference": v["max_relative_difference"]} for k, v in loss_curve.items()}))
    record = {
        "command": recorded_command(__file__, sys.argv[1:], Path(__file__).resolve().parents[1]),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "threads": args.threads},
        "torch": torch.__version__, "git_commit": results_commit(Path(__file__).resolve().parents[1]),
        "encoder": args.encoder, "length": args.length, "mini_batch_size": args.mini_batch_size,
        "memory": rows,
        "loss_curve": {"steps": args.steps, "batch_size": args.curve_batch, **loss_curve},
        "note": "CPU shared with other jobs while measured: times are noisy, memory is not",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    temporary = RESULTS.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record, indent=1) + "\n")
    temporary.replace(RESULTS)
    print(f"written {RESULTS}")


if __name__ == "__main__":
    main()
