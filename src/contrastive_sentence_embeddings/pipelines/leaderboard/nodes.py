"""The leaderboard node: all per-model metrics files into a table, a Markdown page
and the alignment-uniformity figure. The work is in
:mod:`contrastive_sentence_embeddings.evaluation.leaderboard`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import pandas as pd

from contrastive_sentence_embeddings.configuration.blocks import LeaderboardConfig
from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.evaluation import leaderboard
from contrastive_sentence_embeddings.evaluation.records import read_records

logger = logging.getLogger(__name__)
# The summary's own logger: conf/logging.yml prints it without rich's columns, which
# would wrap its aligned lines.
summary_logger = logging.getLogger("contrastive_sentence_embeddings.pipelines.leaderboard.summary")


def build_leaderboard(
    model_metrics: Mapping[str, Callable[[], dict]], full_model_metrics: Mapping[str, Callable[[], dict]],
    sts_pairs: Mapping[str, Callable[[], dict]], parameters: Mapping, *upstream_metrics,
):
    """``model_metrics`` and ``full_model_metrics`` are the partitions of
    ``data/08_reporting/metrics`` and ``metrics_full`` (a model's newest entry wins),
    ``sts_pairs`` every model's per-pair STS predictions (for the paired tests),
    ``parameters`` all of today's parameters: the ``leaderboard`` block, and what each
    record is compared with to say whether it is current, stale or carried
    (``leaderboard.Today``). ``upstream_metrics`` are the metrics the same run has just
    written; they are inputs only so that Kedro runs this node after them (their files
    are among the partitions)."""
    config = parse_strict(LeaderboardConfig, parameters.get("leaderboard") or {}, "leaderboard")
    today = leaderboard.Today.from_parameters(parameters)
    metrics = leaderboard.newest_metrics(
        leaderboard.with_status(read_records(model_metrics, "data/08_reporting/metrics"), today, "sts"),
        leaderboard.with_status(read_records(full_model_metrics, "data/08_reporting/metrics_full"), today,
                                "transfer"))
    if not metrics:
        raise ValueError("data/08_reporting/metrics is empty: run the baseline or a method's pipeline first")
    reported = leaderboard.load_reported_results()
    table = leaderboard.add_paper_reference(leaderboard.metrics_table(metrics), reported)
    table = leaderboard.add_uncertainty(table, metrics)
    pairs = {name: load() for name, load in sts_pairs.items()}
    table = leaderboard.add_significance(table, metrics, pairs, config.bootstrap_resamples, config.bootstrap_seed,
                                         config.alpha)
    table = leaderboard.add_reference_comparison(table, metrics, pairs, config.reference, config.bootstrap_resamples,
                                                 config.bootstrap_seed)
    table = leaderboard.add_transfer_notes(leaderboard.within_budget(table, config.examples_budget),
                                           today.baseline_transfer_poolings)
    markdown = leaderboard.leaderboard_markdown(table, leaderboard.reported_table(reported), config.alpha,
                                                config.examples_budget, metrics, today.baseline_transfer_poolings,
                                                built=leaderboard.build_record())
    figure = leaderboard.alignment_uniformity_figure(table)
    summary_logger.info("leaderboard (data/08_reporting/leaderboard.md): %s",
                        leaderboard.summary_text(table, alpha=config.alpha))
    return pd.DataFrame(leaderboard.csv_table(table)), markdown, figure
