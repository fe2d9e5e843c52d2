"""Contrastive and decorrelation losses of the reproduced methods, as pure functions
of embedding tensors.

Every function takes ``(N, d)`` embeddings of any width ``d`` (rows are sentences),
returns a scalar float32 tensor that is *minimised*, and keeps the autograd graph.
Similarities, standardisation, softmax and log-sum-exp are computed in float32 with
autocast switched off locally, so the losses behave the same on CPU and CUDA and
inside ``torch.autocast`` (fp16/bf16 inputs are upcast; gradients still reach
them).

Building blocks shared by the losses:

* ``cosine_similarity_matrix(a, b)[i, j] = cos(a_i, b_j)``;
* ``standardise(x)``: each column (dimension) to zero mean and unit variance over
  the batch, ``(x - mean) / sqrt(var + eps)`` with the biased variance, i.e. what
  ``BatchNorm1d(d, affine=False)`` does in training mode (the reference codes of
  SCD and ImSimCSE both use exactly that module).

Notation: ``s(u, v) = cos(u, v)``, ``tau`` a temperature, ``CE(logits, k)`` the
cross-entropy ``-log softmax(logits)_k``.

Sources checked (formulas below follow the papers' reference code where the paper
text could not be read here)
------------------------------------------------------------------------------

ImSimCSE / SimCSE++ (Xu, Shao, Chen, Liu, "SimCSE++: Improving Contrastive Learning
for Sentence Embeddings from Two Perspectives", EMNLP 2023; arXiv 2305.13192, first
titled "ImSimCSE"). Reference code github.com/Jiahao004/SimCSE-plus-plus.

Which version we follow, and why. The repository's history (read at its head,
51d2db55cf6009445558c9c9912ec887b6eb94a4 of 2024-01-22, a README edit) has three
versions of the full model's code, ``simcse/models_re_vicreg.py`` with
``train_re_vicreg.py``, run by ``run_re_vicreg.sh`` (the README's "SimCSE++"
command, last changed in 19036b624fab1e913432d5b1b438088b9d50cc9d, 2022-09-25,
which passes ``--pos_ratio 1`` and no loss switches):

* 899e49b7be62b1b841a06ef4100ed84736795c34 (2022-09-21; ``train_re_vicreg.py`` at
  24b0c5bd8a519761026eea91488dae92b74166a7): off-dropout negatives and DCL always
  on; the script's defaults ``pos_ratio 0.9``, ``sw_temp 5``, ``sw_weight 0.1``. **This is the version we
  follow**, with ``simcse/models_re.py`` of the same commit (off-dropout alone,
  ``run_re.sh`` with ``pos_ratio 0.9``; its ``train_re.py``, a52ea2d, was deleted
  in 4febaee on 2022-11-10).
* 4c36662 / da767c4 (2022-11-10): both terms become options that default *off*
  (``sampling_strategy "None"``: plain InfoNCE; ``sw_weight -1``: no DCL); when
  switched on (``off_dropout``, ``sw_sampling_strategy "None"`` with a positive
  weight) their formulas are the ones below.
* c171daa / 295e38e (2022-12-23, unchanged at the head): the DCL term is commented
  out, and ``sampling_strategy`` still defaults to ``"None"``, so
  ``run_re_vicreg.sh`` at the head trains plain unsupervised SimCSE (InfoNCE).

We follow the September 2022 code because it is the only released version in which
the README's SimCSE++ command trains what the paper describes (off-dropout negatives
*and* the dimension-wise term); the head's defaults would reproduce SimCSE, not
SimCSE++. The formulas are the same in every version where a term is active, so
this choice fixes which terms are on and their defaults, not their maths:

* off-dropout sampling: the dropout modules are put in eval mode and the batch is
  encoded once more, giving ``z0``; the loss is ``mean_i [ -m s(z1_i, z2_i)/tau +
  logsumexp( {m s(z1_i, z2_i)/tau} U {s(z0_i, z0_j)/tau : j != i} ) ]``. So the
  negatives are pairs of *dropout-free* embeddings (``z0_i`` against ``z0_j``, not
  ``z1_i`` against ``z0_j``), the positive (both sides with dropout) stays in the
  denominator, and ``m`` (``pos_ratio``) multiplies the positive's *logit*, not the
  negatives. ``pos_ratio`` defaults to 0.9 in the scripts' Python defaults and in
  ``run_re.sh`` (off-dropout alone), while ``run_re_vicreg.sh`` (off-dropout + DCL,
  i.e. full SimCSE++) passes 1.
* dimension-wise contrastive learning (DCL): ``D = bn(z1)^T bn(z2) / N`` with
  ``bn = BatchNorm1d(d, affine=False)`` (batch statistics), loss
  ``mean_k [ -D_kk/tau + logsumexp_l D_kl/tau ]`` with ``tau = sw_temp = 5`` and
  weight ``sw_weight = 0.1`` on top of the sentence-level loss; the help text says
  "5 if it is SW with DE, 20 if soft whitening only". It is applied to the two
  dropout views ``z1, z2`` (after the MLP).

SCD (Klein and Nabi, "SCD: Self-Contrastive Decorrelation for Sentence
Embeddings", ACL 2022; arXiv 2203.07847). Reference code
github.com/SAP-samples/acl2022-self-contrastive-decorrelation, ``scd/models.py``
(``cl_forward``) and the README's "settings as in paper" command
(``--task_alpha=1 --task_beta=0.005225 --task_lambda=0.012 --temp=0.05
--hidden_dropout_prob=0.05 --hidden_dropout_prob_noise=0.155``, projector
``4096-4096-4096``); ``scd/models.py`` as of its only commit ca8efb8 (2022-03-23),
unchanged at the head read, fb1438af42aba5c7622b99630caf96f427b7a533 (2025-03-10).
The projector (``cls.projector``) ends with a Linear; the batch normalisation
``cls.bn`` is a separate module applied once, which is why ``decorrelation`` below
standardises its inputs and ``heads.decorrelation_projector`` does not::

    c = bn(projector(h_a)).T @ bn(projector(h_b)) / N        # bn: BatchNorm1d(affine=False), applied once
    decorrelation = sum_j (c_jj - 1)^2 + task_lambda * sum_{j != k} c_jk^2
    self_contrast = mean_i cos(h_a_i, h_b_i) / temp          # SimCSE's Similarity divides by temp
    loss = task_alpha * self_contrast + task_beta * decorrelation

Reconciliation with the paper's hyper-parameters. The paper reports the
decorrelation weight alpha = 0.005 and the off-diagonal weight lambda = 0.013 (as
summarised for this project; the paper's text itself could not be retrieved
here), with ``L = L_self-contrast + alpha * L_decorrelation``. The released command
uses task_beta = 0.005225 (the paper's alpha, rounded to 0.005 there) and
task_lambda = 0.012 (close to, but not the same as, 0.013). In addition the code's
self-contrast term is a mean cosine *divided by temp = 0.05*, i.e. 20 times
``self_contrast`` below. In this module's terms the reference loss is therefore::

    (1 / 0.05) * self_contrast(h_a, h_b) + 0.005225 * decorrelation(p_a, p_b, 0.012)
      = 20 * [ self_contrast(h_a, h_b) + 2.6125e-4 * decorrelation(p_a, p_b, 0.012) ]

The overall factor 20 only rescales the loss (Adam/AdamW updates are invariant to
it up to their epsilon), but the *ratio* matters: relative to a plain mean cosine
the decorrelation weight that was actually trained with is beta * temp = 2.6e-4,
twenty times smaller than a literal reading of "alpha = 0.005" with an unscaled
cosine. To reproduce the released model use weight ``1/temp`` (or 1) on
``self_contrast`` and ``0.005225`` (or ``0.005225 * temp``) on ``decorrelation``
with ``off_diagonal_weight=0.012``; ``self_contrast`` is mean-reduced over the batch
and ``decorrelation`` is a sum over the d x d matrix, as in the code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
import torch.nn.functional as F

__all__ = [
    "cosine_similarity_matrix",
    "decorrelation",
    "dimension_contrastive_loss",
    "info_nce",
    "nt_xent",
    "off_dropout_info_nce",
    "self_contrast",
    "standardise",
]

_NORM_EPS = 1e-8
_BATCHNORM_EPS = 1e-5  # torch.nn.BatchNorm1d's default


@contextmanager
def _float32(*tensors: torch.Tensor) -> Iterator[None]:
    """Run the block with autocast switched off on the tensors' device types, so that
    matmuls and softmaxes on float32 copies stay float32 inside an autocast region."""
    with ExitStack() as stack:
        for device_type in sorted({tensor.device.type for tensor in tensors}):
            try:
                stack.enter_context(torch.autocast(device_type=device_type, enabled=False))
            except RuntimeError:  # a device type autocast does not know: nothing to switch off
                pass
        yield


def _check_pair(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"{what}: expected two (N, d) matrices, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape != b.shape:
        raise ValueError(f"{what}: the two views differ in shape, {tuple(a.shape)} vs {tuple(b.shape)}")


def _unit(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x.float(), p=2.0, dim=-1, eps=_NORM_EPS)


def cosine_similarity_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``S[i, j] = cos(a_i, b_j) = <a_i, b_j> / (||a_i|| ||b_j||)`` as a float32
    ``(N, M)`` matrix (rows are L2-normalised with eps 1e-8, so a zero row gives 0)."""
    with _float32(a, b):
        return _unit(a) @ _unit(b).transpose(0, 1)


