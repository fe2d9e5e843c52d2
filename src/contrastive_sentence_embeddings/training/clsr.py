"""CLSR, contrastive learning on top of a *frozen* pretrained encoder (the recipe
as the project's issue states it: the paper's citation was not checked offline).

What is trained, and on what
----------------------------
The pretrained encoder never changes, so the mean-pooled embedding ``x`` of every
training sentence is computed once and cached on disk (:func:`embed_pairs`, through
:class:`~contrastive_sentence_embeddings.encoders.embedding_cache.EmbeddingCache`: one
``.npy`` per sentence list, keyed by :func:`frozen_model_key` and every sentence, so
a changed encoder or changed data encode again and everything else is reused across
epochs and runs). Training then only moves two small networks over those vectors:

* the *encoder network* ``f``: ``Linear(h, w) -> ReLU -> Linear(w, h)`` (one hidden
  layer of width ``w = hidden_width``, default ``h``), whose output ``f(x)`` is the
  sentence representation;
* the *projection head* ``g``: ``Linear(h, h)``, used in training only;
* the loss ``losses.clsr_loss``: symmetric NT-Xent (``losses.nt_xent``, temperature
  0.1) over the 2m projected embeddings of a batch of m positive pairs (STS-B pairs
  scored above 4, or NLI entailment pairs), gathered across processes.

The saved model embeds raw text end to end: the frozen encoder, mean pooling, then
``f`` as two sentence-transformers ``Dense`` modules (``Dense(h -> w, ReLU)``,
``Dense(w -> h, Identity)``), which ``SentenceTransformer(path)`` and
``SentenceEncoder.load(path)`` both apply (``training.saving``).

The model handed to the shared trainer (:class:`CLSRModel`) has ``f`` as its
``encoder`` (the weights kept at the best dev step) and scores the dev sets through
:class:`CLSRSentenceEncoder`: frozen embeddings of the dev sentences, computed once
and kept in memory (:class:`FrozenEmbeddings`), then the current ``f``.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch
from torch import nn

from contrastive_sentence_embeddings.encoders.embedding_cache import EmbeddingCache, model_fingerprint
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder, inference_mode, pick_device, precision_tag
from contrastive_sentence_embeddings.encoders.pooling import check_pooling
from contrastive_sentence_embeddings.training.trained_encoder import TrainedEncoder

logger = logging.getLogger(__name__)

Encode = Callable[[list[str]], np.ndarray]


# --- the training data: distinct sentences, their frozen embeddings, the pairs ----------
# The two sentence columns of the pair tables data preparation writes.
PAIR_LAYOUTS = (("sentence1", "sentence2"), ("premise", "hypothesis"))


def pair_columns(pairs: pd.DataFrame, dataset: str) -> tuple[str, str]:
    """The two sentence columns of a pairs table: STS-B pairs (``sentence1``,
    ``sentence2``) or NLI pairs (``premise``, ``hypothesis``)."""
    for first, second in PAIR_LAYOUTS:
        if first in pairs.columns and second in pairs.columns:
            return first, second
    raise ValueError(f"{dataset}: no sentence-pair columns; expected one of "
                     f"{' or '.join(f'({a}, {b})' for a, b in PAIR_LAYOUTS)}, the table has "
                     f"{', '.join(map(str, pairs.columns)) or 'none'}")


def pair_sentences(pairs: pd.DataFrame, first: str, second: str, dataset: str) -> tuple[list[str], np.ndarray]:
    """The distinct sentences of a pairs table (in order of first appearance, row by
    row, ``first`` before ``second``) and, for each row, the indices of its two
    sentences in that list, as an ``(m, 2)`` int64 array.

    ``dataset`` names the table in errors: a missing column, an empty table, or a
    missing / non-text / blank sentence raise ``ValueError``."""
    if not isinstance(pairs, pd.DataFrame):
        raise TypeError(f"{dataset}: expected a pandas DataFrame of sentence pairs, got {type(pairs).__name__}")
    missing = [column for column in (first, second) if column not in pairs.columns]
    if missing:
        raise ValueError(f"{dataset}: missing column(s) {', '.join(missing)} (CLSR reads the pairs from "
                         f"{first!r} and {second!r}; the table has {', '.join(map(str, pairs.columns)) or 'none'})")
    if pairs.empty:
        raise ValueError(f"{dataset}: the table has no pairs to train on; check the data_processing report "
                         "(data/08_reporting/data_report/) for why every row was dropped")
    bad = [position for position, (a, b) in enumerate(zip(pairs[first], pairs[second]))
           if not (isinstance(a, str) and a.strip() and isinstance(b, str) and b.strip())]
    if bad:
        raise ValueError(f"{dataset}: {len(bad)} of {len(pairs)} row(s) lack a sentence in {first!r} or "
                         f"{second!r} (missing, blank or not text; first at row {bad[0]})")
    index: dict[str, int] = {}
    rows = np.empty((len(pairs), 2), dtype=np.int64)
    for row, (a, b) in enumerate(zip(pairs[first], pairs[second])):
        rows[row, 0] = index.setdefault(a, len(index))
        rows[row, 1] = index.setdefault(b, len(index))
    return list(index), rows


def keep_first_layers(encoder: nn.Module, layers: int | None) -> nn.Module:
    """``encoder`` with only its first ``layers`` transformer layers (``0``: the token
    embeddings alone, the sum of word, position and type embeddings after their
    LayerNorm), in place, its config saying so (``num_hidden_layers``) so that the
    saved folder loads as that smaller model; ``None`` keeps every layer. The layers
    are the encoder's one ``ModuleList`` as long as ``config.num_hidden_layers`` (BERT,
    RoBERTa, MiniLM, XLM-R ...); another layout is an error."""
    if layers is None:
        return encoder
    total = getattr(encoder.config, "num_hidden_layers", None)
    stacks = [(name, module) for name, module in encoder.named_modules()
              if isinstance(module, nn.ModuleList) and total is not None and len(module) == total]
    if total is None or len(stacks) != 1:
        raise ValueError(f"method.frozen_layers: {type(encoder).__name__} has no single list of "
                         f"num_hidden_layers={total} layers to cut; leave frozen_layers null for this encoder")
    if not 0 <= layers <= total:
        raise ValueError(f"method.frozen_layers is {layers}, but the encoder has {total} layers")
    name, stack = stacks[0]
    parent = encoder.get_submodule(name.rpartition(".")[0]) if "." in name else encoder
    setattr(parent, name.rpartition(".")[2], nn.ModuleList(list(stack)[:layers]))
    encoder.config.num_hidden_layers = layers
    return encoder


def frozen_model_key(encoder_name: str, pooling: str, device: torch.device, fingerprint: str | None = None,
                     layers: int | None = None) -> str:
    """What produced a set of frozen embeddings, for the cache key (the sentences are
    added by ``EmbeddingCache``): the encoder's name, its weights' fingerprint
    (``embedding_cache.model_fingerprint``: a hash of a local folder's files' names,
    sizes and contents, so replacing the weights changes it; a Hub id is its own
    fingerprint), the layers kept (:func:`keep_first_layers`; all when None), the
    pooling and the precision (:func:`precision_tag`)."""
    if fingerprint is None:
        fingerprint = model_fingerprint(encoder_name)
    kept = "" if layers is None else f"|layers={layers}"
    return f"clsr-frozen|{encoder_name}|{fingerprint}{kept}|{check_pooling(pooling)}|{precision_tag(device)}"


def embedding_cache(encode: Encode, cache_dir, encoder_name: str, pooling: str, device: torch.device,
                    layers: int | None = None):
    """``encode`` behind the on-disk cache in ``cache_dir`` (an ``EmbeddingCache``)."""
    return EmbeddingCache(encode, cache_dir, frozen_model_key(encoder_name, pooling, device, layers=layers))


@dataclass
class PairEmbeddings:
    """The training data of one CLSR run: the distinct sentences of a pairs table,
    their frozen embeddings (``(U, h)`` float32, row i is ``sentences[i]``), the pairs
    as row indices (``(m, 2)``), and where the embeddings came from."""

    dataset: str
    encoder: str
    pooling: str
    sentences: list[str]
    embeddings: np.ndarray
    pairs: np.ndarray
    cache_key: str = ""
    cache_hit: bool = False
    frozen_layers: int | None = None  # the frozen encoder's layers kept (None: all)

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != len(self.sentences):
            raise ValueError(f"{self.dataset}: {len(self.sentences)} sentences but embeddings of shape "
                             f"{self.embeddings.shape}")
        if self.pairs.ndim != 2 or self.pairs.shape[1] != 2 or len(self.pairs) == 0:
            raise ValueError(f"{self.dataset}: expected (m, 2) pair indices with m > 0, got {self.pairs.shape}")
        if self.pairs.min() < 0 or self.pairs.max() >= len(self.sentences):
            raise ValueError(f"{self.dataset}: pair indices outside 0..{len(self.sentences) - 1}")

    def examples(self) -> list[tuple[int, int]]:
        """The trainer's examples: one ``(first, second)`` row-index tuple per pair."""
        return [(int(a), int(b)) for a, b in self.pairs]

    @property
    def fingerprint(self) -> str:
        """Identifies the data for resuming a checkpoint: the embeddings' cache key
        (encoder + every sentence) and the pairing."""
        digest = hashlib.sha256(self.cache_key.encode())
        digest.update(np.ascontiguousarray(self.pairs, dtype=np.int64).tobytes())
        if not self.cache_key:  # embeddings from elsewhere: hash them
            digest.update(np.ascontiguousarray(self.embeddings, dtype=np.float32).tobytes())
        return digest.hexdigest()


