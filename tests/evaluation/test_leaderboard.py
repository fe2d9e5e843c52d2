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
    assert [t.get_text() for t in axis.texts] == ["a = b"]  # identical points share a label
