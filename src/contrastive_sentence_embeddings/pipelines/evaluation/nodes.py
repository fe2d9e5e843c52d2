"""Nodes that score encoders. The work is done by
:mod:`contrastive_sentence_embeddings.evaluation.evaluator`; these only turn parameters
into model specs and settings.

Every scoring node shares ``params:evaluation`` (what to score and how) with a
block's overrides on top (a method's ``evaluation``, or ``transfer_evaluation``'s for
the transfer tasks).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from contrastive_sentence_embeddings.records import provenance
from contrastive_sentence_embeddings.configuration.blocks import (
    BaselineConfig,
    ExternalConfig,
    LeaderboardConfig,
    TransferEvaluationConfig,
)
from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.runs.crash_points import crash_point
from contrastive_sentence_embeddings.encoders.encoding import read_model_metadata
from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig
from contrastive_sentence_embeddings.evaluation.evaluator import (
    EvaluationData,
    EvaluationSettings,
    evaluation_settings,
    EXTERNAL,
    ModelSpec,
    Partitions,
    evaluate_models,
)
from contrastive_sentence_embeddings.pipelines.parameter_blocks import DataProcessingConfig, external_block
from contrastive_sentence_embeddings.runs.project_paths import project_relative

logger = logging.getLogger(__name__)


def baseline_specs(encoder: str, poolings: Sequence[str]) -> list[ModelSpec]:
    """One row per pooling method of the untrained encoder."""
    return [ModelSpec(f"baseline-{pooling}", encoder, pooling, "baseline", encoder) for pooling in poolings]

def trained_model_spec(model_path: str) -> ModelSpec:
    """The row of a model saved by the trainer: its folder's name, the pooling it was
    trained for, its method, base encoder and seed (``cse_metadata.json``)."""
    metadata = read_model_metadata(model_path)
    return ModelSpec(metadata.get("name") or Path(model_path).name, project_relative(model_path), metadata["pooling"],
                     metadata.get("method", ""), metadata.get("base_encoder", ""), metadata.get("seed"))

def score_models(
    specs: Sequence[ModelSpec], raw_sts: Partitions, raw_transfer: Partitions, settings: EvaluationSettings
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Metrics per spec name, and each spec's per-pair STS predictions."""
    data = EvaluationData.read(raw_sts, raw_transfer, settings)
    pairs: dict[str, dict] = {}
    metrics = evaluate_models(specs, data, settings, pair_predictions=pairs)
    return metrics, pairs

def evaluate_model(model: str, raw_sts: Partitions, raw_transfer: Partitions, evaluation: Mapping,
                   block: Mapping) -> tuple[dict, dict]:
    """The metrics of one trained model (``<method>.model``): ``params:evaluation`` with
    the ``evaluation`` overrides of ``block`` on top (the method's block, or
    ``transfer_evaluation``, which turns the transfer tasks on); and its per-pair STS
    predictions, for the leaderboard's paired bootstrap tests. The metrics also say
    what the training cost: examples seen and seconds (from the model's metadata)."""
    spec = trained_model_spec(model)
    settings = evaluation_settings(evaluation, block.get("evaluation"), f"{spec.name}.evaluation")
    metrics, pairs = score_models([spec], raw_sts, raw_transfer, settings)
    crash_point("evaluation:scored")  # a kill after the scoring, before Kedro saves the metrics
    return {**metrics[spec.name], "training": training_budget(read_model_metadata(model))}, pairs.get(spec.name, {})


def training_budget(metadata: Mapping) -> dict:
    """Examples seen, steps, training seconds and the step whose weights were kept
    (``best_step``: 0 when no step beat the starting weights on dev) of a run, from its
    ``cse_metadata.json``."""
    return {key: metadata.get(key) for key in ("examples_seen", "steps", "best_step", "train_seconds")}


def write_model_card(model: str, metrics: Mapping, sts_pairs: Mapping, baseline_metrics: Mapping,
                     baseline_sts_pairs: Mapping, leaderboard: Mapping, data_processing: Mapping, raw_data: Mapping,
                     *reports: Mapping) -> str:
    """The ``README.md`` model card of a trained model (``model_card.model_card``), from
    its metrics, its per-pair STS predictions against the baseline's with the same
    pooling (``vs base``, tested as the leaderboard tests it: ``params:leaderboard``)
    and the data reports (``report_<step>``: ``{step: counts}`` each) of the steps that
    prepared its training data. ``baseline_metrics`` and ``baseline_sts_pairs`` are the
    baseline's folders (partitions: a record's loader by name)."""
    from contrastive_sentence_embeddings.publishing.model_card import base_comparison, model_card

    merged: dict[str, Mapping] = {}
    for report in reports:
        merged.update(report)
    name = (metrics.get("model") or {}).get("name") or Path(model).name
    settings = parse_strict(LeaderboardConfig, leaderboard or {}, "leaderboard")
    wanted = f"baseline-{(metrics.get('model') or {}).get('pooling')}"
    base = base_comparison(metrics, sts_pairs, {k: load() for k, load in baseline_metrics.items() if k == wanted},
                           {k: load() for k, load in baseline_sts_pairs.items() if k == wanted},
                           settings.bootstrap_resamples, settings.bootstrap_seed, settings.alpha)
    return model_card(model, metrics, merged, DataProcessingConfig.from_params(data_processing),
                      parse_strict(RawDataConfig, raw_data, "raw_data"), shown_as=project_relative(model),
                      metrics_name=f"{name}.metrics", base=base)


def write_mteb_results(metrics: Mapping, sts_pairs: Mapping) -> dict:
    """A run's STS scores as MTEB's result files (``evaluation.mteb_results.mteb_files``),
    from its metrics and per-pair predictions."""
    from contrastive_sentence_embeddings.evaluation.mteb_results import mteb_files

    return mteb_files(metrics, sts_pairs)


