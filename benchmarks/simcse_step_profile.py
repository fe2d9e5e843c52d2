"""Where one SimCSE training step's time goes on CPU, ours against sentence-transformers'
MNRL recipe, phase by phase, and what each of our speed changes is worth (ablation).

    python benchmarks/simcse_step_profile.py [--steps 4] [--warmup 1] [--batch-size 64] [--dev]

Each trainer's step is replayed piece by piece with its own components and the same
encoder, sentences (wiki, cut at 32 tokens) and batch: ours as ``training/trainer.py``
runs it (collate = dynamic padding, forward = the doubled batch through the encoder
plus the InfoNCE loss, backward, gradient clipping at 1.0 (the default; the comparison
benchmark turns it off for both), AdamW + schedule + zero_grad, logging = reading the
loss as a float); the peer's as its trainer runs it (tokenising both columns,
two forward passes + MNRL, backward, clipping, AdamW). ``--dev`` adds one dev
evaluation (STS-B dev + SICK-R trial, 1 every ``eval_every`` steps in training).
Variants of ours switch one change at a time. Times are wall seconds per step (mean
of ``--steps`` after ``--warmup``) and process CPU seconds per step (all threads;
less disturbed by other processes on a shared machine). The result goes to
``benchmarks/results/simcse_step_profile.json`` and a Markdown table is printed.
To replay the steps as on a CPU without AVX-512, put ``provenance.INSTRUCTION_SET_CAPS``'s
variables in its environment (docs/record/results.md shows the command).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.data.raw_sources import resolve_mirror_dir
from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, resolve_encoder
from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.runs.project_paths import recorded_command
from contrastive_sentence_embeddings.records.provenance import cpu_description, results_commit, tuning_environment
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.run import load_pretrained

RESULTS = Path(__file__).parent / "results" / "simcse_step_profile.json"


class PhaseClock:
    """Wall and process-CPU seconds spent in each named phase, summed over steps."""

    def __init__(self):
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._mark = None

    def start(self) -> None:
        self._mark = (time.perf_counter(), time.process_time())

    def lap(self, phase: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.wall[phase] = self.wall.get(phase, 0.0) + wall - self._mark[0]
        self.cpu[phase] = self.cpu.get(phase, 0.0) + cpu - self._mark[1]
        self._mark = (wall, cpu)

    def per_step(self, steps: int) -> dict[str, dict[str, float]]:
        return {phase: {"wall_s": round(self.wall[phase] / steps, 4), "cpu_s": round(self.cpu[phase] / steps, 4)}
                for phase in self.wall}


def wiki_sentences(count: int) -> list[str]:
    path = resolve_mirror_dir() / "wiki" / "wiki1m_head.txt"
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) < count:
        raise ValueError(f"{path}: {len(lines)} sentences, the profile needs {count}")
    return lines[:count]


def profile_ours(record, encoder, tokenizer, sentences, args, *, real_tokens_only=True, uniform_dropout=True,
                 fused=True, foreach=True, two_passes=False):
    """Our step (training/trainer.py's loop body), phase by phase: yields after each
    step; ``record`` receives the phases and the losses."""
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(encoder), "mean", build_method("simcse", {"use_mlp": False}),
                             real_tokens_only=real_tokens_only, uniform_dropout=uniform_dropout)
    model.train()
    ids = tokenizer(sentences, truncation=True, max_length=args.max_length)["input_ids"]
    # The trainer's default is the fused kernel (build_optimizer); foreach the fallback.
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, **({"fused": True} if fused else {"foreach": foreach}))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    clock, losses = PhaseClock(), []
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            clock = PhaseClock()
        rows = ids[step * args.batch_size:(step + 1) * args.batch_size]
        torch.manual_seed(step)  # every run of ours draws the same dropout masks at a step
        clock.start()
        batch = pad_batch(rows, tokenizer.pad_token_id)
        clock.lap("collate / tokenise")
        if two_passes:  # the two views as two forward passes (sentence-transformers' way)
            a = model.embed(batch["input_ids"], batch["attention_mask"])
            b = model.embed(batch["input_ids"], batch["attention_mask"])
            clock.lap("forward (encoder)")
            from contrastive_sentence_embeddings.training.losses import info_nce
            loss = info_nce(a, b, 0.05)
            outputs = {"loss": loss}
        else:
            outputs = model(**batch)
        clock.lap("forward (encoder)" if not two_passes else "loss")
        outputs["loss"].backward()
        clock.lap("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=foreach)
        clock.lap("clip grad norm")
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        clock.lap("optimizer")
        logged = [float(value.detach()) for value in outputs.values()]
        clock.lap("logging")
        losses.append(logged[0])
        yield
    record.update(phases=clock.per_step(args.steps), losses=losses)


def profile_peer(record, sentences, args):
    """sentence-transformers' MNRL step as its trainer runs it, phase by phase (a
    generator like :func:`profile_ours`)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    torch.manual_seed(0)
    model = SentenceTransformer(resolve_encoder(args.encoder), device="cpu")
    model.max_seq_length = args.max_length
    model.train()
    loss_module = MultipleNegativesRankingLoss(model, scale=20.0)
    optimizer = peer_optimizer(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    clock = PhaseClock()
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            clock = PhaseClock()
        rows = sentences[step * args.batch_size:(step + 1) * args.batch_size]
        clock.start()
        features = [model.tokenize(rows), model.tokenize(rows)]  # anchor and positive columns
        clock.lap("collate / tokenise")
        loss = loss_module(features, None)
        clock.lap("forward (encoder)")
        loss.backward()
        clock.lap("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)  # its run: max_grad_norm 1e9, still computed
        clock.lap("clip grad norm")
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        clock.lap("optimizer")
        float(loss.detach())
        clock.lap("logging")
        yield
    record.update(phases=clock.per_step(args.steps))


def peer_optimizer(model) -> torch.optim.Optimizer:
    """The optimizer sentence-transformers' trainer builds with its default arguments,
    asked of the transformers Trainer itself (transformers 5.23: torch AdamW, fused)."""
    from sentence_transformers import SentenceTransformerTrainingArguments
    from transformers import Trainer

    with tempfile.TemporaryDirectory() as output:
        arguments = SentenceTransformerTrainingArguments(output_dir=output, learning_rate=3e-5, use_cpu=True,
                                                         report_to="none", weight_decay=0.0)
    optimizer_class, options = Trainer.get_optimizer_cls_and_kwargs(arguments)
    return optimizer_class(model.parameters(), **options)


def dev_evaluation_seconds(encoder, tokenizer) -> dict:
    from contrastive_sentence_embeddings.data.raw_file import folder_partitions
    from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
    from contrastive_sentence_embeddings.evaluation.sts import DevScorer

    scorer = DevScorer(folder_partitions(resolve_mirror_dir() / "sts"))
    start = (time.perf_counter(), time.process_time())
    scorer(SentenceEncoder(encoder, tokenizer, "mean", device=torch.device("cpu")).encode)
    return {"wall_s": round(time.perf_counter() - start[0], 2), "cpu_s": round(time.process_time() - start[1], 2)}


def total(phases: dict, key: str) -> float:
    return round(sum(row[key] for row in phases.values()), 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--dev", action="store_true", help="also time one dev evaluation")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"the results file (default {RESULTS})")
    parser.add_argument("--only-before", action="store_true",
                        help="of the ablation, only the run before issue 23 (quick runs on a busy machine)")
    args = parser.parse_args()
    sentences = wiki_sentences((args.warmup + args.steps) * args.batch_size)
    encoder, tokenizer = load_pretrained(args.encoder)

    # Ablation: ours with one change undone (or one idea tried) at a time.
    variants = {
        "ours, padded linears (real_tokens_only off)": dict(real_tokens_only=False),
        "ours, torch's dropout masks (uniform_dropout off)": dict(uniform_dropout=False),
        "ours, foreach AdamW (fused off)": dict(fused=False),
        "ours, per-parameter AdamW loop (fused and foreach off)": dict(fused=False, foreach=False),
        "ours, all off (before issue 23)": dict(real_tokens_only=False, uniform_dropout=False, fused=False,
                                                foreach=False),
        "ours, two forward passes (other dropout order)": dict(two_passes=True),
    }
    if args.only_before:
        variants = {name: options for name, options in variants.items() if "before" in name}
    records = {name: {} for name in ["ours", "sentence_transformers_mnrl", *variants]}
    steppers = {"ours": profile_ours(records["ours"], encoder, tokenizer, sentences, args),
                "sentence_transformers_mnrl": profile_peer(records["sentence_transformers_mnrl"], sentences, args)}
    for name, options in variants.items():
        steppers[name] = profile_ours(records[name], encoder, tokenizer, sentences, args, **options)
    # Round robin, one step of each run in turn (the first run rotating): on a machine
    # other processes share, every run sees the same load on average.
    names = list(steppers)
    for step in range(args.warmup + args.steps):
        print(f"step {step + 1} of {args.warmup + args.steps}", flush=True)
        for name in names[step % len(names):] + names[:step % len(names)]:
            next(steppers[name])
    for stepper in steppers.values():
        next(stepper, None)  # runs to the end: fills its record
    runs = {name: record["phases"] for name, record in records.items()}
    losses = {name: record["losses"] for name, record in records.items() if "losses" in record}
    report = {
        "command": recorded_command(__file__, sys.argv[1:], Path(__file__).resolve().parents[1]),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "cpu": cpu_description(), "environment": tuning_environment(),
        # The kernels torch ran (an instruction-set cap in the environment lowers them:
        # provenance.INSTRUCTION_SET_CAPS).
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "load_average_at_start_and_end": None, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "git_commit": results_commit(Path(__file__).resolve().parents[1]),
        # Packing and the fused update must not change the loss curve beyond rounding: every
        # step's loss of ours against the run without the one change (same seed, data,
        # dropout masks). Torch's own dropout masks are other masks: no such comparison.
        "loss_curve_max_abs_difference": {
            variant: max(abs(a - b) for a, b in zip(losses["ours"], losses[variant]))
            for variant in ("ours, padded linears (real_tokens_only off)", "ours, foreach AdamW (fused off)")
            if variant in losses},
        "losses": losses,
        "runs": {name: {"phases": phases, "step_wall_s": total(phases, "wall_s"), "step_cpu_s": total(phases, "cpu_s")}
                 for name, phases in runs.items()},
    }
    if args.dev:
        report["dev_evaluation"] = dev_evaluation_seconds(encoder, tokenizer)
    report["load_average_at_start_and_end"] = [LOAD_AT_START, list(os.getloadavg())]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.output, json.dumps(report, indent=2) + "\n")
    phases = list(runs["ours"])
    print("| run | " + " | ".join(phases) + " | step (wall s) | step (CPU s) |")
    print("|---|" + "---:|" * (len(phases) + 2))
    for name, row in report["runs"].items():
        cells = [f"{row['phases'].get(p, {'wall_s': 0})['wall_s']:.3f}" for p in phases]
        print(f"| {name} | " + " | ".join(cells) + f" | {row['step_wall_s']:.3f} | {row['step_cpu_s']:.3f} |")
    if args.dev:
        print(f"one dev evaluation: {report['dev_evaluation']}")


LOAD_AT_START = list(os.getloadavg())

if __name__ == "__main__":
    main()