def standardise(x: torch.Tensor, eps: float = _BATCHNORM_EPS) -> torch.Tensor:
    """Each dimension (column) of ``x`` standardised over the batch:
    ``(x - mean) / sqrt(var + eps)`` with the biased variance, in float32; the same
    as ``BatchNorm1d(d, affine=False)`` in training mode."""
    with _float32(x):
        x = x.float()
        centred = x - x.mean(dim=0, keepdim=True)
        variance = centred.pow(2).mean(dim=0, keepdim=True)
        return centred / torch.sqrt(variance + eps)


def _cross_correlation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``C = standardise(a)^T standardise(b) / N``, a float32 ``(d, d)`` matrix."""
    with _float32(a, b):
        return standardise(a).transpose(0, 1) @ standardise(b) / a.shape[0]


def info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.05) -> torch.Tensor:
    """Unsupervised SimCSE's InfoNCE loss (Gao, Yao and Chen, "SimCSE: Simple
    Contrastive Learning of Sentence Embeddings", EMNLP 2021, eq. 1).

    ``z1_i`` and ``z2_i`` are two views (two dropout masks) of sentence i; every
    ``z2_j`` with j != i is a negative for ``z1_i``::

        sim_ij = cos(z1_i, z2_j) / tau
        loss   = mean_i CE(sim_i, i) = mean_i [ -sim_ii + log sum_j exp(sim_ij) ]

    Minimised; mean over the N anchors; not symmetrised (anchors come from ``z1``).
    """
    _check_pair(z1, z2, "info_nce")
    with _float32(z1, z2):
        logits = cosine_similarity_matrix(z1, z2) / temperature
        targets = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, targets)


def nt_xent(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric NT-Xent loss (Chen et al., "A Simple Framework for Contrastive
    Learning of Visual Representations" (SimCLR), ICML 2020), as used by DeCLUTR
    (anchors vs. averaged positives) and CLSR (pairs).

    Over the 2N embeddings ``e = [a; b]`` the positive of ``e_k`` is its partner
    ``p(k)`` (``a_i`` <-> ``b_i``) and the negatives are the other 2N - 2
    embeddings; ``e_k`` itself is excluded from the softmax::

        sim_kl = cos(e_k, e_l) / tau
        loss   = mean_{k=1..2N} [ -sim_{k,p(k)} + log sum_{l != k} exp(sim_kl) ]

    Minimised; mean over all 2N embeddings, so ``nt_xent(a, b) == nt_xent(b, a)``.
    """
    _check_pair(a, b, "nt_xent")
    n = a.shape[0]
    with _float32(a, b):
        both = torch.cat([a, b], dim=0)
        logits = cosine_similarity_matrix(both, both) / temperature
        self_mask = torch.eye(2 * n, dtype=torch.bool, device=logits.device)
        logits = logits.masked_fill(self_mask, float("-inf"))
        index = torch.arange(n, device=logits.device)
        targets = torch.cat([index + n, index])
        return F.cross_entropy(logits, targets)