def write_baseline_mteb_results(metrics: Mapping, sts_pairs: Mapping, baseline: Mapping) -> dict[str, dict]:
    """:func:`write_mteb_results` of every pooling of ``baseline.poolings``, one folder
    each (``baseline-<pooling>``). The metrics and predictions folders hold every
    model's files: only the configured poolings' are read."""
    from contrastive_sentence_embeddings.evaluation.mteb_results import mteb_files

    config = parse_strict(BaselineConfig, baseline, "baseline")
    results = {}
    for spec in baseline_specs("", config.poolings):
        if spec.name not in metrics or spec.name not in sts_pairs:
            raise ValueError(f"{spec.name}: no metrics or per-pair predictions to write MTEB results from; "
                             "run baseline.evaluate first")
        results[spec.name] = mteb_files(_loaded(metrics[spec.name]), _loaded(sts_pairs[spec.name]))
    return results


def _loaded(partition):
    """A partition as a partitioned data set hands it: its loader, or its value."""
    return partition() if callable(partition) else partition


def evaluate_baseline(
    raw_sts: Partitions, raw_transfer: Partitions, encoder: str, baseline: Mapping, evaluation: Mapping
) -> dict[str, dict]:
    """The untrained ``encoder`` with each of ``baseline.poolings``: one metrics file each."""
    config = parse_strict(BaselineConfig, baseline, "baseline")
    settings = evaluation_settings(evaluation, config.overrides, "baseline.overrides")
    return score_models(baseline_specs(encoder, config.poolings), raw_sts, raw_transfer, settings)


def aggregate_seed_runs(*metrics: Mapping) -> dict:
    """One method's runs over seeds in one metrics dict (``significance.summarise_seed_runs``),
    over the runs of one configuration only (``provenance.runs_of_one_configuration``:
    same parameters apart from the seed, encoder, code and data, as the newest run):
    a run of another configuration (e.g. a committed 120-step record that a partial
    run left beside this checkout's 4-step runs) is left out, named with the reason in
    ``left_out`` and in the log. ``evaluated_at`` is the newest run's; ``provenance``
    holds each run's."""
    from contrastive_sentence_embeddings.evaluation.significance import summarise_seed_runs

    kept, left_out = provenance.runs_of_one_configuration(metrics)
    for name, reason in left_out.items():
        logger.warning("%s is left out of its seed summary: %s", name, reason)
    summary = summarise_seed_runs(kept)
    summary["evaluated_at"] = max((str(run.get("evaluated_at") or "") for run in kept), default="") or None
    summary["provenance"] = provenance.summary_provenance(kept)
    if left_out:
        summary["left_out"] = left_out
    return summary


def concat_seed_curves(*curves):
    """Every seed's training curve in one table, with a ``seed`` column."""
    import pandas as pd

    return pd.concat(curves, ignore_index=True)

def evaluate_baseline_transfer(
    raw_sts: Partitions, raw_transfer: Partitions, encoder: str, transfer: Mapping, evaluation: Mapping
) -> dict[str, dict]:
    """The untrained encoder's ``transfer_evaluation.baseline_poolings`` with the
    transfer tasks, beside the trained models' transfer scores."""
    config = parse_strict(TransferEvaluationConfig, transfer, "transfer_evaluation")
    settings = evaluation_settings(evaluation, config.evaluation, "transfer_evaluation.evaluation")
    return score_models(baseline_specs(encoder, config.baseline_poolings), raw_sts, raw_transfer, settings)[0]



def external_spec(config: ExternalConfig, methods: Sequence[str] = ()) -> ModelSpec:
    """The row of an encoder scored on the harness (``external``): its name, the model
    (a folder inside the project relative to it; anything else, a Hub id included, as
    given) as its own base encoder, as a baseline row is, and the pooling. A name the
    project's own rows use (``baseline-*``, a listed method or its seeds) is refused:
    its metrics file would replace theirs."""
    if not config.model:
        raise ValueError("external.model is not set: name the model folder or Hub id to score, e.g. "
                         "kedro run --pipelines=external --params \"external.model=path/to/model\"")
    name = config.row_name()
    taken = name.startswith("baseline") or name in methods or ".seed" in name or any(
        name.startswith(f"{method}.") for method in methods)
    if taken:
        raise ValueError(f"external.name = {name!r} is a name of the project's own rows (baseline-*, a method in "
                         "`methods` or its seeds): choose another (--params \"external.name=my-model\")")
    model = project_relative(config.model) if Path(config.model).exists() else config.model
    return ModelSpec(name, model, config.pooling, EXTERNAL, model)


def evaluate_external(raw_sts: Partitions, raw_transfer: Partitions, external: Mapping, evaluation: Mapping,
                      methods: Sequence[str]) -> tuple[dict[str, dict], dict[str, dict], dict[str, dict]]:
    """Any encoder (``external.model``: a folder or Hub id) scored as the baseline is,
    with ``external.pooling``, as its own row ``external.name``: its metrics file, its
    per-pair STS predictions (for the paired tests) and its MTEB result files, each
    keyed by the row's name in the folders every row shares. ``params:evaluation`` sets
    how; ``external.transfer`` adds the transfer tasks."""
    from contrastive_sentence_embeddings.evaluation.mteb_results import mteb_files

    config = external_block(external)
    spec = external_spec(config, methods)
    settings = evaluation_settings(evaluation, {"transfer": config.transfer}, "external")
    metrics, pairs = score_models([spec], raw_sts, raw_transfer, settings)
    mteb = {spec.name: mteb_files(metrics[spec.name], pairs[spec.name])} if pairs.get(spec.name) else {}
    return metrics, pairs, mteb
