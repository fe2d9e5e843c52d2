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
    "base_encoder": "base encoder", "evaluated_at": "evaluated (UTC)", "best_step": "kept step",
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
    STS-only ``metrics`` and the full ``metrics_full``), keyed by the model each entry
    names (``model.name``; the file's name only when it names none): the newest entry of a model
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
            # Keyed by the model an entry scored, not by its file name: a seeded method's
            # transfer scores (metrics_full/<method>.json) describe its first seed's run.
            model = (metrics.get("model") or {}).get("name") or name
            entries.setdefault(model, []).append((evaluated_at(metrics), order, metrics))
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


def leaderboard_markdown(table: pd.DataFrame, reported: pd.DataFrame, alpha: float = 0.05,
                         examples_budget: int | None = None) -> str:
    identity = IDENTITY_COLUMNS
    uncertain = "p_vs_base" in table and "n_seeds" in table
    main = table[~table["model"].map(is_seed_run)]
    runs = table[table["model"].map(is_seed_run)]
    sts = uncertainty_view(main, alpha) if uncertain else main
    budget = (["n_seeds", *STS_COLUMNS, "vs base", "examples_seen", "train_seconds", "best_step"] if uncertain
              else STS_COLUMNS)
    parts = [
        "# Leaderboard",
        "",
        "Written by the `leaderboard` node from `data/08_reporting/metrics/*.json`; do not edit by hand.",
        "",
        "## STS (Spearman x 100, SentEval \"all\" setting)",
        "",
    ]
    if examples_budget is not None:
        parts += [f"Trained rows filtered to an equal budget of {examples_budget:,} training examples seen.", ""]
    if uncertain:
        parts += [
            "A method run for several seeds shows the mean +- standard deviation over its `n_seeds` runs (each "
            "run below). `vs base`: STS avg difference to the untrained encoder with the same pooling, from a "
            "paired bootstrap over the pairs of all 7 tasks (1,000 resamples; for several seeds, the mean "
            f"difference and the largest p-value); `n.s.`: not significant at p < {alpha}. "
            "`examples_seen` and `train_seconds` are the training budget (mean over seeds); `kept step` is the "
            "step whose weights were kept (best dev score; mean over seeds): 0 means no training step beat the "
            "starting weights, so the row scores the starting encoder (with any newly initialised layers).",
            "",
        ]
    parts += [markdown_table(sts, [*identity, *budget, "paper_sts_avg"]), ""]
    if uncertain and not runs.empty:
        parts += ["## Each seed's run", "", markdown_table(uncertainty_view(runs, alpha),
                                                          [*identity, *STS_COLUMNS, "vs base"]), ""]
    if uncertain:
        intervals = intervals_view(table)
        if not intervals.empty:
            parts += ["## 95% bootstrap intervals of each score (1,000 resamples of the pairs)", "",
                      markdown_table(intervals, ["model", "pooling", *STS_COLUMNS]), ""]
    parts += [
        "## STS, subsets averaged weighted by size (\"wmean\")",
        "",
        markdown_table(main, [*identity, *WMEAN_COLUMNS]),
        "",
    ]
    if table[TRANSFER_COLUMNS].notna().any().any():
        scored = table[table[TRANSFER_COLUMNS].notna().any(axis=1)]
        parts += ["## Transfer tasks (accuracy; MRPC also F1)", "", markdown_table(scored, [*identity, *TRANSFER_COLUMNS]),
                  ""]
    if table[GEOMETRY_COLUMNS].notna().any().any():
        parts += ["## Alignment and uniformity (lower is better for both)", "",
                  markdown_table(main, [*identity, *GEOMETRY_COLUMNS, "sts_avg"]), ""]
    parts += [
        "## Reported in the papers (full-scale training, for reference)",
        "",
        markdown_table(reported, list(reported.columns)),
        "",
    ]
    return "\n".join(parts)


def alignment_uniformity_figure(table: pd.DataFrame):
    """Uniformity (x) against alignment (y), coloured by STS average: the layout of the
    SimCSE and SCD figures (lower left is better). Each model is a numbered point
    named in the legend beside the axes (labels on the points hid each other); a
    method run for several seeds shows each seed's run as a small point and its mean
    with error bars of one standard deviation over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = table.dropna(subset=["alignment", "uniformity"])
    figure, axis = plt.subplots(figsize=(9.0, 4.8), dpi=150)
    if points.empty:
        axis.text(0.5, 0.5, "no model has alignment / uniformity yet", ha="center", va="center")
        axis.set_axis_off()
        return figure
    summaries = points[~points["model"].map(is_seed_run)]
    runs = points[points["model"].map(is_seed_run)]
    norm = matplotlib.colors.Normalize(points["sts_avg"].min(), points["sts_avg"].max())
    if not runs.empty:
        axis.scatter(runs["uniformity"], runs["alignment"], c=runs["sts_avg"], cmap="viridis", norm=norm, s=14,
                     alpha=0.6, edgecolors="none")
    # Models at the same point (e.g. the mean / last_avg aliases) share one number.
    numbered: dict[tuple[float, float], list[str]] = {}
    for row in summaries.itertuples():
        numbered.setdefault((round(row.uniformity, 4), round(row.alignment, 4)), []).append(row.model)
    for row in summaries.itertuples():
        x_err = getattr(row, "uniformity_std", np.nan) if "uniformity_std" in summaries else np.nan
        y_err = getattr(row, "alignment_std", np.nan) if "alignment_std" in summaries else np.nan
        if not (math.isnan(x_err) and math.isnan(y_err)):
            axis.errorbar(row.uniformity, row.alignment, xerr=0 if math.isnan(x_err) else x_err,
                          yerr=0 if math.isnan(y_err) else y_err, fmt="none", ecolor="grey", elinewidth=0.8,
                          capsize=2)
    scatter = axis.scatter(summaries["uniformity"], summaries["alignment"], c=summaries["sts_avg"], cmap="viridis",
                           norm=norm, s=60, edgecolors="black", linewidths=0.5)
    legend = []
    for number, ((x, y), names) in enumerate(sorted(numbered.items(), key=lambda item: item[1]), start=1):
        axis.annotate(str(number), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8, weight="bold")
        legend.append(f"{number}  {' = '.join(names)}")
    axis.text(1.28, 1.0, "\n".join(legend), transform=axis.transAxes, va="top", ha="left", fontsize=7,
              family="monospace")
    colorbar = figure.colorbar(scatter, ax=axis)
    colorbar.set_label("STS avg (Spearman x 100)")
    axis.set_xlabel(r"$\ell_{\mathrm{uniform}}$")
    axis.set_ylabel(r"$\ell_{\mathrm{align}}$")
    axis.set_title("Alignment and uniformity (STS-B); small points: single seeds")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.subplots_adjust(right=0.58)
    return figure


# --- uncertainty: seeds, bootstrap intervals, paired tests, budgets -------------------------
SEED_RUN = ".seed"   # a seed's run is called <method>.seed<k>; its method's summary row <method>


def is_seed_run(name: str) -> bool:
    return SEED_RUN in str(name)


def add_uncertainty(table: pd.DataFrame, metrics_by_model: Mapping[str, Mapping]) -> pd.DataFrame:
    """Per row: the standard deviation over seeds of every STS score (``<score>_std``,
    rows summarising several seeds), ``n_seeds``, each STS score's bootstrap interval
    (``<score>_ci_lo``, ``<score>_ci_hi``; single runs) and the training budget
    (``examples_seen``, ``train_seconds``)."""
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
    ``significant`` is ``p_vs_base < alpha``; rows without per-pair predictions stay
    empty."""
    from contrastive_sentence_embeddings.evaluation.significance import paired_bootstrap_pvalue

    by_name = {metrics.get("model", {}).get("name", key): metrics for key, metrics in metrics_by_model.items()}
    baselines = {(row.base_encoder, row.pooling): row.model for row in table.itertuples() if row.method == "baseline"}
    deltas, p_values = [], []
    for row in table.itertuples():
        base = baselines.get((row.base_encoder, row.pooling))
        runs = _runs_of(by_name.get(row.model), row.model)
        if row.method == "baseline" or base is None or base not in pairs or not all(run in pairs for run in runs):
            deltas.append(np.nan)
            p_values.append(np.nan)
            continue
        tests = []
        for run in runs:
            tasks = sorted(set(pairs[run]) & set(pairs[base]))
            gold = {task: pairs[base][task]["gold"] for task in tasks}
            tests.append(paired_bootstrap_pvalue(gold, {t: pairs[run][t]["predicted"] for t in tasks},
                                                 {t: pairs[base][t]["predicted"] for t in tasks},
                                                 n_resamples=n_resamples, seed=seed))
        deltas.append(float(np.mean([test.difference for test in tests])))
        p_values.append(float(max(test.p_value for test in tests)))
    table = table.copy()
    table["delta_vs_base"] = deltas
    table["p_vs_base"] = p_values
    table["significant"] = [bool(p < alpha) if not math.isnan(p) else None for p in p_values]
    return table


def within_budget(table: pd.DataFrame, examples_seen: int | None) -> pd.DataFrame:
    """The baselines and the trained rows that saw exactly ``examples_seen`` training
    examples (all rows when None): methods compared at an equal budget."""
    if examples_seen is None:
        return table
    keep = (table["method"] == "baseline") | (table["examples_seen"] == float(examples_seen))
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
    significant at ``alpha``."""
    view = table.copy()
    for column in STS_COLUMNS:
        std = view[f"{column}_std"] if f"{column}_std" in view else pd.Series(np.nan, index=view.index)
        view[column] = [spread_cell(mean, s) for mean, s in zip(view[column], std)]
    if "p_vs_base" in view:
        view["vs base"] = [
            "" if math.isnan(p) else f"{delta:+.2f} (p {p:.3f}{'' if p < alpha else ', n.s.'})"
            for delta, p in zip(view["delta_vs_base"], view["p_vs_base"])
        ]
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
