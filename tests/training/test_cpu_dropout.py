"""Dropout masks from uniform integer draws (training/cpu_dropout.py): the distribution
and scale of torch's dropout, the attention path computed as SDPA's math path does,
calls it does not cover left to torch, and the encoder's CPU training pass using it
(no ``bernoulli_`` left) except under activation checkpointing."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.training.cpu_dropout import (
    DRAW_LEVELS,
    UNIFORM_ATTENTION_MAX_KEYS,
    attention_with_dropout,
    dropout_from_uniform_draws,
    keep_mask,
    uniform_dropout,
)
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import enable_gradient_checkpointing


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_each_element_is_kept_with_probability_one_minus_p_and_scaled_as_torch_scales(p):
    torch.manual_seed(0)
    inputs = torch.ones(1000, 1000, requires_grad=True)
    outputs = uniform_dropout(inputs, p)
    kept = outputs != 0
    sigma = math.sqrt(p * (1 - p) / kept.numel())
    assert abs(kept.double().mean().item() - (1 - p)) < 5 * sigma
    # The kept ones carry 1 / (1 - p), as torch's dropout gives them.
    torch.testing.assert_close(outputs[kept], torch.full((int(kept.sum()),), 1 / (1 - p)), rtol=0, atol=0)
    reference = F.dropout(torch.ones(10, 10), p, training=True)
    assert torch.equal(reference[reference != 0].unique(), outputs[kept].unique())
    # d(sum y)/dx = keep / (1 - p): with x = 1, the output itself.
    outputs.sum().backward()
    assert torch.equal(inputs.grad, outputs.detach())


def test_the_threshold_is_p_in_steps_of_two_to_the_minus_31():
    assert DRAW_LEVELS == 2**31
    torch.manual_seed(1)
    draws = torch.empty(10**6, dtype=torch.int32).random_()
    assert int(draws.min()) >= 0  # int32 random_() draws from [0, 2^31): the comparison below is the one made
    torch.manual_seed(1)
    assert torch.equal(keep_mask(draws.shape, 0.1), draws >= round(0.1 * 2**31))


def test_the_mask_follows_the_generator():
    torch.manual_seed(3)
    first = keep_mask((64, 64), 0.1)
    torch.manual_seed(3)
    assert torch.equal(keep_mask((64, 64), 0.1), first)
    torch.manual_seed(4)
    assert not torch.equal(keep_mask((64, 64), 0.1), first)


@pytest.mark.parametrize("mask_kind", ["bool", "float", "none"])
def test_attention_with_dropout_is_the_math_by_hand(mask_kind):
    generator = torch.Generator().manual_seed(2)
    query, key, value = (torch.randn(2, 3, 5, 4, generator=generator) for _ in range(3))
    attend = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    attend[0, :, :, 3:] = False  # the first sentence's last two positions are padding
    attend[1, :, 2, :] = False  # a query row with every key masked: zeros, as SDPA gives
    mask = {"bool": attend, "float": torch.zeros(attend.shape).masked_fill(~attend, float("-inf")), "none": None}
    torch.manual_seed(7)
    keep = keep_mask((2, 3, 5, 5), 0.2)
    scores = query @ key.transpose(-2, -1) / 2.0  # 1 / sqrt(head size 4)
    if mask[mask_kind] is not None:
        scores = scores.masked_fill(~attend, float("-inf"))
    probabilities = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    expected = (probabilities * keep / 0.8) @ value

    torch.manual_seed(7)
    direct = attention_with_dropout(query, key, value, mask[mask_kind], 0.2, None)
    torch.manual_seed(7)
    with dropout_from_uniform_draws():
        through_sdpa = F.scaled_dot_product_attention(query, key, value, attn_mask=mask[mask_kind], dropout_p=0.2)
    torch.testing.assert_close(direct, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(through_sdpa, expected, rtol=1e-6, atol=1e-6)
    if mask_kind != "none":
        assert torch.equal(through_sdpa[1, :, 2], torch.zeros(3, 4))


def sdpa_causal(x):
    return F.scaled_dot_product_attention(x, x, x, dropout_p=0.3, is_causal=True)


def sdpa_over_many_keys(x):
    keys = torch.randn(2, 3, UNIFORM_ATTENTION_MAX_KEYS + 1, 4)
    return F.scaled_dot_product_attention(x, keys, keys, dropout_p=0.3)


@pytest.mark.parametrize("call", [
    lambda x: F.dropout(x, 0.3, training=False),
    lambda x: F.dropout(x, 0.0, training=True),
    lambda x: F.dropout(x.clone(), 0.3, training=True, inplace=True),
    lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.0),
    sdpa_causal,
    sdpa_over_many_keys,
    lambda x: F.gelu(x),
], ids=["eval", "rate-0", "in-place", "attention-without-dropout", "causal-attention", "long-attention",
        "other-function"])
def test_calls_it_does_not_cover_run_as_torch_runs_them(call):
    inputs = torch.randn(2, 3, 6, 4)
    torch.manual_seed(5)
    expected = call(inputs)
    torch.manual_seed(5)
    with dropout_from_uniform_draws():
        got = call(inputs)
    assert torch.equal(got, expected)


def ops_of_a_training_pass(model, batch):
    with profile(activities=[ProfilerActivity.CPU]) as trace:
        model(**batch)["loss"].backward()
    return {event.key for event in trace.key_averages()}


@pytest.fixture
def batch(tokenizer):
    sentences = ["a short one", "a sentence somewhat longer than the first of them", "the third"]
    return pad_batch(tokenizer(sentences)["input_ids"], tokenizer.pad_token_id)


def test_the_encoders_training_pass_on_cpu_draws_uniform_masks(tiny_bert, batch):
    def model(**options):
        return ContrastiveModel(copy.deepcopy(tiny_bert), "cls", build_method("simcse"), **options).train()

    uniform = ops_of_a_training_pass(model(), batch)
    assert "aten::random_" in uniform and "aten::bernoulli_" not in uniform
    assert "aten::bernoulli_" in ops_of_a_training_pass(model(uniform_dropout=False), batch)
    # Deterministic under a seed, and a dropout at all: another seed, another loss.
    losses = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        losses.append(float(model()(**batch)["loss"].detach()))
    assert losses[0] == losses[1] != losses[2]


def test_activation_checkpointing_keeps_torchs_dropout(tiny_bert, batch):
    encoder = copy.deepcopy(tiny_bert)
    enable_gradient_checkpointing(encoder)
    model = ContrastiveModel(encoder, "cls", build_method("simcse")).train()
    ops = ops_of_a_training_pass(model, batch)
    assert "aten::bernoulli_" in ops and "aten::random_" not in ops
