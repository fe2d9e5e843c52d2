"""``kedro run --pipelines=baseline``: the untrained encoder with each pooling method,
so every trained model has its starting point in the leaderboard."""

from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.pipelines.evaluation.nodes import evaluate_baseline


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                evaluate_baseline,
                ["raw_sts", "raw_transfer", "params:encoder", "params:baseline", "params:evaluation"],
                "baseline_metrics",
                name="evaluate_baseline",
            )
        ]
    )
