import math

import pandas as pd
import pytest

from contrastive_sentence_embeddings.evaluation import leaderboard


def metrics(name, method, pooling, sts_avg, seed=None, **extra):
    return {"model": {"name": name, "method": method, "base_encoder": "bert-base-uncased", "pooling": pooling,
                      "seed": seed}, "sts_avg": sts_avg, **extra}


def test_table_orders_baselines_first_then_methods_by_score():
    table = leaderboard.metrics_table({
        "simcse-b": metrics("simcse-b", "simcse", "cls_before_pooler", 70.0, seed=2),
        "baseline-mean": metrics("baseline-mean", "baseline", "mean", 50.0),
        "simcse-a": metrics("simcse-a", "simcse", "cls_before_pooler", 75.0, seed=1, MR=80.5),
    })
    assert table["model"].tolist() == ["baseline-mean", "simcse-a", "simcse-b"]
    assert table.loc[1, "MR"] == 80.5 and math.isnan(table.loc[2, "MR"])
    assert table["seed"].tolist()[1:] == [1, 2] and table["seed"].isna().tolist()[0]


def test_paper_reference_only_where_method_encoder_and_pooling_match():
    table = leaderboard.metrics_table({
        "ours": metrics("ours", "simcse", "cls_before_pooler", 70.0),
        "other-pooling": metrics("other-pooling", "simcse", "mean", 70.0),
    })
    reported = [{"method": "simcse", "base_encoder": "bert-base-uncased", "pooling": "cls_before_pooler",
                 "setting": "all", "sts": {"sts_avg": 76.25}},
                {"method": "simcse", "base_encoder": "bert-base-uncased", "pooling": "cls_before_pooler",
                 "setting": "wmean", "sts": {"sts_avg": 76.46}}]
    with_paper = leaderboard.add_paper_reference(table, reported).set_index("model")
    assert with_paper.loc["ours", "paper_sts_avg"] == 76.25  # the "all" setting, not wmean
    assert math.isnan(with_paper.loc["other-pooling", "paper_sts_avg"])


def test_markdown_leaves_missing_values_empty_and_drops_empty_columns():
    table = pd.DataFrame({"model": ["a", "b"], "sts12": [70.123, float("nan")], "MR": [float("nan")] * 2})
    text = leaderboard.markdown_table(table, ["model", "sts12", "MR"])
    assert text.splitlines() == ["| model | STS12 |", "|---|---:|", "| a | 70.12 |", "| b |  |"]


