"""DeCLUTR's span sampling (Giorgi et al., 2021, section 2).

For every document of ``L`` tokens, ``A`` anchor spans and, for every anchor, ``P``
positive spans are drawn. A span length is ``floor(p * (l_max - l_min) + l_min)``
with ``p ~ Beta(4, 2)`` for anchors (long spans) and ``p ~ Beta(2, 4)`` for positives
(short ones). Spans are half-open token ranges ``[start, end)``.

* Anchors of one document never overlap and are at least ``anchor_gap`` tokens
  apart; under that constraint their starts are uniform (stars-and-bars placement).
* A positive of length ``l_pos`` starts uniformly in
  ``[anchor_start - l_pos, anchor_end]`` clipped to the document, so it overlaps
  the anchor, is adjacent to it on either side, or is subsumed by it.
* Randomness is seeded per (seed, epoch, document): the spans of a document do not
  depend on which other documents are in the table or on their order.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

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


@dataclass(frozen=True)
class SpanConfig:
    """Span-sampling settings; the paper's are ``SpanConfig(2, 2, 32, 512)``."""

    num_anchors: int = 2
    num_positives: int = 2
    min_length: int = 32
    max_length: int = 512
    anchor_gap: int = 0
    anchor_beta: tuple[float, float] = (4.0, 2.0)
    positive_beta: tuple[float, float] = (2.0, 4.0)

    def __post_init__(self) -> None:
        if self.num_anchors < 1 or self.num_positives < 1:
            raise ValueError("num_anchors and num_positives must be at least 1")
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(
                f"need 1 <= min_length <= max_length, got {self.min_length}, {self.max_length}"
            )
        if self.anchor_gap < 0:
            raise ValueError("anchor_gap must be >= 0")

    @property
    def min_document_length(self) -> int:
        """The shortest document that fits any draw: A anchors of l_max, A-1 gaps."""
        return self.num_anchors * self.max_length + (self.num_anchors - 1) * self.anchor_gap


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


def sample_spans(
    doc_ids: Sequence[str],
    doc_lengths: Sequence[int],
    config: SpanConfig,
    seed: int,
    epochs: int,
    report: StepReport,
) -> pd.DataFrame:
    """One row per (epoch, document, anchor) with its positives; documents too short
    for the spans drawn are skipped and counted, never an error."""
    rows = []
    kept_documents = 0
    for epoch in range(epochs):
        for doc_id, doc_length in zip(doc_ids, doc_lengths):
            report.rows_in += 1
            spans = sample_document_spans(document_rng(seed, epoch, doc_id), int(doc_length), config)
            if spans is None:
                report.drop("document too short for the sampled spans", where=f"{doc_id} (epoch {epoch})")
                continue
            kept_documents += 1
            for anchor, (start, end, pos_starts, pos_ends) in enumerate(spans):
                rows.append((epoch, doc_id, anchor, start, end, pos_starts, pos_ends))
    # rows in/out count (document, epoch) pairs; the table has one row per anchor.
    report.rows_out = kept_documents
    require_rows(kept_documents, "declutr_spans (no document long enough for the sampled spans)")
    report.extra["anchor_rows"] = len(rows)
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)