def embed_pairs(
    pairs: pd.DataFrame,
    first: str,
    second: str,
    dataset: str,
    encoder_name: str,
    cache_dir,
    pooling: str = "mean",
    device: str | None = None,
    batch_size: int = 128,
    attention_backends: Sequence[str] | None = None,
    frozen_layers: int | None = None,
) -> PairEmbeddings:
    """Frozen ``pooling`` embeddings of every distinct sentence of ``pairs`` (columns
    ``first`` and ``second``), from the cache in ``cache_dir`` when the same encoder
    already embedded the same sentences, else encoded (the encoder is loaded only
    then) and stored there. ``attention_backends``: the attention kernels the encoding
    may use (the block's ``training.attention_backends``, as for its dev sets' frozen
    embeddings, which are encoded inside training; None: PyTorch's choice). They change
    only the rounding, so the cache's key leaves them out, as it leaves the batch size.
    ``frozen_layers``: the frozen encoder cut to its first layers (:func:`keep_first_layers`)."""
    sentences, rows = pair_sentences(pairs, first, second, dataset)
    torch_device = pick_device(device)

    def encode(texts: list[str]) -> np.ndarray:
        encoder = SentenceEncoder.load(encoder_name, pooling, batch_size, str(torch_device), attention_backends)
        keep_first_layers(encoder.model, frozen_layers)
        return encoder.encode(texts, show_progress=True)

    cache = embedding_cache(encode, cache_dir, encoder_name, pooling, torch_device, frozen_layers)
    embeddings = np.asarray(cache(sentences), dtype=np.float32)
    logger.info("%s: %d pairs, %d distinct sentences, frozen %s embeddings%s %s", dataset, len(rows),
                len(sentences), pooling, "" if frozen_layers is None else f" of the first {frozen_layers} layers",
                "from the cache" if cache.hits else "computed and cached")
    return PairEmbeddings(dataset, encoder_name, pooling, sentences, embeddings, rows, cache.key(sentences),
                          cache.hits > 0, frozen_layers)


