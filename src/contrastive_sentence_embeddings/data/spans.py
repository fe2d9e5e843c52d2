"""DeCLUTR's span sampling (Giorgi et al., 2021, section 2).

For every document of ``L`` tokens, ``A`` anchor spans and, for every anchor, ``P``
positive spans are drawn. A span length is ``floor(p * (l_max - l_min) + l_min)``
with ``p ~ Beta(4, 2)`` for anchors (long spans) and ``p ~ Beta(2, 4)`` for positives
(short ones). Spans are half-open token ranges ``[start, end)``.

* Anchors of one document never overlap and are at least ``anchor_gap`` tokens
  apart. Where they start is ``anchor_placement``:

  - ``uniform`` (the default, and what this project always did): under the gap
    constraint the starts are uniform over every valid position of the whole
    document (stars-and-bars placement: the ``L - sum(lengths) - (A - 1) * gap``
    free tokens are split into ``A + 1`` parts by ``A`` sorted uniform draws), so
    an anchor may start anywhere, the document's tail included.
  - ``reference``: the released sampler (JohnGiorgi/DeCLUTR,
    ``declutr/common/contrastive_utils.py::sample_anchor_positive_pairs`` at
    b78ac5766d27e1a6cdfadd41cfd2bed57d2ac1c7; the placement last changed in
    825ecf5, 2020-07-26), the one the paper's numbers came from. The document is
    cut into ``floor(L / l_max)`` cells of ``l_max`` tokens, ``[k l_max, (k+1)
    l_max)``; the last ``L mod l_max`` tokens belong to no cell. For each anchor in
    turn a remaining cell is chosen uniformly (or, when fewer than
    ``(A - i)^2`` cells are left for the ``A - i`` anchors still to place, the
    first or the last remaining cell, each with probability 1/2), the anchor starts
    uniformly in ``[cell, cell + l_max - length]`` so that it lies inside its cell,
    and the cell and its immediate neighbours in the list of remaining cells are
    removed. So every anchor lies inside one cell, its start is at most
    ``l_max - length`` after the cell boundary (``length`` is long, Beta(4, 2):
    starts cluster just after the boundaries), two anchors are at least one whole
    cell (``l_max`` tokens) apart, and the tail is never part of an anchor. Like
    the released code, it needs ``L >= 2 A l_max`` (shorter documents are skipped
    and counted); ``anchor_gap`` may not exceed ``l_max`` (the cells give that gap).
    Anchors are listed in the order they were drawn, as the released sampler does.

* A positive of length ``l_pos`` starts uniformly in
  ``[anchor_start - l_pos, anchor_end]`` clipped to the document, so it overlaps
  the anchor, is adjacent to it on either side, or is subsumed by it (the same in
  both placements, and in the released sampler's default strategy).
* Randomness is seeded per (seed, epoch, document): the spans of a document do not
  depend on which other documents are in the table or on their order.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from contrastive_sentence_embeddings.configuration.strict import ParameterError, integer, parse_strict, random_seed
from contrastive_sentence_embeddings.data.report import StepReport, require_rows

SPAN_COLUMNS = [
    "epoch",
    "doc_id",
    "anchor",
    "anchor_start",
    "anchor_end",
    "positive_starts",
    "positive_ends",
]


ANCHOR_PLACEMENTS = ("uniform", "reference")


@dataclass(frozen=True)
class SpanConfig:
    """Span-sampling settings; the paper's are ``SpanConfig(2, 2, 32, 512,
    anchor_gap=512, anchor_placement="reference")``."""

    num_anchors: int = 2
    num_positives: int = 2
    min_length: int = 32
    max_length: int = 512
    anchor_gap: int = 0
    anchor_beta: tuple[float, float] = (4.0, 2.0)
    positive_beta: tuple[float, float] = (2.0, 4.0)
    anchor_placement: str = "uniform"

    def __post_init__(self) -> None:
        if self.num_anchors < 1 or self.num_positives < 1:
            raise ValueError("num_anchors and num_positives must be at least 1")
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(
                f"need 1 <= min_length <= max_length, got {self.min_length}, {self.max_length}"
            )
        if self.anchor_gap < 0:
            raise ValueError("anchor_gap must be >= 0")
        if self.anchor_placement not in ANCHOR_PLACEMENTS:
            raise ValueError(
                f"anchor_placement must be one of {', '.join(ANCHOR_PLACEMENTS)}, not {self.anchor_placement!r}"
            )
        if self.anchor_placement == "reference" and self.anchor_gap > self.max_length:
            raise ValueError(
                f"anchor_placement 'reference' keeps anchors max_length ({self.max_length}) tokens apart; "
                f"anchor_gap {self.anchor_gap} cannot be honoured"
            )

    @property
    def min_document_length(self) -> int:
        """The shortest document that fits any draw: for ``uniform``, A anchors of
        l_max and A-1 gaps; for ``reference``, the released sampler's 2 A l_max."""
        if self.anchor_placement == "reference":
            return 2 * self.num_anchors * self.max_length
        return self.num_anchors * self.max_length + (self.num_anchors - 1) * self.anchor_gap


