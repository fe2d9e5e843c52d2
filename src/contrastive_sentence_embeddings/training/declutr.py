"""DeCLUTR's batches (Giorgi et al., 2021, "DeCLUTR: Deep Contrastive Learning for
Unsupervised Textual Representations", ACL 2021): documents in, token spans out.

A batch is N documents. Each document brings the A anchor spans and A x P positive
spans that the data-preparation pipeline sampled for it (``data.spans``, one set per
epoch). The collate function cuts the spans out of the document's token ids, adds
the encoder's special tokens, masks the anchors for MLM, and groups the sequences
into length buckets, each padded to its own longest member (rounded up to a multiple of
``pad_to_multiple_of``), so that a batch of 32- to 512-token spans does not pay for
padding every span to 512:

* ``anchors``: buckets of the N*A anchors (``input_ids`` masked for MLM when MLM is
  on, ``attention_mask``, ``mlm_labels`` with -100 on unmasked positions,
  ``mlm_positions``: the masked positions' flat indices into the bucket's
  ``rows x width`` tokens, ``rows``: each sequence's place in document order);
* ``positives``: buckets of the N*A*P positives, in the same style (no masking);
  after un-bucketing, rows ``[i*P, (i+1)*P)`` are the positives of anchor ``i``.

Everything random here (which tokens are masked and how) is seeded per (seed, epoch,
document, anchor), like the spans, and drawn over the anchor's own tokens before any
padding: a batch does not depend on the batches before it (a resumed run sees the
masks an uninterrupted one would have), and an anchor's masks do not depend on the
bucket it lands in, so ``bucket_tokens`` and ``pad_to_multiple_of`` change the padding
and nothing else.

Why ``pad_to_multiple_of``: every bucket is a new (rows, width) shape, and on a GPU
some kernels are prepared per shape (PyTorch >= 2.10 runs attention on Hopper through
cuDNN, which builds a graph for each new shape; torch.compile specialises on shapes).
With widths free to take any value from 34 to 514, most of a DeCLUTR step's passes
have a shape never seen before even after many steps (at the paper's settings on the
WikiText articles: 3.7 of 5 passes a step after 20 steps, still 1.3 after 200);
rounding widths up to a multiple of 8 leaves 1.4 new shapes a step after 20 steps
(0.2 after 200) for 0.6 points more padding, a multiple of 64 leaves 0.35 (none after
200) for 2.7 points (benchmarks/declutr_shapes.py).
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100  # label of positions that carry no MLM loss (PyTorch's cross-entropy default)


@dataclass(frozen=True)
class DocumentSpans:
    """The spans of one document in one epoch: ``anchors[i] = (start, end)`` and
    ``positives[i] = [(start, end), ...]`` (P of them), token offsets into the
    document's ids without special tokens, half-open."""

    doc_id: str
    epoch: int
    anchors: tuple[tuple[int, int], ...]
    positives: tuple[tuple[tuple[int, int], ...], ...]


