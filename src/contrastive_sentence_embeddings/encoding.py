"""Turning sentences into embeddings with any saved encoder.

The evaluation protocol (SentEval as SimCSE runs it) encodes every sentence at full
length: nothing is truncated below the model's own maximum, and the few sentences
longer than that are counted and logged. Sentences are tokenised once, sorted by
length and batched, so each batch is padded only to its own longest sentence
(dynamic padding); the embeddings come back in the input order.

One forward pass can feed several pooling methods at once, which is how the
``baseline`` pipeline scores every pooling of the default encoder for the price of
one encoding.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from contrastive_sentence_embeddings.encoders import resolve_encoder
from contrastive_sentence_embeddings.pooling import check_pooling, needs_hidden_states, pool_outputs

logger = logging.getLogger(__name__)

# Written next to a model saved by this project's trainer: method, base encoder,
# pooling, seed, training parameters and library versions.
METADATA_FILE = "cse_metadata.json"
# Beyond this, a tokenizer's model_max_length is a placeholder ("no limit"), not a limit.
_UNSET_MAX_LENGTH = 1_000_000


def pick_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when present, else CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision on CUDA (bf16 where supported, else fp16); full fp32 on CPU,
    where bf16 autocast is far slower without AVX-512/AMX."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)


@contextlib.contextmanager
def inference_mode(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode and no autograd for the duration, then the model's previous
    train/eval flags back: the trainer calls the evaluator in the middle of training."""
    flags = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, was_training in flags.items():
            module.train(was_training)


def max_sequence_length(tokenizer, config) -> int:
    """The longest input the model accepts: the smaller of the tokenizer's
    ``model_max_length`` (when set) and the position embeddings' size (RoBERTa's 514
    includes its padding offset, so its tokenizer's 512 is the one that counts)."""
    limits = [int(getattr(config, "max_position_embeddings", 0) or 0)]
    declared = getattr(tokenizer, "model_max_length", None)
    if declared is not None and declared < _UNSET_MAX_LENGTH:
        limits.append(int(declared))
    limits = [limit for limit in limits if limit > 0]
    if not limits:
        raise ValueError("neither the tokenizer nor the model config states a maximum sequence length")
    return min(limits)


def read_model_metadata(path: str | Path) -> dict:
    """The project's metadata of a saved model, or ``{}`` for any other model."""
    file = Path(path) / METADATA_FILE
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from err


def default_pooling(path: str | Path) -> str | None:
    """The pooling a saved model declares: this project's metadata first, else a
    sentence-transformers ``1_Pooling/config.json`` (mean or CLS)."""
    metadata = read_model_metadata(path)
    if metadata.get("pooling"):
        return check_pooling(metadata["pooling"])
    st_pooling = Path(path) / "1_Pooling" / "config.json"
    if st_pooling.is_file():
        config = json.loads(st_pooling.read_text(encoding="utf-8"))
        # sentence-transformers >= 6 writes "pooling_mode"; older versions one flag per mode.
        if config.get("pooling_mode") == "mean" or config.get("pooling_mode_mean_tokens"):
            return "mean"
        if config.get("pooling_mode") == "cls" or config.get("pooling_mode_cls_token"):
            return "cls_before_pooler"
    return None


def pad_batch(token_ids: Sequence[Sequence[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch to its longest member: ``input_ids`` and ``attention_mask``."""
    longest = max(len(ids) for ids in token_ids)
    input_ids = torch.full((len(token_ids), longest), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), longest), dtype=torch.long)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass
class SentenceEncoder:
    """A Hugging Face encoder, its tokenizer and a pooling method.

    ``encode`` returns float32 numpy embeddings (not normalised; cosine scoring
    normalises). ``batch_size`` counts sentences per forward pass.
    """

    model: torch.nn.Module
    tokenizer: object
    pooling: str = "mean"
    batch_size: int = 128
    device: torch.device = field(default_factory=pick_device)
    name: str = ""
    max_length: int | None = None

    def __post_init__(self) -> None:
        check_pooling(self.pooling)
        if self.max_length is None:
            self.max_length = max_sequence_length(self.tokenizer, self.model.config)
        self.model.to(self.device)

    @classmethod
    def load(
        cls,
        name_or_path: str,
        pooling: str | None = None,
        batch_size: int = 128,
        device: str | None = None,
    ) -> "SentenceEncoder":
        """Load any ``AutoModel`` directory or Hub id (``all-MiniLM-L6-v2`` resolves to
        the offline copy). Without ``pooling``, the saved model's declared pooling is
        used; a model that declares none needs one."""
        from transformers import AutoModel, AutoTokenizer

        source = resolve_encoder(name_or_path)
        pooling = pooling or (default_pooling(source) if Path(source).is_dir() else None)
        if pooling is None:
            raise ValueError(f"{name_or_path}: the model does not declare a pooling method; pass one")
        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
        model = AutoModel.from_pretrained(source)
        logger.info("encoder %s loaded from %s (pooling %s)", name_or_path, source, pooling)
        return cls(model, tokenizer, pooling, batch_size, pick_device(device), name=name_or_path)

    def tokenize(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids of every sentence, truncated only at the model maximum; the
        truncated ones are counted in the log."""
        encoded = self.tokenizer(
            list(sentences), truncation=True, max_length=self.max_length, add_special_tokens=True
        )["input_ids"]
        truncated = sum(len(ids) >= self.max_length for ids in encoded)
        if truncated:
            logger.warning("%d of %d sentences reach the model maximum of %d tokens and were truncated",
                           truncated, len(encoded), self.max_length)
        return encoded

    def encode(self, sentences: Sequence[str], show_progress: bool | None = None) -> np.ndarray:
        """Embeddings (len(sentences), dim) with this encoder's pooling."""
        return self.encode_poolings(sentences, [self.pooling], show_progress)[self.pooling]

    def encode_poolings(
        self, sentences: Sequence[str], poolings: Sequence[str], show_progress: bool | None = None
    ) -> dict[str, np.ndarray]:
        """Embeddings for several pooling methods from one forward pass per batch."""
        for method in poolings:
            check_pooling(method)
        if not len(sentences):
            dim = self.model.config.hidden_size
            return {method: np.zeros((0, dim), dtype=np.float32) for method in poolings}
        start = time.perf_counter()
        token_ids = self.tokenize(sentences)
        # Longest first: a too-large batch fails at once rather than at the end.
        order = np.argsort([-len(ids) for ids in token_ids], kind="stable")
        with_layers = needs_hidden_states(poolings)
        pieces: dict[str, list[np.ndarray]] = {method: [] for method in poolings}
        batches = range(0, len(order), self.batch_size)
        if show_progress is None:
            show_progress = len(sentences) >= 10 * self.batch_size
        with inference_mode(self.model), autocast_for(self.device):
            for begin in tqdm(batches, desc=f"encoding {len(sentences)} sentences", disable=not show_progress,
                              unit="batch"):
                batch = pad_batch([token_ids[i] for i in order[begin:begin + self.batch_size]],
                                  self.tokenizer.pad_token_id)
                batch = {key: value.to(self.device) for key, value in batch.items()}
                outputs = self.model(**batch, output_hidden_states=with_layers, return_dict=True)
                for method in poolings:
                    embedding = pool_outputs(method, outputs, batch["attention_mask"])
                    pieces[method].append(embedding.float().cpu().numpy())
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        elapsed = time.perf_counter() - start
        logger.info("encoded %d sentences in %.1f s (%.0f sentences/s)", len(sentences), elapsed,
                    len(sentences) / max(elapsed, 1e-9))
        return {method: np.concatenate(pieces[method])[inverse] for method in poolings}
