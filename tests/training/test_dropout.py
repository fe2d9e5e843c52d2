"""Dropout control on real (tiny, randomly initialised) transformers models."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, load_tokenizer
from contrastive_sentence_embeddings.training.dropout import (
    dropout_modules,
    dropout_off,
    dropout_rate,
    dropout_rates,
)

SENTENCES = [
    "A man is playing a guitar on the street.",
    "Two dogs run across the snowy field.",
    "The committee postponed its decision until next spring.",
    "She reads.",
    "Contrastive learning pulls two views of a sentence together.",
    "A child is eating an apple while sitting on a bench in the park.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(DEFAULT_ENCODER)


@pytest.fixture(scope="module")
def batch(tokenizer):
    return dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))


def tiny_bert(tokenizer, **config) -> nn.Module:
    torch.manual_seed(0)
    bert_config = transformers.BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        **config,
    )
    return transformers.BertModel(bert_config).train()


@pytest.fixture
def model(tokenizer):
    return tiny_bert(tokenizer)


def forward(model: nn.Module, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).last_hidden_state


def snapshot(model: nn.Module) -> tuple[dict[str, float], dict[str, bool]]:
    """Every controlled rate and every submodule's train flag."""
    return dropout_rates(model), {name: module.training for name, module in model.named_modules()}


# --- what is covered ---------------------------------------------------------------------


def test_every_bert_dropout_is_found(model):
    rates = dropout_rates(model)
    modules = dict(dropout_modules(model))
    # embeddings + per layer: attention probabilities, attention output, FFN output
    assert len(modules) == 1 + 3 * 2
    assert {f"{name}.p" for name in modules} <= set(rates)
    assert "encoder.layer.0.attention.self.dropout.p" in rates  # the attention-probability rate
    assert rates["config.attention_probs_dropout_prob"] == pytest.approx(0.1)
    assert set(rates.values()) == {0.1}


# --- dropout_rate ------------------------------------------------------------------------------


def test_rate_zero_makes_train_mode_deterministic(model, batch):
    assert model.training
    with dropout_rate(model, 0.0):
        first, second = forward(model, batch), forward(model, batch)
        assert model.training
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    model.eval()
    torch.testing.assert_close(first, forward(model, batch))


def test_rate_half_makes_passes_differ_and_sets_every_rate(model, batch):
    with dropout_rate(model, 0.5) as same:
        assert same is model
        first, second = forward(model, batch), forward(model, batch)
        assert set(dropout_rates(model).values()) == {0.5}
        assert all(module.p == 0.5 for _, module in dropout_modules(model))
        for layer in model.encoder.layer:  # the attention-probability rate BERT passes to SDPA
            assert layer.attention.self.dropout.p == 0.5
    assert not torch.allclose(first, second)


def test_rates_are_restored_on_exit_and_on_error(model, batch):
    before = snapshot(model)
    with dropout_rate(model, 0.5):
        forward(model, batch)
    assert snapshot(model) == before
    with pytest.raises(RuntimeError, match="boom"):
        with dropout_rate(model, 0.0):
            assert set(dropout_rates(model).values()) == {0.0}
            raise RuntimeError("boom")
    assert snapshot(model) == before


def test_nested_rates_restore_the_enclosing_rate(model):
    with dropout_rate(model, 0.3):
        with dropout_rate(model, 0.05):
            assert set(dropout_rates(model).values()) == {0.05}
        assert set(dropout_rates(model).values()) == {0.3}
    assert set(dropout_rates(model).values()) == {0.1}


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_out_of_range_rates_are_rejected_and_nothing_changes(model, p):
    before = snapshot(model)
    with pytest.raises(ValueError, match="dropout rate"):
        with dropout_rate(model, p):
            pass
    assert snapshot(model) == before


def _zeroed_fraction(module: nn.Module, run) -> float:
    """Fraction of the non-zero inputs of ``module`` that its output zeroed."""
    counts = {"zeroed": 0, "total": 0}

    def hook(_module, inputs, output):
        alive = inputs[0] != 0
        counts["zeroed"] += int((output[alive] == 0).sum())
        counts["total"] += int(alive.sum())

    handle = module.register_forward_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return counts["zeroed"] / counts["total"]


@pytest.mark.parametrize("p", [0.3, 0.05])
def test_the_rate_is_the_fraction_of_activations_dropped(model, batch, p):
    target = model.encoder.layer[0].output.dropout
    torch.manual_seed(1)

    def run():
        for _ in range(10):
            forward(model, batch)

    with dropout_rate(model, p):
        fraction = _zeroed_fraction(target, run)
    # about 10 x 6 x 16 x 32 = 30k activations: the standard error is below 0.003
    assert fraction == pytest.approx(p, abs=0.02)