def test_shipped_reported_results_are_consistent():
    """Each paper row's average is the mean of its seven tasks (a transcription check)."""
    for entry in leaderboard.load_reported_results():
        sts = entry["sts"]
        tasks = [sts[t] for t in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")]
        assert sum(tasks) / 7 == pytest.approx(sts["sts_avg"], abs=0.006), entry["source"]
        assert entry["source"] and entry["url"].startswith("https://")


def test_figure_has_one_point_per_model_with_geometry():
    table = leaderboard.metrics_table({
        "a": metrics("a", "baseline", "mean", 70.0, alignment=0.2, uniformity=-3.0),
        "b": metrics("b", "baseline", "last_avg", 70.0, alignment=0.2, uniformity=-3.0),
        "c": metrics("c", "simcse", "cls", 60.0),
    })
    figure = leaderboard.alignment_uniformity_figure(table)
    axis = figure.axes[0]
    assert len(axis.collections[0].get_offsets()) == 2
    # Identical points share a number; the legend beside the axes names them.
    assert [t.get_text() for t in axis.texts] == ["1", "1  a = b"]


# --- uncertainty ------------------------------------------------------------------------
def pair_predictions(rng, gold, noise):
    """A model's per-pair predictions on every STS task: gold plus Gaussian noise."""
    return {task: {"gold": gold[task], "predicted": gold[task] + rng.normal(0, noise, len(gold[task])),
                   "subset": pd.Series(["all"] * len(gold[task])).to_numpy()} for task in gold}


@pytest.fixture
def seeded_runs():
    import numpy as np

    rng = np.random.default_rng(0)
    gold = {task: rng.uniform(0, 5, 300) for task in ("sts12", "stsb", "sickr")}
    pairs = {"baseline-cls": pair_predictions(rng, gold, 2.0), "simcse.seed1": pair_predictions(rng, gold, 0.5),
             "simcse.seed2": pair_predictions(rng, gold, 0.6), "scd": pair_predictions(rng, gold, 2.0)}
    rows = {
        "baseline-cls": metrics("baseline-cls", "baseline", "cls", 60.0, sts_avg_ci=[58.0, 62.0]),
        "simcse.seed1": metrics("simcse.seed1", "simcse", "cls", 80.0, seed=1,
                                training={"examples_seen": 640, "train_seconds": 10.0}),
        "simcse.seed2": metrics("simcse.seed2", "simcse", "cls", 78.0, seed=2,
                                training={"examples_seen": 640, "train_seconds": 12.0}),
        "scd": metrics("scd", "scd", "cls", 60.5, seed=1,
                       training={"examples_seen": 320, "train_seconds": 5.0, "best_step": 0}),
    }
    from contrastive_sentence_embeddings.evaluation.significance import summarise_seed_runs

    rows["simcse"] = summarise_seed_runs([rows["simcse.seed1"], rows["simcse.seed2"]])
    table = leaderboard.add_uncertainty(leaderboard.metrics_table(rows), rows)
    return leaderboard.add_significance(table, rows, pairs, n_resamples=200, seed=0), rows


def test_seed_summaries_show_mean_and_spread_and_the_budget(seeded_runs):
    table, _ = seeded_runs
    simcse = table.set_index("model").loc["simcse"]
    assert simcse["sts_avg"] == 79.0 and simcse["sts_avg_std"] == pytest.approx(2 ** 0.5)  # (80, 78), ddof 1
    assert simcse["n_seeds"] == 2 and simcse["examples_seen"] == 640 and simcse["train_seconds"] == 11.0
    view = leaderboard.uncertainty_view(table).set_index("model")
    assert view.loc["simcse", "sts_avg"] == "79.00 +- 1.41" and view.loc["scd", "sts_avg"] == "60.50"
    baseline = table.set_index("model").loc["baseline-cls"]
    assert (baseline["sts_avg_ci_lo"], baseline["sts_avg_ci_hi"]) == (58.0, 62.0)


def test_each_trained_row_is_tested_against_its_starting_encoder(seeded_runs):
    table, _ = seeded_runs
    rows = table.set_index("model")
    # Far less noise than the baseline: a real difference, for each seed.
    assert rows.loc["simcse.seed1", "p_vs_base"] < 0.05 and rows.loc["simcse", "significant"]
    assert rows.loc["simcse", "p_vs_base"] == max(rows.loc["simcse.seed1", "p_vs_base"],
                                                  rows.loc["simcse.seed2", "p_vs_base"])
    # The same noise as the baseline: no real difference.
    assert rows.loc["scd", "p_vs_base"] >= 0.05 and not rows.loc["scd", "significant"]
    assert math.isnan(rows.loc["baseline-cls", "p_vs_base"])
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]))
    assert "n.s." in next(line for line in markdown.splitlines() if line.startswith("| scd |"))
    assert "## Each seed's run" in markdown and "| simcse.seed1 |" in markdown


def test_a_run_that_kept_its_starting_weights_says_so(seeded_runs):
    """CLSR on an encoder already trained for STS can keep step 0 (no step beats the
    start on dev): two such runs then score the same, and the table must say why."""
    table, _ = seeded_runs
    assert table.set_index("model").loc["scd", "best_step"] == 0
    markdown = leaderboard.leaderboard_markdown(table, pd.DataFrame(columns=["method"]))
    header = next(line for line in markdown.splitlines() if line.startswith("| model |"))
    scd_row = next(line for line in markdown.splitlines() if line.startswith("| scd |"))
    kept = header.strip("|").split("|").index(" kept step ")
    assert scd_row.strip("|").split("|")[kept].strip() == "0"
    assert "0 means no training step beat the starting weights" in markdown


def test_an_equal_budget_keeps_the_baselines_and_the_runs_that_saw_it(seeded_runs):
    table, _ = seeded_runs
    assert set(leaderboard.within_budget(table, 320)["model"]) == {"baseline-cls", "scd"}
    assert len(leaderboard.within_budget(table, None)) == len(table)


def test_the_figure_shows_seeds_and_numbers_every_model(seeded_runs):
    table, _ = seeded_runs
    table = table.assign(alignment=[0.2, 0.3, 0.25, 0.31, 0.4], uniformity=[-2.0, -2.5, -2.4, -2.6, -1.0])
    figure = leaderboard.alignment_uniformity_figure(table)
    texts = [text.get_text() for text in figure.axes[0].texts]
    legend = next(text for text in texts if "\n" in text or "  " in text)
    for name in ("baseline-cls", "simcse", "scd"):
        assert name in legend
    assert "simcse.seed1" not in legend  # single seeds are the small points around their mean
