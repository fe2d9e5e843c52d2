"""The losses against values worked out by hand (plain-Python loops with ``math``,
independent of the implementation) and against the properties they must have."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_sentence_embeddings.training.losses import (
    cosine_similarity_matrix,
    decorrelation,
    dimension_contrastive_loss,
    info_nce,
    nt_xent,
    off_dropout_info_nce,
    self_contrast,
    standardise,
)

# Three sentences, three dimensions; two dropout views and a dropout-free pass.
Z1 = [[1.0, 0.0, 2.0], [0.0, 1.0, -1.0], [1.0, 1.0, 0.0]]
Z2 = [[1.0, 0.5, 2.0], [0.2, 1.0, -1.0], [1.0, 0.8, 0.3]]
Z_OFF = [[0.9, 0.1, 2.1], [0.1, 1.1, -0.8], [1.2, 0.9, 0.1]]


# float32 losses near 0 at tau = 0.05 (logits around 20) are exact to about 1e-6
ABS = 2e-6


def t(rows: list[list[float]], requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32, requires_grad=requires_grad)


# --- hand arithmetic -------------------------------------------------------------


def dot(u: list[float], v: list[float]) -> float:
    return sum(x * y for x, y in zip(u, v))


def cos(u: list[float], v: list[float]) -> float:
    return dot(u, v) / (math.sqrt(dot(u, u)) * math.sqrt(dot(v, v)))


def minus_log_softmax(logits: list[float], target: int) -> float:
    """-log( exp(logits[target]) / sum_k exp(logits[k]) ), written out."""
    return -logits[target] + math.log(sum(math.exp(x) for x in logits))


def standardise_by_hand(rows: list[list[float]], eps: float = 1e-5) -> list[list[float]]:
    n, d = len(rows), len(rows[0])
    out = [[0.0] * d for _ in range(n)]
    for k in range(d):
        column = [rows[i][k] for i in range(n)]
        mean = sum(column) / n
        variance = sum((x - mean) ** 2 for x in column) / n  # biased, as BatchNorm
        for i in range(n):
            out[i][k] = (column[i] - mean) / math.sqrt(variance + eps)
    return out


def correlation_by_hand(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    an, bn = standardise_by_hand(a), standardise_by_hand(b)
    n, d = len(a), len(a[0])
    return [[sum(an[i][k] * bn[i][l] for i in range(n)) / n for l in range(d)] for k in range(d)]


# --- each loss against the hand value ------------------------------------------------


def test_cosine_similarity_matrix_by_hand():
    expected = [cos(u, v) for u in Z1 for v in Z2]
    assert cosine_similarity_matrix(t(Z1), t(Z2)).flatten().tolist() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("tau", [0.05, 0.5])
def test_info_nce_by_hand(tau):
    n = len(Z1)
    expected = sum(minus_log_softmax([cos(Z1[i], Z2[j]) / tau for j in range(n)], i) for i in range(n)) / n
    assert info_nce(t(Z1), t(Z2), temperature=tau).item() == pytest.approx(expected, rel=1e-5, abs=ABS)


def test_info_nce_default_temperature_is_simcse_005():
    assert info_nce(t(Z1), t(Z2)).item() == pytest.approx(info_nce(t(Z1), t(Z2), 0.05).item())


@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_nt_xent_by_hand(tau):
    e = Z1 + Z2  # the 2N embeddings [a; b]
    n = len(Z1)
    total = 0.0
    for k in range(2 * n):
        partner = k + n if k < n else k - n
        others = [l for l in range(2 * n) if l != k]  # self excluded, partner + 2N-2 negatives
        logits = [cos(e[k], e[l]) / tau for l in others]
        total += minus_log_softmax(logits, others.index(partner))
    expected = total / (2 * n)
    assert nt_xent(t(Z1), t(Z2), temperature=tau).item() == pytest.approx(expected, rel=1e-5, abs=ABS)


@pytest.mark.parametrize(("m", "tau"), [(0.9, 0.05), (0.5, 0.5), (1.0, 0.2)])
def test_off_dropout_info_nce_by_hand(m, tau):
    n = len(Z1)
    reference, view1 = 0.0, 0.0
    for i in range(n):
        positive = m * cos(Z1[i], Z2[i]) / tau
        # reference code: negatives between dropout-free embeddings z_off_i, z_off_j
        negatives = [cos(Z_OFF[i], Z_OFF[j]) / tau for j in range(n) if j != i]
        reference += -positive + math.log(math.exp(positive) + sum(math.exp(x) for x in negatives))
        # variant: negatives anchored at the dropout view z1_i
        negatives = [cos(Z1[i], Z_OFF[j]) / tau for j in range(n) if j != i]
        view1 += -positive + math.log(math.exp(positive) + sum(math.exp(x) for x in negatives))
    got = off_dropout_info_nce(t(Z1), t(Z2), t(Z_OFF), m=m, temperature=tau)
    assert got.item() == pytest.approx(reference / n, rel=1e-5, abs=ABS)
    got = off_dropout_info_nce(t(Z1), t(Z2), t(Z_OFF), m=m, temperature=tau, negative_anchor="view1")
    assert got.item() == pytest.approx(view1 / n, rel=1e-5, abs=ABS)


def test_off_dropout_info_nce_defaults_are_m_09_tau_005():
    assert off_dropout_info_nce(t(Z1), t(Z2), t(Z_OFF)).item() == pytest.approx(
        off_dropout_info_nce(t(Z1), t(Z2), t(Z_OFF), m=0.9, temperature=0.05).item()
    )


def test_off_dropout_info_nce_rejects_an_unknown_anchor():
    with pytest.raises(ValueError, match="negative_anchor"):
        off_dropout_info_nce(t(Z1), t(Z2), t(Z_OFF), negative_anchor="z2")


@pytest.mark.parametrize("tau", [5.0, 0.5])
def test_dimension_contrastive_loss_by_hand(tau):
    correlation = correlation_by_hand(Z1, Z2)
    d = len(correlation)
    expected = sum(minus_log_softmax([correlation[k][l] / tau for l in range(d)], k) for k in range(d)) / d
    got = dimension_contrastive_loss(t(Z1), t(Z2), temperature=tau).item()
    assert got == pytest.approx(expected, rel=1e-5, abs=ABS)


def test_dimension_contrastive_loss_default_temperature_is_5():
    assert dimension_contrastive_loss(t(Z1), t(Z2)).item() == pytest.approx(
        dimension_contrastive_loss(t(Z1), t(Z2), temperature=5.0).item()
    )


def test_self_contrast_by_hand():
    expected = sum(cos(a, b) for a, b in zip(Z1, Z2)) / len(Z1)
    assert self_contrast(t(Z1), t(Z2)).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("weight", [0.012, 1.0])
def test_decorrelation_by_hand(weight):
    c = correlation_by_hand(Z1, Z2)
    d = len(c)
    on = sum((1.0 - c[j][j]) ** 2 for j in range(d))
    off = sum(c[j][k] ** 2 for j in range(d) for k in range(d) if j != k)
    got = decorrelation(t(Z1), t(Z2), off_diagonal_weight=weight).item()
    assert got == pytest.approx(on + weight * off, rel=1e-5, abs=ABS)


def test_standardise_matches_batchnorm_without_affine():
    x = torch.randn(16, 5) * 3 + 2
    batchnorm = torch.nn.BatchNorm1d(5, affine=False).train()
    torch.testing.assert_close(standardise(x), batchnorm(x))


# --- properties ------------------------------------------------------------------------


def test_info_nce_prefers_aligned_views_over_shuffled_ones():
    z = torch.eye(3) * 2.0  # perfectly separated sentences
    shuffled = z[[1, 2, 0]]
    assert info_nce(z, z) < info_nce(z, shuffled)
    assert info_nce(z, z).item() < 1e-6  # cos 1 against cos 0 at tau 0.05: exp(-20) * 2


def test_nt_xent_is_symmetric_in_its_arguments():
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=generator), torch.randn(5, 7, generator=generator)
    assert nt_xent(a, b, 0.1).item() == pytest.approx(nt_xent(b, a, 0.1).item(), rel=1e-6)


def test_off_dropout_info_nce_reduces_to_info_nce():
    generator = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(6, 4, generator=generator), torch.randn(6, 4, generator=generator)
    # negatives anchored at z1: with m = 1 and z_off = z2 it is SimCSE's InfoNCE exactly
    got = off_dropout_info_nce(z1, z2, z2, m=1.0, temperature=0.05, negative_anchor="view1")
    assert got.item() == pytest.approx(info_nce(z1, z2, 0.05).item(), rel=1e-5, abs=ABS)
    # the reference form (negatives among z_off) agrees when all three passes coincide
    got = off_dropout_info_nce(z1, z1, z1, m=1.0, temperature=0.05)
    assert got.item() == pytest.approx(info_nce(z1, z1, 0.05).item(), rel=1e-5, abs=ABS)


def test_self_contrast_of_identical_views_is_one():
    z = torch.randn(4, 6)
    assert self_contrast(z, z).item() == pytest.approx(1.0, abs=1e-6)
    assert self_contrast(z, -z).item() == pytest.approx(-1.0, abs=1e-6)


def test_decorrelation_of_identical_decorrelated_standardised_features_is_zero():
    # columns with zero mean, unit (biased) variance and no correlation: C = I
    p = t([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    assert decorrelation(p, p, off_diagonal_weight=0.5).item() == pytest.approx(0.0, abs=1e-8)
    # correlated columns are penalised off the diagonal only through the weight
    q = t([[1.0, 1.0], [1.0, 1.0], [-1.0, -1.0], [-1.0, -1.0]])
    assert decorrelation(q, q, off_diagonal_weight=0.0).item() == pytest.approx(0.0, abs=1e-8)
    assert decorrelation(q, q, off_diagonal_weight=0.5).item() == pytest.approx(0.5 * 2, rel=1e-4)


def test_dimension_contrastive_loss_is_invariant_to_per_dimension_affine_scaling():
    generator = torch.Generator().manual_seed(2)
    z1, z2 = torch.randn(8, 4, generator=generator), torch.randn(8, 4, generator=generator)
    scale = torch.tensor([3.0, 0.5, 10.0, 1.7])
    shift = torch.tensor([-2.0, 4.0, 0.3, 100.0])
    base = dimension_contrastive_loss(z1, z2).item()
    assert dimension_contrastive_loss(z1 * scale + shift, z2).item() == pytest.approx(base, rel=1e-4)
    assert dimension_contrastive_loss(z1, z2 * scale - shift).item() == pytest.approx(base, rel=1e-4)


LOSSES = {
    "info_nce": lambda a, b, c: info_nce(a, b),
    "nt_xent": lambda a, b, c: nt_xent(a, b, 0.05),
    "off_dropout_info_nce": lambda a, b, c: off_dropout_info_nce(a, b, c),
    "dimension_contrastive_loss": lambda a, b, c: dimension_contrastive_loss(a, b),
    "self_contrast": lambda a, b, c: self_contrast(a, b),
    "decorrelation": lambda a, b, c: decorrelation(a, b, 0.012),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("width", [3, 17])
def test_gradients_flow_and_losses_are_finite_for_batch_size_two(name, width):
    generator = torch.Generator().manual_seed(3)
    a, b, c = (torch.randn(2, width, generator=generator).requires_grad_() for _ in range(3))
    loss = LOSSES[name](a, b, c)
    assert loss.dim() == 0 and loss.dtype == torch.float32
    assert torch.isfinite(loss)
    loss.backward()
    assert a.grad is not None and b.grad is not None
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    if name == "off_dropout_info_nce":
        assert c.grad is not None and torch.isfinite(c.grad).all()


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_mismatched_views_are_rejected(name):
    with pytest.raises(ValueError):
        LOSSES[name](torch.randn(3, 4), torch.randn(2, 4), torch.randn(3, 4))


def _inputs(device: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(4)
    return tuple(
        (torch.randn(8, 16, generator=generator) * 2).to(dtype).to(device).requires_grad_() for _ in range(3)
    )


def _check_under_autocast(device: str, dtype: torch.dtype) -> None:
    low = _inputs(device, dtype)
    full = tuple(x.detach().float().cpu() for x in low)  # the same (rounded) numbers in float32
    for name, loss_of in LOSSES.items():
        with torch.autocast(device_type=device, dtype=dtype):
            loss = loss_of(*low)
        assert loss.dtype == torch.float32, name
        expected = loss_of(*full)
        assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-5), name
        loss.backward()
        assert all(torch.isfinite(x.grad).all() for x in low[:2]), name
        for x in low:
            x.grad = None


def test_losses_are_float32_under_cpu_bfloat16_autocast():
    _check_under_autocast("cpu", torch.bfloat16)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_losses_are_float32_on_cuda_under_autocast(dtype):
    _check_under_autocast("cuda", dtype)
