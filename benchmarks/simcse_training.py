"""Our SimCSE training against sentence-transformers' SimCSE recipe
(``MultipleNegativesRankingLoss`` on (sentence, sentence) pairs), same encoder, data,
batch, length, learning rate, steps and threads, in one run.

    python benchmarks/simcse_training.py [--steps 30] [--batch-size 64] [--pooling mean] [--repeats 3]

Both start from the same pretrained weights, see the same sentences (steps x batch
of them: one epoch, each in its own trainer's shuffled order), use InfoNCE at
temperature 0.05 (MNRL's scale 20) without an MLP head, AdamW with a linear schedule
and no warm-up. Reported: examples/s of each and STS-B dev / SICK-R trial Spearman
after the same number of steps, scored by the same evaluator. Both run one after the
other, ``--repeats`` times, the order alternating (ours first, then theirs first,
...), and each repeat's ratio of examples/s is reported: on a machine other processes
share, the two of a repeat see about the same load. Each trainer runs in a fresh
process of its own, as a user's run is: the heap one has grown does not serve the
other (in one process the peer ran ~13% faster after ours, docs/record/results.md).
The load average before and after each trainer is recorded. ``--interleaved`` runs
each repeat's two trainers at once in two processes that take their steps in turn
instead (ours, theirs, ours, ...: one waits while the other steps), each timing its
own turns (a turn: from one step's first forward call to the next's, so data, logging
and the update are in it; the last one ends when the trainer returns): both meet the
machine as it is at the same moments, which a shared or throttled machine changes from
one minute to the next. ``--against-itself ours|theirs`` is the check of that method:
one trainer in both processes, whose two examples/s should agree (written to
``benchmarks/results/simcse_training_against_itself_<trainer>.json``). ``--no-dev``
skips the dev scores (for quick runs on a busy machine). ``--sentences`` is a Kedro
``wiki_sentences`` ArrowDataset folder or a text file with one sentence per line
(default: the offline mirror's ``wiki/wiki1m_head.txt``). ``GLIBC_TUNABLES`` in the
environment gives both trainers other malloc thresholds (recorded in the results, with
the other variables ``provenance.tuning_environment`` lists).
``--instruction-set avx2`` runs both trainers with torch's CPU kernels capped at AVX2
(``provenance.INSTRUCTION_SET_CAPS``: ATen, oneDNN and MKL each told so in the
trainers' environment), a stand-in on a CPU with AVX-512 for one without it; each
trainer reports the kernels it ran (``cpu_capability``), and a trainer that did not
run capped is an error.
Results are printed as Markdown and written to
``benchmarks/results/simcse_training.json`` (or ``--output``) with the command, the
machine and its CPU, torch version and git commit.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import multiprocessing
import os
import platform
import queue
import sys
import tempfile
import time
from pathlib import Path

import torch

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.data.raw_file import folder_partitions
from contrastive_sentence_embeddings.data.raw_sources import resolve_mirror_dir
from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, resolve_encoder
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.runs.project_paths import recorded_command
from contrastive_sentence_embeddings.records.provenance import (
    INSTRUCTION_SET_CAPS,
    cpu_description,
    results_commit,
    starting_environment,
    tuning_environment,
)
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.run import load_pretrained
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train

RESULTS = Path(__file__).parent / "results" / "simcse_training.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    parser.add_argument("--pooling", default="mean")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-5)
    parser.add_argument("--sentences", default=None)  # an ArrowDataset folder or a text file; default: the mirror's wiki
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-dev", action="store_true")
    parser.add_argument("--interleaved", action="store_true",
                        help="the two trainers in two processes taking their steps in turn")
    parser.add_argument("--against-itself", choices=("ours", "theirs"),
                        help="interleave one trainer with itself (the method's check)")
    parser.add_argument("--instruction-set", choices=sorted(INSTRUCTION_SET_CAPS),
                        help="cap torch's CPU kernels at this instruction set in both trainers' processes")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"the results file (default {RESULTS})")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.instruction_set:
        # Read by each library when it loads: the trainers' fresh processes inherit it.
        os.environ.update(INSTRUCTION_SET_CAPS[args.instruction_set])
    if args.against_itself:
        return against_itself(args)

    wanted = args.steps * args.batch_size
    sentences = read_sentences(args.sentences, wanted)
    repeats = []
    for repeat in range(args.repeats):
        order = (train_ours, train_theirs) if repeat % 2 == 0 else (train_theirs, train_ours)
        row = {"first": "ours" if repeat % 2 == 0 else "sentence_transformers_mnrl"}
        if args.interleaved:
            row.update(interleaved(args, sentences, order))
        else:
            for trainer in order:
                load_before = os.getloadavg()[0]
                name, seconds, scores, capability = in_own_process(trainer, args, sentences)
                row[name] = {"seconds": round(seconds, 1), "examples_per_second": round(wanted / seconds, 1),
                             "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                             "cpu_capability": capability, **{k: round(v, 2) for k, v in scores.items()}}
        check_capability(args, row)
        row["ratio"] = round(row["ours"]["examples_per_second"] / row["sentence_transformers_mnrl"]["examples_per_second"], 3)
        repeats.append(row)
        print(f"repeat {repeat + 1}: ours {row['ours']['examples_per_second']} ex/s, sentence-transformers "
              f"{row['sentence_transformers_mnrl']['examples_per_second']} ex/s, ratio {row['ratio']}", flush=True)

    report = {
        **run_record(args),
        "encoder": args.encoder, "pooling": args.pooling, "steps": args.steps, "batch_size": args.batch_size,
        "max_length": args.max_length, "sentences": args.sentences or "mirror wiki/wiki1m_head.txt",
        "instruction_set_cap": args.instruction_set,
        "timing": "interleaved steps, two processes" if args.interleaved else "one trainer after the other",
        "ratios": [row["ratio"] for row in repeats], "repeats": repeats,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(args.output, json.dumps(report, indent=2) + "\n")
    print("| repeat | first | ours examples/s | sentence-transformers examples/s | ratio | ours STS-B dev | theirs STS-B dev |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for number, row in enumerate(repeats, start=1):
        ours, theirs = row["ours"], row["sentence_transformers_mnrl"]
        print(f"| {number} | {row['first']} | {ours['examples_per_second']} | {theirs['examples_per_second']} "
              f"| {row['ratio']} | {ours.get('stsb_dev', '-')} | {theirs.get('stsb_dev', '-')} |")


def in_own_process(trainer, args, sentences) -> tuple[str, float, dict]:
    """``trainer``'s run (its name, wall seconds and dev scores) in a fresh process."""
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    worker = context.Process(target=run_alone, args=(trainer, args, sentences, reports))
    worker.start()
    (report,) = collect(reports, [worker])
    return report


