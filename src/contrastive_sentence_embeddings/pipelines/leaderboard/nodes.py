"""The leaderboard node: all per-model metrics files into a table, a Markdown page
and the alignment-uniformity figure. The work is in
:mod:`contrastive_sentence_embeddings.evaluation.leaderboard`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import pandas as pd

from contrastive_sentence_embeddings.config import LeaderboardConfig, parse_strict
from contrastive_sentence_embeddings.evaluation import leaderboard

logger = logging.getLogger(__name__)


def build_leaderboard(
    model_metrics: Mapping[str, Callable[[], dict]], full_model_metrics: Mapping[str, Callable[[], dict]],
    sts_pairs: Mapping[str, Callable[[], dict]], params: Mapping, *upstream_metrics,
):
    """``model_metrics`` and ``full_model_metrics`` are the partitions of
    ``data/08_reporting/metrics`` and ``metrics_full`` (a model's newest entry wins),
    ``sts_pairs`` every model's per-pair STS predictions (for the paired tests),
    ``params`` the ``leaderboard`` block. ``upstream_metrics`` are the metrics the same
    run has just written; they are inputs only so that Kedro runs this node after them
    (their files are among the partitions)."""
    config = parse_strict(LeaderboardConfig, params, "leaderboard")
    metrics = leaderboard.newest_metrics({name: load() for name, load in model_metrics.items()},
                                         {name: load() for name, load in full_model_metrics.items()})
    if not metrics:
        raise ValueError("data/08_reporting/metrics is empty: run the baseline or a method's pipeline first")
    reported = leaderboard.load_reported_results()
    table = leaderboard.add_paper_reference(leaderboard.metrics_table(metrics), reported)
    table = leaderboard.add_uncertainty(table, metrics)
    pairs = {name: load() for name, load in sts_pairs.items()}
    table = leaderboard.add_significance(table, metrics, pairs, config.bootstrap_resamples, config.bootstrap_seed,
                                         config.alpha)
    table = leaderboard.within_budget(table, config.examples_budget)
    markdown = leaderboard.leaderboard_markdown(table, leaderboard.reported_table(reported), config.alpha,
                                                config.examples_budget)
    figure = leaderboard.alignment_uniformity_figure(table)
    logger.info("leaderboard of %d model(s):\n%s", len(table),
                table[["model", "pooling", "sts_avg", "transfer_avg"]].to_string(index=False))
    return pd.DataFrame(table), markdown, figure