def off_dropout_info_nce(
    z1: torch.Tensor,
    z2: torch.Tensor,
    z_off: torch.Tensor,
    m: float = 0.9,
    temperature: float = 0.05,
    negative_anchor: str = "off",
) -> torch.Tensor:
    """ImSimCSE's off-dropout contrastive loss (Xu et al., "SimCSE++: Improving
    Contrastive Learning for Sentence Embeddings from Two Perspectives", EMNLP 2023,
    arXiv 2305.13192 "ImSimCSE"; reference code Jiahao004/SimCSE-plus-plus).

    The positive pair ``(z1_i, z2_i)`` comes from two passes with dropout; the
    negatives come from a dropout-free pass ``z_off`` of the same batch, so they carry
    no dropout noise. ``m`` multiplies the positive's logit (``pos_ratio`` in the
    reference code), and the positive stays in the denominator::

        pos_i  = m * cos(z1_i, z2_i) / tau
        neg_ij = cos(z_off_i, z_off_j) / tau        (negative_anchor="off", j != i)
               = cos(z1_i,    z_off_j) / tau        (negative_anchor="view1", j != i)
        loss   = mean_i [ -pos_i + log( exp(pos_i) + sum_{j != i} exp(neg_ij) ) ]

    ``negative_anchor="off"`` (default) is the reference code: both sides of every
    negative pair are dropout-free. ``"view1"`` anchors the negatives at ``z1_i``
    instead; with ``m = 1`` and ``z_off = z2`` it is exactly ``info_nce(z1, z2)``.
    The reference default is ``m = 0.9`` (off-dropout SimCSE); its full ImSimCSE
    script (off-dropout + DCL) uses ``m = 1``. Minimised; mean over the N anchors.
    ``z_off`` is normally computed with ``dropout.dropout_off(model)``; whether it
    carries gradient is the caller's choice (the reference code keeps it).
    """
    _check_pair(z1, z2, "off_dropout_info_nce")
    _check_pair(z1, z_off, "off_dropout_info_nce")
    if negative_anchor not in ("off", "view1"):
        raise ValueError(f"negative_anchor must be 'off' or 'view1', not {negative_anchor!r}")
    with _float32(z1, z2, z_off):
        positive = m * (_unit(z1) * _unit(z2)).sum(dim=-1) / temperature
        anchors = z_off if negative_anchor == "off" else z1
        logits = cosine_similarity_matrix(anchors, z_off) / temperature
        diagonal = torch.eye(logits.shape[0], dtype=torch.bool, device=logits.device)
        logits = torch.where(diagonal, positive.unsqueeze(1).expand_as(logits), logits)
        targets = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, targets)