def collect(reports, workers) -> list:
    """One report from each of ``workers`` (processes that put one on ``reports``), then
    their exits; a process that ends without reporting (killed, out of memory) or with
    an error is an error here, not a wait for ever."""
    received = []
    while len(received) < len(workers):
        try:
            received.append(reports.get(timeout=5))
        except queue.Empty:
            failed = any(worker.exitcode not in (None, 0) for worker in workers)
            if failed or all(worker.exitcode is not None for worker in workers):
                for worker in workers:
                    worker.kill()
                codes = ", ".join(str(worker.exitcode) for worker in workers)
                raise RuntimeError(f"a trainer's process ended without its report (exit codes {codes})") from None
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a trainer's process ended with exit code {worker.exitcode}")
    return received


def run_alone(trainer, args, sentences, reports) -> None:
    logging.basicConfig(level=logging.WARNING)
    dev = None if args.no_dev else DevScorer(folder_partitions(resolve_mirror_dir() / "sts"))
    reports.put((*trainer(args, sentences, dev), torch.backends.cpu.get_cpu_capability()))


def check_capability(args, rows: dict) -> None:
    """With ``--instruction-set``, every trainer of ``rows`` must have run its kernels at
    that set (torch ignores a cap it does not know, and a CPU without the set runs
    below it): a row timed at another one would be a wrong figure under the cap's name."""
    if not args.instruction_set:
        return
    wanted = args.instruction_set.upper()
    for name, row in rows.items():
        if isinstance(row, dict) and row.get("cpu_capability") != wanted:
            raise RuntimeError(f"{name} ran torch's CPU kernels at {row.get('cpu_capability')}, not the "
                               f"{wanted} that --instruction-set {args.instruction_set} asked for")