def spans_by_document(spans) -> dict[tuple[int, str], DocumentSpans]:
    """``(epoch, doc_id) -> DocumentSpans`` from the ``declutr_spans`` table (one row
    per epoch, document and anchor; a pandas ``DataFrame``, a ``pyarrow.Table`` or the
    ``datasets.Dataset`` the catalog loads). Every document must have the same number
    of anchors and every anchor the same number of positives, since the loss reshapes
    them into a grid; a table that breaks this is refused."""
    if isinstance(spans, pa.Table):
        spans = spans.to_pandas()
    elif not isinstance(spans, pd.DataFrame):
        spans = spans.to_pandas()  # a datasets.Dataset: a few small integer columns per anchor
    required = {"epoch", "doc_id", "anchor", "anchor_start", "anchor_end", "positive_starts", "positive_ends"}
    missing = required - set(spans.columns)
    if missing:
        raise ValueError(f"declutr_spans lacks column(s) {sorted(missing)}; rebuild it with the data_processing "
                         "pipeline")
    grouped: dict[tuple[int, str], DocumentSpans] = {}
    shapes = set()
    for (epoch, doc_id), rows in spans.sort_values(["epoch", "doc_id", "anchor"]).groupby(["epoch", "doc_id"]):
        anchors = tuple(zip(rows["anchor_start"].astype(int), rows["anchor_end"].astype(int)))
        positives = tuple(
            tuple(zip(map(int, starts), map(int, ends)))
            for starts, ends in zip(rows["positive_starts"], rows["positive_ends"])
        )
        shapes.add((len(anchors), *{len(p) for p in positives}))
        grouped[(int(epoch), str(doc_id))] = DocumentSpans(str(doc_id), int(epoch), anchors, positives)
    if len(shapes) > 1:
        raise ValueError(f"declutr_spans: documents differ in anchors x positives {sorted(shapes)}; every "
                         "document needs the same number of each")
    return grouped


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    generator: torch.Generator,
    probability: float = 0.15,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: each ``maskable`` position is chosen with ``probability``; a
    chosen token is replaced by the mask token with probability 0.8, by a uniformly
    random token with 0.1, and kept with 0.1. Returns ``(masked_ids, labels)``:
    ``labels`` holds the original id at chosen positions and -100 elsewhere (no loss).
    ``maskable`` is False on special tokens and padding."""
    chosen = (torch.rand(input_ids.shape, generator=generator) < probability) & maskable
    action = torch.rand(input_ids.shape, generator=generator)
    replace_by_mask = chosen & (action < 0.8)
    replace_by_random = chosen & (action >= 0.8) & (action < 0.9)
    masked = input_ids.clone()
    masked[replace_by_mask] = mask_token_id
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator)
    masked[replace_by_random] = random_ids[replace_by_random]
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return masked, labels


def masked_positions(labels: torch.Tensor) -> torch.Tensor:
    """The flat indices (into ``labels.flatten()``) of the positions that carry an MLM
    label. Found here, on the host, while the batch is built: the loss then gathers
    the masked tokens' states by index on the device, where finding them itself
    (boolean indexing, ``nonzero``) would make the host wait for the device at every
    anchor bucket."""
    return (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)


def padded_width(length: int, multiple: int, cap: int | None = None) -> int:
    """``length`` rounded up to a multiple of ``multiple`` (1: unchanged), but never
    past ``cap`` (the model's longest sequence: a width beyond it has no position
    embeddings) unless ``length`` itself is."""
    rounded = -(-length // multiple) * multiple
    return rounded if cap is None else max(length, min(rounded, cap))


def length_buckets(lengths: Sequence[int], max_tokens: int, multiple: int = 1,
                   cap: int | None = None) -> list[list[int]]:
    """Indices grouped into buckets of similar length: sorted by length, a bucket
    closes when one more sequence would make ``len(bucket) * width`` exceed
    ``max_tokens`` (the padded size of one forward pass; ``width`` is the longest
    member rounded up by :func:`padded_width`). A sequence whose width exceeds
    ``max_tokens`` gets a bucket of its own."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    buckets: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if current and (len(current) + 1) * padded_width(lengths[index], multiple, cap) > max_tokens:
            buckets.append(current)
            current = []
        current.append(index)
    if current:
        buckets.append(current)
    return buckets


def unbucket(pieces: Sequence[torch.Tensor], rows: Sequence[torch.Tensor], total: int) -> torch.Tensor:
    """The per-bucket results ``pieces[b]`` (one row per sequence of bucket ``b``) put
    back into the original order given by ``rows[b]``."""
    out = pieces[0].new_empty((total, *pieces[0].shape[1:]))
    for piece, index in zip(pieces, rows):
        out[index.to(out.device)] = piece
    return out


