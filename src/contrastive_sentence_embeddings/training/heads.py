"""Training-only heads put on top of the pooled sentence embedding. None of them is
saved with the model: the saved encoder is the bare Hugging Face model plus its
pooling.

* :func:`mlp_head`: SimCSE's MLP (dense + tanh, hidden -> hidden), used in training
  only; unsupervised SimCSE evaluates [CLS] before it (``cls_before_pooler``).
* :func:`decorrelation_projector`: SCD's wide projector. Widths are a parameter (paper
  4096-4096-4096); Linear-BatchNorm-ReLU between layers and a final BatchNorm without
  affine parameters, so that the decorrelation loss sees standardised features.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def mlp_head(hidden_size: int) -> nn.Module:
    """dense (hidden -> hidden) + tanh, as BERT's pooler and SimCSE's MLP."""
    return nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())


def decorrelation_projector(hidden_size: int, widths: Sequence[int]) -> nn.Module:
    """hidden -> widths[0] -> ... -> widths[-1]; Linear, BatchNorm1d, ReLU between
    layers; the last Linear is followed by BatchNorm1d(affine=False) only."""
    if not widths:
        raise ValueError("the projector needs at least one layer width")
    layers: list[nn.Module] = []
    sizes = [hidden_size, *widths]
    for index, (size_in, size_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = index == len(widths) - 1
        layers.append(nn.Linear(size_in, size_out, bias=not last))
        if not last:
            layers += [nn.BatchNorm1d(size_out), nn.ReLU(inplace=True)]
    layers.append(nn.BatchNorm1d(sizes[-1], affine=False))
    return nn.Sequential(*layers)
