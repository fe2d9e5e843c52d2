"""Nodes that score encoders. The work is done by
:mod:`contrastive_sentence_embeddings.evaluation.evaluator`; these only turn parameters
into model specs and settings.

Every scoring node shares ``params:evaluation`` (what to score and how) and may
override parts of it; the result is a ``{metrics_file_name: metrics}`` dict saved as
partitions of ``data/08_reporting/metrics``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from contrastive_sentence_embeddings.encoding import METADATA_FILE, read_model_metadata
from contrastive_sentence_embeddings.evaluation.evaluator import (
    EvaluationData,
    EvaluationSettings,
    ModelSpec,
    Partitions,
    evaluate_models,
)

logger = logging.getLogger(__name__)


def evaluation_settings(evaluation: Mapping, overrides: Mapping | None = None) -> EvaluationSettings:
    """``params:evaluation`` with a pipeline's overrides on top."""
    return EvaluationSettings.from_params({**evaluation, **(overrides or {})})


def baseline_specs(encoder: str, poolings: Sequence[str]) -> list[ModelSpec]:
    """One row per pooling method of the untrained encoder."""
    return [ModelSpec(f"baseline-{pooling}", encoder, pooling, "baseline", encoder) for pooling in poolings]


def trained_model_specs(models_dir: str | Path) -> list[ModelSpec]:
    """Every model saved by this project's trainer under ``models_dir`` (a folder with
    ``cse_metadata.json``), with the pooling it was trained for. Folders without
    metadata are listed in the log, not guessed at."""
    root = Path(models_dir)
    specs, skipped = [], []
    # Hidden folders are staging areas of saves in progress (or killed), not models.
    folders = sorted(p for p in root.glob("*") if p.is_dir() and not p.name.startswith(".")) if root.is_dir() else []
    for folder in folders:
        metadata = read_model_metadata(folder)
        if not metadata:
            skipped.append(folder.name)
            continue
        specs.append(ModelSpec(metadata.get("name", folder.name), str(folder), metadata["pooling"],
                               metadata.get("method", ""), metadata.get("base_encoder", ""), metadata.get("seed")))
    if skipped:
        logger.warning("%s: %d folder(s) without %s were not evaluated: %s", root, len(skipped), METADATA_FILE,
                       ", ".join(skipped))
    logger.info("%d trained model(s) found under %s", len(specs), root)
    return specs


def score_models(
    specs: Sequence[ModelSpec], raw_sts: Partitions, raw_transfer: Partitions, settings: EvaluationSettings
) -> dict[str, dict]:
    data = EvaluationData.read(raw_sts, raw_transfer, settings)
    return evaluate_models(specs, data, settings)


def evaluate_baseline(
    raw_sts: Partitions, raw_transfer: Partitions, encoder: str, baseline: Mapping, evaluation: Mapping
) -> dict[str, dict]:
    """The untrained ``encoder`` with each of ``baseline.poolings``."""
    settings = evaluation_settings(evaluation, baseline.get("overrides"))
    return score_models(baseline_specs(encoder, baseline["poolings"]), raw_sts, raw_transfer, settings)


def evaluate_all_models(
    raw_sts: Partitions, raw_transfer: Partitions, encoder: str, params: Mapping, evaluation: Mapping
) -> dict[str, dict]:
    """Every trained model under ``params.models_dir`` plus the baseline poolings in
    ``params.baseline_poolings``, with the pipeline's overrides (transfer tasks on)."""
    specs = trained_model_specs(params["models_dir"]) + baseline_specs(encoder, params.get("baseline_poolings", []))
    if not specs:
        raise ValueError(f"nothing to evaluate: no trained model under {params['models_dir']} and no baseline pooling")
    settings = evaluation_settings(evaluation, params.get("overrides"))
    return score_models(specs, raw_sts, raw_transfer, settings)
