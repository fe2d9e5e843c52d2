import math

import numpy as np
import pytest

from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.data.spans import (
    SpanConfig,
    place_anchors,
    place_anchors_in_cells,
    positive_start_range,
    sample_document_spans,
    sample_spans,
    span_schema,
    span_length,
)

PAPER = SpanConfig(num_anchors=2, num_positives=2, min_length=32, max_length=512, anchor_gap=512)
PAPER_REFERENCE = SpanConfig(2, 2, 32, 512, anchor_gap=512, anchor_placement="reference")


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
    if config.anchor_placement == "reference":
        cell = config.max_length
        for (_, end), (next_start, _) in zip(anchors, anchors[1:]):
            assert next_start - end >= cell  # at least one whole cell between two anchors
        for start, end in anchors:
            assert start // cell == (end - 1) // cell  # inside one cell
            assert end <= doc_length // cell * cell  # never in the tail


@pytest.mark.parametrize(
    "config",
    [PAPER, SpanConfig(3, 1, 8, 64, anchor_gap=0), SpanConfig(1, 4, 16, 16),
     PAPER_REFERENCE, SpanConfig(3, 1, 8, 64, anchor_gap=64, anchor_placement="reference"),
     SpanConfig(1, 4, 16, 16, anchor_placement="reference"), SpanConfig(4, 2, 8, 32, anchor_placement="reference")],
    ids=lambda c: f"{c.anchor_placement}-A{c.num_anchors}-P{c.num_positives}-{c.min_length}-{c.max_length}",
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


@pytest.mark.parametrize("placement", ["uniform", "reference"])
def test_sample_spans_is_deterministic_per_seed_and_epoch_and_order_free(placement):
    ids, lengths = [f"doc{i}" for i in range(20)], [3000] * 20
    config = SpanConfig(2, 2, 32, 256, anchor_gap=256, anchor_placement=placement)
    first = sample_spans(ids, lengths, config, seed=3, epochs=2, report=StepReport("a")).to_pandas()
    again = sample_spans(ids, lengths, config, seed=3, epochs=2, report=StepReport("b")).to_pandas()
    assert first.equals(again)
    other_seed = sample_spans(ids, lengths, config, seed=4, epochs=2, report=StepReport("c")).to_pandas()
    assert not first.equals(other_seed)
    epoch0, epoch1 = (first[first["epoch"] == e].drop(columns="epoch").reset_index(drop=True) for e in (0, 1))
    assert not epoch0.equals(epoch1)  # new spans each epoch
    reversed_docs = sample_spans(ids[::-1], lengths, config, seed=3, epochs=1, report=StepReport("d")).to_pandas()
    key = ["doc_id", "anchor"]
    assert reversed_docs.sort_values(key).reset_index(drop=True).equals(
        first[first["epoch"] == 0].sort_values(key).reset_index(drop=True)
    )


def test_too_short_documents_are_skipped_and_counted_never_an_error():
    config = SpanConfig(2, 2, 32, 512, anchor_gap=512)
    report = StepReport("t")
    spans = sample_spans(["long", "short", "tiny"], [4000, 300, 5], config, seed=0, epochs=1, report=report).to_pandas()
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


# --- anchor placement: reference (the released sampler's cells) vs uniform ---------------


def _anchor_starts(config, doc_length, draws, seed=5):
    rng = np.random.default_rng(seed)
    return [(start, end) for _ in range(draws)
            for start, end, _, _ in sample_document_spans(rng, doc_length, config)]


def test_reference_anchors_lie_inside_one_cell_start_near_its_boundary_and_never_in_the_tail():
    config = SpanConfig(2, 2, 32, 128, anchor_gap=128, anchor_placement="reference")
    doc_length = 1000  # 7 cells of 128 tokens; tokens 896..999 are the tail
    anchors = _anchor_starts(config, doc_length, 3000)
    for start, end in anchors:
        cell = start // 128
        assert (end - 1) // 128 == cell  # inside one cell...
        assert start - cell * 128 <= 128 - (end - start)  # ...starting at most l_max - length after its boundary
        assert end <= 7 * 128  # never in the tail
    starts = np.array([start for start, _ in anchors])
    assert set(starts // 128) == set(range(7))  # every cell is used
    # offsets within the cell are uniform on [0, l_max - length], length ~ Beta(4, 2): mean about
    # (l_max - l_min) / 6 = 16 tokens after the boundary (uniform placement: about 64)
    assert np.mean(starts % 128) == pytest.approx(96 / 6, abs=2.0)


def test_uniform_anchor_starts_spread_over_all_valid_positions_the_tail_included():
    config = SpanConfig(2, 2, 32, 128, anchor_gap=128)
    anchors = _anchor_starts(config, 1000, 3000)
    starts = np.array([start for start, _ in anchors])
    assert np.mean(starts % 128) == pytest.approx(64, abs=4)  # no clustering at multiples of l_max
    assert any(end > 7 * 128 for _, end in anchors)  # the tail can be an anchor
    histogram = np.bincount(starts // 100, minlength=10)[:9]
    assert histogram.min() > 0.3 * histogram.max()  # starts reach every part of the document


def test_reference_cell_choice_by_hand():
    # 4 cells, 2 anchors: 4 // 2 = 2 is not < 2, so the first cell is uniform; it and its neighbours go.
    rng = np.random.default_rng(0)
    firsts = []
    for _ in range(2000):
        first, second = place_anchors_in_cells(rng, 4 * 10, [10, 10], 10)
        assert abs(first // 10 - second // 10) >= 2  # a neighbouring cell is never taken
        firsts.append(first // 10)
    assert set(firsts) == {0, 1, 2, 3}
    # 6 cells, 3 anchors: 6 // 3 = 2 < 3, so the first anchor takes the first or the last cell.
    firsts = {place_anchors_in_cells(rng, 60, [10, 10, 10], 10)[0] // 10 for _ in range(200)}
    assert firsts == {0, 5}


def test_reference_skips_and_counts_documents_shorter_than_the_released_minimum():
    config = SpanConfig(2, 2, 32, 128, anchor_gap=128, anchor_placement="reference")
    assert config.min_document_length == 2 * 2 * 128
    report = StepReport("t")
    spans = sample_spans(["long", "short"], [512, 511], config, seed=0, epochs=1, report=report).to_pandas()
    assert set(spans["doc_id"]) == {"long"}
    reason = "document shorter than 2 * num_anchors * max_length (anchor_placement: reference)"
    assert report.dropped == {reason: 1} and report.examples[reason] == ["short (epoch 0)"]


def test_uniform_is_the_default_and_unchanged_by_the_placement_option():
    ids, lengths = [f"doc{i}" for i in range(5)], [1500] * 5
    default = sample_spans(ids, lengths, SpanConfig(2, 2, 32, 128, anchor_gap=128), 42, 1, StepReport("a"))
    uniform = sample_spans(ids, lengths, SpanConfig(2, 2, 32, 128, anchor_gap=128, anchor_placement="uniform"),
                           42, 1, StepReport("b"))
    reference = sample_spans(ids, lengths, SpanConfig(2, 2, 32, 128, anchor_gap=128, anchor_placement="reference"),
                             42, 1, StepReport("c"))
    assert default.equals(uniform) and not default.equals(reference)


def span_settings_from_params(params):
    from contrastive_sentence_embeddings.data.spans import SpansParams

    settings = SpansParams.from_params(params)
    return settings.span_config(), settings.seed, settings.epochs


def test_span_parameters_are_parsed_strictly():
    params = {"num_anchors": 2, "num_positives": 2, "min_length": 32, "max_length": 512, "anchor_gap": 512,
              "epochs": 1, "seed": 42, "anchor_placement": "reference"}
    config, seed, epochs = span_settings_from_params(params)
    assert config == PAPER_REFERENCE and (seed, epochs) == (42, 1)
    assert span_settings_from_params({k: v for k, v in params.items() if k != "anchor_placement"})[0] == PAPER
    with pytest.raises(ValueError, match="unknown parameter\\(s\\) data_processing.declutr_spans.anchor_placment"):
        span_settings_from_params({**params, "anchor_placment": "reference"})
    with pytest.raises(ValueError, match="missing parameter\\(s\\) data_processing.declutr_spans.seed"):
        span_settings_from_params({k: v for k, v in params.items() if k != "seed"})
    with pytest.raises(ValueError, match="anchor_placement must be one of uniform, reference"):
        span_settings_from_params({**params, "anchor_placement": "cells"})
    with pytest.raises(ValueError, match="anchor_gap 1024 cannot be honoured"):
        span_settings_from_params({**params, "anchor_gap": 1024})


@pytest.mark.parametrize("placement", ["uniform", "reference"])
def test_spans_do_not_depend_on_the_number_of_workers_nor_the_runs(placement):
    ids = [f"doc{i}" for i in range(40)]
    lengths = [200 + 97 * i for i in range(40)]  # the first ones too short: drops to count
    config = SpanConfig(2, 2, 32, 128, anchor_gap=128, anchor_placement=placement)
    reports = [StepReport("s") for _ in range(3)]
    one = sample_spans(ids, lengths, config, seed=7, epochs=2, report=reports[0])
    two = sample_spans(ids, lengths, config, seed=7, epochs=2, report=reports[1], num_proc=2, chunk=3)
    runs = sample_spans(ids, lengths, config, seed=7, epochs=2, report=reports[2], num_proc=1, chunk=5)
    assert one.equals(two) and one.equals(runs)
    assert reports[0].to_dict() == reports[1].to_dict() == reports[2].to_dict()
    assert reports[0].rows_dropped > 0 and reports[0].rows_in == 80
    assert one.schema == span_schema()
