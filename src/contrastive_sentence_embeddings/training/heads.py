"""Training-only heads put on top of the pooled sentence embedding. None of them is
saved with the model: the saved encoder is the bare Hugging Face model plus its
pooling.

* :func:`mlp_head`: SimCSE's MLP (dense + tanh, hidden -> hidden), used in training
  only; unsupervised SimCSE evaluates [CLS] before it (``cls_before_pooler``).
* :func:`decorrelation_projector`: SCD's wide projector. Widths are a parameter (paper
  4096-4096-4096); Linear-BatchNorm-ReLU between layers, and it ends with the last
  Linear. The batch normalisation without affine parameters that the SCD reference
  code applies to the projector's output (its ``cls.bn``, kept apart from
  ``cls.projector``) lives in the loss: :func:`.losses.decorrelation` standardises
  its inputs over the batch exactly once. Ending the projector with that
  BatchNorm as well would standardise twice, which differs from the reference when
  a projector feature's batch variance is small against BatchNorm's eps.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def mlp_head(hidden_size: int) -> nn.Module:
    """dense (hidden -> hidden) + tanh, as BERT's pooler and SimCSE's MLP."""
    return nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())


def decorrelation_projector(hidden_size: int, widths: Sequence[int]) -> nn.Module:
    """hidden -> widths[0] -> ... -> widths[-1]; Linear, BatchNorm1d, ReLU between
    layers; the last Linear (no bias) is the output, not normalised here (the
    decorrelation loss standardises it once, as the reference's ``bn``)."""
    if not widths:
        raise ValueError("the projector needs at least one layer width")
    layers: list[nn.Module] = []
    sizes = [hidden_size, *widths]
    for index, (size_in, size_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = index == len(widths) - 1
        layers.append(nn.Linear(size_in, size_out, bias=not last))
        if not last:
            layers += [nn.BatchNorm1d(size_out), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)