def interleaved(args, sentences, order) -> dict:
    """Both trainers at once, in two processes taking turns step by step, ``order[0]``'s
    first; each one's examples/s over its own turns."""
    context = multiprocessing.get_context("spawn")
    turns = [context.Semaphore(1), context.Semaphore(0)]
    # Both wait for each other at their first step (neither steps while the other loads)
    # and after their last (neither steps while the other scores the dev sets).
    together = context.Barrier(2)
    reports = context.Queue()
    load_before = os.getloadavg()[0]
    workers = [context.Process(target=take_turns, args=(trainer, index, turns, together, reports, args, sentences))
               for index, trainer in enumerate(order)]
    for worker in workers:
        worker.start()
    rows = dict(collect(reports, workers))
    wanted = args.steps * args.batch_size
    for row in rows.values():
        row.update(examples_per_second=round(wanted / row["seconds"], 1),
                   load_average_1min=[round(load_before, 2), round(os.getloadavg()[0], 2)])
    return rows


def run_record(args) -> dict:
    """What identifies this run: its command, the machine (its CPU: runs on other CPUs
    differ by 2x here), torch, the commit, and the speed settings of the environment the
    trainers started with (``GLIBC_TUNABLES`` changes both trainers' speed:
    docs/record/results.md; ``--instruction-set``'s cap is in it)."""
    cap = INSTRUCTION_SET_CAPS[args.instruction_set] if args.instruction_set else {}
    return {
        "command": recorded_command(__file__, sys.argv[1:], Path(__file__).resolve().parents[1]),
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()})",
        "cpu": cpu_description(),
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "git_commit": results_commit(Path(__file__).resolve().parents[1]),
        "environment": tuning_environment({**starting_environment(), **cap}),
    }


def against_itself(args) -> None:
    """``--against-itself``: the interleaved timing with one trainer in both processes."""
    trainer = {"ours": train_ours, "theirs": train_theirs}[args.against_itself]
    sentences = read_sentences(args.sentences, args.steps * args.batch_size)
    args.no_dev = True
    repeats = []
    for _ in range(args.repeats):
        slots = interleaved(args, sentences, (functools.partial(in_slot, trainer, "first"),
                                              functools.partial(in_slot, trainer, "second")))
        check_capability(args, slots)
        slots["ratio"] = round(slots["first"]["examples_per_second"] / slots["second"]["examples_per_second"], 3)
        repeats.append(slots)
        print(f"{args.against_itself} against itself: first {slots['first']['examples_per_second']} ex/s, "
              f"second {slots['second']['examples_per_second']} ex/s, ratio {slots['ratio']}", flush=True)
    report = {
        **run_record(args),
        "trainer": args.against_itself, "instruction_set_cap": args.instruction_set, "steps": args.steps,
        "batch_size": args.batch_size, "repeats": repeats,
    }
    write_text_atomically(RESULTS.parent / f"simcse_training_against_itself_{args.against_itself}.json",
                          json.dumps(report, indent=2) + "\n")


def in_slot(trainer, slot, *arguments, **options):
    """``trainer``'s run reported under ``slot`` (the name of a process of the pair)."""
    _, seconds, scores = trainer(*arguments, **options)
    return slot, seconds, scores


