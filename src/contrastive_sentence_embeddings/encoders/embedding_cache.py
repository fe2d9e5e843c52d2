"""Embeddings cached on disk, keyed by what produced them, and the key of a model's
weights. Both evaluation (transfer-task embeddings) and training (CLSR's frozen
embeddings) use them, so they live beside neither.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

# The key of a model's weights (encoders/fingerprint.py), importable from here beside the caches keyed on it.
from contrastive_sentence_embeddings.encoders.fingerprint import model_fingerprint  # noqa: F401

logger = logging.getLogger(__name__)


def hash_texts(digest, texts: Iterable[str]) -> None:
    """Feed ``texts`` to ``digest`` (a hashlib object), each as its UTF-8 bytes after their
    length (8 bytes, little-endian), so that no two different lists of texts (["a b"] and
    ["a", "b"]) feed the same bytes. The embedding cache's keys and the dev scorer's
    fingerprint (evaluation/sts.py) are taken this way."""
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)


class EmbeddingCache:
    """``encode`` with a disk cache: the embeddings of a sentence list are stored in
    ``directory/<sha256>.npy``, the hash taken over ``model_key`` and the sentences (in
    order). The same model and data hit; another model key or any changed sentence
    misses. ``model_key`` must identify the weights (e.g. a checkpoint path plus its
    training run id): the cache cannot tell two models apart by itself.
    """

    def __init__(self, encode: Callable[[list[str]], np.ndarray], directory: str | os.PathLike, model_key: str):
        self.encode = encode
        self.directory = Path(directory)
        self.model_key = model_key
        self.hits = 0
        self.misses = 0

    def key(self, sentences: Sequence[str]) -> str:
        """sha256 over the model key and the sentences, each length-prefixed so that no
        two different lists (e.g. ["a b"] and ["a", "b"]) share a key."""
        digest = hashlib.sha256()
        hash_texts(digest, (self.model_key, *sentences))
        return digest.hexdigest()

    def path(self, sentences: Sequence[str]) -> Path:
        return self.directory / f"{self.key(sentences)}.npy"

    def __call__(self, sentences: list[str]) -> np.ndarray:
        path = self.path(sentences)
        if path.is_file():
            try:
                cached = np.load(path, allow_pickle=False)
            except (ValueError, OSError) as err:  # a truncated or foreign file: recompute
                logger.warning("embedding cache: unreadable %s (%s); encoding again", path, err)
            else:
                if cached.ndim == 2 and cached.shape[0] == len(sentences):
                    self.hits += 1
                    logger.info("embedding cache hit: %d sentences from %s", len(sentences), path.name)
                    return cached
                logger.warning("embedding cache: %s has shape %s, not %d rows; encoding again",
                               path, cached.shape, len(sentences))
        self.misses += 1
        logger.info("embedding cache miss: encoding %d sentences (model %s)", len(sentences), self.model_key)
        embeddings = np.asarray(self.encode(sentences))
        self.store(sentences, embeddings)
        return embeddings

    def store(self, sentences: Sequence[str], embeddings: np.ndarray) -> None:
        """Put embeddings computed elsewhere into the cache (the evaluator encodes all
        pooling methods in one pass and stores each under its own key)."""
        path = self.path(sentences)
        self.directory.mkdir(parents=True, exist_ok=True)
        # Write to a temporary file and rename, so that an interrupted run never leaves
        # a half-written file under the final name.
        handle, temporary = tempfile.mkstemp(dir=self.directory, suffix=".npy.tmp")
        try:
            with os.fdopen(handle, "wb") as stream:
                np.save(stream, embeddings, allow_pickle=False)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
