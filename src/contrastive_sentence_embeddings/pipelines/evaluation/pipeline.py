"""``kedro run --pipelines=evaluation``: score every model under ``data/06_models``
(and the baseline) on STS, the transfer tasks and alignment/uniformity."""

from kedro.pipeline import Node, Pipeline

from . import nodes


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.evaluate_all_models,
                ["raw_sts", "raw_transfer", "params:encoder", "params:evaluation_pipeline", "params:evaluation"],
                "evaluated_metrics",
                name="evaluate_all_models",
            )
        ]
    )
