"""Each method's batch recipe on a tiny random BERT: the views really are what the
method says, and a few optimiser steps on a fixed batch lower its loss."""

import copy

import numpy as np
import pytest
import torch

from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.training.heads import decorrelation_projector, mlp_head
from contrastive_sentence_embeddings.training import objective
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
    # ends with its last Linear: the one batch normalisation of the output is in losses.decorrelation
    assert [m.__class__.__name__ for m in projector] == ["Linear", "BatchNorm1d", "ReLU", "Linear"]
    assert projector[0].in_features == 48 and projector[-1].out_features == 32 and projector[-1].bias is None


# --- SCD's total loss against numpy, written out from the reference formula -------------
#   loss = w_sc * mean_i cos(h_a_i, h_b_i) + w_dec * [sum_j (1 - C_jj)^2 + lambda * sum_{j!=k} C_jk^2]
#   C = bn(projector(h_a))^T bn(projector(h_b)) / N,  bn(x) = (x - mean) / sqrt(var + 1e-5) over the batch


def _bn(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5)  # biased variance, as BatchNorm1d


def _projector_by_hand(h: np.ndarray, w1, b1, w2) -> np.ndarray:
    return np.maximum(_bn(h @ w1.T + b1), 0.0) @ w2.T  # Linear, BatchNorm (gamma 1, beta 0), ReLU, Linear


def _scd_by_hand(h_a, h_b, w1, b1, w2, w_sc, w_dec, lam, normalise=_bn) -> float:
    cos = (h_a * h_b).sum(1) / (np.linalg.norm(h_a, axis=1) * np.linalg.norm(h_b, axis=1))
    p_a, p_b = _projector_by_hand(h_a, w1, b1, w2), _projector_by_hand(h_b, w1, b1, w2)
    c = normalise(p_a).T @ normalise(p_b) / len(h_a)
    on = ((1.0 - np.diag(c)) ** 2).sum()
    off = (c ** 2).sum() - (np.diag(c) ** 2).sum()
    return w_sc * cos.mean() + w_dec * (on + lam * off)


def _scd_objective(method, h_a, h_b, projector) -> dict:
    """The SCD preset's terms on two given views, with ``projector`` as its head."""
    model = torch.nn.Module()
    model.heads = torch.nn.ModuleDict({"projector": projector})
    encoded = objective.Encoded()
    encoded.tensors = {"a": h_a, "b": h_b}
    return objective.total_loss(method.terms, model, encoded)


def _fixed_projector(w1, b1, w2) -> torch.nn.Module:
    projector = decorrelation_projector(w1.shape[1], [w1.shape[0], w2.shape[0]])
    with torch.no_grad():
        projector[0].weight.copy_(torch.from_numpy(w1))
        projector[0].bias.copy_(torch.from_numpy(b1))
        projector[3].weight.copy_(torch.from_numpy(w2))
    return projector.train()


# A fixed batch of 5 sentences, hidden size 3, projector 3 -> 4 -> 3.
H_A = np.array([[0.5, -1.0, 2.0], [1.5, 0.2, -0.3], [-0.7, 0.9, 1.1], [0.3, 0.3, -1.2], [2.0, -0.4, 0.6]])
H_B = np.array([[0.4, -0.8, 2.2], [1.2, 0.5, -0.1], [-0.9, 1.0, 0.8], [0.6, 0.1, -1.0], [1.7, -0.6, 0.9]])
W1 = np.array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.3], [-0.6, 0.2, 0.1], [0.2, 0.2, 0.2]])
B1 = np.array([0.1, -0.2, 0.0, 0.3])
W2 = np.array([[0.5, -0.4, 0.3, 0.2], [-0.1, 0.6, 0.2, -0.3], [0.4, 0.1, -0.5, 0.6]])


@pytest.mark.parametrize("w_sc, w_dec, lam", [(20.0, 0.005225, 0.012), (1.0, 1.0, 0.5)])
def test_scd_total_loss_of_a_fixed_batch_by_hand(w_sc, w_dec, lam):
    method = build_method("scd", {"self_contrast_weight": w_sc, "decorrelation_weight": w_dec,
                                  "off_diagonal_weight": lam, "projector_widths": [4, 3]})
    got = _scd_objective(method, torch.tensor(H_A, dtype=torch.float32), torch.tensor(H_B, dtype=torch.float32),
                         _fixed_projector(W1.astype(np.float32), B1.astype(np.float32), W2.astype(np.float32)))
    expected = _scd_by_hand(H_A, H_B, W1, B1, W2, w_sc, w_dec, lam)
    assert float(got["loss"].detach()) == pytest.approx(expected, rel=1e-5)


def test_scd_normalises_projections_once_which_matters_for_a_low_variance_feature():
    # The projector's third output feature has a batch variance of about 1e-9, far below BatchNorm's
    # eps 1e-5: normalised once (the reference) it stays near 0, so (1 - C_33)^2 is about 1; a second
    # standardisation would scale it back to unit variance and make C_33 about 1.
    w2 = W2.copy()
    w2[2] *= 1e-4
    method = build_method("scd", {"self_contrast_weight": 1.0, "decorrelation_weight": 1.0,
                                  "off_diagonal_weight": 0.0, "projector_widths": [4, 3]})
    got = float(_scd_objective(method, torch.tensor(H_A, dtype=torch.float32), torch.tensor(H_B, dtype=torch.float32),
                               _fixed_projector(W1.astype(np.float32), B1.astype(np.float32),
                                                w2.astype(np.float32)))["loss"].detach())
    once = _scd_by_hand(H_A, H_B, W1, B1, w2, 1.0, 1.0, 0.0)
    twice = _scd_by_hand(H_A, H_B, W1, B1, w2, 1.0, 1.0, 0.0, normalise=lambda x: _bn(_bn(x)))
    assert got == pytest.approx(once, rel=1e-4)
    assert once - twice > 0.5  # the collapsed feature is penalised only with one normalisation


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
    model.heads["mlp"].register_forward_pre_hook(lambda _, inputs: captured.setdefault(len(captured), inputs[0]))
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
