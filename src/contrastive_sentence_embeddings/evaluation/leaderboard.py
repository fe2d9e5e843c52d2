"""The leaderboard: every evaluated model in one table, as the papers lay theirs out,
with the papers' own numbers for reference, and the alignment-uniformity figure.

Input is the per-model metrics JSON written by the evaluation nodes
(``data/08_reporting/metrics/<model>.json``): a ``model`` block (name, method, base
encoder, pooling, seed) and flat metric keys (``sts12`` .. ``sickr``, ``sts_avg``,
``*_wmean``, transfer accuracies, ``alignment``, ``uniformity``), the time it was
produced (``evaluated_at``) and the fingerprint of the weights it scored
(``model_fingerprint``), and its ``provenance`` (``provenance.record_provenance``).

Each row has a status (:func:`record_status`): ``current`` (produced here from today's
code and parameters), ``stale`` (its parameters, encoder, evaluation settings or code
changed since, or its model folder now holds a model trained after these scores:
"scores of an earlier model"; ``status_reason`` says which, and what to rerun) or
``carried`` (no model behind it here: a result committed with the repository or
produced elsewhere). Which model a record scored is compared by the fingerprint of its
weights (``encoders/fingerprint.py``: content, not file times), read from the model's
metadata, so the comparison reads no weights. Carried rows are shown
apart and never compared or averaged with this checkout's runs; a cell that cannot be
filled says why (``vs_base_note``, ``transfer_note``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from contrastive_sentence_embeddings.records import provenance
from contrastive_sentence_embeddings.evaluation.records import EXTERNAL
from contrastive_sentence_embeddings.evaluation.sts import STS_TASKS
from contrastive_sentence_embeddings.evaluation.transfer import TRANSFER_TASKS

IDENTITY_COLUMNS = ["model", "method", "base_encoder", "pooling", "seed", "evaluated_at"]
STS_COLUMNS = [*STS_TASKS, "sts_avg"]
WMEAN_COLUMNS = [f"{task}_wmean" for task in STS_TASKS] + ["sts_avg_wmean"]
TRANSFER_COLUMNS = [*TRANSFER_TASKS, "MRPC_f1", "transfer_avg"]
GEOMETRY_COLUMNS = ["alignment", "uniformity"]
HEADERS = {
    "sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
    "stsb": "STS-B", "sickr": "SICK-R", "sts_avg": "STS avg", "sts_avg_wmean": "STS avg (wmean)",
    "transfer_avg": "Transfer avg", "MRPC_f1": "MRPC F1", "paper_sts_avg": "paper STS avg",
    "base_encoder": "base encoder", "evaluated_at": "evaluated (UTC)", "best_step": "kept step",
}
# Columns added after the first releases of leaderboard.csv: written after all the others,
# so that readers of the older columns find them where they were.
STATUS_COLUMNS = ["status", "status_reason", "params_hash", "source_hash", "commit", "dirty", "environment",
                  "not_scored"]
NOTE_COLUMNS = ["vs_base_note", "transfer_note"]
# The 95% interval of a seeded row's STS avg over its seeds, and the paired test of every
# row against the leaderboard's `reference` row (when one is set).
SEED_INTERVAL_COLUMNS = ["sts_avg_seed_ci_lo", "sts_avg_seed_ci_hi"]
REFERENCE_COLUMNS = ["reference", "delta_vs_ref", "p_vs_ref", "vs_ref_note"]
HEADERS.update({"status_reason": "why", "vs_base_note": "vs base", "transfer_note": "note", "env_label": "env"})
# Metrics files written before results carried a time sort before every dated one.
_UNDATED = datetime.min.replace(tzinfo=timezone.utc)


def evaluated_at(metrics: Mapping) -> datetime:
    """When a metrics entry was produced (its ``evaluated_at``); undated entries (older
    files) are the oldest of all."""
    stamp = metrics.get("evaluated_at")
    if not stamp:
        return _UNDATED
    moment = datetime.fromisoformat(str(stamp))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def newest_metrics(*sources: Mapping[str, Mapping]) -> dict[str, dict]:
    """One metrics entry per model from several folders of metrics files (e.g. the
    STS-only ``metrics`` and the full ``metrics_full``), keyed by the model each entry
    names (``model.name``; the file's name only when it names none): the newest entry of a model
    wins (by ``evaluated_at``; an undated file loses to any dated one; on a tie the
    later source wins).

    An older entry's metrics that the newest one lacks (e.g. the transfer scores of
    a full evaluation, after a fresh STS-only run) join its row only when both entries
    scored the same weights (equal ``model_fingerprint``), so a row never mixes two
    models. An older entry of other weights that the leaderboard marks ``carried``
    (e.g. the repository's transfer scores after a fresh run replaced the model) is a
    row of its own, ``<model> (earlier model)`` (with its fingerprint when there are
    several), its entries of the same weights joined, so no committed number leaves
    the page; without statuses such entries are left out.
    Pure: the inputs are not modified.
    """
    entries: dict[str, list[tuple[datetime, int, Mapping]]] = {}
    for order, source in enumerate(sources):
        for name, metrics in source.items():
            # Keyed by the model an entry scored, not by its file name: a seeded method's
            # transfer scores (metrics_full/<method>.json) describe its first seed's run.
            model = (metrics.get("model") or {}).get("name") or name
            entries.setdefault(model, []).append((evaluated_at(metrics), order, metrics))
    merged = {}
    for name, candidates in entries.items():
        candidates.sort(key=lambda entry: (entry[0], entry[1]))
        newest = candidates[-1][2]
        earlier: dict[str, list[Mapping]] = {}  # carried entries of other weights, by fingerprint
        row = dict(newest)
        _keep_cut_splits(row, newest)
        for _, _, older in reversed(candidates[:-1]):
            fingerprint = older.get("model_fingerprint")
            if fingerprint is not None and fingerprint == newest.get("model_fingerprint"):
                _keep_cut_splits(row, older)
                _join(row, older)
            elif older.get("status") == CARRIED and fingerprint is not None:
                earlier.setdefault(str(fingerprint), []).append(older)
        merged[name] = row
        for fingerprint, older_entries in earlier.items():
            label = f"{name} (earlier model{f' {fingerprint}' if len(earlier) > 1 else ''})"
            carried = dict(older_entries[0])
            for other in older_entries[1:]:
                _join(carried, other)
            carried["model"] = {**(carried.get("model") or {}), "name": label}
            merged[label] = carried
    return merged


# A transfer record's cut training splits (evaluation.transfer_train_rows), kept on the
# row whichever of its joined records is newest (the STS record has its own
# evaluation_report, which would otherwise hide the transfer record's).
CUT_SPLITS = "transfer_training_rows_used"


def _keep_cut_splits(row: dict, entry: Mapping) -> None:
    used = (((entry.get("evaluation_report") or {}).get("data") or {}).get("transfer training rows used") or {})
    if used:
        row[CUT_SPLITS] = {**used, **(row.get(CUT_SPLITS) or {})}


def _join(row: dict, older: Mapping) -> None:
    """``older``'s metrics that ``row`` lacks, into ``row`` (same weights)."""
    for key, value in older.items():
        row.setdefault(key, value)
    _combine_status(row, older)


# --- where a row comes from: current, stale or carried --------------------------------------
CURRENT, STALE, CARRIED = "current", "stale", "carried"
_SEVERITY = {CURRENT: 0, STALE: 1, CARRIED: 2}


def _combine_status(row: dict, older: Mapping) -> None:
    """A row joined from two records (STS and transfer scores of the same weights) is
    as trustworthy as the worse of them, for every reason either gives."""
    if "status" not in older or "status" not in row:
        return
    if _SEVERITY[older["status"]] > _SEVERITY[row["status"]]:
        row["status"] = older["status"]
    reasons = [r for r in (row.get("status_reason"), older.get("status_reason")) if r]
    row["status_reason"] = "; ".join(dict.fromkeys(reasons))


def model_here(path: str, trained: bool) -> str | None:
    """The fingerprint of the model at ``path`` in this checkout (``model_fingerprint``),
    None when there is none: a trained model's folder without ``cse_metadata.json``.
    An untrained encoder (a Hub id or a folder) is fingerprinted as the evaluator does.
    A trained model's fingerprint is read from its metadata, not from its weights."""
    from contrastive_sentence_embeddings.encoders.fingerprint import METADATA_FILE, model_fingerprint

    if trained and not (Path(path) / METADATA_FILE).is_file():
        return None
    return model_fingerprint(path)


def broken_model_here(path: str) -> str | None:
    """What is wrong with the model folder at ``path`` in this checkout (a metadata file
    cut short, a recorded file missing or resized: ``encoders.integrity.folder_problems``);
    None when nothing is, or ``path`` is no folder here."""
    from contrastive_sentence_embeddings.encoders.integrity import folder_problems

    return "; ".join(folder_problems(path)) or None


def earlier_models_here(path: str) -> Mapping[str, str | None]:
    """The fingerprints of the models the folder ``path`` held before its current one
    (``model_fingerprint.earlier_models``; none for a Hub id)."""
    from contrastive_sentence_embeddings.encoders.fingerprint import earlier_models

    return earlier_models(path) if Path(path).is_dir() else {}


def evaluation_command(run: str, scope: str = "sts", baseline: bool = False, external: str | None = None) -> str:
    """The command that scores ``run``'s model again (and rewrites its model card):
    its method's evaluation nodes, or for the transfer tasks its ``transfer.`` namespace
    (the untrained encoder: the baseline's; an external row, ``external``: the model
    it scored, the external pipeline)."""
    if external is not None:
        return external_command(run, external, transfer=scope == "transfer")
    if baseline:
        return BASELINE_TRANSFER if scope == "transfer" else BASELINE_EVALUATION
    method = method_block(run)
    if scope == "transfer":
        return f"kedro run --namespaces=transfer.{method}"
    return f"kedro run --namespaces={method},card.{method} --tags=evaluation"


def external_command(run: str, model: str, pooling: str | None = None, transfer: bool = False) -> str:
    """The ``kedro run`` that scores ``model`` as the external row ``run``."""
    settings = [f"external.model={model}", *([f"external.pooling={pooling}"] if pooling else []),
                f"external.name={run}", *(["external.transfer=true"] if transfer else [])]
    return f"kedro run --pipelines=external --params \"{','.join(settings)}\""


def other_model_reason(path: str, run: str, scope: str, earlier: Mapping[str, str | None],
                       fingerprint: str, baseline: bool = False, external: bool = False) -> tuple[str, str]:
    """``(status, reason)`` of a record whose model is not the one now at ``path``: the
    scores of an earlier model of that folder (``earlier``: the fingerprints it held
    before) are stale, with the command that scores the model now there; those of a
    model the folder never held (produced elsewhere, or before models recorded what
    they replaced) are carried."""
    command = evaluation_command(run, scope, baseline, path if external else None)
    if fingerprint in earlier:
        return STALE, (f"scores of an earlier model: the model now in {path} was trained after these scores were "
                       f"computed; rerun `{command}`")
    return CARRIED, (f"the model at {path} is not the one scored (other fingerprint: produced elsewhere, or "
                     f"retrained before models recorded what they replace); `{command}` scores the one there")


@dataclass(frozen=True)
class Today:
    """What a record is compared with: today's run blocks (``config.run_blocks``), the
    encoder, the evaluation settings each kind of record is scored with, the package's
    ``source_hash``, ``fingerprint_of(path, trained)``, the fingerprint of the model
    at a path here (None: no model there), the baseline poolings the transfer
    tasks score (``transfer_evaluation.baseline_poolings``), and ``earlier_models_of(path)``,
    the fingerprints of the models a folder here held before its current one."""

    blocks: Mapping[str, Mapping]
    encoder: str | None
    source_hash: str
    evaluation: Mapping
    baseline_overrides: Mapping
    transfer_overrides: Mapping
    fingerprint_of: Callable[[str, bool], str | None] = model_here
    baseline_transfer_poolings: tuple[str, ...] = ()
    earlier_models_of: Callable[[str], Mapping[str, str | None]] = earlier_models_here
    broken_of: Callable[[str], str | None] = broken_model_here

    @classmethod
    def from_parameters(cls, parameters: Mapping, fingerprint_of: Callable[[str, bool], str | None] = model_here,
                        source_hash: str | None = None) -> "Today":
        from contrastive_sentence_embeddings.configuration.blocks import (
            BaselineConfig,
            TransferEvaluationConfig,
            run_blocks,
        )
        from contrastive_sentence_embeddings.configuration.strict import parse_strict

        baseline = parse_strict(BaselineConfig, parameters.get("baseline") or {}, "baseline")
        transfer = parse_strict(TransferEvaluationConfig, parameters.get("transfer_evaluation") or {},
                                "transfer_evaluation")
        return cls(blocks=run_blocks(parameters) if parameters.get("methods") else {},
                   encoder=parameters.get("encoder"), source_hash=source_hash or provenance.source_hash(),
                   evaluation=dict(parameters.get("evaluation") or {}), baseline_overrides=dict(baseline.overrides),
                   transfer_overrides=dict(transfer.evaluation), fingerprint_of=fingerprint_of,
                   baseline_transfer_poolings=tuple(transfer.baseline_poolings))

    def settings(self, scope: str, run: str, baseline: bool, external: Mapping | None = None) -> dict | None:
        """Today's evaluation settings (as records hold them) for ``run``'s records in
        ``scope`` (``sts``: ``metrics/``, ``transfer``: ``metrics_full/``); None when
        today's parameters have no such run. An external row (``external``: the
        settings its record holds) is compared with today's ``evaluation`` with its own
        choice of transfer tasks: its parameters were given for its run only."""
        from contrastive_sentence_embeddings.evaluation.evaluator import evaluation_settings

        if external is not None:
            overrides = {"transfer": bool(external.get("transfer"))}
        elif scope == "transfer":
            overrides = self.transfer_overrides
        elif baseline:
            overrides = self.baseline_overrides
        elif run in self.blocks:
            overrides = self.blocks[run].get("evaluation") or {}
        else:
            return None
        return provenance.evaluation_settings_record(evaluation_settings(self.evaluation, overrides))


def record_status(record: Mapping, today: Today, scope: str = "sts") -> tuple[str, list[str]]:
    """``(status, reasons)`` of one metrics record (module docstring). A summary over
    seeds is as current as the worst of its runs, each reason naming its run."""
    identity = record.get("model") or {}
    record_provenance = record.get("provenance")
    method = identity.get("method")
    if record_provenance and record_provenance.get("runs"):
        worst, reasons = CURRENT, []
        for run, run_provenance in record_provenance["runs"].items():
            status, why = _provenance_status(run_provenance, run, method, today, scope)
            worst = max(worst, status, key=_SEVERITY.__getitem__)
            reasons += [f"{run}: {reason}" for reason in why]
        return worst, reasons
    return _provenance_status(record_provenance, identity.get("name"), method, today, scope,
                              identity.get("path"), record.get("model_fingerprint"))


def _provenance_status(record_provenance: Mapping | None, run: str | None, method: str | None, today: Today,
                       scope: str, path: str | None = None, fingerprint: str | None = None) -> tuple[str, list[str]]:
    model = (record_provenance or {}).get("model") or {}
    path, fingerprint = model.get("path") or path, model.get("fingerprint") or fingerprint
    baseline, external = method == "baseline", method == EXTERNAL
    if not path or not fingerprint:
        return CARRIED, ["no provenance and no model fingerprint (written before records carried them)"]
    # A damaged folder is named as such, not taken for another model (its fingerprint
    # would be computed from what is left of it).
    broken = today.broken_of(path)
    if broken:
        return CARRIED, [f"the model folder {path} is broken: {broken}; restore it (`dvc checkout`) or train "
                         "the model again"]
    here = today.fingerprint_of(path, not (baseline or external))
    if here is None:
        return CARRIED, [f"no model at {path}"]
    if here != fingerprint:
        status, reason = other_model_reason(path, str(run), scope, today.earlier_models_of(path), fingerprint,
                                            baseline, external)
        return status, [reason]
    if not record_provenance:
        return STALE, ["written before records carried provenance: its code and parameters are unknown"]
    reasons = []
    if baseline:
        pooling = (record_provenance.get("parameters") or {}).get("pooling")
        expected = provenance.baseline_parameters(today.encoder, pooling)
        if provenance.sha256_of(expected) != record_provenance.get("params_hash"):
            reasons.append(f"encoder changed: {record_provenance.get('encoder')} -> {today.encoder}")
    elif external:
        pass  # its parameters (the model and pooling) were its run's own: the fingerprint above is the check
    else:
        block = today.blocks.get(str(run))
        recorded_hash = provenance.recorded_params_hash(record_provenance)
        if not recorded_hash:
            reasons.append("trained before models recorded their provenance: its parameters are unknown")
        elif block is None:
            method_runs = sorted(name for name in today.blocks if method_block(name) == method_block(str(run)))
            reasons.append(f"{run} is not a run of today's parameters (`methods` or `seeds` changed; today's runs "
                           f"of {method_block(str(run))}: {', '.join(method_runs) or 'none'})")
        elif provenance.params_hash(block) != recorded_hash:
            before = provenance.without(record_provenance.get("parameters") or {}, provenance.RUN_INDEPENDENT_KEYS)
            after = provenance.without(block, provenance.RUN_INDEPENDENT_KEYS)
            reasons.append("parameters changed: " + ", ".join(provenance.parameter_changes(before, after)))
        if record_provenance.get("encoder") and today.encoder and record_provenance["encoder"] != today.encoder:
            reasons.append(f"encoder changed: {record_provenance['encoder']} -> {today.encoder}")
    training_code = (((record_provenance.get("training") or {}).get("code")) or {}).get("source_hash")
    evaluation = record_provenance.get("evaluation") or {}
    if training_code and training_code != today.source_hash:
        reasons.append("code changed since training")
    elif (evaluation.get("code") or {}).get("source_hash") != today.source_hash:
        reasons.append("code changed since scoring")
    recorded_settings = evaluation.get("settings") or {}
    expected = today.settings(scope, str(run), baseline, recorded_settings if external else None)
    if expected is not None and provenance.sha256_of(expected) != evaluation.get("settings_hash"):
        changes = provenance.parameter_changes(evaluation.get("settings") or {}, expected)
        reasons.append("evaluation parameters changed: " + ", ".join(changes))
    return (STALE if reasons else CURRENT), reasons


def with_status(records: Mapping[str, Mapping], today: Today, scope: str = "sts") -> dict[str, dict]:
    """Each record with its ``status`` and ``status_reason`` (reasons joined by "; ")."""
    annotated = {}
    for name, record in records.items():
        status, reasons = record_status(record, today, scope)
        annotated[name] = {**record, "status": status, "status_reason": "; ".join(reasons)}
    return annotated


def is_carried(table: pd.DataFrame) -> pd.Series:
    """Rows carried from the repository (a table without statuses has none)."""
    if "status" not in table:
        return pd.Series(False, index=table.index)
    return table["status"] == CARRIED


def load_reported_results() -> list[dict]:
    """The papers' reported numbers shipped with the package (see the YAML for sources)."""
    text = resources.files("contrastive_sentence_embeddings.evaluation").joinpath("reported_results.yml").read_text()
    return yaml.safe_load(text)


def metrics_table(metrics_by_model: Mapping[str, Mapping]) -> pd.DataFrame:
    """One row per evaluated model, identity columns first, then the papers' column
    order; metrics a model was not scored on are empty (NaN)."""
    rows = []
    for key, metrics in sorted(metrics_by_model.items()):
        identity = metrics.get("model", {})
        row = {
            "model": identity.get("name", key),
            "method": identity.get("method", ""),
            "base_encoder": identity.get("base_encoder", ""),
            "pooling": identity.get("pooling", ""),
            "seed": identity.get("seed"),
            "evaluated_at": _minutes(metrics.get("evaluated_at")),
        }
        for column in [*STS_COLUMNS, *WMEAN_COLUMNS, *TRANSFER_COLUMNS, *GEOMETRY_COLUMNS]:
            value = metrics.get(column)
            row[column] = float(value) if isinstance(value, (int, float)) else np.nan
        row.update(provenance_columns(metrics))
        row["not_scored"] = " ".join(not_scored_tasks(metrics))
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*IDENTITY_COLUMNS, *STS_COLUMNS, *WMEAN_COLUMNS, *TRANSFER_COLUMNS,
                                        *GEOMETRY_COLUMNS, *STATUS_COLUMNS])
    table["seed"] = table["seed"].astype("Int64")
    # Baselines first, then external encoders, then methods, best STS average first within each.
    table["_group"] = table["method"].map({"baseline": 0, EXTERNAL: 1}).fillna(2)
    table = table.sort_values(["_group", "method", "sts_avg"], ascending=[True, True, False], na_position="last")
    return table.drop(columns="_group").reset_index(drop=True)


