"""The shapes of DeCLUTR's forward passes at the paper's settings, for each
``pad_to_multiple_of``: how many passes a step makes, how many of them have a
``(rows, width)`` shape no earlier step had, and what the rounding costs in padding.

    python benchmarks/declutr_shapes.py                      # multiples 1, 8, 64, 128
    python benchmarks/declutr_shapes.py --multiples 1,16 --steps 200
    python benchmarks/declutr_shapes.py --bucket-tokens 4096,8192,16384,32768 --multiples 1,8,64

Why it matters: on a GPU some kernels are prepared per input shape and cached, and a
step that keeps meeting new shapes keeps paying for the preparation. PyTorch >= 2.10
runs ``scaled_dot_product_attention`` on Hopper through cuDNN, which builds a graph for
each new shape (forward and backward); torch.compile specialises on shapes too. A
SimCSE batch has one of ~30 shapes (64 rows, width <= 32); a DeCLUTR bucket's width can
be anything from 34 to 514 and its rows depend on the widths, so the count of new
shapes does not fall to zero after a warm-up the way SimCSE's does.

No model runs: the batches are the library's own (:class:`DeclutrCollate`, the paper's
block from ``conf/base`` + ``conf/paper``, spans sampled by the library's sampler at the
paper's 32-512 tokens, A = 2, P = 2) over the mirror's WikiText-2 articles of >= 2048
tokens, the documents in a seeded random order each epoch, ``batch_size`` a step, the
last incomplete batch dropped, as the trainer does. Writes
``benchmarks/results/declutr_shapes.json``; CPU only, seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark's data helpers
import training_throughput as throughput  # noqa: E402

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.runs.project_paths import recorded_command  # noqa: E402
from contrastive_sentence_embeddings.records.provenance import results_commit  # noqa: E402

PROJECT_ROOT = throughput.PROJECT_ROOT


def pass_shapes(collate, documents: list[str], batch_size: int, steps: int, seed: int) -> list[list[tuple]]:
    """Per step, the ``(rows, width, real tokens)`` of each forward pass (anchor buckets,
    then positive buckets)."""
    shapes, order, epoch = [], [], 0
    generator = torch.Generator().manual_seed(seed)
    while len(shapes) < steps:
        if len(order) < batch_size:  # drop_last: a new epoch, its own spans and order
            collate.set_epoch(epoch)
            epoch += 1
            order = [documents[i] for i in torch.randperm(len(documents), generator=generator).tolist()]
        batch, order = order[:batch_size], order[batch_size:]
        built = collate(batch)
        shapes.append([(*bucket["input_ids"].shape, int(bucket["attention_mask"].sum()))
                       for part in ("anchors", "positives") for bucket in built[part]])
    return shapes


def summarise(shapes: list[list[tuple]], warmup: int) -> dict:
    """The passes, new shapes (counted as the throughput benchmark counts them:
    :func:`training_throughput.new_shapes`) and padding of :func:`pass_shapes`' steps."""
    passes = [(step, rows, width) for step, step_passes in enumerate(shapes) for rows, width, _ in step_passes]
    distinct, passes_after_warmup, new_after_warmup = throughput.new_shapes(passes, warmup)
    padded = sum(rows * width for step_passes in shapes for rows, width, _ in step_passes)
    real = sum(tokens for step_passes in shapes for *_, tokens in step_passes)
    timed = len(shapes) - warmup
    return {"passes_per_step": round(sum(map(len, shapes)) / len(shapes), 2),
            "new_shapes_per_step_after_warmup": round(new_after_warmup / timed, 2),
            "share_of_passes_with_a_new_shape": round(new_after_warmup / passes_after_warmup, 3),
            "distinct_shapes": distinct, "padding_share": round(1 - real / padded, 4),
            "padded_tokens_per_step": round(padded / len(shapes), 1), "real_tokens_per_step": round(real / len(shapes), 1)}


def positive_integers(parser: argparse.ArgumentParser, flag: str, text: str) -> list[int]:
    """``flag``'s comma-separated value as integers, at least one, each >= 1."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        parser.error(f"{flag} {text!r}: expected integers, e.g. 1,8,64")
    if not values or min(values) < 1:
        parser.error(f"{flag}: at least one, each >= 1")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--multiples", default="1,8,64,128", help="pad_to_multiple_of values, comma-separated")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=20, help="steps before new shapes are counted")
    parser.add_argument("--bucket-tokens", default=None,
                        help="padded tokens per pass, comma-separated (default: conf/paper's method.bucket_tokens)")
    parser.add_argument("--mirror", default=None)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--output", default=str(throughput.RESULTS_DIR / "declutr_shapes.json"))
    args = parser.parse_args()
    if not 0 <= args.warmup < args.steps:
        parser.error("--warmup must be at least 0 and below --steps")
    multiples = positive_integers(parser, "--multiples", args.multiples)
    budgets = positive_integers(parser, "--bucket-tokens", args.bucket_tokens) if args.bucket_tokens else [None]
    from transformers import AutoTokenizer

    from contrastive_sentence_embeddings.training.declutr import DeclutrCollate

    mirror = throughput.mirror_dir(args.mirror)
    tokenizer = AutoTokenizer.from_pretrained(throughput.tokenizer_dir(args.tokenizer), use_fast=True)
    block = throughput.method_block("declutr", {"training": {"seed": 42, "checkpoint_dir": None},
                                                "max_examples": None})
    encoder_config = argparse.Namespace(max_position_embeddings=514, model_type="roberta")
    model = argparse.Namespace(method=block.method, encoder=argparse.Namespace(config=encoder_config))
    inputs = {"articles": throughput.read_articles(mirror), "span_settings": throughput.paper_spans(mirror)}
    documents, library_collate = throughput.training_examples(
        "declutr", block, tokenizer, model, inputs, block.training.batch_size * (args.steps + 1))
    rows = []
    for budget in budgets:
        budget = budget or library_collate.bucket_tokens
        for multiple in multiples:
            collate = DeclutrCollate(library_collate.token_ids, library_collate.spans, tokenizer,
                                     max_span_tokens=library_collate.max_span_tokens,
                                     mlm_probability=library_collate.mlm_probability, bucket_tokens=budget,
                                     pad_to_multiple_of=multiple, seed=library_collate.seed)
            shapes = pass_shapes(collate, documents, block.training.batch_size, args.steps, seed=42)
            rows.append({"bucket_tokens": budget, "pad_to_multiple_of": multiple, **summarise(shapes, args.warmup)})
            print(", ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
    report = {
        "command": recorded_command(__file__, sys.argv[1:], PROJECT_ROOT), "git_commit": results_commit(PROJECT_ROOT),
        "python": platform.python_version(), "torch": torch.__version__, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "documents": len(documents), "batch_size": block.training.batch_size,
        "conf_paper_bucket_tokens": library_collate.bucket_tokens, "max_span_tokens": library_collate.max_span_tokens,
        "steps": args.steps, "warmup_steps": args.warmup, "epochs": math.ceil(args.steps / (len(documents)
                                                                                            // block.training.batch_size)),
        "rows": rows,
    }
    output = Path(args.output)
    write_text_atomically(output, json.dumps(report, indent=1) + "\n")
    print(f"written: {output}")


if __name__ == "__main__":
    main()
