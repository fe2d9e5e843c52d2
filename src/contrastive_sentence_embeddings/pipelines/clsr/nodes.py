"""CLSR's nodes: they read parameters and call the library
(:mod:`contrastive_sentence_embeddings.training.clsr`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.training.clsr import PairEmbeddings, embed_pairs, train_clsr


@dataclass(frozen=True)
class PairSource:
    """Where a variant's positive pairs come from: a catalog data set and its two
    sentence columns."""

    dataset: str
    first: str
    second: str


VARIANTS: dict[str, PairSource] = {
    "clsr_stsb": PairSource("stsb_pairs", "sentence1", "sentence2"),
    "clsr_nli": PairSource("nli_pairs", "premise", "hypothesis"),
}


def pair_source(variant: str) -> PairSource:
    if variant not in VARIANTS:
        raise ValueError(f"unknown CLSR variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def embed_pairs_node(variant: str) -> Callable:
    source = pair_source(variant)

    def embed(pairs: pd.DataFrame, embedding_cache: str, encoder: str, params: Mapping) -> PairEmbeddings:
        """Frozen embeddings of every sentence of the pairs (``params.n_pairs``: the
        first n pairs only), from the embedding cache when it holds them."""
        if params.get("n_pairs"):
            pairs = pairs.head(int(params["n_pairs"]))
        return embed_pairs(pairs, source.first, source.second, source.dataset, encoder, embedding_cache,
                           params.get("pooling", "mean"), device=params.get("training", {}).get("device"))

    embed.__name__ = f"embed_{variant}_pairs"
    return embed


def train_node(variant: str) -> Callable:
    def train(pair_embeddings: PairEmbeddings, raw_sts: Mapping, embedding_cache: str, encoder: str,
              params: Mapping):
        """The encoder network trained on the cached pairs; the best one by the dev
        sets, with the frozen encoder, and the training curve."""
        trained, result = train_clsr(pair_embeddings, encoder, params, DevScorer(raw_sts), embedding_cache)
        return trained, result.curve

    train.__name__ = f"train_{variant}"
    return train
