"""The paper table (Markdown, LaTeX) and the comparison figure, checked against the
records they come from, through the leaderboard's own steps."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from contrastive_sentence_embeddings.evaluation import leaderboard, paper_table
from contrastive_sentence_embeddings.evaluation.significance import summarise_seed_runs
from contrastive_sentence_embeddings.evaluation.sts import STS_TASKS

TASKS = list(STS_TASKS)


def record(name, method, pooling, base, rng, seed=None, noise=1.0):
    """A record with every STS score, ``base`` plus noise, and its average."""
    scores = {task: float(base + rng.normal(0, noise)) for task in TASKS}
    scores["sts_avg"] = float(np.mean(list(scores.values())))
    scores["sts_avg_ci"] = [scores["sts_avg"] - 0.7, scores["sts_avg"] + 0.6]  # as the evaluator's bootstrap gives it
    return {"model": {"name": name, "method": method, "base_encoder": "enc", "pooling": pooling, "seed": seed},
            **scores}


def predictions(rng, gold, noise):
    return {task: {"gold": gold[task], "predicted": gold[task] + rng.normal(0, noise, len(gold[task])),
                   "subset": np.array(["all"] * len(gold[task]))} for task in gold}


@pytest.fixture
def board():
    rng = np.random.default_rng(1)
    records = {
        "baseline-mean": record("baseline-mean", "baseline", "mean", 70, rng),
        "simcse.seed1": record("simcse.seed1", "simcse", "mean", 76, rng, seed=1),
        "simcse.seed2": record("simcse.seed2", "simcse", "mean", 77, rng, seed=2),
        "simcse.seed3": record("simcse.seed3", "simcse", "mean", 75, rng, seed=3),
        "scd": record("scd", "scd", "mean", 74, rng, seed=1),
        "imsimcse": record("imsimcse", "imsimcse", "mean", 73, rng, seed=1),
    }
    records["simcse"] = summarise_seed_runs([records[f"simcse.seed{k}"] for k in (1, 2, 3)])
    gold = {task: rng.uniform(0, 5, 200) for task in TASKS}
    pairs = {"baseline-mean": predictions(rng, gold, 2.0), "scd": predictions(rng, gold, 0.6),
             "imsimcse": predictions(rng, gold, 2.0),
             **{f"simcse.seed{k}": predictions(rng, gold, 0.5) for k in (1, 2, 3)}}
    statuses = {name: ("stale" if name == "imsimcse" else "current") for name in records}
    records = {name: {**value, "status": statuses[name], "status_reason": ""} for name, value in records.items()}
    table = leaderboard.add_uncertainty(leaderboard.metrics_table(records), records)
    table = leaderboard.add_significance(table, records, pairs, n_resamples=200)
    table = leaderboard.add_reference_comparison(table, records, pairs, "simcse", n_resamples=200)
    # as the node gets it: written to CSV and read back (empty cells are NaN there)
    return pd.read_csv(pd.io.common.StringIO(leaderboard.csv_table(table).to_csv(index=False))), records


def markdown_rows(text):
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| Model"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_the_markdown_table_holds_the_records_numbers_best_in_bold(board):
    table, records = board
    text = paper_table.markdown_paper_table(table)
    rows = markdown_rows(text)
    # current rows only, the seed summary once, its seeds' runs not as rows
    assert set(rows) == {"baseline-mean", "simcse (n=3 seeds)", "scd"}
    columns = [*TASKS, "sts_avg"]
    for label, name in (("baseline-mean", "baseline-mean"), ("scd", "scd")):
        for cell, column in zip(rows[label], columns):
            assert re.sub(r"[*†]", "", cell).strip() == f"{records[name][column]:.2f}", (label, column)
    for cell, column in zip(rows["simcse (n=3 seeds)"], columns):
        shown = re.sub(r"[*†]", "", cell).strip()
        assert shown == f"{records['simcse'][column]:.2f} ± {records['simcse'][column + '_std']:.2f}", column
    for index, column in enumerate(columns):  # the best of the three rows is bold, and only it
        best = max(round(records[name][column], 2) for name in ("baseline-mean", "scd", "simcse"))
        for label, cells in rows.items():
            value = float(re.sub(r"[*† ]", "", cells[index]).split("±")[0])
            assert cells[index].startswith("**") == (round(value, 2) == best), (label, column)
    # significance against the reference (simcse): scd's noise is close to simcse's, the baseline's far from it
    p_values = table.set_index("model")["p_vs_ref"]
    assert ("†" in rows["baseline-mean"][-1]) == (p_values["baseline-mean"] < 0.05)
    assert ("†" in rows["scd"][-1]) == (p_values["scd"] < 0.05)
    assert "differs from the reference row simcse" in text
    assert "Left out: 1 row(s) not current (1 stale): imsimcse" in text


def test_the_latex_table_holds_the_same_cells(board):
    table, records = board
    latex = paper_table.latex_paper_table(table)
    assert latex.count(r"\\") >= 4 and r"\toprule" in latex and r"\bottomrule" in latex
    line = next(row for row in latex.splitlines() if row.startswith("baseline-mean &"))
    cells = [cell.strip().removesuffix(r"\\").strip() for cell in line.split("&")][1:]
    for cell, column in zip(cells, [*TASKS, "sts_avg"]):
        number = re.sub(r"\\textbf\{|\}|\$\^\\dagger\$", "", cell).strip()
        assert number == f"{records['baseline-mean'][column]:.2f}", column
    assert r"simcse (n=3 seeds) & " in latex and r" $\pm$ " in latex
    assert "imsimcse &" not in latex  # stale: left out, and said so in the caption
    assert r"\caption{" in latex and "imsimcse" in latex.split(r"\caption{", 1)[1]


def test_names_are_escaped_for_latex():
    assert paper_table.latex_escape("scd_offdrop 5% & co") == r"scd\_offdrop 5\% \& co"


def test_the_figure_has_a_row_per_shown_model_and_a_tick_per_seed(board):
    table, records = board
    figure = paper_table.comparison_figure(table)
    [axis] = figure.axes
    labels = [tick.get_text() for tick in axis.get_yticklabels()]
    assert sorted(labels) == sorted(["baseline-mean", "simcse (n=3 seeds)", "scd"])
    # best at the top: labels run from the lowest STS avg up
    averages = {"baseline-mean": records["baseline-mean"]["sts_avg"], "scd": records["scd"]["sts_avg"],
                "simcse (n=3 seeds)": records["simcse"]["sts_avg"]}
    assert labels == sorted(labels, key=averages.get)
    seed_ticks = [line for line in axis.lines if line.get_gid() == "seed runs"]
    assert len(seed_ticks) == 1 and sorted(seed_ticks[0].get_xdata()) == pytest.approx(
        sorted(records[f"simcse.seed{k}"]["sts_avg"] for k in (1, 2, 3)))
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert any("reference: simcse" in text for text in legend)
    # Two kinds of interval, each drawn its own way and named: a single run's bootstrap
    # interval over pairs (a plain bar), a seeded row's t-interval over seeds (capped bar).
    assert any("over the test pairs" in text for text in legend) and any("over seeds" in text for text in legend)
    simcse = table[table["model"] == "simcse"].iloc[0]
    [seed_bar] = [c for c in axis.collections if len(c.get_segments()) == 1]
    assert sorted(seed_bar.get_segments()[0][:, 0]) == pytest.approx(
        [simcse["sts_avg_seed_ci_lo"], simcse["sts_avg_seed_ci_hi"]])
    scd = table[table["model"] == "scd"].iloc[0]
    bars = [sorted(line.get_xdata()) for line in axis.lines if line.get_marker() in ("None", "", None)
            and len(line.get_xdata()) == 2]
    assert [scd["sts_avg_ci_lo"], scd["sts_avg_ci_hi"]] in [pytest.approx(bar) for bar in bars]


def test_with_no_current_row_the_table_says_so():
    table = pd.DataFrame({"model": ["scd"], "method": ["scd"], "pooling": ["cls"], "sts_avg": [70.0],
                          "status": ["carried"]})
    text = paper_table.markdown_paper_table(table)
    assert "No current row" in text and "Left out: 1 row(s) not current (1 carried): scd" in text
