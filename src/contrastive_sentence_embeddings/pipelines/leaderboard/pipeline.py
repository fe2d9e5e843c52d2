"""``kedro run --pipelines=leaderboard`` rebuilds the leaderboard from the metrics
files. Pipelines that write metrics get the same node with their metrics data sets as
extra inputs (``after``), so that it runs once they are saved."""

from collections.abc import Sequence

from kedro.pipeline import Node, Pipeline

from . import nodes


def create_pipeline(after: Sequence[str] = (), **kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.build_leaderboard,
                ["model_metrics", "full_model_metrics", "sts_pairs", "parameters", *after],
                ["leaderboard_table", "leaderboard_markdown", "alignment_uniformity_plot"],
                name="build_leaderboard",
            )
        ]
    )
