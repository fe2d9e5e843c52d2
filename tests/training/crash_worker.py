"""One training run from sentences to a saved model, for the crash tests of
``test_crash_safety``: started as a subprocess (with ``CSE_TEST_CRASH_AT`` set to
kill it at a chosen moment), it trains the tiny encoder with a checkpoint folder,
saves the model through the catalog's ``SentenceEncoderDataset`` and writes a digest
of the weights it ended with. Not a test module (no ``test_`` prefix).

Usage: crash_worker.py ENCODER_DIR SENTENCES_FILE CHECKPOINT_DIR MODEL_DIR OUT_JSON [two-renames]
("two-renames": behave like a file system without an atomic folder swap).
"""

import hashlib
import json
import logging
import sys
from pathlib import Path

import torch


def main(encoder_dir: str, sentences_file: str, checkpoint_dir: str, model_dir: str, out_json: str,
         *options: str) -> None:
    from contrastive_sentence_embeddings.pipelines.datasets import SentenceEncoderDataset
    from contrastive_sentence_embeddings.training import saving
    from contrastive_sentence_embeddings.training.run import train_on_sentences

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    if "two-renames" in options:
        saving._exchange = lambda first, second: False
    sentences = Path(sentences_file).read_text(encoding="utf-8").splitlines()
    params = {"kind": "simcse", "pooling": "cls_before_pooler", "method": {},
              "training": {"batch_size": 8, "max_steps": 6, "eval_every": 2, "learning_rate": 1e-3,
                           "log_every": 1, "device": "cpu", "checkpoint_dir": checkpoint_dir}}
    trained, result = train_on_sentences(sentences, encoder_dir, params)
    digest = hashlib.sha256()
    for key, value in sorted(result.best_state.items()):
        digest.update(key.encode())
        digest.update(value.float().numpy().tobytes())
    Path(out_json).write_text(json.dumps({"steps": result.steps, "weights": digest.hexdigest()}))
    SentenceEncoderDataset(model_dir).save(trained)


if __name__ == "__main__":
    main(*sys.argv[1:])
