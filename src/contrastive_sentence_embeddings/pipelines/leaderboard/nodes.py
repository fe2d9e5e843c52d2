"""The leaderboard node: all per-model metrics files into a table, a Markdown page
and the alignment-uniformity figure."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import pandas as pd

from contrastive_sentence_embeddings.evaluation import leaderboard

logger = logging.getLogger(__name__)


def merge_metrics(sts_metrics: Mapping[str, dict], full_metrics: Mapping[str, dict]) -> dict[str, dict]:
    """Per model, the STS-only entry updated with the full (transfer) entry, so that a
    model re-scored by the ``evaluation`` pipeline keeps one row with every column."""
    merged = {name: dict(values) for name, values in sts_metrics.items()}
    for name, values in full_metrics.items():
        merged.setdefault(name, {}).update(values)
    return merged


def build_leaderboard(
    model_metrics: Mapping[str, Callable[[], dict]], full_model_metrics: Mapping[str, Callable[[], dict]],
    *upstream_metrics,
):
    """``model_metrics`` and ``full_model_metrics`` are the partitions of
    ``data/08_reporting/metrics`` and ``metrics_full``. ``upstream_metrics`` are the
    metrics the same run has just written; they are inputs only so that Kedro runs
    this node after them (their files are among the partitions)."""
    metrics = merge_metrics({name: load() for name, load in model_metrics.items()},
                            {name: load() for name, load in full_model_metrics.items()})
    if not metrics:
        raise ValueError("data/08_reporting/metrics is empty: run the baseline or a method's pipeline first")
    reported = leaderboard.load_reported_results()
    table = leaderboard.add_paper_reference(leaderboard.metrics_table(metrics), reported)
    markdown = leaderboard.leaderboard_markdown(table, leaderboard.reported_table(reported))
    figure = leaderboard.alignment_uniformity_figure(table)
    logger.info("leaderboard of %d model(s):\n%s", len(table),
                table[["model", "pooling", "sts_avg", "transfer_avg"]].to_string(index=False))
    return pd.DataFrame(table), markdown, figure
