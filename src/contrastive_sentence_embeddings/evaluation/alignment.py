"""Alignment and uniformity of an embedding space (Wang and Isola, 2020), the
analysis SimCSE, SCD and ImSimCSE plot.

On L2-normalised embeddings f:

* alignment = E_{(x, y) ~ positive pairs} ||f(x) - f(y)||^2   (alpha = 2; lower is better)
* uniformity = log E_{x, y ~ data, x != y} exp(-2 ||f(x) - f(y)||^2)   (t = 2; lower is better)

As in SimCSE, positive pairs are STS-B pairs scored above 4 and the data are all
STS-B sentences (here the split given by ``split``, the test split by default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from contrastive_sentence_embeddings.evaluation.sts import StsSubset


def normalise(embeddings: np.ndarray) -> np.ndarray:
    embeddings = np.asarray(embeddings, dtype=np.float64)
    return embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)


def alignment(left: np.ndarray, right: np.ndarray, alpha: float = 2.0) -> float:
    """Mean over pairs of ||f(x) - f(y)||^alpha on normalised embeddings."""
    difference = normalise(left) - normalise(right)
    return float((np.linalg.norm(difference, axis=1) ** alpha).mean())


def uniformity(embeddings: np.ndarray, t: float = 2.0) -> float:
    """log of the mean over distinct pairs of exp(-t ||f(x) - f(y)||^2), normalised
    embeddings. Computed as a log-sum-exp over torch's pairwise distances, so it is
    stable and fast for a few thousand sentences."""
    points = torch.from_numpy(normalise(embeddings))
    squared = torch.pdist(points, p=2).pow(2)
    if squared.numel() == 0:
        raise ValueError("uniformity needs at least two sentences")
    return float(torch.logsumexp(-t * squared, dim=0) - np.log(squared.numel()))


def positive_pairs(subset: StsSubset, min_score: float = 4.0) -> tuple[list[str], list[str]]:
    """The pairs of ``subset`` scored strictly above ``min_score``."""
    keep = subset.scores > min_score
    return ([s for s, k in zip(subset.sentence1, keep) if k], [s for s, k in zip(subset.sentence2, keep) if k])


def alignment_uniformity(
    subset: StsSubset, embedding_of: Mapping[str, np.ndarray], min_score: float = 4.0
) -> dict[str, float]:
    """``alignment`` over the subset's pairs above ``min_score`` and ``uniformity``
    over all its distinct sentences."""
    left, right = positive_pairs(subset, min_score)
    if not left:
        raise ValueError(f"{subset.task} {subset.subset}: no pair scored above {min_score}")
    sentences = list(dict.fromkeys([*subset.sentence1, *subset.sentence2]))
    return {
        "alignment": alignment(np.stack([embedding_of[s] for s in left]), np.stack([embedding_of[s] for s in right])),
        "uniformity": uniformity(np.stack([embedding_of[s] for s in sentences])),
    }


def evaluate_alignment_uniformity(
    subset: StsSubset, encode: Callable[[Sequence[str]], np.ndarray], min_score: float = 4.0
) -> dict[str, float]:
    sentences = list(dict.fromkeys([*subset.sentence1, *subset.sentence2]))
    return alignment_uniformity(subset, dict(zip(sentences, encode(sentences))), min_score)
