import math

import numpy as np
import pytest

from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.data.spans import (
    SpanConfig,
    place_anchors,
    positive_start_range,
    sample_document_spans,
    sample_spans,
    span_length,
)

PAPER = SpanConfig(num_anchors=2, num_positives=2, min_length=32, max_length=512, anchor_gap=512)


def test_span_length_formula_by_hand():
    # floor(p * (l_max - l_min) + l_min)
    assert span_length(0.0, 32, 512) == 32
    assert span_length(1.0, 32, 512) == 512
    assert span_length(0.5, 32, 512) == 272
    assert span_length(0.123, 32, 512) == math.floor(0.123 * 480 + 32) == 91


def test_positive_start_range_by_hand():
    # [anchor_start - l_pos, anchor_end], clipped to the document
    assert positive_start_range(100, 200, 50, 1000) == (50, 200)
    assert positive_start_range(10, 200, 50, 1000) == (0, 200)
    assert positive_start_range(900, 990, 50, 1000) == (850, 950)


def _check_document(spans, doc_length, config):
    anchors = sorted((start, end) for start, end, _, _ in spans)
    assert len(spans) == config.num_anchors
    for (_, end), (next_start, _) in zip(anchors, anchors[1:]):
        assert next_start - end >= config.anchor_gap  # disjoint, and far enough apart
    for start, end, positive_starts, positive_ends in spans:
        assert 0 <= start < end <= doc_length
        assert config.min_length <= end - start <= config.max_length
        assert len(positive_starts) == len(positive_ends) == config.num_positives
        for p_start, p_end in zip(positive_starts, positive_ends):
            length = p_end - p_start
            assert config.min_length <= length <= config.max_length
            assert 0 <= p_start and p_end <= doc_length
            # overlapping, adjacent to, or subsumed by its anchor
            assert start - length <= p_start <= end
            assert p_end >= start and p_start <= end


@pytest.mark.parametrize(
    "config",
    [PAPER, SpanConfig(3, 1, 8, 64, anchor_gap=0), SpanConfig(1, 4, 16, 16)],
)
def test_span_invariants_over_many_documents(config):
    rng = np.random.default_rng(0)
    checked = 0
    for doc_length in rng.integers(config.min_document_length, 6000, size=300):
        spans = sample_document_spans(rng, int(doc_length), config)
        assert spans is not None  # long enough for any draw
        _check_document(spans, int(doc_length), config)
        checked += 1
    assert checked == 300


def test_anchor_and_positive_lengths_follow_their_beta_distributions():
    config = SpanConfig(1, 1, 0 + 1, 1001)
    rng = np.random.default_rng(1)
    anchors, positives = [], []
    for _ in range(4000):
        ((start, end, p_starts, p_ends),) = sample_document_spans(rng, 5000, config)
        anchors.append((end - start - 1) / 1000)
        positives.append((p_ends[0] - p_starts[0] - 1) / 1000)
    # Beta(4, 2) has mean 2/3, Beta(2, 4) mean 1/3; floor() lowers them by < 1/1000.
    assert np.mean(anchors) == pytest.approx(2 / 3, abs=0.01)
    assert np.mean(positives) == pytest.approx(1 / 3, abs=0.01)


def test_anchor_starts_cover_the_whole_document():
    rng = np.random.default_rng(2)
    starts = [place_anchors(rng, 1000, [100], gap=0)[0] for _ in range(5000)]
    assert min(starts) <= 10 and max(starts) >= 890  # uniform over [0, 900]
    assert np.mean(starts) == pytest.approx(450, abs=15)


def test_place_anchors_refuses_what_cannot_fit():
    rng = np.random.default_rng(0)
    assert place_anchors(rng, 299, [100, 100], gap=100) is None
    assert place_anchors(rng, 300, [100, 100], gap=100) == [0, 200]


def test_sample_spans_is_deterministic_per_seed_and_epoch_and_order_free():
    ids, lengths = [f"doc{i}" for i in range(20)], [3000] * 20
    config = SpanConfig(2, 2, 32, 256, anchor_gap=256)
    first = sample_spans(ids, lengths, config, seed=3, epochs=2, report=StepReport("a"))
    again = sample_spans(ids, lengths, config, seed=3, epochs=2, report=StepReport("b"))
    assert first.equals(again)
    other_seed = sample_spans(ids, lengths, config, seed=4, epochs=2, report=StepReport("c"))
    assert not first.equals(other_seed)
    epoch0, epoch1 = (first[first["epoch"] == e].drop(columns="epoch").reset_index(drop=True) for e in (0, 1))
    assert not epoch0.equals(epoch1)  # new spans each epoch
    reversed_docs = sample_spans(ids[::-1], lengths, config, seed=3, epochs=1, report=StepReport("d"))
    key = ["doc_id", "anchor"]
    assert reversed_docs.sort_values(key).reset_index(drop=True).equals(
        first[first["epoch"] == 0].sort_values(key).reset_index(drop=True)
    )


def test_too_short_documents_are_skipped_and_counted_never_an_error():
    config = SpanConfig(2, 2, 32, 512, anchor_gap=512)
    report = StepReport("t")
    spans = sample_spans(["long", "short", "tiny"], [4000, 300, 5], config, seed=0, epochs=1, report=report)
    assert set(spans["doc_id"]) == {"long"}
    assert len(spans) == 2
    assert report.rows_in == 3 and report.rows_out == 1
    assert report.dropped == {"document too short for the sampled spans": 2}
    assert report.examples["document too short for the sampled spans"] == ["short (epoch 0)", "tiny (epoch 0)"]


def test_span_config_rejects_impossible_settings():
    with pytest.raises(ValueError):
        SpanConfig(min_length=64, max_length=32)
    with pytest.raises(ValueError):
        SpanConfig(num_anchors=0)
    with pytest.raises(ValueError):
        SpanConfig(anchor_gap=-1)
