"""The leaderboard as a paper shows it: one table of rows x STS tasks (Markdown and
LaTeX) and one comparison figure, made from the leaderboard's table
(``leaderboard.csv``) alone, so every number in them is one of its cells.

* Rows: this checkout's **current** rows, a method over seeds as its summary (single
  seeds' runs are the figure's points). Stale and carried rows are left out and counted
  under the table: a paper table never holds a number of other code or parameters.
* Cells: Spearman x 100 to 2 decimals; a method over seeds ``mean ± sd`` (sample sd,
  ddof 1); a task a record could not score ``missing``, its average ``n/a``.
* Best per column in bold (ties at the shown precision all bold), over the rows shown.
* Significance against the reference row (``leaderboard.reference``; without one,
  against the starting encoder, ``vs base``) on the average: ``†`` where the paired
  bootstrap over the pairs of the 7 tasks gives p < alpha (for a row over seeds, for
  every seed), the sign of the difference being the reader's to see beside it.

The figure: STS avg per row with its 95% interval (over seeds for a row over seeds,
Student's t; else the bootstrap interval over the pairs), each seed's run a small
point, the reference a dashed line.
"""

from __future__ import annotations

import pandas as pd

from contrastive_sentence_embeddings.evaluation.leaderboard import (
    CURRENT,
    HEADERS,
    STS_COLUMNS,
    is_seed_run,
    method_block,
    not_scored_cell,
)

SIGNIFICANT = "†"


def _number(value) -> float | None:
    number = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    return None if pd.isna(number) else float(number)


def comparison_basis(table: pd.DataFrame) -> tuple[str, str, str]:
    """``(delta column, p column, what it is compared with)``: the reference row when
    the leaderboard has one, else each row's starting encoder."""
    if "reference" in table and table["reference"].notna().any() and "p_vs_ref" in table:
        reference = str(table["reference"].dropna().iloc[0])
        return "delta_vs_ref", "p_vs_ref", f"the reference row {reference}"
    return "delta_vs_base", "p_vs_base", "the starting encoder with the same pooling (vs base)"


def paper_rows(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(shown, left out)``: the current rows that are not single seeds' runs, and the
    other non-seed rows with their status (stale or carried)."""
    status = table["status"].fillna("").astype(str) if "status" in table else pd.Series(CURRENT, index=table.index)
    summaries = ~table["model"].map(is_seed_run).astype(bool)
    shown = table[summaries & (status == CURRENT)].copy()
    left_out = table[summaries & (status != CURRENT)].copy()
    return shown.reset_index(drop=True), left_out.reset_index(drop=True)


def _cells(shown: pd.DataFrame, p_column: str, alpha: float) -> tuple[list[list[str]], list[list[bool]]]:
    """Each shown row's task cells as text (without emphasis), and which are best."""
    means = {column: [_number(v) for v in shown[column]] if column in shown else [None] * len(shown)
             for column in STS_COLUMNS}
    best = {column: max((round(v, 2) for v in values if v is not None), default=None) for column, values in means.items()}
    texts, bold = [], []
    for index, (_, row) in enumerate(shown.iterrows()):
        missing = set(not_scored_cell(row.get("not_scored")))
        row_texts, row_bold = [], []
        for column in STS_COLUMNS:
            value = means[column][index]
            if column in missing:
                row_texts.append("missing")
                row_bold.append(False)
                continue
            if value is None:
                row_texts.append("n/a" if column == "sts_avg" and missing else "")
                row_bold.append(False)
                continue
            std = _number(row.get(f"{column}_std"))
            text = f"{value:.2f}" if std is None else f"{value:.2f} ± {std:.2f}"
            if column == "sts_avg":
                p_value = _number(row.get(p_column))
                if p_value is not None and p_value < alpha:
                    text += f" {SIGNIFICANT}"
            row_texts.append(text)
            row_bold.append(best[column] is not None and round(value, 2) == best[column])
        texts.append(row_texts)
        bold.append(row_bold)
    return texts, bold


def _row_label(row: pd.Series) -> str:
    """The row's name; an external encoder's with its pooling, a row over seeds with their number."""
    seeds = _number(row.get("n_seeds"))
    label = str(row["model"])
    if row.get("method") == "external":
        label += f" ({row.get('pooling')})"
    return label + (f" (n={int(seeds)} seeds)" if seeds is not None and seeds > 1 else "")


def _footer(table: pd.DataFrame, left_out: pd.DataFrame, alpha: float) -> list[str]:
    _, p_column, basis = comparison_basis(table)
    lines = [f"Spearman x 100 (SentEval \"all\"); mean ± sd over seeds where a row has several; best per column "
             f"in bold. {SIGNIFICANT}: STS avg differs from {basis} (paired bootstrap over the pairs of the 7 tasks, "
             f"p < {alpha}; over seeds, for every seed)."]
    if not left_out.empty:
        counts = left_out["status"].fillna("").astype(str).value_counts().to_dict() if "status" in left_out else {}
        described = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        lines.append(f"Left out: {len(left_out)} row(s) not current ({described}): "
                     + ", ".join(str(model) for model in left_out["model"]) + " (see leaderboard.md).")
    return lines


def markdown_paper_table(table: pd.DataFrame, alpha: float = 0.05) -> str:
    """The paper table in GitHub Markdown (best per column in ``**bold**``)."""
    shown, left_out = paper_rows(table)
    _, p_column, _ = comparison_basis(table)
    texts, bold = _cells(shown, p_column, alpha)
    header = "| Model | " + " | ".join(HEADERS.get(c, c) for c in STS_COLUMNS) + " |"
    rule = "|---|" + "|".join("---:" for _ in STS_COLUMNS) + "|"
    body = []
    for (_, row), row_texts, row_bold in zip(shown.iterrows(), texts, bold):
        cells = [f"**{text}**" if emphasised else text for text, emphasised in zip(row_texts, row_bold)]
        body.append(f"| {_row_label(row)} | " + " | ".join(cells) + " |")
    parts = ["# STS results (paper table)", "",
             "Written by the `leaderboard` pipeline from `data/08_reporting/leaderboard.csv`; do not edit by hand.",
             ""]
    if shown.empty:
        parts += ["No current row in this checkout yet.", ""]
    else:
        parts += [header, rule, *body, ""]
    parts += [line + "\n" for line in _footer(table, left_out, alpha)]
    return "\n".join(parts).rstrip() + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(character, character) for character in str(text))