# --- the networks and the loss ---------------------------------------------------------
class FrozenEmbeddings:
    """Frozen-encoder embeddings by sentence: each sentence is encoded once (through
    ``encode``, e.g. the disk cache) and kept in memory, since the dev sets are
    scored with the same frozen embeddings at every evaluation. ``calls`` counts the
    calls of ``encode``."""

    def __init__(self, encode: Encode):
        self.encode = encode
        self.memo: dict[str, np.ndarray] = {}
        self.calls = 0

    def __call__(self, sentences: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(s for s in sentences if s not in self.memo))
        if missing:
            self.calls += 1
            embedded = np.asarray(self.encode(missing), dtype=np.float32)
            self.memo.update(zip(missing, embedded))
        if not len(sentences):
            width = len(next(iter(self.memo.values()))) if self.memo else 0
            return np.zeros((0, width), dtype=np.float32)
        return np.stack([self.memo[s] for s in sentences])


@dataclass
class CLSRSentenceEncoder:
    """Raw text -> frozen embedding (``frozen``) -> the encoder network: the model as
    it will be saved, for the dev scorer."""

    network: nn.Module
    frozen: Callable[[Sequence[str]], np.ndarray]
    device: torch.device | None = None
    batch_size: int = 4096

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        inputs = self.frozen(list(sentences))
        device = self.device or next(self.network.parameters()).device
        pieces = []
        with inference_mode(self.network):
            for begin in range(0, len(inputs), self.batch_size):
                batch = torch.from_numpy(inputs[begin:begin + self.batch_size]).to(device, torch.float32)
                pieces.append(self.network(batch).float().cpu().numpy())
        if not pieces:
            return np.zeros((0, self.network[-1].out_features), dtype=np.float32)
        return np.concatenate(pieces)


