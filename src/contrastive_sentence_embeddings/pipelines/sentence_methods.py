"""The pipeline shape every sentence-level method shares (SimCSE, SCD, ImSimCSE):

    wiki_sentences -> train_<method> -> <method>_model (data/06_models/<method>)
                                     -> <method>_training_curve (CSV, a DVC plot)
    <method>_model -> evaluate_<method> -> <method>_metrics (data/08_reporting/metrics)

The nodes only read parameters and call the library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pandas as pd
from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.pipelines.evaluation.nodes import evaluation_settings, score_models
from contrastive_sentence_embeddings.evaluation.evaluator import ModelSpec
from contrastive_sentence_embeddings.encoding import read_model_metadata
from contrastive_sentence_embeddings.training.run import train_on_sentences


def train_sentence_method(method: str) -> Callable:
    def train_node(wiki_sentences: pd.DataFrame, raw_sts: Mapping, encoder: str, params: Mapping):
        sentences = wiki_sentences["sentence"].tolist()
        if params.get("n_sentences"):
            sentences = sentences[: params["n_sentences"]]
        trained, result = train_on_sentences(sentences, encoder, method, params, DevScorer(raw_sts))
        return trained, result.curve

    train_node.__name__ = f"train_{method}"
    return train_node


def evaluate_trained_model(model_path: str, raw_sts: Mapping, raw_transfer: Mapping, evaluation: Mapping,
                           params: Mapping) -> dict[str, dict]:
    """Score the saved model with ``params:evaluation`` (STS by default) plus the
    method's own ``evaluation`` overrides; one metrics file named after the run."""
    metadata = read_model_metadata(model_path)
    spec = ModelSpec(metadata["name"], model_path, metadata["pooling"], metadata["method"], metadata["base_encoder"],
                     metadata.get("seed"))
    settings = evaluation_settings(evaluation, params.get("evaluation"))
    return score_models([spec], raw_sts, raw_transfer, settings)


def create_sentence_method_pipeline(method: str) -> Pipeline:
    return Pipeline(
        [
            Node(train_sentence_method(method), ["wiki_sentences", "raw_sts", "params:encoder", f"params:{method}"],
                 [f"{method}_model", f"{method}_training_curve"], name=f"train_{method}"),
            Node(evaluate_trained_model, [f"{method}_model", "raw_sts", "raw_transfer", "params:evaluation",
                                          f"params:{method}"],
                 f"{method}_metrics", name=f"evaluate_{method}"),
        ]
    )
