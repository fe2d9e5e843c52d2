"""One process of ``test_gradient_caching_under_two_processes_is_the_plain_fan_out``:
started twice by torchrun, it trains the tiny encoder (dropout off) with the real
trainer, each method once on whole per-process batches and once in mini-batches, and
saves what each run ended with. Not a test module (no ``test_`` prefix)."""

import json
import os
import sys
from pathlib import Path

import pandas as pd
import torch


def main(encoder_dir: str, data_dir: str, out_dir: str) -> None:
    from contrastive_sentence_embeddings.training.run import train_on_documents, train_on_sentences

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])  # set by torchrun
    data, out = Path(data_dir), Path(out_dir)
    sentences = (data / "sentences.txt").read_text(encoding="utf-8").splitlines()
    documents, spans = pd.read_parquet(data / "documents.parquet"), pd.read_parquet(data / "spans.parquet")
    # SGD, not AdamW: AdamW turns the round-off of a near-zero gradient entry into a
    # full-size step of either sign, and the comparison is of the gradients' effect.
    training = {"max_steps": 3, "learning_rate": 0.5, "optimizer": "sgd", "eval_every": 0, "log_every": 1,
                "device": "cpu", "max_grad_norm": None}
    runs = {
        # SimCSE: the loss over the embeddings gathered from both processes.
        "simcse": ({"kind": "simcse", "pooling": "cls_before_pooler", "method": {}}, 8, 2),
        # SCD: a per-process loss on the whole per-process batch's statistics (BatchNorm).
        "scd": ({"kind": "scd", "pooling": "cls_before_pooler",
                 "method": {"projector_widths": [16, 16], "rate_a": 0.0, "rate_b": 0.0}}, 8, 4),
        # DeCLUTR with MLM: gathered NT-Xent plus a per-process, per-token term.
        "declutr": ({"kind": "declutr", "pooling": "mean", "method": {"mlm": True}}, 2, 1),
    }
    summary = {}
    for name, (params, batch_size, mini_batch_size) in runs.items():
        for mini in (None, mini_batch_size):
            run_params = {**params, "training": {**training, "batch_size": batch_size, "mini_batch_size": mini}}
            if name == "declutr":
                run_params["training"]["epochs"] = 2
                trained, result = train_on_documents(documents, spans, encoder_dir, run_params)
            else:
                trained, result = train_on_sentences(sentences, encoder_dir, run_params)
            label = f"{name}_{'mini' if mini else 'whole'}"
            torch.save({key: value.detach().clone() for key, value in trained.encoder.state_dict().items()},
                       out / f"{label}_rank{rank}.pt")
            summary[label] = {"steps": result.steps, "processes": result.extra["num_processes"],
                              "mini_batch_size": result.extra["config"]["mini_batch_size"],
                              "loss": result.curve["loss"].dropna().tolist()}
    (out / f"rank{rank}.json").write_text(json.dumps(summary))


if __name__ == "__main__":
    main(*sys.argv[1:])
