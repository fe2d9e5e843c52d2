"""Nodes of the ``declutr`` pipeline; the work is in ``training.declutr`` (batches),
``training.methods.DeCLUTR`` (loss) and the shared trainer."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.training.run import train_on_documents


def train_declutr(long_documents: pd.DataFrame, declutr_spans: pd.DataFrame, raw_sts: Mapping, encoder: str,
                  params: Mapping):
    """DeCLUTR from ``encoder`` on the sampled spans, best checkpoint by STS-B dev and
    SICK-R trial; returns the model to save and its training curve."""
    trained, result = train_on_documents(long_documents, declutr_spans, encoder, params, DevScorer(raw_sts))
    return trained, result.curve
