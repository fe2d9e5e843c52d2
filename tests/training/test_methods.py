"""Each method's batch recipe on a tiny random BERT: the views really are what the
method says, and a few optimiser steps on a fixed batch lower its loss."""

import copy

import pytest
import torch

from contrastive_sentence_embeddings.encoding import pad_batch
from contrastive_sentence_embeddings.training.heads import decorrelation_projector, mlp_head
from contrastive_sentence_embeddings.training.methods import METHODS, ContrastiveModel, build_method

SENTENCES = [
    "the cat sat on the mat", "a dog barked at the mailman", "stock markets fell sharply today",
    "she plays the violin beautifully", "rain is expected over the weekend", "the committee approved the budget",
    "he forgot his keys at home", "the river flooded the small town",
]


@pytest.fixture
def batch(tokenizer):
    return pad_batch(tokenizer(SENTENCES)["input_ids"], tokenizer.pad_token_id)


def fresh(tiny_bert, method, **params):
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method(method, params))
    model.train()
    return model


def test_heads_are_sized_from_the_encoder():
    assert mlp_head(48)[0].weight.shape == (48, 48)
    projector = decorrelation_projector(48, [64, 32])
    assert [m.__class__.__name__ for m in projector] == ["Linear", "BatchNorm1d", "ReLU", "Linear", "BatchNorm1d"]
    assert projector[0].in_features == 48 and projector[-1].num_features == 32 and not projector[-1].affine


def test_scd_views_get_their_own_dropout_rates(tiny_bert, batch):
    model = fresh(tiny_bert, "scd", rate_a=0.05, rate_b=0.3, projector_widths=[16, 16])
    seen = []
    hooks = [module.register_forward_pre_hook(lambda m, _: seen.append(m.p))
             for module in model.encoder.modules() if isinstance(module, torch.nn.Dropout)]
    model(**batch)
    for hook in hooks:
        hook.remove()
    half = len(seen) // 2
    assert set(seen[:half]) == {0.05} and set(seen[half:]) == {0.3}
    assert {m.p for m in model.encoder.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}  # restored


def test_simcse_views_differ_only_by_dropout(tiny_bert, batch):
    model = fresh(tiny_bert, "simcse")
    captured = {}
    model.method.project = lambda m, pooled: captured.setdefault(len(captured), pooled)
    model(**batch)
    view1, view2 = captured[0], captured[1]
    assert not torch.allclose(view1, view2)  # dropout on: different views
    model.eval()
    captured.clear()
    model(**batch)
    assert torch.allclose(captured[0], captured[1], atol=1e-6)  # dropout off: identical


def test_imsimcse_third_pass_is_dropout_free_and_leaves_the_model_in_train_mode(tiny_bert, batch):
    model = fresh(tiny_bert, "imsimcse")
    outputs = []
    original = model.embed
    model.embed = lambda ids, mask: outputs.append(original(ids, mask)) or outputs[-1]
    model(**batch)
    model(**batch)
    # calls: [doubled batch, dropout-free] x 2; the dropout-free passes agree, the dropout ones do not
    assert torch.allclose(outputs[1], outputs[3], atol=1e-6)
    assert not torch.allclose(outputs[0], outputs[2])
    assert model.training and all(m.training for m in model.modules())


# The sentence family; DeCLUTR's batches: test_declutr.py, CLSR's: test_clsr.py.
@pytest.mark.parametrize("method", sorted(name for name, recipe in METHODS.items() if recipe.family == "sentences"))
def test_loss_decreases_on_a_fixed_batch(tiny_bert, batch, method):
    params = {"projector_widths": [32, 32]} if method == "scd" else {}
    model = fresh(tiny_bert, method, **params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(12):
        torch.manual_seed(1)  # the same dropout masks every step: only the weights change
        output = model(**batch)
        optimizer.zero_grad()
        output["loss"].backward()
        optimizer.step()
        losses.append(float(output["loss"]))
    assert losses[-1] < losses[0] - 0.05 * abs(losses[0]), losses
    assert set(output) > {"loss"}  # every term is logged


def test_unknown_method_or_parameter_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown method kind 'simclr'"):
        build_method("simclr")
    with pytest.raises(ValueError, match="simcse: unknown parameter\\(s\\) temprature"):
        build_method("simcse", {"temprature": 0.05})