@dataclass(frozen=True)
class SpansParams:
    """``data_processing.declutr_spans``: :class:`SpanConfig` plus the sampling seed and
    the number of epochs of spans (the block parsed strictly, here beside the code it
    configures)."""

    num_anchors: int = field(default=2, metadata=integer(1))
    num_positives: int = field(default=2, metadata=integer(1))
    min_length: int = field(default=32, metadata=integer(1))
    max_length: int = field(default=512, metadata=integer(1))
    anchor_gap: int = field(default=0, metadata=integer(0))
    anchor_placement: str = "uniform"   # uniform (any valid position) or reference (the released sampler's cells)
    epochs: int = field(default=1, metadata=integer(1))
    seed: int = field(default=42, metadata=random_seed())

    REQUIRED = ("num_anchors", "num_positives", "min_length", "max_length", "epochs", "seed")

    @classmethod
    def from_params(cls, params: Mapping, where: str = "data_processing.declutr_spans") -> "SpansParams":
        """The block parsed strictly, its span settings checked by ``SpanConfig``."""
        settings = parse_strict(cls, params, where, required=cls.REQUIRED)
        try:
            settings.span_config()
        except ValueError as error:
            raise ParameterError(f"{where}: {error}", key=where) from error
        return settings

    def span_config(self) -> SpanConfig:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.pop("epochs"), values.pop("seed")
        return SpanConfig(**values)



def span_length(p: float, min_length: int, max_length: int) -> int:
    """``floor(p * (max_length - min_length) + min_length)`` for ``p`` in [0, 1]."""
    return int(math.floor(p * (max_length - min_length) + min_length))


def place_anchors(
    rng: np.random.Generator, doc_length: int, lengths: Sequence[int], gap: int
) -> list[int] | None:
    """Starts of non-overlapping anchors of the given lengths, in document order, with
    at least ``gap`` tokens between consecutive anchors; None if they cannot fit.

    The free tokens ``slack = L - sum(lengths) - (A - 1) * gap`` are split into A + 1
    parts by A sorted uniform draws from ``[0, slack]``.
    """
    slack = doc_length - sum(lengths) - (len(lengths) - 1) * gap
    if slack < 0:
        return None
    offsets = np.sort(rng.integers(0, slack, size=len(lengths), endpoint=True))
    starts, consumed = [], 0
    for offset, length in zip(offsets, lengths):
        starts.append(int(offset) + consumed)
        consumed += length + gap
    return starts