def dimension_contrastive_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 5.0) -> torch.Tensor:
    """ImSimCSE's dimension-wise contrastive learning (DCL; Xu et al., EMNLP 2023,
    see ``off_dropout_info_nce``; reference ``dcl_loss`` in ``models_re_vicreg.py``).

    Each dimension is standardised over the batch (``standardise``, i.e.
    ``BatchNorm1d(affine=False)``: zero mean, unit biased variance, eps 1e-5); the
    d x d correlation between the dimensions of the two views is
    ``D = standardise(z1)^T standardise(z2) / N`` and dimension k of view 1 must pick
    out dimension k of view 2 among all d dimensions::

        loss = mean_k CE(D_k / tau, k) = mean_k [ -D_kk/tau + log sum_l exp(D_kl/tau) ]

    The reference uses ``tau = 5`` with weight 0.1 next to the sentence-level loss.
    Minimised; mean over the d dimensions. Invariant to a per-dimension positive
    affine rescaling of either view (up to the 1e-5 eps). Needs N >= 2.
    """
    _check_pair(z1, z2, "dimension_contrastive_loss")
    with _float32(z1, z2):
        logits = _cross_correlation(z1, z2) / temperature
        targets = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, targets)


def self_contrast(h_a: torch.Tensor, h_b: torch.Tensor) -> torch.Tensor:
    """SCD's self-contrastive term (Klein and Nabi, "SCD: Self-Contrastive
    Decorrelation for Sentence Embeddings", ACL 2022)::

        loss = mean_i cos(h_a_i, h_b_i)

    where ``h_a`` and ``h_b`` are the same sentences encoded with a low and a high
    dropout rate. It is *minimised*, i.e. it pushes the two views of a sentence
    apart (the decorrelation term keeps them informative). Mean over the batch. The
    reference code divides this by its temperature 0.05; see the module docstring.
    """
    _check_pair(h_a, h_b, "self_contrast")
    with _float32(h_a, h_b):
        return (_unit(h_a) * _unit(h_b)).sum(dim=-1).mean()


