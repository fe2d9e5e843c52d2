"""Where the uniform-draw attention dropout (training/cpu_dropout.py) stops paying on CPU:
one attention forward + backward with dropout 0.1, torch's SDPA against
``attention_with_dropout``, at the default encoder's head shape (12 heads of 32) and
the sequence lengths the methods train on (SimCSE's 32-token sentences up to DeCLUTR's
512-token spans), a quarter of the keys padded in half of the rows.

    python benchmarks/cpu_attention_dropout.py [--threads 2] [--pairs 6]

The two alternate (torch, ours, ours, torch, ...) so both see the same load; the
medians per length and their ratio go to
``benchmarks/results/cpu_attention_dropout.json`` with the command, machine, torch and
git commit. ``UNIFORM_ATTENTION_MAX_KEYS`` in cpu_dropout.py is set from this table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.runs.project_paths import recorded_command
from contrastive_sentence_embeddings.records.provenance import results_commit
from contrastive_sentence_embeddings.training.cpu_dropout import UNIFORM_ATTENTION_MAX_KEYS, attention_with_dropout

RESULTS = Path(__file__).parent / "results" / "cpu_attention_dropout.json"
# (sequences, length): about 4,096 padded tokens each, as the methods' batches and buckets are
SHAPES = [(128, 32), (64, 64), (32, 128), (20, 192), (16, 256), (12, 340), (8, 512)]


def timed(attention, query, key, value, mask) -> float:
    started = time.perf_counter()
    attention(query, key, value, mask).sum().backward()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    implementations = {
        "torch_sdpa": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=0.1),
        "uniform_draws": lambda q, k, v, m: attention_with_dropout(q, k, v, m, 0.1, None),
    }
    rows = []
    for sequences, length in SHAPES:
        query, key, value = (torch.randn(sequences, 12, length, 32, requires_grad=True) for _ in range(3))
        mask = torch.ones(sequences, 1, length, length, dtype=torch.bool)
        mask[: sequences // 2, :, :, length * 3 // 4:] = False
        seconds = {name: [] for name in implementations}
        for name, attention in implementations.items():  # warm-up
            timed(attention, query, key, value, mask)
        for pair in range(args.pairs):
            order = list(implementations) if pair % 2 == 0 else list(reversed(implementations))
            for name in order:
                seconds[name].append(timed(implementations[name], query, key, value, mask))
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        rows.append({"sequences": sequences, "length": length,
                     **{f"{name}_ms": round(1000 * value, 2) for name, value in medians.items()},
                     "torch_over_uniform": round(medians["torch_sdpa"] / medians["uniform_draws"], 3),
                     "served_by": "uniform_draws" if length <= UNIFORM_ATTENTION_MAX_KEYS else "torch_sdpa"})
        print(rows[-1], flush=True)
    report = {
        "command": recorded_command(__file__, sys.argv[1:], Path(__file__).resolve().parents[1]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "threads": args.threads, "pairs": args.pairs,
        "torch": torch.__version__,
        "git_commit": results_commit(Path(__file__).resolve().parents[1]),
        "load_average_at_end": os.getloadavg(), "uniform_attention_max_keys": UNIFORM_ATTENTION_MAX_KEYS,
        "rows": rows,
    }
    write_text_atomically(RESULTS, json.dumps(report, indent=1) + "\n")
    print(f"written: {RESULTS}")


if __name__ == "__main__":
    main()