def _latex_cell(text: str, emphasised: bool) -> str:
    text = text.replace(" ± ", r" $\pm$ ").replace(f" {SIGNIFICANT}", r"$^\dagger$")
    return rf"\textbf{{{text}}}" if emphasised and text else text


def latex_paper_table(table: pd.DataFrame, alpha: float = 0.05) -> str:
    """The paper table as a LaTeX ``table`` (booktabs: ``\\usepackage{booktabs}``)."""
    shown, left_out = paper_rows(table)
    _, p_column, _ = comparison_basis(table)
    texts, bold = _cells(shown, p_column, alpha)
    columns = [HEADERS.get(c, c).replace("STS avg", "Avg.") for c in STS_COLUMNS]
    lines = [r"% Written by the leaderboard pipeline from data/08_reporting/leaderboard.csv; do not edit by hand.",
             r"\begin{table}[t]", r"\centering", r"\small",
             r"\begin{tabular}{l" + "r" * len(STS_COLUMNS) + "}", r"\toprule",
             "Model & " + " & ".join(latex_escape(c) for c in columns) + r" \\", r"\midrule"]
    for (_, row), row_texts, row_bold in zip(shown.iterrows(), texts, bold):
        cells = [_latex_cell(latex_escape(text), emphasised) for text, emphasised in zip(row_texts, row_bold)]
        lines.append(latex_escape(_row_label(row)) + " & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}",
              r"\caption{" + latex_escape(" ".join(_footer(table, left_out, alpha))).replace(
                  SIGNIFICANT, r"$^\dagger$") + "}",
              r"\label{tab:sts}", r"\end{table}"]
    return "\n".join(lines) + "\n"


# The two kinds of 95% interval the figure draws, each in its own style: they measure
# different things (the test pairs' sampling for one run; the runs' spread for a row over
# seeds), so their widths are not comparable and must not look alike.
PAIRS_INTERVAL = ("sts_avg_ci_lo", "sts_avg_ci_hi")
SEEDS_INTERVAL = ("sts_avg_seed_ci_lo", "sts_avg_seed_ci_hi")


def _interval(row: pd.Series, columns: tuple[str, str]) -> tuple[float, float] | None:
    """The row's 95% interval of STS avg from ``columns`` (:data:`PAIRS_INTERVAL` or
    :data:`SEEDS_INTERVAL`), None where the row has none."""
    lo, hi = _number(row.get(columns[0])), _number(row.get(columns[1]))
    return (lo, hi) if lo is not None and hi is not None else None


