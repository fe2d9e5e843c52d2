"""Paired A/B timing of one SimCSE forward + backward with the linear layers on real
tokens only (training/real_tokens.py) against the padded computation, on CPU.

    python benchmarks/simcse_real_tokens_ab.py [--pairs 12] [--threads 1]

The two models alternate step by step (A then B, then B then A, ...) on the same
batches (wiki, cut at 32 tokens, 64 sentences, SimCSE's doubled batch) with the same
dropout masks, so on a machine other processes share both see the same load: the
per-pair ratio, the median and the minimum of each are robust where a mean is not.
Result: ``benchmarks/results/simcse_real_tokens_ab.json`` (command, machine, torch,
git commit, load average).

``--change uniform_dropout`` times the other CPU change of a training pass the same
way: dropout masks from uniform integer draws (training/cpu_dropout.py) against
torch's ``bernoulli_`` masks, both on real tokens. The masks differ by design, so the
losses are only compared on average. Result: ``benchmarks/results/simcse_uniform_dropout_ab.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.data.raw_sources import resolve_mirror_dir
from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER
from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.runs.project_paths import recorded_command
from contrastive_sentence_embeddings.records.provenance import results_commit
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.run import load_pretrained

RESULTS = Path(__file__).parent / "results"
# --change: (the model option, the names of the runs with it on and off)
CHANGES = {"real_tokens": ("real_tokens_only", "real_tokens", "padded"),
           "uniform_dropout": ("uniform_dropout", "uniform_draws", "bernoulli")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--change", choices=sorted(CHANGES), default="real_tokens")
    args = parser.parse_args()
    option, on, off = CHANGES[args.change]
    torch.set_num_threads(args.threads)
    load_at_start = list(os.getloadavg())
    path = resolve_mirror_dir() / "wiki" / "wiki1m_head.txt"
    sentences = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    encoder, tokenizer = load_pretrained(args.encoder)
    ids = tokenizer(sentences[: args.pairs * args.batch_size], truncation=True, max_length=args.max_length)["input_ids"]
    models = {name: ContrastiveModel(copy.deepcopy(encoder), "mean", build_method("simcse", {"use_mlp": False}),
                                     **{option: name == on}).train()
              for name in (on, off)}
    seconds: dict[str, list[float]] = {name: [] for name in models}
    losses: dict[str, list[float]] = {name: [] for name in models}
    real = padded = 0
    for pair in range(args.pairs):
        batch = pad_batch(ids[pair * args.batch_size:(pair + 1) * args.batch_size], tokenizer.pad_token_id)
        real, padded = real + int(batch["attention_mask"].sum()), padded + batch["attention_mask"].numel()
        for name in ((on, off) if pair % 2 else (off, on)):
            torch.manual_seed(pair)  # the same dropout masks for both (real_tokens)
            start = time.perf_counter()
            loss = models[name](**batch)["loss"]
            loss.backward()
            seconds[name].append(time.perf_counter() - start)
            losses[name].append(float(loss.detach()))
            models[name].zero_grad(set_to_none=True)
        print(f"pair {pair + 1}: {on} {seconds[on][-1]:.2f} s, {off} {seconds[off][-1]:.2f} s", flush=True)
    ratios = [without / with_ for without, with_ in zip(seconds[off], seconds[on])]
    report = {
        "command": recorded_command(__file__, sys.argv[1:], Path(__file__).resolve().parents[1]),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, shared with other processes",
        "load_average_at_start_and_end": [load_at_start, list(os.getloadavg())],
        "torch": torch.__version__, "threads": args.threads,
        "git_commit": results_commit(Path(__file__).resolve().parents[1]),
        "real_token_share": round(real / padded, 3),
        "seconds": {name: [round(s, 3) for s in values] for name, values in seconds.items()},
        "median_seconds": {name: round(statistics.median(values), 3) for name, values in seconds.items()},
        "min_seconds": {name: round(min(values), 3) for name, values in seconds.items()},
        "speedup_per_pair": [round(r, 3) for r in ratios], "median_speedup": round(statistics.median(ratios), 3),
        f"pairs_faster_with_{on}": sum(r > 1 for r in ratios),
    }
    if args.change == "real_tokens":  # same masks: the losses must agree up to rounding
        report["loss_max_abs_difference"] = max(abs(a - b) for a, b in zip(losses[on], losses[off]))
    else:  # other masks: the same distribution, so about the same loss on average
        report["mean_loss"] = {name: round(statistics.mean(values), 5) for name, values in losses.items()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_text_atomically(RESULTS / f"simcse_{args.change}_ab.json", json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k not in ("command", "machine", "seconds", "speedup_per_pair")}))


if __name__ == "__main__":
    main()