@pytest.mark.parametrize("p", [0.3, 0.05])
def test_the_attention_probability_rate_is_controlled(tokenizer, batch, p):
    # eager attention returns the attention probabilities after dropout
    model = tiny_bert(tokenizer, attn_implementation="eager")
    keys = batch["attention_mask"].bool()[:, None, None, :]  # (B, 1, 1, K): real tokens
    torch.manual_seed(2)
    zeroed = total = 0
    with dropout_rate(model, p), torch.no_grad():
        for _ in range(10):
            for probabilities in model(**batch, output_attentions=True).attentions:
                valid = keys.expand_as(probabilities)
                zeroed += int((probabilities[valid] == 0).sum())
                total += int(valid.sum())
    assert zeroed / total == pytest.approx(p, abs=0.02)


# --- float rate attributes (decoder-style attention) -------------------------------------


@pytest.fixture
def tiny_llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        attention_dropout=0.2,
    )
    return transformers.LlamaModel(config).train()


def test_float_attention_rates_are_controlled(tiny_llama):
    """Llama has no dropout module at all: its only dropout is the float
    ``self_attn.attention_dropout`` passed to the attention function."""
    assert dropout_modules(tiny_llama) == []
    labels = {"layers.0.self_attn.attention_dropout", "layers.1.self_attn.attention_dropout"}
    assert labels <= set(dropout_rates(tiny_llama))
    ids = torch.randint(0, 100, (3, 9), generator=torch.Generator().manual_seed(0))
    before = snapshot(tiny_llama)
    with torch.no_grad():
        with dropout_rate(tiny_llama, 0.5):
            assert {tiny_llama.layers[i].self_attn.attention_dropout for i in (0, 1)} == {0.5}
            noisy = [tiny_llama(input_ids=ids).last_hidden_state for _ in range(2)]
        with dropout_rate(tiny_llama, 0.0):
            clean = [tiny_llama(input_ids=ids).last_hidden_state for _ in range(2)]
        with dropout_off(tiny_llama):
            off = tiny_llama(input_ids=ids).last_hidden_state
    assert not torch.allclose(*noisy)
    torch.testing.assert_close(*clean, rtol=0, atol=0)
    torch.testing.assert_close(off, clean[0])
    assert snapshot(tiny_llama) == before


def test_torch_multihead_attention_dropout_is_a_rate():
    layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.1)
    rates = dropout_rates(layer)
    assert rates["self_attn.dropout"] == pytest.approx(0.1)  # a float, not a module
    with dropout_rate(layer, 0.4):
        assert layer.self_attn.dropout == 0.4
    assert layer.self_attn.dropout == pytest.approx(0.1)


def test_layerdrop_and_non_float_attributes_are_not_rates():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.layerdrop = 0.2
            self.drop_path_rate = 0.1
            self.num_dropout_layers = 1
            self.use_dropout = True
            self.attn_drop = 0.3
            self.dropout_p = 0.25

    rates = dropout_rates(Block())
    assert rates == {"attn_drop": 0.3, "dropout_p": 0.25}


# --- dropout_off -------------------------------------------------------------------------------


class WithProjector(nn.Module):
    """An encoder with a BatchNorm projector, as SCD and ImSimCSE train."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.projector = nn.Sequential(nn.Linear(32, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.1))

    def forward(self, **batch):
        return self.projector(self.encoder(**batch).last_hidden_state[:, 0])


def test_dropout_off_is_deterministic_and_equals_eval_mode(model, batch):
    with dropout_off(model) as same:
        assert same is model
        assert model.training
        first, second = forward(model, batch), forward(model, batch)
        assert set(dropout_rates(model).values()) == {0.0}
        assert not any(module.training for _, module in dropout_modules(model))
    torch.testing.assert_close(first, second, rtol=0, atol=0)
    model.eval()
    torch.testing.assert_close(first, forward(model, batch))


def test_evaluating_only_dropout_modules_is_not_enough_in_bert(model, batch):
    """Why ``dropout_off`` zeroes the rates too: BERT's attention-probability dropout
    is gated by the attention module's train flag, not the dropout module's."""
    reference = forward(model.eval(), batch)
    model.train()
    for _, module in dropout_modules(model):
        module.eval()
    assert not torch.allclose(forward(model, batch), reference)


def test_dropout_off_keeps_batchnorm_training_and_restores_everything(tokenizer, batch):
    wrapper = WithProjector(tiny_bert(tokenizer)).train()
    wrapper.encoder.embeddings.dropout.eval()  # a mixed state must come back as it was
    batchnorm = wrapper.projector[1]
    before = snapshot(wrapper)
    tracked = int(batchnorm.num_batches_tracked)
    with dropout_off(wrapper):
        assert wrapper.training and batchnorm.training
        with torch.no_grad():
            wrapper(**batch)
    assert int(batchnorm.num_batches_tracked) == tracked + 1  # batch statistics were used
    assert snapshot(wrapper) == before
    assert wrapper.encoder.embeddings.dropout.training is False
    assert wrapper.projector[3].training is True

    with pytest.raises(KeyError):
        with dropout_off(wrapper):
            raise KeyError("boom")
    assert snapshot(wrapper) == before


def test_dropout_off_in_eval_mode_stays_in_eval_mode(model, batch):
    model.eval()
    before = snapshot(model)
    with dropout_off(model):
        assert not model.training
        forward(model, batch)
    assert snapshot(model) == before
