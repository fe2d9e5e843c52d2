"""What keeping freed memory for reuse (``training.retain_freed_memory``,
training/host_memory.py) does to our SimCSE training on CPU: seconds and minor page
faults a step, with the setting and under glibc's malloc defaults.

    python benchmarks/cpu_allocator.py [--pairs 2] [--steps 30]

Each run is the trainer (training/trainer.py's ``train``) on the offline default
encoder, mean pooling, batch 64, length 32, wiki sentences, in a fresh process (the
setting is for the whole process and stays); the two settings alternate, run after
run (default, kept, kept, default, ...). A step is timed, and its page faults counted,
from one forward call to the next, over the steps after the first ``--skip`` (the
heap is still growing in the first ones). Result: ``benchmarks/results/cpu_allocator.json``
(command, machine, CPU, torch, git commit).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "cpu_allocator.json"
ROOT = Path(__file__).resolve().parents[1]


def one_run(setting: str, steps: int, skip: int) -> dict:
    """The trainer in this process with ``setting`` ("kept" or "default")."""
    import logging

    import torch

    from contrastive_sentence_embeddings.data.raw_sources import resolve_mirror_dir
    from contrastive_sentence_embeddings.encoders import DEFAULT_ENCODER
    from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
    from contrastive_sentence_embeddings.training.run import load_pretrained
    from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train

    logging.basicConfig(level=logging.WARNING)
    torch.manual_seed(0)
    encoder, tokenizer = load_pretrained(DEFAULT_ENCODER)
    model = ContrastiveModel(encoder, "mean", build_method("simcse", {"use_mlp": False}))
    path = resolve_mirror_dir() / "wiki" / "wiki1m_head.txt"
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    marks = []  # (seconds, minor faults) at each step's first forward call

    def mark(_module, _args):
        marks.append((time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt))

    model.register_forward_pre_hook(mark)
    config = TrainingConfig(learning_rate=3e-5, batch_size=64, max_steps=steps, max_length=32, eval_every=0,
                            device="cpu", max_grad_norm=None,
                            retain_freed_memory=None if setting == "kept" else False)
    train(model, tokenizer, tokenize_sentences(tokenizer, lines[:64 * steps], 32), config)
    (start, faults_at_start), (end, faults_at_end) = marks[skip], marks[-1]
    counted = len(marks) - 1 - skip
    return {"setting": setting, "seconds_per_step": round((end - start) / counted, 4),
            "minor_faults_per_step": round((faults_at_end - faults_at_start) / counted)}


def cpu_description() -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from simcse_training import cpu_description as describe

    return describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip", type=int, default=10, help="steps not counted at the start of each run")
    parser.add_argument("--one-run", choices=("kept", "default"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steps <= args.skip + 1:
        parser.error("--steps must exceed --skip + 1")
    if args.one_run:
        print(json.dumps(one_run(args.one_run, args.steps, args.skip)))
        return

    from contrastive_sentence_embeddings.project_paths import recorded_command
    from contrastive_sentence_embeddings.provenance import results_commit

    runs = []
    for pair in range(args.pairs):
        for setting in (("default", "kept") if pair % 2 == 0 else ("kept", "default")):
            done = subprocess.run([sys.executable, __file__, "--one-run", setting, "--steps", str(args.steps),
                                   "--skip", str(args.skip)], capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    summary = {setting: {"median_seconds_per_step": statistics.median(r["seconds_per_step"] for r in runs
                                                                      if r["setting"] == setting),
                         "median_minor_faults_per_step": statistics.median(r["minor_faults_per_step"] for r in runs
                                                                           if r["setting"] == setting)}
               for setting in ("default", "kept")}
    report = {
        "command": recorded_command(__file__, sys.argv[1:], ROOT),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs", "cpu": cpu_description(),
        "git_commit": results_commit(ROOT), "steps": args.steps, "counted_from_step": args.skip,
        "runs": runs, "summary": summary,
        "default_over_kept_seconds": round(summary["default"]["median_seconds_per_step"]
                                           / summary["kept"]["median_seconds_per_step"], 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"glibc defaults / kept, seconds a step: {report['default_over_kept_seconds']}")


if __name__ == "__main__":
    main()