def decorrelation(p_a: torch.Tensor, p_b: torch.Tensor, off_diagonal_weight: float) -> torch.Tensor:
    """SCD's feature decorrelation on projector outputs (Klein and Nabi, ACL 2022;
    the Barlow Twins objective of Zbontar et al., ICML 2021)::

        C    = standardise(p_a)^T standardise(p_b) / N        (d x d)
        loss = sum_j (1 - C_jj)^2 + lambda * sum_{j != k} C_jk^2

    with ``standardise`` = ``BatchNorm1d(affine=False)`` in training mode over the
    batch (``(p - mean) / sqrt(var + 1e-5)``, biased variance) and
    ``lambda = off_diagonal_weight`` (0.012 in the SCD reference command, 0.013 in
    the paper). Minimised; a *sum* over the matrix entries (not a mean), as in the
    reference code. Needs N >= 2.

    ``p_a`` and ``p_b`` are the *raw* projector outputs (the last Linear of
    ``heads.decorrelation_projector``): the standardisation here is the reference
    code's ``cls.bn`` and must be the only one. Inputs that were batch-normalised
    already would be standardised twice; that differs from the reference when a
    feature's batch variance is small against the eps (BatchNorm's output then has
    a variance of about ``var / (var + eps)`` << 1, which a second standardisation
    would blow back up to 1, hiding the collapsed feature from ``(1 - C_jj)^2``).
    """
    _check_pair(p_a, p_b, "decorrelation")
    with _float32(p_a, p_b):
        c = _cross_correlation(p_a, p_b)
        diagonal_mask = torch.eye(c.shape[0], dtype=torch.bool, device=c.device)
        on_diagonal = (1.0 - torch.diagonal(c)).pow(2).sum()
        off_diagonal = c.masked_fill(diagonal_mask, 0.0).pow(2).sum()
        return on_diagonal + off_diagonal_weight * off_diagonal


def clsr_loss(network, projection, first: torch.Tensor, second: torch.Tensor, temperature: float = 0.1,
              gather=None) -> torch.Tensor:
    """CLSR's loss on a batch of m positive pairs of frozen embeddings
    ``(first_i, second_i)``, each ``(m, h)``::

        z_a = g(f(first)),  z_b = g(f(second))      (f: encoder network, g: projection)
        e   = [z_a; z_b]                            (2m embeddings)
        loss = mean_{k=1..2m} [ -cos(e_k, e_p(k))/tau + log sum_{l != k} exp(cos(e_k, e_l)/tau) ]

    i.e. :func:`nt_xent` of ``(z_a, z_b)``: each sentence's positive is its partner,
    the other 2m - 2 sentences of the batch are its negatives. Minimised; mean over
    all 2m embeddings (symmetric in the two columns). ``gather`` (e.g.
    ``distributed.gather_embeddings``) widens the batch to every process's pairs
    before the loss."""
    m = first.shape[0]
    projected = projection(network(torch.cat([first, second])))
    z_a, z_b = projected[:m], projected[m:]
    if gather is not None:
        z_a, z_b = gather(z_a, z_b)
    return nt_xent(z_a, z_b, temperature)