def comparison_figure(table: pd.DataFrame, alpha: float = 0.05):
    """STS avg per current row (best at the top): a single run's 95% bootstrap interval
    over the test pairs as a light bar, a row over seeds' 95% Student-t interval of the
    seeds' mean as a black capped bar (a different quantity, drawn differently and named
    in the legend), each seed's run as a tick, the reference (if any) as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown, left_out = paper_rows(table)
    shown = shown[[_number(v) is not None for v in shown["sts_avg"]]] if not shown.empty else shown
    shown = shown.assign(_avg=[_number(v) for v in shown["sts_avg"]]).sort_values("_avg") if not shown.empty else shown
    figure, axis = plt.subplots(figsize=(7.5, 0.9 + 0.38 * max(len(shown), 1)), dpi=150)
    if shown.empty:
        axis.text(0.5, 0.5, "no current row with an STS avg yet", ha="center", va="center")
        axis.set_axis_off()
        return figure
    status = table["status"].fillna("").astype(str) if "status" in table else pd.Series(CURRENT, index=table.index)
    seeds = table[table["model"].map(is_seed_run).astype(bool) & (status == CURRENT)]
    _, p_column, basis = comparison_basis(table)
    kinds_drawn = set()
    for position, (_, row) in enumerate(shown.iterrows()):
        colour = "grey" if row.get("method") in ("baseline", "external") else "tab:blue"
        if (pairs := _interval(row, PAIRS_INTERVAL)) is not None:
            axis.plot(pairs, [position, position], color=colour, linewidth=2, alpha=0.6, solid_capstyle="butt")
            kinds_drawn.add("pairs")
        if (over_seeds := _interval(row, SEEDS_INTERVAL)) is not None:
            axis.errorbar([row["_avg"]], [position], xerr=[[row["_avg"] - over_seeds[0]], [over_seeds[1] - row["_avg"]]],
                          fmt="none", ecolor="black", elinewidth=1.2, capsize=4, zorder=3)
            kinds_drawn.add("seeds")
        axis.plot([row["_avg"]], [position], "o", color=colour, markersize=6, markeredgecolor="black", zorder=4)
        runs = seeds[seeds["model"].map(method_block) == row["model"]]
        values = [v for v in (_number(v) for v in runs["sts_avg"]) if v is not None]
        if values:  # below the point, the value being above it
            axis.plot(values, [position - 0.22] * len(values), "|", color="black", markersize=6, gid="seed runs")
        p_value = _number(row.get(p_column))
        mark = f" {SIGNIFICANT}" if p_value is not None and p_value < alpha else ""
        axis.annotate(f"{row['_avg']:.2f}{mark}", (row["_avg"], position), textcoords="offset points",
                      xytext=(0, 7), ha="center", fontsize=7)
    from matplotlib.lines import Line2D

    legend = []
    if "pairs" in kinds_drawn:
        legend.append(Line2D([], [], color="tab:blue", linewidth=2, alpha=0.6,
                             label="one run: 95% bootstrap interval over the test pairs"))
    if "seeds" in kinds_drawn:
        legend.append(Line2D([], [], color="black", linewidth=1.2, marker="|", markersize=8,
                             label="over seeds: 95% Student-t interval of the mean of the seeds' runs"))
    if "reference" in table and table["reference"].notna().any():
        reference = str(table["reference"].dropna().iloc[0])
        match = shown[shown["model"] == reference]
        if not match.empty:
            legend.append(axis.axvline(float(match["_avg"].iloc[0]), color="tab:red", linestyle="--", linewidth=0.8,
                                       label=f"reference: {reference}"))
    if legend:
        axis.legend(handles=legend, loc="lower right", fontsize=7)
    axis.set_yticks(range(len(shown)), [_row_label(row) for _, row in shown.iterrows()], fontsize=8)
    axis.set_xlabel("STS avg (Spearman x 100, 7 tasks)")
    axis.set_title(f"STS avg with 95% intervals of two kinds (legend; their widths do not compare); "
                   f"ticks: seeds' runs\n{SIGNIFICANT}: p < {alpha} against {basis}"
                   + (f"; {len(left_out)} non-current row(s) left out" if not left_out.empty else ""), fontsize=8)
    axis.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return figure


def paper_outputs(table: pd.DataFrame, leaderboard: dict | None = None):
    """The leaderboard pipeline's node: the Markdown and LaTeX tables and the figure,
    from the leaderboard's table and the ``leaderboard`` block's ``alpha``."""
    from contrastive_sentence_embeddings.configuration.blocks import LeaderboardConfig
    from contrastive_sentence_embeddings.configuration.strict import parse_strict

    alpha = parse_strict(LeaderboardConfig, leaderboard or {}, "leaderboard").alpha
    return markdown_paper_table(table, alpha), latex_paper_table(table, alpha), comparison_figure(table, alpha)