def place_anchors_in_cells(
    rng: np.random.Generator, doc_length: int, lengths: Sequence[int], max_length: int
) -> list[int] | None:
    """Starts of anchors of the given lengths (each <= ``max_length``) placed as the
    released DeCLUTR sampler does (``anchor_placement: reference``, see the module
    docstring), in the order drawn; None if the cells run out (never for documents
    of at least ``2 * len(lengths) * max_length`` tokens)."""
    if any(length > max_length for length in lengths):
        raise ValueError(f"anchor lengths {list(lengths)} exceed max_length {max_length}")
    cells = list(range(0, doc_length - max_length + 1, max_length))
    starts = []
    for placed, length in enumerate(lengths):
        if not cells:
            return None
        still_to_place = len(lengths) - placed
        if len(cells) // still_to_place < still_to_place:
            # Few cells left: take one at either end, so that removing its neighbours
            # costs one cell fewer and the remaining anchors still find one.
            index = (0, len(cells) - 1)[int(rng.integers(2))]
        else:
            index = int(rng.integers(len(cells)))
        cell = cells[index]
        starts.append(int(rng.integers(cell, cell + max_length - length, endpoint=True)))
        del cells[max(0, index - 1) : index + 2]
    return starts


def positive_start_range(
    anchor_start: int, anchor_end: int, positive_length: int, doc_length: int
) -> tuple[int, int]:
    """Inclusive range of starts for a positive: ``[anchor_start - l_pos, anchor_end]``
    clipped so that the positive lies inside ``[0, doc_length)``."""
    low = max(0, anchor_start - positive_length)
    high = min(anchor_end, doc_length - positive_length)
    return low, high


def sample_document_spans(
    rng: np.random.Generator, doc_length: int, config: SpanConfig
) -> list[tuple[int, int, list[int], list[int]]] | None:
    """``(anchor_start, anchor_end, positive_starts, positive_ends)`` per anchor, or
    None when the document is too short for the lengths drawn."""
    anchor_lengths = [
        span_length(p, config.min_length, config.max_length)
        for p in rng.beta(*config.anchor_beta, size=config.num_anchors)
    ]
    if config.anchor_placement == "reference":
        if doc_length < config.min_document_length:
            return None
        starts = place_anchors_in_cells(rng, doc_length, anchor_lengths, config.max_length)
    else:
        starts = place_anchors(rng, doc_length, anchor_lengths, config.anchor_gap)
    if starts is None:
        return None
    spans = []
    for start, length in zip(starts, anchor_lengths):
        end = start + length
        positive_starts, positive_ends = [], []
        for p in rng.beta(*config.positive_beta, size=config.num_positives):
            positive_length = span_length(p, config.min_length, config.max_length)
            low, high = positive_start_range(start, end, positive_length, doc_length)
            if high < low:
                return None
            positive_start = int(rng.integers(low, high, endpoint=True))
            positive_starts.append(positive_start)
            positive_ends.append(positive_start + positive_length)
        spans.append((start, end, positive_starts, positive_ends))
    return spans


def document_rng(seed: int, epoch: int, doc_id: str) -> np.random.Generator:
    """The generator of one document in one epoch, independent of table order."""
    return np.random.default_rng([seed, epoch, zlib.crc32(doc_id.encode("utf-8"))])


# (epoch, document) pairs per unit of work handed to a worker: about 0.1 s of sampling,
# so that starting a worker is worth it and the work is spread evenly.
SPAN_CHUNK = 2000


def span_schema() -> pa.Schema:
    """The ``declutr_spans`` table: one row per (epoch, document, anchor)."""
    offsets = pa.list_(pa.int64())
    return pa.schema([("epoch", pa.int64()), ("doc_id", pa.string()), ("anchor", pa.int64()),
                      ("anchor_start", pa.int64()), ("anchor_end", pa.int64()),
                      ("positive_starts", offsets), ("positive_ends", offsets)])


