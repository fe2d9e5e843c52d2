"""One process of ``test_trainer_under_ddp``: started twice by ``accelerate launch
--cpu --num_processes 2``, it trains the tiny encoder with the real trainer and writes
what it ended with. Not a test module (no ``test_`` prefix)."""

import hashlib
import json
import sys
from pathlib import Path

import pandas as pd
import torch


def main(encoder_dir: str, data_dir: str, out_dir: str) -> None:
    import os

    from contrastive_sentence_embeddings.training.run import train_on_documents, train_on_sentences

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])  # set by torchrun
    data = Path(data_dir)
    training = {"batch_size": 8, "max_steps": 3, "learning_rate": 1e-3, "eval_every": 0, "log_every": 1,
                "device": "cpu"}
    from transformers import AutoModel

    results = {"initial": digest_of(AutoModel.from_pretrained(encoder_dir))}
    sentences = (data / "sentences.txt").read_text(encoding="utf-8").splitlines()
    for method in ("simcse", "scd"):
        params = {"kind": method, "pooling": "cls_before_pooler", "training": training,
                  "method": {"projector_widths": [16, 16]} if method == "scd" else {}}
        trained, result = train_on_sentences(sentences, encoder_dir, params)
        results[method] = summary(trained.encoder, result)
    # 8 documents, 2 per process: a global batch of 4, two steps an epoch; the spans have
    # two epochs, so the third step starts the second (each epoch its own spans).
    params = {"kind": "declutr", "pooling": "mean", "training": {**training, "batch_size": 2, "epochs": 2},
              "method": {"mlm": True}}
    trained, result = train_on_documents(pd.read_parquet(data / "documents.parquet"),
                                         pd.read_parquet(data / "spans.parquet"), encoder_dir, params)
    results["declutr"] = summary(trained.encoder, result)
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(results))


def digest_of(encoder) -> str:
    digest = hashlib.sha256()
    for key, value in sorted(encoder.state_dict().items()):
        digest.update(key.encode())
        digest.update(value.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def summary(encoder, result) -> dict:
    return {"weights": digest_of(encoder), "steps": result.steps, "processes": result.extra["num_processes"],
            "loss": result.curve["loss"].dropna().tolist()}


if __name__ == "__main__":
    main(*sys.argv[1:])
