"""``kedro run --pipelines=declutr``:

    long_documents, declutr_spans -> train_declutr -> declutr_model (data/06_models/declutr)
                                                   -> declutr_training_curve
    declutr_model -> evaluate_declutr -> declutr_metrics

The composed pipeline of the same name (pipeline_registry.py) adds raw data,
data preparation and the leaderboard in front of and after it.
"""

from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.pipelines.sentence_methods import evaluate_trained_model

from .nodes import train_declutr


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(train_declutr, ["long_documents", "declutr_spans", "raw_sts", "params:encoder", "params:declutr"],
                 ["declutr_model", "declutr_training_curve"], name="train_declutr"),
            Node(evaluate_trained_model, ["declutr_model", "raw_sts", "raw_transfer", "params:evaluation",
                                          "params:declutr"],
                 "declutr_metrics", name="evaluate_declutr"),
        ]
    )