def document_lengths(documents) -> dict[str, list]:
    """The ``doc_id`` and ``n_tokens`` columns of a long-documents table (a
    ``datasets.Dataset`` as the catalog loads it, a ``pyarrow.Table`` or a pandas
    ``DataFrame``) as lists, reading those two columns only (never the token ids)."""
    wanted = ["doc_id", "n_tokens"]
    if isinstance(documents, pd.DataFrame):
        return {name: documents[name].tolist() for name in wanted}
    if isinstance(documents, pa.Table):
        return {name: documents.column(name).to_pylist() for name in wanted}
    table = documents.select_columns(wanted).with_format("arrow")[:]  # a datasets.Dataset, its row selection kept
    return {name: table.column(name).to_pylist() for name in wanted}


def _sample_chunk(work: tuple) -> tuple[pa.Table, StepReport, int]:
    """Spans of one contiguous run of documents in one epoch: ``(table, report, kept)``."""
    epoch, doc_ids, doc_lengths, config, seed, step = work
    report = StepReport(step)
    columns: dict[str, list] = {name: [] for name in SPAN_COLUMNS}
    kept = 0
    for doc_id, doc_length in zip(doc_ids, doc_lengths):
        report.rows_in += 1
        spans = sample_document_spans(document_rng(seed, epoch, doc_id), int(doc_length), config)
        if spans is None:
            reason = ("document shorter than 2 * num_anchors * max_length (anchor_placement: reference)"
                      if config.anchor_placement == "reference" and doc_length < config.min_document_length
                      else "document too short for the sampled spans")
            report.drop(reason, where=f"{doc_id} (epoch {epoch})")
            continue
        kept += 1
        for anchor, row in enumerate(spans):
            for name, value in zip(SPAN_COLUMNS, (epoch, doc_id, anchor, *row)):
                columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=span_schema()), report, kept


def sample_spans(
    doc_ids: Sequence[str],
    doc_lengths: Sequence[int],
    config: SpanConfig,
    seed: int,
    epochs: int,
    report: StepReport,
    what: str = "declutr_spans",
    num_proc: int | None = 1,
    chunk: int = SPAN_CHUNK,
) -> pa.Table:
    """One row per (epoch, document, anchor) with its positives (``span_schema``),
    epoch by epoch in document order; documents too short for the spans drawn are
    skipped and counted, never an error (but no document with spans at all is,
    naming ``what``).

    The work is cut into runs of ``chunk`` documents of one epoch and sampled on
    ``num_proc`` processes (``data.parallel.worker_count``; no more than ``chunk``
    (epoch, document) pairs would keep busy). Each document's spans come from its own generator (``document_rng``), so
    the table and the counts are the same whatever ``num_proc`` and ``chunk`` are:
    the runs are put back in order and their reports added in order.

    Sampling costs about 80 us of CPU per (epoch, document) (paper settings, 200k
    documents: 16 s; 500k documents, one epoch: 75 s wall on 2 cores shared with a
    load average of 10), so at paper scale it is worth the workers when cores are
    free; the output does not depend on them."""
    from contrastive_sentence_embeddings.data.parallel import worker_count

    doc_ids, doc_lengths = list(doc_ids), [int(n) for n in doc_lengths]
    work = [(epoch, doc_ids[begin : begin + chunk], doc_lengths[begin : begin + chunk], config, seed, report.step)
            for epoch in range(epochs) for begin in range(0, len(doc_ids), chunk)]
    # no more workers than there are runs' worth of work (a small table is sampled in-process)
    workers = worker_count(num_proc, math.ceil(len(doc_ids) * epochs / chunk))
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_sample_chunk, work))
    else:
        results = [_sample_chunk(item) for item in work]
    kept_documents = 0
    for _, part, kept in results:
        report.rows_in += part.rows_in
        report.absorb(part)
        kept_documents += kept
    # rows in/out count (document, epoch) pairs; the table has one row per anchor.
    report.rows_out = kept_documents
    require_rows(kept_documents, f"{what} (no document long enough for the sampled spans)")
    table = pa.concat_tables([table for table, _, _ in results]) if results else span_schema().empty_table()
    report.extra["anchor_rows"] = table.num_rows
    return table.combine_chunks()
