"""The leaderboard: every evaluated model in one table, as the papers lay theirs out,
with the papers' own numbers for reference, and the alignment-uniformity figure.

Input is the per-model metrics JSON written by the evaluation nodes
(``data/08_reporting/metrics/<model>.json``): a ``model`` block (name, method, base
encoder, pooling, seed) and flat metric keys (``sts12`` .. ``sickr``, ``sts_avg``,
``*_wmean``, transfer accuracies, ``alignment``, ``uniformity``), the time it was
produced (``evaluated_at``) and the fingerprint of the weights it scored
(``model_fingerprint``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import resources

import numpy as np
import pandas as pd
import yaml

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
    "base_encoder": "base encoder", "evaluated_at": "evaluated (UTC)",
}
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
    STS-only ``metrics`` and the full ``metrics_full``): the newest entry of a model
    wins (by ``evaluated_at``; an undated file loses to any dated one; on a tie the
    later source wins).

    An older entry's metrics that the newest one lacks (e.g. the transfer scores of
    a full evaluation, after a fresh STS-only run) are kept only when both entries
    scored the same weights (equal ``model_fingerprint``); otherwise they describe a
    model that no longer exists and are left out, so a row never mixes two models.
    Pure: the inputs are not modified.
    """
    entries: dict[str, list[tuple[datetime, int, Mapping]]] = {}
    for order, source in enumerate(sources):
        for name, metrics in source.items():
            entries.setdefault(name, []).append((evaluated_at(metrics), order, metrics))
    merged = {}
    for name, candidates in entries.items():
        candidates.sort(key=lambda entry: (entry[0], entry[1]))
        newest = candidates[-1][2]
        row = dict(newest)
        for _, _, older in reversed(candidates[:-1]):
            same_weights = older.get("model_fingerprint") is not None and \
                older.get("model_fingerprint") == newest.get("model_fingerprint")
            if same_weights:
                for key, value in older.items():
                    row.setdefault(key, value)
        merged[name] = row
    return merged


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
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*IDENTITY_COLUMNS, *STS_COLUMNS, *WMEAN_COLUMNS, *TRANSFER_COLUMNS,
                                        *GEOMETRY_COLUMNS])
    table["seed"] = table["seed"].astype("Int64")
    # Baselines first, then methods, best STS average first within each.
    table["_baseline"] = table["method"] != "baseline"
    table = table.sort_values(["_baseline", "method", "sts_avg"], ascending=[True, True, False], na_position="last")
    return table.drop(columns="_baseline").reset_index(drop=True)


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


def markdown_table(table: pd.DataFrame, columns: Sequence[str]) -> str:
    """A GitHub-flavoured Markdown table; numbers to 2 decimals, missing values empty.
    Columns that are empty in every row are left out."""
    columns = [c for c in columns if c in table and table[c].map(_cell).ne("").any()]
    header = "| " + " | ".join(HEADERS.get(c, c) for c in columns) + " |"
    rule = "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(table[c]) else "---" for c in columns) + "|"
    body = ["| " + " | ".join(_cell(row[c]) for c in columns) + " |" for _, row in table.iterrows()]
    return "\n".join([header, rule, *body])


def leaderboard_markdown(table: pd.DataFrame, reported: pd.DataFrame) -> str:
    identity = IDENTITY_COLUMNS
    parts = [
        "# Leaderboard",
        "",
        "Written by the `leaderboard` node from `data/08_reporting/metrics/*.json`; do not edit by hand.",
        "",
        "## STS (Spearman x 100, SentEval \"all\" setting)",
        "",
        markdown_table(table, [*identity, *STS_COLUMNS, "paper_sts_avg"]),
        "",
        "## STS, subsets averaged weighted by size (\"wmean\")",
        "",
        markdown_table(table, [*identity, *WMEAN_COLUMNS]),
        "",
    ]
    if table[TRANSFER_COLUMNS].notna().any().any():
        scored = table[table[TRANSFER_COLUMNS].notna().any(axis=1)]
        parts += ["## Transfer tasks (accuracy; MRPC also F1)", "", markdown_table(scored, [*identity, *TRANSFER_COLUMNS]),
                  ""]
    if table[GEOMETRY_COLUMNS].notna().any().any():
        parts += ["## Alignment and uniformity (lower is better for both)", "",
                  markdown_table(table, [*identity, *GEOMETRY_COLUMNS, "sts_avg"]), ""]
    parts += [
        "## Reported in the papers (full-scale training, for reference)",
        "",
        markdown_table(reported, list(reported.columns)),
        "",
    ]
    return "\n".join(parts)


def alignment_uniformity_figure(table: pd.DataFrame):
    """Scatter of uniformity (x) against alignment (y), coloured by STS average, one
    labelled point per model: the layout of the SimCSE and SCD figures (lower left
    is better)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = table.dropna(subset=["alignment", "uniformity"])
    figure, axis = plt.subplots(figsize=(6.4, 4.8), dpi=150)
    if points.empty:
        axis.text(0.5, 0.5, "no model has alignment / uniformity yet", ha="center", va="center")
        axis.set_axis_off()
        return figure
    scatter = axis.scatter(points["uniformity"], points["alignment"], c=points["sts_avg"], cmap="viridis", s=60,
                           edgecolors="black", linewidths=0.5)
    # Models at the same point (e.g. the mean / last_avg aliases) share one label.
    labels: dict[tuple[float, float], list[str]] = {}
    for row in points.itertuples():
        labels.setdefault((round(row.uniformity, 4), round(row.alignment, 4)), []).append(row.model)
    for (x, y), names in labels.items():
        axis.annotate(" = ".join(names), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=7)
    colorbar = figure.colorbar(scatter, ax=axis)
    colorbar.set_label("STS avg (Spearman x 100)")
    axis.set_xlabel(r"$\ell_{\mathrm{uniform}}$")
    axis.set_ylabel(r"$\ell_{\mathrm{align}}$")
    axis.set_title("Alignment and uniformity (STS-B)")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    return figure
