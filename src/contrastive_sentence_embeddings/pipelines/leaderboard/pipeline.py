"""``kedro run --pipelines=leaderboard`` rebuilds the leaderboard from the metrics
files, and its summary (``data/08_reporting/summary.json``, DVC's metrics) from the
table. Every user pipeline that writes metrics holds the same two nodes, so that any
sum of user pipelines (``kedro run --pipelines=simcse,scd``) has one leaderboard: Kedro
merges identical nodes. Identical means the same inputs everywhere, hence ``after``,
the registry's list of *every* metrics data set of the graph. The node reads the
metrics folders; ``after`` is there only so that Kedro runs it once the metrics the run
writes are saved. Those the run does not write are given a placeholder instead of being
loaded (``pipelines.hooks.LeaderboardOrderingHook``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.evaluation.paper_table import paper_outputs
from contrastive_sentence_embeddings.evaluation.summary import leaderboard_summary

from . import nodes

NODE_NAME = "build_leaderboard"
# What the node reads; the rest of its inputs only order it.
DATA_INPUTS = ("model_metrics", "full_model_metrics", "sts_pairs", "parameters")

# The data sets that land in the folders the leaderboard reads: a run's metrics
# (<run>.metrics, <method>.metrics_full), the baseline's and an external row's. The per-pair predictions
# (<run>.sts_pairs) are written by the same nodes, so waiting for the metrics waits for them.
METRICS_DATASET = re.compile(r"(.+\.)?metrics(_full)?|baseline_(transfer_)?metrics|external_metrics")


def is_metrics(name: str) -> bool:
    """Whether the data set ``name`` is one the leaderboard is built from."""
    return METRICS_DATASET.fullmatch(name) is not None


def ordering_inputs(node: Node) -> list[str]:
    """The inputs of the leaderboard node that only order it (``after``)."""
    return [name for name in node.inputs if name not in DATA_INPUTS]


def create_pipeline(after: Sequence[str] = (), **kwargs) -> Pipeline:
    """The leaderboard, run after the metrics data sets ``after`` (the same list in
    every user pipeline), its summary, and the paper's table and figure
    (``evaluation/paper_table.py``), all three from the leaderboard's table."""
    return Pipeline(
        [
            Node(
                nodes.build_leaderboard,
                [*DATA_INPUTS, *sorted(after)],
                ["leaderboard_table", "leaderboard_markdown", "alignment_uniformity_plot"],
                name=NODE_NAME,
            ),
            Node(leaderboard_summary, "leaderboard_table", "leaderboard_summary", name="summarise_leaderboard"),
            Node(paper_outputs, ["leaderboard_table", "params:leaderboard"],
                 ["paper_table_markdown", "paper_table_latex", "sts_comparison_plot"], name="paper_table"),
        ]
    )
