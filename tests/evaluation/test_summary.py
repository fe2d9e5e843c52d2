"""The leaderboard's summary (``data/08_reporting/summary.json``, DVC's metrics): one
short entry per trained model and the baseline's STS average per pooling, the same
numbers as the table, rounded."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from contrastive_sentence_embeddings.evaluation.summary import leaderboard_summary
from tests.helpers import PROJECT_ROOT


def row(model, method, pooling, sts_avg, **more):
    return {"model": model, "method": method, "pooling": pooling, "sts_avg": sts_avg, **more}


def test_trained_models_and_baseline_poolings_with_the_tables_numbers_rounded():
    table = pd.DataFrame([
        row("baseline-mean", "baseline", "mean", 78.87401),
        row("baseline-cls", "baseline", "cls", 73.33428),
        row("declutr", "declutr", "mean", 79.22864, delta_vs_base=0.35462, p_vs_base=0.001, examples_seen=336.0,
            train_seconds=180.6),
        row("simcse", "simcse", "cls_before_pooler", 76.61723, delta_vs_base=-0.2, p_vs_base=0.0421,
            examples_seen=7680.0, train_seconds=976.6667, n_seeds=3),
        row("simcse.seed42", "simcse", "cls_before_pooler", 76.6513, examples_seen=7680.0, train_seconds=1233.2),
    ])
    assert leaderboard_summary(table) == {
        "declutr": {"sts_avg": 79.23, "vs_base": 0.35, "p": 0.001, "examples": 336, "seconds": 181},
        "simcse": {"sts_avg": 76.62, "vs_base": -0.2, "p": 0.042, "examples": 7680, "seconds": 977},
        "baseline": {"mean": 78.87, "cls": 73.33},
    }


def test_a_value_the_table_lacks_or_explains_is_left_out():
    table = pd.DataFrame([
        row("imsimcse", "imsimcse", "cls_before_pooler", 76.96, delta_vs_base=None, p_vs_base="no baseline predictions",
            examples_seen=float("nan"), train_seconds=600.4),
    ])
    assert leaderboard_summary(table) == {"imsimcse": {"sts_avg": 76.96, "seconds": 600}}


def test_a_table_without_the_columns_it_needs_is_refused():
    with pytest.raises(ValueError, match="no pooling, sts_avg column"):
        leaderboard_summary(pd.DataFrame([{"model": "x", "method": "y"}]))


def catalog_dataset(name: str, **changes):
    """The catalog's data set ``name`` (conf/base/catalog.yml), as the pipeline reads it."""
    import yaml
    from kedro.io import AbstractDataset

    entry = dict(yaml.safe_load((PROJECT_ROOT / "conf" / "base" / "catalog.yml").read_text())[name])
    entry["filepath"] = str(PROJECT_ROOT / entry["filepath"])
    return AbstractDataset.from_config(name, {**entry, **changes})


def test_the_committed_leaderboard_summarises_to_its_own_rows():
    table = catalog_dataset("leaderboard_table").load()  # as the summary node reads it
    summary = leaderboard_summary(table)
    own = table[table["status"] != "carried"]  # results carried from the repository are not this checkout's
    trained = own[(own["method"] != "baseline") & ~own["model"].str.contains(r"\.seed\d+$")]
    assert set(summary) == set(trained["model"]) | {"baseline"}
    for record in trained.to_dict("records"):
        assert summary[record["model"]]["sts_avg"] == round(record["sts_avg"], 2)
    assert json.loads((PROJECT_ROOT / "data/08_reporting/summary.json").read_text()) == summary
    baselines = own[own["method"] == "baseline"]
    assert summary["baseline"] == {r["pooling"]: round(r["sts_avg"], 2) for r in baselines.to_dict("records")}


def test_rows_carried_from_the_repository_are_not_this_checkouts_results():
    table = pd.DataFrame([
        {"model": "simcse", "method": "simcse", "pooling": "cls", "sts_avg": 74.3, "status": "current"},
        {"model": "scd", "method": "scd", "pooling": "cls", "sts_avg": 76.68, "status": "carried"},
        {"model": "baseline-cls", "method": "baseline", "pooling": "cls", "sts_avg": 73.3, "status": "stale"},
        {"model": "baseline-mean", "method": "baseline", "pooling": "mean", "sts_avg": 78.9, "status": "carried"},
    ])
    assert leaderboard_summary(table) == {"simcse": {"sts_avg": 74.3}, "baseline": {"cls": 73.3, "cls_stale": 1}}


def test_stale_rows_are_kept_and_marked_stale():
    """A stale score (its model is here, its parameters or code changed since) never
    reads as a current one in `dvc exp show`; a current one carries no mark."""
    table = pd.DataFrame([
        {"model": "simcse", "method": "simcse", "pooling": "cls", "sts_avg": 74.3, "status": "stale",
         "status_reason": "parameters changed: training.max_steps 4 -> 8"},
        {"model": "simcse.seed42", "method": "simcse", "pooling": "cls", "sts_avg": 74.2, "status": "stale"},
        {"model": "declutr", "method": "declutr", "pooling": "mean", "sts_avg": 79.2, "status": "current"},
        {"model": "baseline-mean", "method": "baseline", "pooling": "mean", "sts_avg": 78.9, "status": "current"},
    ])
    assert leaderboard_summary(table) == {"simcse": {"sts_avg": 74.3, "stale": 1}, "declutr": {"sts_avg": 79.2},
                                          "baseline": {"mean": 78.9}}


def test_the_summary_of_the_table_as_the_catalog_writes_and_reads_it(tmp_path):
    """The summary node reads leaderboard.csv back through the catalog's own data set:
    an empty `not_scored` cell (every task scored) must not count as a task not scored,
    and a row with one says how many (the committed summary once said 1 for every row)."""
    dataset = catalog_dataset("leaderboard_table", filepath=str(tmp_path / "leaderboard.csv"))
    dataset.save(pd.DataFrame([
        row("baseline-mean", "baseline", "mean", 78.87401, not_scored="", status="current"),
        row("declutr", "declutr", "mean", 79.22864, delta_vs_base=0.35462, p_vs_base=0.001, not_scored="",
            paper_sts_avg=float("nan"), status="current"),
        row("scd", "scd", "cls_before_pooler", float("nan"), delta_vs_base=float("nan"), not_scored="sts13 sickr",
            status="current"),
    ]))
    summary = leaderboard_summary(dataset.load())
    assert summary["declutr"] == {"sts_avg": 79.23, "vs_base": 0.35, "p": 0.001}
    assert summary["scd"] == {"tasks_not_scored": 2}
    assert summary["baseline"] == {"mean": 78.87}