class CLSRModel(nn.Module):
    """What the shared trainer trains: ``encoder`` is CLSR's encoder network ``f``
    (its best weights are kept), ``heads["projection"]`` the projection ``g``;
    ``forward(first, second)`` is ``losses.clsr_loss`` on a batch of frozen embeddings.
    ``frozen`` (not a module, never trained or saved here) embeds raw text for the dev
    scorer."""

    # ``method`` is the recipe (:class:`.methods.ComposedMethod` of the CLSR preset), which builds ``f`` and ``g`` and
    # computes the loss; not imported here, since the recipe imports this module to build
    # its model.
    def __init__(self, hidden_size: int, method, frozen: Encode, pooling: str = "mean"):
        super().__init__()
        self.method = method
        self.pooling = check_pooling(pooling)
        self.encoder = method.build_network(hidden_size)
        self.heads = method.build_heads(hidden_size)
        self.frozen = FrozenEmbeddings(frozen)

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.method.loss(self, first=first, second=second)

    def sentence_encoder(self, tokenizer=None, device=None) -> CLSRSentenceEncoder:
        return CLSRSentenceEncoder(self.encoder, self.frozen, device)


class PairCollate:
    """A list of ``(first, second)`` row indices -> ``{"first": (m, h), "second": (m, h)}``
    frozen embeddings, the keyword arguments of :meth:`CLSRModel.forward`."""

    def __init__(self, embeddings: np.ndarray, fingerprint: str | None = None):
        self.embeddings = torch.from_numpy(np.ascontiguousarray(embeddings, dtype=np.float32))
        self._fingerprint = fingerprint

    def fingerprint(self) -> str:
        """Identifies the data for resuming a checkpoint (:attr:`PairEmbeddings.fingerprint`)."""
        if self._fingerprint is None:
            return hashlib.sha256(self.embeddings.numpy().tobytes()).hexdigest()
        return self._fingerprint

    def __call__(self, examples: Sequence[tuple[int, int]]) -> dict[str, torch.Tensor]:
        rows = torch.as_tensor(list(examples), dtype=torch.long).reshape(-1, 2)
        return {"first": self.embeddings[rows[:, 0]], "second": self.embeddings[rows[:, 1]]}


# --- one run ------------------------------------------------------------------------------
@dataclass
class TrainedCLSR(TrainedEncoder):
    """The frozen encoder, its tokenizer and pooling, and the trained encoder network
    as ``head`` (saved as ``Dense`` modules after the pooling)."""

    head: nn.Module | None = field(default=None)


def build_clsr_model(method, encoder: nn.Module, tokenizer, pooling: str, *, encoder_name: str,
                     cache_dir=None, device=None, seed: int | None = None) -> "CLSRModel":
    """CLSR's trainable model around the frozen ``encoder``: the dev sentences are
    embedded by the frozen encoder (through the disk cache in ``cache_dir``, when
    given) and only the encoder network and projection train. ``seed`` is set right
    before the networks are initialised, so loading the encoder never shifts them."""
    from accelerate.utils import set_seed

    layers = method.pair_view.frozen_layers
    keep_first_layers(encoder, layers)  # in place: the saved model is the encoder trained on
    encoder.requires_grad_(False)
    torch_device = pick_device(device)
    frozen_encoder: list[SentenceEncoder] = []  # built on the first miss only

    def encode_frozen(sentences: list[str]) -> np.ndarray:
        if not frozen_encoder:
            frozen_encoder.append(SentenceEncoder(encoder, tokenizer, pooling, device=torch_device))
        return frozen_encoder[0].encode(sentences)

    frozen = (embedding_cache(encode_frozen, cache_dir, encoder_name, pooling, torch_device, layers) if cache_dir
              else encode_frozen)
    if seed is not None:
        set_seed(seed)
    return CLSRModel(int(encoder.config.hidden_size), method, frozen, pooling)


def check_pair_embeddings(data: PairEmbeddings, encoder_name: str, pooling: str, hidden_size: int,
                          frozen_layers: int | None = None) -> None:
    """The cached embeddings must come from the encoder, layers and pooling being trained."""
    if (data.encoder, data.pooling, data.frozen_layers) != (encoder_name, pooling, frozen_layers):
        def named(encoder, pool, layers):
            return f"{encoder}'s {pool} pooling" + ("" if layers is None else f" of its first {layers} layers")

        raise ValueError(f"{data.dataset}: the cached embeddings are {named(data.encoder, data.pooling, data.frozen_layers)}, "
                         f"but the run asks for {named(encoder_name, pooling, frozen_layers)}")
    if data.embeddings.shape[1] != hidden_size:
        raise ValueError(f"{data.dataset}: embeddings of width {data.embeddings.shape[1]}, but {encoder_name} has "
                         f"hidden size {hidden_size}")