@dataclass
class DeclutrCollate:
    """Builds a DeCLUTR batch from document ids (the trainer's examples). The epoch
    is set by the trainer before each pass over the data (``set_epoch``) and picks
    that epoch's spans; a document with no spans in that epoch (too short for the
    lengths drawn) is left out of its batch. The span sampling that left it without
    spans counted it, with the document and epoch, in its report
    (``data/08_reporting/data_report/declutr_spans.json``; own documents:
    ``<method>.spans.json`` there)."""

    token_ids: Mapping[str, Sequence[int]]
    spans: Mapping[tuple[int, str], DocumentSpans]
    tokenizer: object
    max_span_tokens: int
    mlm_probability: float | None = 0.15
    bucket_tokens: int = 4096
    pad_to_multiple_of: int = 1
    seed: int = 42
    epoch: int = 0

    def fingerprint(self) -> str:
        """A digest of what the batches are made of (token ids, spans, masking and
        bucketing settings), for the trainer's resume check: the examples themselves
        are only document ids."""
        digest = hashlib.sha256(repr((self.max_span_tokens, self.mlm_probability, self.bucket_tokens, self.seed,
                                      self._prefix, self._suffix, self.pad_to_multiple_of)).encode())
        for doc_id in sorted(self.token_ids):
            digest.update(doc_id.encode("utf-8"))
            digest.update(np.asarray(self.token_ids[doc_id], dtype=np.int64).tobytes())
        for key in sorted(self.spans):
            digest.update(repr(self.spans[key]).encode())
        return digest.hexdigest()

    def set_epoch(self, epoch: int) -> None:
        available = sorted({e for e, _ in self.spans})
        if epoch not in available:
            raise ValueError(f"declutr_spans has spans for epoch(s) {available} but training reached epoch {epoch}: "
                             "raise data_processing.declutr_spans.epochs to at least the training epochs")
        self.epoch = epoch

    def __post_init__(self) -> None:
        if int(self.pad_to_multiple_of) < 1:
            raise ValueError(f"pad_to_multiple_of must be a positive integer, got {self.pad_to_multiple_of}")
        self._prefix, self._suffix = special_token_template(self.tokenizer)

    def _sequence(self, doc: Sequence[int], start: int, end: int) -> list[int]:
        # Spans are cut from ids without special tokens; too-long spans are clipped so
        # that the span plus [CLS]/[SEP] (or <s>/</s>) fits the model.
        end = min(end, start + self.max_span_tokens)
        return [*self._prefix, *_as_ints(doc[start:end]), *self._suffix]

    def __call__(self, doc_ids: Sequence[str]) -> dict:
        anchors, positives, generators = [], [], []
        for doc_id in doc_ids:
            document = self.spans.get((self.epoch, doc_id))
            if document is None:
                continue
            tokens = self.token_ids[doc_id]
            for anchor, ((start, end), anchor_positives) in enumerate(zip(document.anchors, document.positives)):
                anchors.append(self._sequence(tokens, start, end))
                generators.append(_document_generator(self.seed, self.epoch, doc_id, anchor))
                positives.extend(self._sequence(tokens, s, e) for s, e in anchor_positives)
        if not anchors:
            raise ValueError(f"no document of this batch has spans for epoch {self.epoch}")
        return {
            "anchors": self._buckets(anchors, generators if self.mlm_probability else None),
            "positives": self._buckets(positives, None),
        }

    def _buckets(self, sequences: list[list[int]], generators: list[torch.Generator] | None) -> list[dict]:
        labels = None
        if generators is not None:  # each anchor masked over its own tokens, before any padding
            special = torch.as_tensor(self.tokenizer.all_special_ids)
            masked_sequences, labels = [], []
            for ids, generator in zip(sequences, generators):
                ids = torch.as_tensor(ids).unsqueeze(0)
                masked, label = mask_tokens(ids, ~torch.isin(ids, special), self.tokenizer.mask_token_id,
                                            len(self.tokenizer), generator, self.mlm_probability)
                masked_sequences.append(masked[0])
                labels.append(label[0])
            sequences = masked_sequences
        buckets = []
        longest = self.max_span_tokens + len(self._prefix) + len(self._suffix)  # what the model takes
        for members in length_buckets([len(s) for s in sequences], self.bucket_tokens, self.pad_to_multiple_of,
                                      longest):
            width = padded_width(max(len(sequences[i]) for i in members), self.pad_to_multiple_of, longest)
            input_ids = torch.full((len(members), width), self.tokenizer.pad_token_id, dtype=torch.long)
            attention_mask = torch.zeros((len(members), width), dtype=torch.long)
            for row, index in enumerate(members):
                input_ids[row, : len(sequences[index])] = torch.as_tensor(sequences[index])
                attention_mask[row, : len(sequences[index])] = 1
            bucket = {"input_ids": input_ids, "attention_mask": attention_mask,
                      "rows": torch.as_tensor(members, dtype=torch.long)}
            if labels is not None:
                bucket["mlm_labels"] = torch.full((len(members), width), IGNORE_INDEX, dtype=torch.long)
                for row, index in enumerate(members):
                    bucket["mlm_labels"][row, : len(labels[index])] = labels[index]
                bucket["mlm_positions"] = masked_positions(bucket["mlm_labels"])
            buckets.append(bucket)
        return buckets