def take_turns(trainer, index, turns, together, reports, args, sentences) -> None:
    """Runs ``trainer`` in this process, stepping only in its turn: a global forward
    hook on the step's outermost module ends the previous turn (passing it on) and waits
    for the next; the time of each turn is summed."""
    logging.basicConfig(level=logging.WARNING)
    dev = None if args.no_dev else DevScorer(folder_partitions(resolve_mirror_dir() / "sts"))
    mine, other = turns[index], turns[1 - index]
    clock = {"start": None, "seconds": 0.0, "turns": 0, "top": None}

    def end_turn():
        clock["seconds"] += time.perf_counter() - clock["start"]
        clock["turns"] += 1
        clock["start"] = None
        other.release()

    def at_forward(module, _args):
        if module is not clock["top"]:
            return
        if clock["start"] is not None:
            end_turn()
        elif clock["turns"] == 0:
            together.wait()
        mine.acquire()
        clock["start"] = time.perf_counter()

    def timed(run_training, top):
        clock["top"] = top
        handle = torch.nn.modules.module.register_module_forward_pre_hook(at_forward)
        try:
            run_training()
        finally:
            handle.remove()
            if clock["start"] is not None:
                end_turn()
        together.wait()
        return clock["seconds"]

    name, _, scores = trainer(args, sentences, dev, timed)
    if clock["turns"] != args.steps:
        raise RuntimeError(f"{name}: {clock['turns']} turns timed for {args.steps} steps")
    reports.put((name, {"seconds": round(clock["seconds"], 1), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                        **{k: round(v, 2) for k, v in scores.items()}}))


def wall_clock(run_training, _top) -> float:
    start = time.perf_counter()
    run_training()
    return time.perf_counter() - start


def read_sentences(source: str | None, wanted: int) -> list[str]:
    """The first ``wanted`` sentences of an ArrowDataset folder or a text file."""
    path = Path(source) if source else resolve_mirror_dir() / "wiki" / "wiki1m_head.txt"
    if path.is_dir():
        from datasets import load_from_disk

        table = load_from_disk(str(path))
        return table.select(range(min(wanted, len(table))))["sentence"][:]
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:wanted]


def train_ours(args, sentences, dev, timer=wall_clock):
    torch.manual_seed(0)
    encoder, tokenizer = load_pretrained(args.encoder)
    model = ContrastiveModel(encoder, args.pooling, build_method("simcse", {"use_mlp": False}))
    config = TrainingConfig(learning_rate=args.learning_rate, batch_size=args.batch_size, max_steps=args.steps,
                            max_length=args.max_length, eval_every=0, device="cpu", max_grad_norm=None)
    ids = tokenize_sentences(tokenizer, sentences, args.max_length)
    trained = []
    seconds = timer(lambda: trained.append(train(model, tokenizer, ids, config)), model)
    result = trained[0]
    if dev is None:
        return "ours", seconds, {}
    encoder.load_state_dict(result.best_state)
    return "ours", seconds, dev(SentenceEncoder(encoder, tokenizer, args.pooling, device=torch.device("cpu")).encode)


def train_theirs(args, sentences, dev, timer=wall_clock):
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    torch.manual_seed(0)
    st_model = SentenceTransformer(resolve_encoder(args.encoder), device="cpu")
    st_model.max_seq_length = args.max_length
    pairs = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    with tempfile.TemporaryDirectory() as output:
        training_args = SentenceTransformerTrainingArguments(
            output_dir=output, per_device_train_batch_size=args.batch_size, max_steps=args.steps,
            learning_rate=args.learning_rate, warmup_steps=0, lr_scheduler_type="linear", weight_decay=0.0,
            max_grad_norm=1e9, save_strategy="no", report_to="none", logging_steps=10**6, use_cpu=True,
            dataloader_drop_last=True, seed=0,
        )
        loss = MultipleNegativesRankingLoss(st_model, scale=20.0)
        trainer = SentenceTransformerTrainer(model=st_model, args=training_args, train_dataset=pairs, loss=loss)
        seconds = timer(trainer.train, loss)
    if dev is None:
        return "sentence_transformers_mnrl", seconds, {}
    return "sentence_transformers_mnrl", seconds, dev(lambda s: st_model.encode(s, batch_size=128, convert_to_numpy=True))


if __name__ == "__main__":
    main()
