"""Time the full 7-task STS evaluation of an encoder against
``SentenceTransformer.encode`` on the same sentences, in the same process.

    python benchmarks/sts_evaluation.py [--encoder NAME] [--batch-size 128] [--repeats 1]

Both sides encode the same distinct sentences with the same batch size and threads;
ours also reads nothing twice and scores all seven tasks. The ratio
(ours / sentence-transformers) is the overhead of the protocol over the plain
encoding. Results are printed as a Markdown row and written to
``benchmarks/results/sts_evaluation.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.data.raw_file import folder_partitions
from contrastive_sentence_embeddings.data.raw_sources import resolve_mirror_dir
from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, resolve_encoder
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation.sts import distinct_sentences, read_sts_benchmark, score_sts

RESULTS = Path(__file__).parent / "results" / "sts_evaluation.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    parser.add_argument("--pooling", default="mean")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    suite = read_sts_benchmark(folder_partitions(resolve_mirror_dir() / "sts"), StepReport("sts"))
    sentences = distinct_sentences(suite)
    ours = SentenceEncoder.load(args.encoder, args.pooling, batch_size=args.batch_size, device="cpu")
    theirs = SentenceTransformer(resolve_encoder(args.encoder), device="cpu")

    ours_seconds, theirs_seconds = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        embeddings = ours.encode(sentences, show_progress=False)
        metrics = score_sts(suite, dict(zip(sentences, embeddings)))
        ours_seconds.append(time.perf_counter() - start)

        start = time.perf_counter()
        theirs.encode(sentences, batch_size=args.batch_size, show_progress_bar=False)
        theirs_seconds.append(time.perf_counter() - start)

    result = {
        "encoder": args.encoder,
        "pooling": args.pooling,
        "sentences": len(sentences),
        "batch_size": args.batch_size,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "ours_seconds": round(float(np.median(ours_seconds)), 2),
        "sentence_transformers_encode_seconds": round(float(np.median(theirs_seconds)), 2),
        "sts_avg": round(metrics["sts_avg"], 2),
    }
    result["ratio"] = round(result["ours_seconds"] / result["sentence_transformers_encode_seconds"], 3)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(RESULTS, json.dumps(result, indent=2) + "\n")
    print("| encoder | sentences | threads | full 7-task STS (s) | ST encode (s) | ratio | STS avg |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| {args.encoder} ({args.pooling}) | {result['sentences']} | {result['threads']} | {result['ours_seconds']} "
          f"| {result['sentence_transformers_encode_seconds']} | {result['ratio']} | {result['sts_avg']} |")


if __name__ == "__main__":
    main()
