"""Each pooling method against a hand computation on a padded batch."""

import pytest
import torch

from contrastive_sentence_embeddings.encoders.pooling import POOLING_METHODS, masked_mean, pool

# Two sentences of 3 and 2 real tokens (the second padded), dimension 2.
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
EMBEDDING_LAYER = torch.full((2, 3, 2), 100.0)  # must never be used
FIRST = torch.tensor([[[1.0, 0], [3, 2], [5, 4]], [[2.0, 2], [4, 0], [99, 99]]])
LAST = torch.tensor([[[0.0, 1], [2, 3], [4, 5]], [[1.0, 1], [3, 5], [-99, -99]]])
POOLER = torch.tensor([[0.5, -0.5], [0.25, 0.75]])


def run(method):
    return pool(method, MASK, LAST, POOLER, (EMBEDDING_LAYER, FIRST, LAST))


def test_cls_uses_the_pooler_and_cls_before_pooler_the_raw_state():
    assert torch.equal(run("cls"), POOLER)
    assert torch.equal(run("cls_before_pooler"), torch.tensor([[0.0, 1], [1.0, 1]]))


def test_mean_ignores_padding():
    # sentence 1: ((0+2+4)/3, (1+3+5)/3); sentence 2: ((1+3)/2, (1+5)/2), the -99 padding ignored
    expected = torch.tensor([[2.0, 3.0], [2.0, 3.0]])
    assert torch.allclose(run("mean"), expected)
    assert torch.equal(run("last_avg"), run("mean"))


def test_first_last_avg_uses_the_first_transformer_layer_not_the_embeddings():
    # sentence 1: first-layer mean (3, 2), last-layer mean (2, 3) -> (2.5, 2.5)
    # sentence 2: first-layer mean (3, 1), last-layer mean (2, 3) -> (2.5, 2.0)
    assert torch.allclose(run("first_last_avg"), torch.tensor([[2.5, 2.5], [2.5, 2.0]]))


def test_missing_inputs_and_unknown_names_are_clear_errors():
    with pytest.raises(ValueError, match="no pooler"):
        pool("cls", MASK, LAST, None)
    with pytest.raises(ValueError, match="output_hidden_states"):
        pool("first_last_avg", MASK, LAST, POOLER, None)
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        pool("max", MASK, LAST)
    assert len(POOLING_METHODS) == 5


def test_masked_mean_of_half_precision_is_float32():
    states = torch.full((1, 4, 2), 60000.0, dtype=torch.float16)  # fp16 sum would overflow
    assert masked_mean(states, torch.ones(1, 4)).dtype == torch.float32
    assert torch.allclose(masked_mean(states, torch.ones(1, 4)), torch.full((1, 2), 60000.0))
