"""Our SimCSE training against sentence-transformers' SimCSE recipe
(``MultipleNegativesRankingLoss`` on (sentence, sentence) pairs), same encoder, data,
batch, length, learning rate, steps and threads, in the same process.

    python benchmarks/simcse_training.py [--steps 30] [--batch-size 64] [--pooling mean]

Both start from the same pretrained weights, see the same sentences in the same
order, use InfoNCE at temperature 0.05 (MNRL's scale 20) without an MLP head, AdamW
with a linear schedule and no warm-up. Reported: examples/s of each and STS-B dev /
SICK-R trial Spearman after the same number of steps, scored by the same evaluator.
Results are printed as Markdown and written to ``benchmarks/results/simcse_training.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from datasets import load_from_disk
import torch

from contrastive_sentence_embeddings.data.raw_file import folder_partitions
from contrastive_sentence_embeddings.data.raw_sources import resolve_mirror_dir
from contrastive_sentence_embeddings.encoders import DEFAULT_ENCODER, resolve_encoder
from contrastive_sentence_embeddings.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation.sts import DevScorer
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
    parser.add_argument("--sentences", default="data/05_model_input/wiki_sentences")  # an ArrowDataset folder
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    wanted = args.steps * args.batch_size
    table = load_from_disk(args.sentences)
    sentences = table.select(range(min(wanted, len(table))))["sentence"][:]
    dev = DevScorer(folder_partitions(resolve_mirror_dir() / "sts"))

    # --- ours ---
    torch.manual_seed(0)
    encoder, tokenizer = load_pretrained(args.encoder)
    model = ContrastiveModel(encoder, args.pooling, build_method("simcse", {"use_mlp": False}))
    config = TrainingConfig(learning_rate=args.learning_rate, batch_size=args.batch_size, max_steps=args.steps,
                            max_length=args.max_length, eval_every=0, device="cpu", max_grad_norm=None)
    ids = tokenize_sentences(tokenizer, sentences, args.max_length)
    start = time.perf_counter()
    result = train(model, tokenizer, ids, config)
    ours_seconds = time.perf_counter() - start
    encoder.load_state_dict(result.best_state)
    ours_dev = dev(SentenceEncoder(encoder, tokenizer, args.pooling, device=torch.device("cpu")).encode)

    # --- sentence-transformers ---
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
        trainer = SentenceTransformerTrainer(model=st_model, args=training_args, train_dataset=pairs,
                                             loss=MultipleNegativesRankingLoss(st_model, scale=20.0))
        start = time.perf_counter()
        trainer.train()
        st_seconds = time.perf_counter() - start
    theirs_dev = dev(lambda s: st_model.encode(s, batch_size=128, convert_to_numpy=True))

    examples = args.steps * args.batch_size
    report = {
        "encoder": args.encoder, "pooling": args.pooling, "steps": args.steps, "batch_size": args.batch_size,
        "max_length": args.max_length, "threads": torch.get_num_threads(),
        "ours": {"seconds": round(ours_seconds, 1), "examples_per_second": round(examples / ours_seconds, 1),
                 **{k: round(v, 2) for k, v in ours_dev.items()}},
        "sentence_transformers_mnrl": {"seconds": round(st_seconds, 1),
                                       "examples_per_second": round(examples / st_seconds, 1),
                                       **{k: round(v, 2) for k, v in theirs_dev.items()}},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print("| trainer | steps x batch | seconds | examples/s | STS-B dev | SICK-R trial |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, row in (("ours (SimCSE)", report["ours"]), ("sentence-transformers MNRL", report["sentence_transformers_mnrl"])):
        print(f"| {name} | {args.steps} x {args.batch_size} | {row['seconds']} | {row['examples_per_second']} "
              f"| {row['stsb_dev']} | {row['sickr_dev']} |")


if __name__ == "__main__":
    main()
