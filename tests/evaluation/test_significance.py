"""Bootstrap intervals, the paired bootstrap test and seed aggregation: calibrated on
synthetic data whose population Spearman correlation is known, and checked against
numbers worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from contrastive_sentence_embeddings.evaluation.significance import (
    aggregate_seeds,
    bootstrap_ci,
    bootstrap_task_intervals,
    format_mean_std,
    load_pair_predictions,
    paired_bootstrap_pvalue,
    percentile_interval,
    resampled_spearman_x100,
    save_pair_predictions,
    spearman_rows_x100,
)


def _bivariate_normal(rng: np.random.Generator, rho: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.multivariate_normal([0.0, 0.0], [[1.0, rho], [rho, 1.0]], size=n)
    return x[:, 0], x[:, 1]


def test_row_spearman_equals_scipy_with_ties():
    rng = np.random.default_rng(0)
    gold = np.round(rng.uniform(0, 5, size=(4, 60)), 0)  # many ties, as STS gold scores
    predicted = np.round(gold + rng.normal(0, 1.5, size=gold.shape), 1)
    expected = [spearmanr(g, p).statistic * 100 for g, p in zip(gold, predicted)]
    np.testing.assert_allclose(spearman_rows_x100(gold, predicted), expected, rtol=1e-10)


def test_bootstrap_interval_covers_the_population_spearman_about_95_percent_of_the_time():
    # Bivariate normal with correlation rho: population Spearman = 6/pi * asin(rho/2).
    rho, n, draws = 0.6, 100, 300
    truth = 6 / math.pi * math.asin(rho / 2) * 100
    covered95 = covered50 = 0
    for draw in range(draws):
        gold, predicted = _bivariate_normal(np.random.default_rng(10_000 + draw), rho, n)
        (values,) = resampled_spearman_x100(gold, [predicted], np.random.default_rng(draw), 300)
        low, high = percentile_interval(values, 0.95)
        covered95 += low <= truth <= high
        low, high = percentile_interval(values, 0.50)
        covered50 += low <= truth <= high
    # binomial standard error of a 95% rate over 300 draws: 1.3 points
    assert 0.91 <= covered95 / draws <= 0.985
    assert 0.40 <= covered50 / draws <= 0.60  # calibrated, not merely wide


def test_bootstrap_ci_is_seeded_brackets_the_estimate_and_narrows_with_more_pairs():
    gold, predicted = _bivariate_normal(np.random.default_rng(1), 0.7, 400)
    estimate = spearmanr(gold, predicted).statistic * 100
    low, high = bootstrap_ci(gold, predicted, n_resamples=500, seed=3)
    assert low < estimate < high
    assert bootstrap_ci(gold, predicted, n_resamples=500, seed=3) == (low, high)
    assert bootstrap_ci(gold, predicted, n_resamples=500, seed=4) != (low, high)
    low_small, high_small = bootstrap_ci(gold[:100], predicted[:100], n_resamples=500, seed=3)
    assert high_small - low_small > 1.5 * (high - low)  # width ~ 1/sqrt(n): about 2x


def test_task_intervals_per_task_and_for_the_average():
    rng = np.random.default_rng(2)
    pairs = {}
    for task, n in (("sts12", 300), ("stsb", 200)):
        gold, predicted = _bivariate_normal(rng, 0.6, n)
        pairs[task] = {"gold": gold, "predicted": predicted}
    intervals = bootstrap_task_intervals(pairs, n_resamples=300, seed=5)
    assert set(intervals) == {"sts12_ci", "stsb_ci", "sts_avg_ci"}
    for task in ("sts12", "stsb"):
        assert intervals[f"{task}_ci"] == list(bootstrap_ci(pairs[task]["gold"], pairs[task]["predicted"], 300, 5))
    average = np.mean([spearmanr(p["gold"], p["predicted"]).statistic * 100 for p in pairs.values()])
    low, high = intervals["sts_avg_ci"]
    assert low < average < high
    assert high - low < min(h - l for l, h in (intervals["sts12_ci"], intervals["stsb_ci"]))  # averaging narrows


def _tasks(rng, noise_a: float, noise_b: float, sizes=(250, 300, 200)):
    gold, pred_a, pred_b = {}, {}, {}
    for index, n in enumerate(sizes):
        g = np.round(rng.uniform(0, 5, n), 1)
        gold[f"t{index}"] = g
        pred_a[f"t{index}"] = g + rng.normal(0, noise_a, n)
        pred_b[f"t{index}"] = g + rng.normal(0, noise_b, n)
    return gold, pred_a, pred_b


def test_paired_test_rejects_a_real_difference():
    gold, better, worse = _tasks(np.random.default_rng(3), noise_a=1.0, noise_b=1.6)
    result = paired_bootstrap_pvalue(gold, better, worse, n_resamples=500, seed=0)
    expected = np.mean([spearmanr(gold[t], better[t]).statistic - spearmanr(gold[t], worse[t]).statistic
                        for t in gold]) * 100
    assert result.difference == pytest.approx(expected, rel=1e-9)
    assert result.difference > 5
    assert result.p_value < 0.01 and result.significant()
    assert result.interval[0] > 0
    reverse = paired_bootstrap_pvalue(gold, worse, better, n_resamples=500, seed=0)
    assert reverse.difference == pytest.approx(-result.difference) and reverse.p_value < 0.01


def test_paired_test_uses_the_same_pairs_for_both_models():
    # A monotone transform keeps every Spearman value: with the same indices for both
    # models, every resampled difference is exactly 0 and the test cannot reject.
    gold, a, _ = _tasks(np.random.default_rng(4), 1.0, 1.0)
    result = paired_bootstrap_pvalue(gold, a, {t: 2 * v + 1 for t, v in a.items()}, n_resamples=200, seed=1)
    assert result.difference == 0.0 and result.interval == (0.0, 0.0) and result.p_value == 1.0


def test_paired_test_does_not_reject_equal_models_more_than_its_level():
    # Two models of the same quality (same noise level, independent noise): the p-value
    # is about uniform, so it falls under 0.05 in about 5% of replicates.
    rejections = 0
    replicates = 40
    for replicate in range(replicates):
        gold, a, b = _tasks(np.random.default_rng(100 + replicate), 1.0, 1.0, sizes=(120, 150))
        rejections += paired_bootstrap_pvalue(gold, a, b, n_resamples=200, seed=replicate).p_value < 0.05
    assert rejections / replicates <= 0.15


def test_paired_test_needs_the_same_tasks():
    gold, a, b = _tasks(np.random.default_rng(5), 1.0, 1.0)
    with pytest.raises(ValueError, match="both models need exactly the tasks"):
        paired_bootstrap_pvalue(gold, a, {"t0": b["t0"]})


def test_aggregate_seeds_by_hand():
    rows = [
        {"model": {"name": "simcse_seed42"}, "sts_avg": 76.0, "stsb": 80.0, "sts12_ci": [74.0, 78.0]},
        {"model": {"name": "simcse_seed43"}, "sts_avg": 77.0, "stsb": 81.0},
        {"model": {"name": "simcse_seed44"}, "sts_avg": 75.5},
    ]
    summary = aggregate_seeds(rows)
    assert set(summary) == {"sts_avg", "stsb"}  # the model block and the interval are not scores
    # sts_avg: mean (76 + 77 + 75.5) / 3 = 76.1666..., deviations -1/6, 5/6, -2/3,
    # squares sum 1/36 + 25/36 + 16/36 = 42/36 = 7/6, over n - 1 = 2: 7/12
    assert summary["sts_avg"]["mean"] == pytest.approx(76.1666666667)
    assert summary["sts_avg"]["std"] == pytest.approx(math.sqrt(7 / 12)) == pytest.approx(0.7637626)
    assert summary["sts_avg"]["n"] == 3
    # stsb: two seeds, 80 and 81: mean 80.5, std sqrt((0.25 + 0.25) / 1) = 0.7071
    assert summary["stsb"] == {"mean": 80.5, "std": pytest.approx(0.70710678), "n": 2}
    assert aggregate_seeds([{"sts_avg": 70.0}])["sts_avg"] == {"mean": 70.0, "std": None, "n": 1}


def test_format_mean_std_cells():
    assert format_mean_std(76.1666, 0.7637) == "76.2 +- 0.8"
    assert format_mean_std(76.25, 0.04, digits=2) == "76.25 +- 0.04"
    assert format_mean_std(70.0, None) == "70.0"
    assert format_mean_std(None, None) == ""


def test_pair_predictions_round_trip_without_pickle(tmp_path):
    pairs = {
        "sts12": {"gold": np.array([1.0, 2.5, 4.0]), "predicted": np.array([0.1, 0.4, 0.9]),
                  "subset": np.array(["MSRpar", "MSRpar", "OnWN"])},
        "stsb": {"gold": np.array([0.0, 5.0, 3.2]), "predicted": np.array([0.2, 0.8, 0.5]),
                 "subset": np.array(["test"] * 3)},
    }
    path = save_pair_predictions(tmp_path / "out" / "simcse.sts_pairs.npz", pairs)
    assert sorted(p.name for p in path.parent.iterdir()) == ["simcse.sts_pairs.npz"]  # no temporary left
    loaded = load_pair_predictions(path)
    assert set(loaded) == {"sts12", "stsb"}
    for task, fields in pairs.items():
        for name, values in fields.items():
            np.testing.assert_array_equal(loaded[task][name], values)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="one length"):
        bootstrap_ci([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, 2.0, np.nan, 4.0], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0], level=95)


def test_the_interval_over_seeds_is_students_t_on_their_spread():
    from contrastive_sentence_embeddings.evaluation.significance import seed_interval

    # three seeds, sd 1: t(0.975, 2) = 4.303 (tables), half-width 4.303 / sqrt(3) = 2.484
    low, high = seed_interval(70.0, 1.0, 3)
    assert (low, high) == pytest.approx((70 - 2.4842, 70 + 2.4842), abs=1e-3)
    assert seed_interval(70.0, None, 1) is None and seed_interval(70.0, 1.0, 1) is None
    assert seed_interval(70.0, float("nan"), 3) is None