def not_scored_tasks(metrics: Mapping) -> list[str]:
    """The STS tasks a record could not score (every pair of the task's files dropped as
    bad input: its ``evaluation_report.missing_tasks``): marked ``missing`` in every
    table, their averages ``n/a``."""
    report = metrics.get("evaluation_report") or {}
    return [str(task) for task in (report.get("missing_tasks") or {})]


def not_scored_cell(value) -> list[str]:
    """The tasks a ``not_scored`` cell names. The cell is a space-separated list, empty
    when every task was scored; a table read back from CSV may hold NaN (or None) for
    the empty cell, which names no task."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    return str(value).split()


def provenance_columns(metrics: Mapping) -> dict:
    """A record's status (``status``, ``status_reason``: empty when not annotated) and
    what produced it, shortened for the table: the parameters' and the code's hashes
    (the training's code for a trained model) and the git commit with ``dirty``. A
    summary over seeds shows its shared ``config_hash`` and its first run's code."""
    record_provenance = metrics.get("provenance") or {}
    runs = record_provenance.get("runs") or {}
    if runs:
        source = next(iter(runs.values())) or {}
        parameters_hash = record_provenance.get("config_hash")
    else:
        source = record_provenance
        parameters_hash = provenance.recorded_params_hash(record_provenance)
    code = (source.get("training") or {}).get("code") or (source.get("evaluation") or {}).get("code") or {}
    dirty = code.get("dirty")
    return {"status": metrics.get("status", ""), "status_reason": metrics.get("status_reason", ""),
            "params_hash": provenance.short(parameters_hash), "source_hash": provenance.short(code.get("source_hash")),
            "commit": provenance.short(code.get("commit")), "dirty": "" if dirty is None else str(bool(dirty)).lower(),
            "environment": record_environments(metrics)}


def evaluation_environments(metrics: Mapping) -> list[Mapping | None]:
    """The environment records a record's scores were computed with: its own, or for a
    summary over seeds each run's (None where a run's record names none)."""
    record_provenance = metrics.get("provenance") or {}
    sources = list((record_provenance.get("runs") or {}).values()) or [record_provenance]
    return [((source or {}).get("evaluation") or {}).get("environment") for source in sources]


def record_environments(metrics: Mapping) -> str:
    """The key (``provenance.environment_key``) of the machine and libraries a record's
    scores were computed with; for a summary over seeds, each run's distinct key joined
    by ``+``; ``""`` for a record written before records named them."""
    keys = [provenance.environment_key(environment) for environment in evaluation_environments(metrics)]
    return "+".join(dict.fromkeys(keys)) if all(keys) else ""


def environments_of(metrics_by_model: Mapping[str, Mapping]) -> dict[str, Mapping]:
    """Every environment record the records hold (each run's for a seed summary), by key."""
    return {provenance.environment_key(environment): environment
            for metrics in metrics_by_model.values() for environment in evaluation_environments(metrics)
            if environment}


def environment_labels(table: pd.DataFrame) -> dict[str, str]:
    """``E1``, ``E2``, ... for the environment keys of ``table``'s rows, in order of
    first appearance (a seed summary's ``a+b`` counts each part)."""
    labels: dict[str, str] = {}
    for keys in table["environment"] if "environment" in table else []:
        for key in str(keys or "").split("+"):
            if key and key not in labels:
                labels[key] = f"E{len(labels) + 1}"
    return labels


def environment_lines(table: pd.DataFrame, environments: Mapping[str, Mapping]) -> tuple[list[str], dict[str, str]]:
    """The page's lines on where its scores were computed, and the label of each key
    for the ``env`` column (empty when every row shares one environment, which the
    lines then name). Scores of one commit differ in the second decimal between
    machines (an Intel Xeon with AMX against an AMD EPYC without: docs/evaluation.md),
    so rows of different environments are never silently compared."""
    if table.empty:
        return [], {}
    labels = environment_labels(table)
    unrecorded = table["environment"].eq("").sum() if "environment" in table else len(table)
    if not labels:
        return ["No row records the machine and libraries it was scored on (written before records named "
                "them).", ""], {}
    if len(labels) == 1 and not unrecorded:
        (key,) = labels
        return [f"Every score here was computed on one environment: {provenance.environment_label(environments.get(key))}.",
                ""], {}
    lines = ["Rows were scored on different machines or library versions (`env`); scores of one commit differ "
             "in the last digits between machines, so compare rows of one `env` (`vs base` tests a row against "
             "a base scored on another and says so):", ""]
    lines += [f"- {label}: {provenance.environment_label(environments.get(key))}" for key, label in labels.items()]
    if unrecorded:
        lines.append("- (empty): not recorded (written before records named their machine)")
    return [*lines, ""], labels


def environment_cell(keys: str, labels: Mapping[str, str]) -> str:
    return "+".join(labels.get(key, key) for key in str(keys or "").split("+") if key)


def csv_table(table: pd.DataFrame) -> pd.DataFrame:
    """The table as ``leaderboard.csv`` holds it: the older columns in their order, then
    the status, provenance and note columns."""
    later = [c for c in [*STATUS_COLUMNS, *NOTE_COLUMNS, *SEED_INTERVAL_COLUMNS, *REFERENCE_COLUMNS] if c in table]
    return table[[c for c in table.columns if c not in later] + later]


def _minutes(stamp) -> str:
    """``2025-01-31T12:00:05+00:00`` as ``2025-01-31 12:00`` for the table (UTC)."""
    if not stamp:
        return ""
    return evaluated_at({"evaluated_at": stamp}).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")


def add_paper_reference(table: pd.DataFrame, reported: Sequence[Mapping]) -> pd.DataFrame:
    """``paper_sts_avg``: the STS average a paper reports for the same method, base
    encoder and pooling in the "all" setting, where one exists."""
    lookup = {
        (entry["method"], entry["base_encoder"], entry.get("pooling")): entry["sts"]["sts_avg"]
        for entry in reported
        if entry.get("setting") == "all" and "sts" in entry
    }
    table = table.copy()
    table["paper_sts_avg"] = [
        lookup.get((row.method, row.base_encoder, row.pooling), np.nan) for row in table.itertuples()
    ]
    return table


def reported_table(reported: Sequence[Mapping]) -> pd.DataFrame:
    rows = []
    for entry in reported:
        row = {"method": entry["method"], "base_encoder": entry["base_encoder"], "pooling": entry.get("pooling", ""),
               "setting": entry.get("setting", ""), "source": entry.get("source", "")}
        row.update(entry.get("sts", {}))
        row.update(entry.get("transfer", {}))
        rows.append(row)
    columns = ["method", "base_encoder", "pooling", "setting", *STS_COLUMNS,
               *[c for c in TRANSFER_COLUMNS if c != "MRPC_f1"], "source"]
    return pd.DataFrame(rows).reindex(columns=columns)


def _cell(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _row_cell(row: pd.Series, column: str) -> str:
    """A cell of ``row``: ``missing`` for an STS task the row's record could not score
    (``not_scored``), ``n/a`` for an average over the tasks when one is missing."""
    not_scored = not_scored_cell(row.get("not_scored"))
    if not_scored and column in STS_COLUMNS + WMEAN_COLUMNS:
        if column.removesuffix("_wmean") in not_scored:
            return "missing"
        if column.startswith("sts_avg"):
            return "n/a"
    return _cell(row[column])


def markdown_table(table: pd.DataFrame, columns: Sequence[str]) -> str:
    """A GitHub-flavoured Markdown table; numbers to 2 decimals, missing values empty
    (an STS task a record could not score says ``missing``). Columns that are empty in
    every row are left out."""
    cells = {c: [_row_cell(row, c) for _, row in table.iterrows()] for c in columns if c in table}
    columns = [c for c in columns if c in cells and any(cells[c])]
    header = "| " + " | ".join(HEADERS.get(c, c) for c in columns) + " |"
    rule = "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(table[c]) else "---" for c in columns) + "|"
    body = ["| " + " | ".join(cells[c][i] for c in columns) + " |" for i in range(len(table))]
    return "\n".join([header, rule, *body])


STATUS_TEXT = (
    "`status`: **current** = produced here from today's code and parameters (its parameter block and the "
    "package's source hash equal today's, and its model is in its folder with the fingerprint it was scored "
    "with); **stale** = its parameters, encoder, evaluation settings or code changed since, or its model was "
    "retrained after it was scored; the cell says which, and what to rerun to refresh it; "
    "**carried** = no model behind it here (a result committed with the repository, or produced elsewhere): "
    "shown apart at the end, never compared or averaged with this checkout's runs. docs/evaluation.md lists each "
    "record's provenance."
)


def status_cell(status, reason) -> str:
    """``current``, or ``stale: <reason>``."""
    status = "" if status is None or (isinstance(status, float) and math.isnan(status)) else str(status)
    reason = "" if reason is None or (isinstance(reason, float) and math.isnan(reason)) else str(reason)
    return f"{status}: {reason}" if status and reason else status


def built_by_line(built: Mapping) -> str:
    """The page's first line after its title: the checkout it describes (commit, whether
    src/ or conf/ had uncommitted changes, the machine, the time). A committed page is
    read in other checkouts, where the models behind its ``current`` rows may be absent."""
    commit = str(built.get("commit") or provenance.UNKNOWN)
    dirty = {True: " with uncommitted changes in src/ or conf/", False: "", None: ""}[built.get("dirty")]
    return (f"This page describes the checkout that built it: commit {commit[:SHORT_COMMIT]}{dirty}, on "
            f"{provenance.environment_label(built.get('environment'))}, at {_minutes(built.get('built_at'))} UTC. "
            "Its statuses are that checkout's: in another (a fresh clone has no trained model), rebuild it with "
            "`kedro run --pipelines=leaderboard` (seconds) before reading them.")


SHORT_COMMIT = 12


def build_record() -> dict:
    """What :func:`built_by_line` says of this checkout, now."""
    return {**provenance.git_state(), "environment": provenance.environment_record(), "built_at": provenance.utc_now()}


def leaderboard_markdown(table: pd.DataFrame, reported: pd.DataFrame, alpha: float = 0.05,
                         examples_budget: int | None = None, metrics_by_model: Mapping[str, Mapping] | None = None,
                         baseline_poolings: Sequence[str] | None = None, built: Mapping | None = None) -> str:
    """The leaderboard page. This checkout's rows (current and stale) fill the tables;
    carried rows have their own section at the end. With ``metrics_by_model`` (the
    records of the rows), "Each seed's run" lists the runs each seed summary averaged,
    and the runs it left out (``provenance.runs_of_one_configuration``) or that no
    summary holds are listed apart, with the reason. With ``baseline_poolings`` (today's
    ``transfer_evaluation.baseline_poolings``), the transfer table leaves out the
    baseline rows of other poolings, which it does not score, and says so in one line."""
    left_out = left_out_runs(metrics_by_model or {})
    summarised = summarised_runs(metrics_by_model) if metrics_by_model is not None else None
    identity = IDENTITY_COLUMNS
    uncertain = "p_vs_base" in table and "n_seeds" in table
    statuses = "status" in table and table["status"].ne("").any()
    gone = is_carried(table)
    table = table.copy()
    if statuses:
        table["status"] = [status_cell(s, r) for s, r in zip(table["status"], table["status_reason"])]
    # Where this checkout's rows were scored (carried rows are never compared with them).
    environment_text, env_labels = environment_lines(table[~gone], environments_of(metrics_by_model or {}))
    if env_labels:
        identity = [*identity, "env_label"]
        table["env_label"] = [environment_cell(keys, env_labels) for keys in table["environment"]]
    carried = table[gone]
    table = table[~gone]
    status = ["status"] if statuses else []
    main = table[~seed_run_rows(table)]
    runs = table[seed_run_rows(table)]
    if summarised is not None:
        runs, unsummarised = runs[runs["model"].isin(summarised)], runs[~runs["model"].isin(summarised)]
    else:
        unsummarised = runs.iloc[:0]
    sts = uncertainty_view(main, alpha) if uncertain else main
    against = reference_column(main)
    compared = [against] if against else []
    budget = (["n_seeds", *STS_COLUMNS, "seed CI", "vs base", *compared, "examples_seen", "train_seconds",
               "best_step"] if uncertain else STS_COLUMNS)
    parts = [
        "# Leaderboard",
        "",
        "Written by the `leaderboard` node from `data/08_reporting/metrics/*.json`; do not edit by hand.",
        "",
    ]
    if built is not None:
        parts += [built_by_line(built), ""]
    if statuses:
        parts += [STATUS_TEXT, ""]
    parts += environment_text
    parts += ["## STS (Spearman x 100, SentEval \"all\" setting)", ""]
    if examples_budget is not None:
        parts += [f"Trained rows filtered to an equal budget of {examples_budget:,} training examples seen.", ""]
    if uncertain:
        parts += [
            "A method run for several seeds shows the mean +- standard deviation over its `n_seeds` runs (each "
            "run below; only runs of one configuration are averaged). `vs base`: STS avg difference to the "
            "untrained encoder with the same pooling, from a "
            "paired bootstrap over the pairs of all 7 tasks (1,000 resamples; for several seeds, the mean "
            f"difference and the largest p-value); `n.s.`: not significant at p < {alpha}. "
            "`examples_seen` and `train_seconds` are the training budget (mean over seeds); `kept step` is the "
            "step whose weights were kept (best dev score; mean over seeds): 0 means no training step beat the "
            "starting weights, so the row scores the starting encoder (with any newly initialised layers). "
            "`seed CI`: the 95% interval of the mean STS avg over the seeds (Student's t on the seeds' standard "
            "deviation; wide with 3 seeds).",
            "",
        ]
        if against:
            parts += [f"`{against}`: STS avg difference to the reference row `{main['reference'].iloc[0]}` "
                      "(`leaderboard.reference`), by the same paired bootstrap over the pairs of all 7 tasks; rows "
                      "over seeds are tested seed against seed (mean difference, largest p-value).", ""]
    if main.empty and runs.empty:
        parts += ["No result was produced in this checkout yet: every row is carried from the repository "
                  "(at the end).", ""]
    else:
        parts += [markdown_table(sts, [*identity, *status, *budget, "paper_sts_avg"]), ""]
    short = short_scores(metrics_by_model or {})
    shown_here = set(table["model"])
    for model, tasks in sorted(short.items()):
        if model in shown_here:
            parts += [f"**{model}: scored on fewer pairs than the benchmark**, not comparable with published "
                      f"scores: {'; '.join(tasks)} (its record's `evaluation_report` says why).", ""]
    for summary, excluded in sorted((left_out or {}).items()):
        if summary in set(main["model"]):
            parts += [f"{summary}: left out of its seed summary (another configuration): "
                      + "; ".join(f"{run} ({why})" for run, why in sorted(excluded.items())), ""]
    if uncertain and not runs.empty:
        parts += ["## Each seed's run", "", markdown_table(uncertainty_view(runs, alpha),
                                                          [*identity, *status, *STS_COLUMNS, "vs base", *compared]),
                  ""]
    if not unsummarised.empty:
        view = uncertainty_view(unsummarised, alpha) if uncertain else unsummarised
        parts += ["## Seed runs in no seed summary", "",
                  "Runs of this checkout that their method's summary does not average (another configuration, "
                  "or a run its last aggregation did not see): shown for what they are, never averaged.", "",
                  markdown_table(view, [*identity, *status, "sts_avg", "vs base"]), ""]
    if uncertain:
        intervals = intervals_view(table)
        if not intervals.empty:
            parts += ["## 95% bootstrap intervals of each score (1,000 resamples of the pairs)", "",
                      markdown_table(intervals, ["model", "pooling", *STS_COLUMNS]), ""]
    if not main.empty:
        parts += [
            "## STS, subsets averaged weighted by size (\"wmean\")",
            "",
            markdown_table(main, [*identity, *WMEAN_COLUMNS]),
            "",
        ]
    transfer = _transfer_rows(table)
    unscored = pd.Series(False, index=transfer.index)
    if baseline_poolings is not None:
        unscored = (transfer["method"] == "baseline") & ~transfer["pooling"].isin(list(baseline_poolings)) & \
            transfer[TRANSFER_COLUMNS].isna().all(axis=1)
    if not transfer.empty and (table[TRANSFER_COLUMNS].notna().any().any() or "transfer_note" in table):
        parts += ["## Transfer tasks (accuracy; MRPC also F1)", ""]
        if not transfer[~unscored].empty:
            parts += [markdown_table(transfer[~unscored], [*identity, *TRANSFER_COLUMNS, "transfer_note"]), ""]
            shown_here = set(transfer[~unscored]["model"])
            for cut, models in cut_training_splits(metrics_by_model or {}).items():
                models = [model for model in models if model in shown_here]
                if models:
                    parts += [f"**{cut}** ({'every row' if set(models) == shown_here else ', '.join(models)}): "
                              "not SentEval's setting, whose classifier sees every training row.", ""]
        if unscored.any():
            parts += [baseline_transfer_line(baseline_poolings), ""]
    if table[GEOMETRY_COLUMNS].notna().any().any():
        parts += ["## Alignment and uniformity (lower is better for both)", "",
                  markdown_table(main, [*identity, *GEOMETRY_COLUMNS, "sts_avg"]), ""]
    if not carried.empty:
        shown = uncertainty_view(carried, alpha) if uncertain else carried
        parts += [
            "## Carried from the repository (reference)",
            "",
            "Results with no model behind them here (committed with the repository, or produced elsewhere "
            "with other code or parameters): kept for reference, never compared or averaged with the rows "
            "above. Rerun a method's pipeline to get it here.",
            "",
            markdown_table(shown, ["model", "method", "pooling", "seed", "evaluated_at", "n_seeds", "sts_avg",
                                   "sts_avg_wmean", "transfer_avg", "status"]),
            "",
        ]
    parts += [
        "## Reported in the papers (full-scale training, for reference)",
        "",
        markdown_table(reported, list(reported.columns)),
        "",
    ]
    return "\n".join(parts)


def short_scores(metrics_by_model: Mapping[str, Mapping]) -> dict[str, list[str]]:
    """``{model: ["sts12 2,358 of 3,108 pairs", ...]}`` for every record scored on fewer
    pairs of a task than its benchmark has (a file's lines dropped as bad input, a subset
    left with none) or on none (``sts13 not scored, no pair left (why)``): said under
    the table, since the score is not the benchmark's."""
    short = {}
    for key, metrics in metrics_by_model.items():
        report = metrics.get("evaluation_report") or {}
        pairs, benchmark = report.get("pairs") or {}, report.get("benchmark_pairs") or {}
        tasks = [f"{task} {count:,} of {benchmark[task]:,} pairs" for task, count in pairs.items()
                 if isinstance(count, int) and isinstance(benchmark.get(task), int) and count < benchmark[task]]
        tasks += [f"{task} not scored, no pair left ({why})"
                  for task, why in (report.get("missing_tasks") or {}).items()]
        if tasks:
            short[(metrics.get("model") or {}).get("name", key)] = tasks
    return short


def cut_training_splits(metrics_by_model: Mapping[str, Mapping]) -> dict[str, list[str]]:
    """``{"SST2's classifier trained on 10,000 of 67,349 training rows": [model, ...]}``
    for every row (of :func:`newest_metrics`) whose transfer classifier saw only part of
    a task's training split (``evaluation.transfer_train_rows``, the CPU default): said
    under the transfer table, since the score is not SentEval's setting."""
    cut: dict[str, list[str]] = {}
    for key, metrics in sorted(metrics_by_model.items()):
        for task, rows in sorted((metrics.get(CUT_SPLITS) or {}).items()):
            text = f"{task}'s classifier trained on {rows['used']:,} of {rows['read']:,} training rows"
            cut.setdefault(text, []).append((metrics.get("model") or {}).get("name", key))
    return cut


def _transfer_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the transfer table: every row that is not a seed's run (with its note
    when it has no scores), and the seed runs that were scored (a method's first seed)."""
    scored = table[TRANSFER_COLUMNS].notna().any(axis=1) if not table.empty else pd.Series(dtype=bool)
    keep = ~seed_run_rows(table) | scored
    if "transfer_note" not in table:
        keep &= scored
    return table[keep]


def summarised_runs(metrics_by_model: Mapping[str, Mapping]) -> set[str]:
    """The runs some seed summary of this checkout averaged (its ``seed_runs``; a carried
    summary averaged the repository's runs, not these)."""
    return {run for metrics in metrics_by_model.values() if metrics.get("status") != CARRIED
            for run in (metrics.get("seed_runs") or {})}


def left_out_runs(metrics_by_model: Mapping[str, Mapping]) -> dict[str, dict[str, str]]:
    """``{summary: {run: reason}}``: the runs each seed summary left out."""
    return {metrics.get("model", {}).get("name", key): dict(metrics["left_out"])
            for key, metrics in metrics_by_model.items() if metrics.get("left_out")}


def alignment_uniformity_figure(table: pd.DataFrame):
    """Uniformity (x) against alignment (y), coloured by STS average: the layout of the
    SimCSE and SCD figures (lower left is better). Each model is a numbered point
    named in the legend beside the axes (labels on the points hid each other); a
    method run for several seeds shows each seed's run as a small point and its mean
    with error bars of one standard deviation over seeds. Rows carried from the
    repository are hollow points marked ``[carried]`` in the legend (stale rows
    ``[stale]``), so they are never read as this checkout's results."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = table.dropna(subset=["alignment", "uniformity"])
    figure, axis = plt.subplots(figsize=(9.0, 4.8), dpi=150)
    if points.empty:
        axis.text(0.5, 0.5, "no model has alignment / uniformity yet", ha="center", va="center")
        axis.set_axis_off()
        return figure
    carried = is_carried(points)
    status = points["status"] if "status" in points else pd.Series("", index=points.index)
    summaries = points[~seed_run_rows(points)]
    runs = points[seed_run_rows(points)]
    norm = matplotlib.colors.Normalize(points["sts_avg"].min(), points["sts_avg"].max())
    cmap = matplotlib.colormaps["viridis"]
    for rows, hollow in ((runs[~carried[runs.index]], False), (runs[carried[runs.index]], True)):
        if not rows.empty:
            colours = cmap(norm(rows["sts_avg"].to_numpy()))
            axis.scatter(rows["uniformity"], rows["alignment"], s=14, alpha=0.6,
                         facecolors="none" if hollow else colours, edgecolors=colours if hollow else "none")
    # Models at the same point (e.g. the mean / last_avg aliases) share one number.
    numbered: dict[tuple[float, float], list[str]] = {}
    for row in summaries.itertuples():
        mark = {CARRIED: " [carried]", STALE: " [stale]"}.get(status[row.Index], "")
        numbered.setdefault((round(row.uniformity, 4), round(row.alignment, 4)), []).append(f"{row.model}{mark}")
    for row in summaries.itertuples():
        x_err = getattr(row, "uniformity_std", np.nan) if "uniformity_std" in summaries else np.nan
        y_err = getattr(row, "alignment_std", np.nan) if "alignment_std" in summaries else np.nan
        if not (math.isnan(x_err) and math.isnan(y_err)):
            axis.errorbar(row.uniformity, row.alignment, xerr=0 if math.isnan(x_err) else x_err,
                          yerr=0 if math.isnan(y_err) else y_err, fmt="none", ecolor="grey", elinewidth=0.8,
                          capsize=2)
    own, reference = summaries[~carried[summaries.index]], summaries[carried[summaries.index]]
    scatter = axis.scatter(own["uniformity"], own["alignment"], c=own["sts_avg"], cmap=cmap, norm=norm, s=60,
                           edgecolors="black", linewidths=0.5)
    if not reference.empty:
        axis.scatter(reference["uniformity"], reference["alignment"], s=60, facecolors="none", linewidths=1.2,
                     edgecolors=cmap(norm(reference["sts_avg"].to_numpy())))
    legend = []
    for number, ((x, y), names) in enumerate(sorted(numbered.items(), key=lambda item: item[1]), start=1):
        axis.annotate(str(number), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8, weight="bold")
        legend.append(f"{number}  {' = '.join(names)}")
    axis.text(1.28, 1.0, "\n".join(legend), transform=axis.transAxes, va="top", ha="left", fontsize=7,
              family="monospace")
    mappable = matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap)
    colorbar = figure.colorbar(scatter if not own.empty else mappable, ax=axis)
    colorbar.set_label("STS avg (Spearman x 100)")
    axis.set_xlabel(r"$\ell_{\mathrm{uniform}}$")
    axis.set_ylabel(r"$\ell_{\mathrm{align}}$")
    title = "Alignment and uniformity (STS-B); small points: single seeds"
    if carried.any():
        title += "\nhollow: carried from the repository (no model here)"
    axis.set_title(title, fontsize=9 if carried.any() else None)
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.subplots_adjust(right=0.58)
    return figure


# --- uncertainty: seeds, bootstrap intervals, paired tests, budgets -------------------------
SEED_RUN = ".seed"   # a seed's run is called <method>.seed<k>; its method's summary row <method>


def is_seed_run(name: str) -> bool:
    return SEED_RUN in str(name)


def seed_run_rows(table: pd.DataFrame) -> pd.Series:
    """Which rows are single seeds' runs (a boolean mask, also for an empty table)."""
    return table["model"].map(is_seed_run).astype(bool)


def add_uncertainty(table: pd.DataFrame, metrics_by_model: Mapping[str, Mapping]) -> pd.DataFrame:
    """Per row: the standard deviation over seeds of every STS score (``<score>_std``,
    rows summarising several seeds), ``n_seeds``, each STS score's bootstrap interval
    (``<score>_ci_lo``, ``<score>_ci_hi``; single runs), the 95% interval of the STS
    average over seeds (``sts_avg_seed_ci_lo``, ``sts_avg_seed_ci_hi``:
    ``significance.seed_interval``, rows over two seeds or more) and the training
    budget (``examples_seen``, ``train_seconds``)."""
    from contrastive_sentence_embeddings.evaluation.significance import seed_interval

    by_name = {metrics.get("model", {}).get("name", key): metrics for key, metrics in metrics_by_model.items()}
    table = table.copy()
    columns: dict[str, list] = {}
    for name in table["model"]:
        metrics = by_name.get(name, {})
        values = {"n_seeds": metrics.get("n_seeds", 1)}
        for column in GEOMETRY_COLUMNS:
            values[f"{column}_std"] = metrics.get(f"{column}_std")
        for column in STS_COLUMNS:
            values[f"{column}_std"] = metrics.get(f"{column}_std")
            interval = metrics.get(f"{column}_ci")
            values[f"{column}_ci_lo"], values[f"{column}_ci_hi"] = interval if interval else (None, None)
        budget = metrics.get("training") or {}
        values["examples_seen"] = budget.get("examples_seen")
        values["train_seconds"] = budget.get("train_seconds")
        values["best_step"] = budget.get("best_step")
        for key, value in values.items():
            columns.setdefault(key, []).append(np.nan if value is None else float(value))
    for key, values in columns.items():
        table[key] = values
    nothing = pd.Series(np.nan, index=table.index)
    intervals = [seed_interval(mean, std, int(n)) if not math.isnan(n) else None
                 for mean, std, n in zip(table["sts_avg"], table.get("sts_avg_std", nothing),
                                         table.get("n_seeds", nothing))]
    table["sts_avg_seed_ci_lo"] = [interval[0] if interval else np.nan for interval in intervals]
    table["sts_avg_seed_ci_hi"] = [interval[1] if interval else np.nan for interval in intervals]
    for key in ("n_seeds", "examples_seen", "best_step"):  # counts and steps, shown without decimals
        table[key] = table[key].round().astype("Int64")
    return table


def _runs_of(metrics: Mapping, name: str) -> list[str]:
    """The runs a row stands for: its seeds' runs when it summarises several, else itself."""
    return list((metrics or {}).get("seed_runs") or {}) or [name]


def add_significance(table: pd.DataFrame, metrics_by_model: Mapping[str, Mapping], pairs: Mapping[str, Mapping],
                     n_resamples: int = 1000, seed: int = 0, alpha: float = 0.05) -> pd.DataFrame:
    """For every trained row, the paired bootstrap test of its STS average against its
    starting encoder (the baseline row of the same base encoder and pooling):
    ``delta_vs_base`` (STS avg difference, x 100) and ``p_vs_base``
    (``significance.paired_bootstrap_pvalue`` over the 7 tasks' pairs). A row that
    summarises seeds is tested seed by seed and gets the mean difference and the
    largest p-value, so "significant" means significant for every seed.
    ``significant`` is ``p_vs_base < alpha``. Only this checkout's rows are tested, each
    against a baseline of this checkout (a carried row is neither); a row with no test
    says why in ``vs_base_note`` (no baseline row, no per-pair predictions, ...)."""
    by_name = {metrics.get("model", {}).get("name", key): metrics for key, metrics in metrics_by_model.items()}
    carried = is_carried(table)
    baselines = {(row.base_encoder, row.pooling): row.model
                 for row, gone in zip(table.itertuples(), carried) if row.method == "baseline" and not gone}
    deltas, p_values, notes = [], [], []
    for row, gone in zip(table.itertuples(), carried):
        base = baselines.get((row.base_encoder, row.pooling))
        runs = _runs_of(by_name.get(row.model), row.model)
        note = _why_no_test(row, gone, base, [run for run in runs if run not in pairs], pairs)
        if note:
            deltas.append(np.nan)
            p_values.append(np.nan)
            notes.append(note)
            continue
        delta, p_value = paired_difference(runs, [base], pairs, n_resamples, seed)
        deltas.append(delta)
        p_values.append(p_value)
        base_environment = table.loc[table["model"] == base, "environment"] if "environment" in table else None
        other = (base_environment is not None and not base_environment.empty
                 and getattr(row, "environment", "") != base_environment.iloc[0])
        notes.append(OTHER_ENVIRONMENT if other else "")
    table = table.copy()
    table["delta_vs_base"] = deltas
    table["p_vs_base"] = p_values
    table["significant"] = [bool(p < alpha) if not math.isnan(p) else None for p in p_values]
    table["vs_base_note"] = notes
    return table


def paired_difference(runs: Sequence[str], others: Sequence[str], pairs: Mapping[str, Mapping],
                      n_resamples: int, seed: int) -> tuple[float, float]:
    """The paired bootstrap test (``significance.paired_bootstrap_pvalue``, on the pairs
    both runs scored) of every run of ``runs`` against every run of ``others``: the
    mean STS avg difference and the largest p-value, so that "significant" holds for
    every pairing of their seeds."""
    from contrastive_sentence_embeddings.evaluation.significance import paired_bootstrap_pvalue

    tests = []
    for run in runs:
        for other in others:
            tasks = sorted(set(pairs[run]) & set(pairs[other]))
            gold = {task: pairs[other][task]["gold"] for task in tasks}
            tests.append(paired_bootstrap_pvalue(gold, {t: pairs[run][t]["predicted"] for t in tasks},
                                                 {t: pairs[other][t]["predicted"] for t in tasks},
                                                 n_resamples=n_resamples, seed=seed))
    return float(np.mean([test.difference for test in tests])), float(max(test.p_value for test in tests))


def reference_column(table: pd.DataFrame) -> str | None:
    """The shown column of the test against the reference row: ``vs <reference>``."""
    if "reference" not in table or table.empty:
        return None
    return f"vs {table['reference'].iloc[0]}"


def add_reference_comparison(table: pd.DataFrame, metrics_by_model: Mapping[str, Mapping],
                             pairs: Mapping[str, Mapping], reference: str | None, n_resamples: int = 1000,
                             seed: int = 0) -> pd.DataFrame:
    """With a ``reference`` row (``leaderboard.reference``: any row's name, e.g.
    ``simcse`` or ``baseline-mean``), every other row of this checkout tested against
    it as ``vs base`` tests against the starting encoder: ``delta_vs_ref`` (STS avg
    difference, x 100) and ``p_vs_ref`` from the paired bootstrap over the pairs of
    the 7 tasks (:func:`paired_difference`: rows over seeds, either side, are tested
    seed against seed; the mean difference and the largest p-value), or why not in
    ``vs_ref_note``. Without a reference the table is returned as it is."""
    if not reference:
        return table
    by_name = {metrics.get("model", {}).get("name", key): metrics for key, metrics in metrics_by_model.items()}
    carried = is_carried(table)
    rows = table[(table["model"] == reference) & ~carried]
    reference_row = next(rows.itertuples(), None)
    reference_runs = _runs_of(by_name.get(reference), reference)
    deltas, p_values, notes = [], [], []
    for row, gone in zip(table.itertuples(), carried):
        runs = _runs_of(by_name.get(row.model), row.model)
        if row.model == reference:
            note = "n/a (the reference)"
        elif gone:
            note = "carried: not compared with this checkout's runs"
        elif reference_row is None:
            note = f"no row {reference} in this checkout"
        else:
            missing = [run for run in [*runs, *reference_runs] if run not in pairs]
            not_scored = not_scored_cell(getattr(row, "not_scored", None)) + not_scored_cell(
                getattr(reference_row, "not_scored", None))
            note = (f"no per-pair predictions of {', '.join(missing)}" if missing else
                    f"n/a ({', '.join(sorted(set(not_scored)))} not scored)" if not_scored else "")
        if note:
            deltas.append(np.nan)
            p_values.append(np.nan)
            notes.append(note)
            continue
        delta, p_value = paired_difference(runs, reference_runs, pairs, n_resamples, seed)
        deltas.append(delta)
        p_values.append(p_value)
        notes.append("")
    table = table.copy()
    table["reference"] = reference
    table["delta_vs_ref"] = deltas
    table["p_vs_ref"] = p_values
    table["vs_ref_note"] = notes
    return table


# A `vs base` test whose row and base were scored on different machines or libraries.
OTHER_ENVIRONMENT = "base scored in another env"


def _why_no_test(row, carried: bool, base: str | None, missing_runs: Sequence[str], pairs: Mapping) -> str:
    """Why a row has no ``vs base`` value ("" when it can be tested)."""
    if row.method == "baseline":
        return "n/a (the base)"
    if carried:
        return "carried: not compared with this checkout's runs"
    if base is None and row.method == EXTERNAL:
        return f"n/a (no baseline of {row.base_encoder} here)"
    if base is None:
        return f"no baseline with {row.pooling} pooling here (kedro run --pipelines=baseline)"
    if base not in pairs:
        return "no baseline predictions (kedro run --pipelines=baseline)"
    if missing_runs:
        return f"no per-pair predictions of {', '.join(missing_runs)} (kedro run --pipelines={method_block(row.model)})"
    not_scored = not_scored_cell(getattr(row, "not_scored", None))
    if not_scored:
        # The test is over all 7 tasks' pairs, as STS avg is: on fewer it would be another test.
        return f"n/a ({', '.join(not_scored)} not scored)"
    return ""


def method_block(model: str) -> str:
    """The method block a run belongs to: ``simcse`` for ``simcse.seed42``."""
    return str(model).split(SEED_RUN, 1)[0]


BASELINE_TRANSFER = "kedro run --nodes=baseline.transfer"
BASELINE_EVALUATION = "kedro run --nodes=baseline.evaluate,baseline.mteb_results"


def add_transfer_notes(table: pd.DataFrame, baseline_poolings: Sequence[str] | None = None) -> pd.DataFrame:
    """``transfer_note``: why a row has no transfer scores, and how to get them (empty
    for a row that has them, or that is carried: a carried row is not run here). A
    baseline pooling the transfer tasks score (``baseline_poolings``: today's
    ``transfer_evaluation.baseline_poolings``) just has not been run; one they do not
    score says so (None: which they score is not known)."""
    scored = table["transfer_avg"].notna() if "transfer_avg" in table else pd.Series(False, index=table.index)
    carried = is_carried(table)
    own_seed_runs_scored = {method_block(model) : model for model, done, gone
                            in zip(table["model"], scored, carried) if is_seed_run(model) and done and not gone}
    notes = []
    for row, done, gone in zip(table.itertuples(), scored, carried):
        if done or gone:
            notes.append("")
        elif row.method == "baseline":
            notes.append(_baseline_transfer_note(row.pooling, baseline_poolings))
        elif row.method == EXTERNAL:
            notes.append(f"not run: {external_command(row.model, row.base_encoder, row.pooling, transfer=True)}")
        elif not is_seed_run(row.model) and row.model in own_seed_runs_scored:
            notes.append(f"scored on {own_seed_runs_scored[row.model]} (the method's first seed)")
        elif is_seed_run(row.model):
            notes.append("not run: the transfer tasks score a method's first seed "
                         f"(kedro run --namespaces=transfer.{method_block(row.model)})")
        else:
            notes.append(f"not run: kedro run --namespaces=transfer.{method_block(row.model)}")
    table = table.copy()
    table["transfer_note"] = notes
    return table


def _baseline_transfer_note(pooling: str, baseline_poolings: Sequence[str] | None) -> str:
    if baseline_poolings is None:
        return f"not run: {BASELINE_TRANSFER} (with {pooling} in transfer_evaluation.baseline_poolings)"
    if pooling in baseline_poolings:
        return f"not run: {BASELINE_TRANSFER}"
    return (f"not scored: {pooling} is not in transfer_evaluation.baseline_poolings (add it, then "
            f"{BASELINE_TRANSFER})")


def baseline_transfer_line(baseline_poolings: Sequence[str]) -> str:
    """The transfer table's one line on the baseline poolings it leaves out."""
    listed = ", ".join(f"`{pooling}`" for pooling in baseline_poolings) or "none"
    return (f"The untrained encoder's transfer tasks score its {listed} pooling only "
            "(`transfer_evaluation.baseline_poolings`); the other poolings are not listed here: add one there, "
            f"then `{BASELINE_TRANSFER}`.")


def within_budget(table: pd.DataFrame, examples_seen: int | None) -> pd.DataFrame:
    """The baselines, the external encoders and the trained rows that saw exactly
    ``examples_seen`` training examples (all rows when None): methods compared at an
    equal budget."""
    if examples_seen is None:
        return table
    keep = table["method"].isin(["baseline", EXTERNAL]) | (table["examples_seen"] == float(examples_seen))
    return table[keep].reset_index(drop=True)


def spread_cell(mean, std, digits: int = 2) -> str:
    """``76.65 +- 0.41`` for a score over seeds, ``76.65`` for one run, empty if none."""
    from contrastive_sentence_embeddings.evaluation.significance import format_mean_std

    mean = None if mean is None or (isinstance(mean, float) and math.isnan(mean)) else float(mean)
    std = None if std is None or (isinstance(std, float) and math.isnan(std)) else float(std)
    return format_mean_std(mean, std, digits)


def uncertainty_view(table: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """The STS table as shown: ``mean +- std`` cells for rows over seeds, the
    difference to the starting encoder with its p-value, ``n.s.`` where it is not
    significant at ``alpha``, and why where there is none (``vs_base_note``)."""
    view = table.copy()
    for column in STS_COLUMNS:
        std = view[f"{column}_std"] if f"{column}_std" in view else pd.Series(np.nan, index=view.index)
        view[column] = [spread_cell(mean, s) for mean, s in zip(view[column], std)]
    if "p_vs_base" in view:
        notes = view["vs_base_note"] if "vs_base_note" in view else pd.Series("", index=view.index)
        view["vs base"] = [
            str(note or "") if math.isnan(p) else
            f"{delta:+.2f} (p {p:.3f}{'' if p < alpha else ', n.s.'}{'; ' + note if note else ''})"
            for delta, p, note in zip(view["delta_vs_base"], view["p_vs_base"], notes)
        ]
    if "p_vs_ref" in view:
        view[reference_column(view)] = [
            str(note or "") if math.isnan(p) else f"{delta:+.2f} (p {p:.3f}{'' if p < alpha else ', n.s.'})"
            for delta, p, note in zip(view["delta_vs_ref"], view["p_vs_ref"], view["vs_ref_note"])
        ]
    if "sts_avg_seed_ci_lo" in view:
        view["seed CI"] = ["" if math.isnan(lo) else f"[{lo:.2f}, {hi:.2f}]"
                           for lo, hi in zip(view["sts_avg_seed_ci_lo"], view["sts_avg_seed_ci_hi"])]
    return view


def intervals_view(table: pd.DataFrame) -> pd.DataFrame:
    """Each single run's STS scores with their 95% bootstrap intervals: ``72.37 [71.1, 73.6]``."""
    rows = table[table[[f"{c}_ci_lo" for c in STS_COLUMNS]].notna().any(axis=1)].copy()
    for column in STS_COLUMNS:
        rows[column] = [
            "" if math.isnan(value) else (f"{value:.2f}" if math.isnan(lo) else f"{value:.2f} [{lo:.1f}, {hi:.1f}]")
            for value, lo, hi in zip(rows[column], rows[f"{column}_ci_lo"], rows[f"{column}_ci_hi"])
        ]
    return rows


# --- the log --------------------------------------------------------------------------------
def summary_text(table: pd.DataFrame, top: int = 8, alpha: float = 0.05) -> str:
    """The leaderboard as the log shows it: a count of rows by status, then this
    checkout's best rows by STS avg (model, status, pooling, STS avg, vs base, transfer
    avg; a method over seeds as its summary, each seed's run being in the Markdown) as
    an aligned table of a few columns, and the best carried row for reference."""
    carried = table[is_carried(table)]
    own = table[~is_carried(table)]
    counts = own["status"].value_counts().to_dict() if "status" in own else {}
    described = ", ".join(f"{counts[s]} {s}" for s in (CURRENT, STALE) if counts.get(s))
    lines = [f"{len(own)} row(s) from this checkout{f' ({described})' if described else ''}, "
             f"{len(carried)} carried from the repository"]
    ranked = own[~seed_run_rows(own)].sort_values("sts_avg", ascending=False, na_position="last")
    shown = ranked.head(top)
    if not shown.empty:
        view = uncertainty_view(shown, alpha) if "p_vs_base" in shown else shown.assign(**{"vs base": ""})
        columns = {"model": "model", "status": "status", "pooling": "pooling", "sts_avg": "STS avg",
                   "vs base": "vs base", "transfer_avg": "transfer"}
        rows = [[_log_cell(row.get(key), key) for key in columns] for _, row in view.iterrows()]
        header = list(columns.values())
        widths = [max(len(text) for text in column) for column in zip(header, *rows)]
        numeric = {"STS avg", "transfer"}
        for cells in [header, *rows]:
            lines.append("  " + "  ".join(cell.rjust(width) if name in numeric else cell.ljust(width)
                                          for cell, width, name in zip(cells, widths, header)).rstrip())
        if len(ranked) > len(shown):
            lines.append(f"  ... {len(ranked) - len(shown)} more in data/08_reporting/leaderboard.md")
    if not carried.empty:
        best = carried.sort_values("sts_avg", ascending=False, na_position="last").iloc[0]
        lines.append(f"best carried row (reference, not produced here): {best['model']} STS avg "
                     f"{_log_cell(best['sts_avg'], 'sts_avg')}")
    return "\n".join(lines)


def _log_cell(value, key: str) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-" if key in ("sts_avg", "transfer_avg") else ""
    if key == "vs base" and not str(value)[:1] in "+-":  # a note: its reason, without the command
        return str(value).split(" (", 1)[0]
    return f"{value:.2f}" if isinstance(value, float) else str(value)