def _as_ints(ids) -> list[int]:
    """A slice of token ids as Python ints (a numpy slice of the memory-mapped ids, or
    a list)."""
    return ids.tolist() if isinstance(ids, np.ndarray) else list(ids)


def special_token_template(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after one sequence
    (``[CLS]`` / ``[SEP]`` for BERT, ``<s>`` / ``</s>`` for RoBERTa), read off its
    encoding of a one-word text, so that spans cut from pre-tokenised documents get
    exactly what the tokenizer would add."""
    bare = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    raise ValueError(f"cannot tell where {type(tokenizer).__name__} puts its special tokens")


def _document_generator(seed: int, epoch: int, doc_id: str, anchor: int) -> torch.Generator:
    """The masking generator of one anchor: seeded by (seed, epoch, document, anchor)."""
    mixed = np.random.SeedSequence([seed, epoch, zlib.crc32(doc_id.encode("utf-8")), anchor]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(mixed))


class DocumentTokens(Mapping):
    """``doc_id -> token ids`` (a numpy ``int32`` array) of the documents that have
    spans, read from the ``long_documents`` Arrow table only when a batch asks for
    them. The ids stay in the table's buffers (memory-mapped when the table was
    loaded from disk), so holding this costs an index of the documents, not their
    tokens, and training processes on one machine share the page cache."""

    def __init__(self, table: pa.Table, rows: Mapping[str, int]):
        column = table.column("input_ids")
        self._rows = dict(rows)
        self._chunk_starts = np.cumsum([0] + [len(chunk) for chunk in column.chunks])
        self._chunks = [(chunk.offsets.to_numpy(), chunk.values.to_numpy(zero_copy_only=False))
                        for chunk in column.chunks]

    def __getitem__(self, doc_id: str) -> np.ndarray:
        row = self._rows[doc_id]
        chunk = int(np.searchsorted(self._chunk_starts, row, side="right")) - 1
        offsets, values = self._chunks[chunk]
        local = row - self._chunk_starts[chunk]
        return values[offsets[local] : offsets[local + 1]]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def document_table(long_documents) -> pa.Table:
    """The ``long_documents`` data as an Arrow table without copying it: a
    ``datasets.Dataset`` (as the catalog loads it, memory-mapped; a row selection is
    applied first), a ``pyarrow.Table``, or a pandas ``DataFrame`` (converted)."""
    if isinstance(long_documents, pa.Table):
        return long_documents
    if isinstance(long_documents, pd.DataFrame):
        return pa.Table.from_pandas(long_documents[["doc_id", "input_ids"]], preserve_index=False)
    if getattr(long_documents, "_indices", None) is not None:  # a filtered or selected datasets.Dataset
        long_documents = long_documents.flatten_indices()
    return long_documents.data.table


def training_documents(long_documents, spans: Mapping[tuple[int, str], DocumentSpans],
                       vocab_size: int) -> DocumentTokens:
    """Token ids of the documents that have spans (:class:`DocumentTokens`), checked
    against the vocabulary (the documents must have been tokenised with this encoder's
    tokenizer). Only the ``doc_id`` column is read into memory; the check runs over
    the token buffers without turning them into Python ints."""
    import pyarrow.compute as pc

    table = document_table(long_documents)
    wanted = {doc_id for _, doc_id in spans}
    rows = {doc_id: row for row, doc_id in enumerate(table.column("doc_id").to_pylist()) if doc_id in wanted}
    missing = wanted - set(rows)
    if missing:
        raise ValueError(f"declutr_spans names {len(missing)} document(s) not in long_documents "
                         f"(e.g. {sorted(missing)[:3]}); rebuild both with the data_processing pipeline")
    tokens = DocumentTokens(table, rows)
    largest = pc.max(pc.list_flatten(table.column("input_ids"))).as_py()
    if largest is not None and largest >= vocab_size:
        for doc_id in rows:  # the first wanted document that has such an id, for the message
            ids = tokens[doc_id]
            if len(ids) and int(ids.max()) >= vocab_size:
                raise ValueError(f"long_documents: {doc_id} has token id {int(ids.max())} >= the tokenizer's "
                                 f"vocabulary ({vocab_size}); it was tokenised with another encoder, rerun "
                                 "data_processing")
    return tokens
