"""How much of a difference between two STS scores is noise: bootstrap intervals,
paired bootstrap tests and mean +- standard deviation over seeds.

Small pure functions of numpy arrays. Scores are Spearman correlations x 100, as in
:mod:`.sts`. A task's pairs are resampled with replacement (the "pairs" bootstrap);
for STS12-16, whose SentEval "all" score is one Spearman over the subsets
concatenated, the pairs of all subsets are pooled and resampled together, so the
interval is that of the reported "all" number. Every function that resamples takes
a ``seed`` and gives the same result for the same seed.

Per-pair predictions (one cosine similarity per pair, with its gold score and
subset) are kept per model in a compact ``.npz`` file beside its metrics
(:func:`save_pair_predictions` / :func:`load_pair_predictions`), so that the
leaderboard can test two models on the same pairs without re-encoding anything.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

# Resampled values handled at once: bounds memory to a few tens of MB per array.
_CHUNK_ELEMENTS = 2_000_000


def _as_pairs(gold, predicted, what: str) -> tuple[np.ndarray, np.ndarray]:
    gold = np.asarray(gold, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    if gold.ndim != 1 or gold.shape != predicted.shape:
        raise ValueError(f"{what}: gold and predicted must be 1-d arrays of one length, got shapes "
                         f"{gold.shape} and {predicted.shape}")
    if len(gold) < 3:
        raise ValueError(f"{what}: a Spearman correlation needs at least 3 pairs, got {len(gold)}")
    if not (np.isfinite(gold).all() and np.isfinite(predicted).all()):
        raise ValueError(f"{what}: gold or predicted scores contain NaN or infinite values")
    return gold, predicted


def spearman_rows_x100(gold: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Spearman's rank correlation x 100 of each row of two ``(R, n)`` matrices: the
    Pearson correlation of their average ranks (ties share the mean rank), i.e.
    ``scipy.stats.spearmanr`` row by row. A row with a constant side gives NaN."""
    gold_ranks = rankdata(gold, axis=1)
    predicted_ranks = rankdata(predicted, axis=1)
    gold_ranks -= gold_ranks.mean(axis=1, keepdims=True)
    predicted_ranks -= predicted_ranks.mean(axis=1, keepdims=True)
    numerator = (gold_ranks * predicted_ranks).sum(axis=1)
    denominator = np.sqrt((gold_ranks ** 2).sum(axis=1) * (predicted_ranks ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return 100.0 * numerator / denominator


def resampled_spearman_x100(
    gold: np.ndarray, predicted: Sequence[np.ndarray], rng: np.random.Generator, n_resamples: int
) -> list[np.ndarray]:
    """Spearman x 100 of ``gold`` with each array of ``predicted`` on ``n_resamples``
    bootstrap resamples of the pairs: resample r draws ``n`` pair indices uniformly
    with replacement, the *same* indices for every array of ``predicted`` (a paired
    bootstrap). Returns one ``(n_resamples,)`` array per predicted array."""
    n = len(gold)
    per_chunk = max(1, _CHUNK_ELEMENTS // n)
    pieces: list[list[np.ndarray]] = [[] for _ in predicted]
    for begin in range(0, n_resamples, per_chunk):
        indices = rng.integers(0, n, size=(min(per_chunk, n_resamples - begin), n))
        resampled_gold = gold[indices]
        for piece, scores in zip(pieces, predicted):
            piece.append(spearman_rows_x100(resampled_gold, scores[indices]))
    return [np.concatenate(piece) for piece in pieces]


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval ``[q_{(1-level)/2}, q_{(1+level)/2}]`` of bootstrap
    values (Efron and Tibshirani 1993, ch. 13), NaN resamples left out."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        raise ValueError("no bootstrap resample gave a defined correlation")
    low, high = np.percentile(values, [50.0 * (1.0 - level), 50.0 * (1.0 + level)])
    return float(low), float(high)


def bootstrap_ci(
    gold, pred, n_resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval ``(low, high)`` of Spearman x 100
    between ``gold`` and ``pred``: ``n_resamples`` resamples of the pairs with
    replacement (generator ``numpy.random.default_rng(seed)``), the interval between
    the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the resampled
    correlations. For an STS12-16 "all" score pass the subsets' pairs concatenated."""
    gold, pred = _as_pairs(gold, pred, "bootstrap_ci")
    (values,) = resampled_spearman_x100(gold, [pred], np.random.default_rng(seed), n_resamples)
    return percentile_interval(values, level)


def bootstrap_task_intervals(
    pairs: Mapping[str, Mapping[str, np.ndarray]], n_resamples: int = 1000, seed: int = 0,
    level: float = 0.95, average_key: str | None = "sts_avg",
) -> dict[str, list[float]]:
    """``{"<task>_ci": [low, high], ...}`` for every task of ``pairs`` (``{task:
    {"gold": ..., "predicted": ...}}``), each as :func:`bootstrap_ci` with the same
    ``seed`` (so a task's interval does not depend on which other tasks are there),
    plus ``"<average_key>_ci"``: the percentile interval of the mean over tasks of
    their resampled Spearman values (tasks resampled independently), when there is
    more than one task and ``average_key`` is not None."""
    intervals: dict[str, list[float]] = {}
    resampled = {}
    for task, arrays in pairs.items():
        gold, predicted = _as_pairs(arrays["gold"], arrays["predicted"], task)
        (values,) = resampled_spearman_x100(gold, [predicted], np.random.default_rng(seed), n_resamples)
        resampled[task] = values
        intervals[f"{task}_ci"] = list(percentile_interval(values, level))
    if average_key is not None and len(resampled) > 1:
        average = np.mean(np.stack(list(resampled.values())), axis=0)
        intervals[f"{average_key}_ci"] = list(percentile_interval(average, level))
    return intervals


@dataclass(frozen=True)
class PairedTest:
    """Result of :func:`paired_bootstrap_pvalue`: ``difference`` = score(A) - score(B)
    on the full data (x 100 units), its percentile ``interval`` and the two-sided
    ``p_value``."""

    difference: float
    p_value: float
    interval: tuple[float, float]
    n_resamples: int

    def significant(self, alpha: float = 0.05) -> bool:
        return self.p_value < alpha


def _spearman_x100(gold: np.ndarray, predicted: np.ndarray) -> float:
    return float(spearman_rows_x100(gold[None, :], predicted[None, :])[0])


def paired_bootstrap_pvalue(
    gold: Mapping[str, np.ndarray],
    pred_a: Mapping[str, np.ndarray],
    pred_b: Mapping[str, np.ndarray],
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedTest:
    """Paired bootstrap test of the difference in STS average between two models
    scored on the same pairs of several tasks (``{task: array}``, one array per task,
    the same pairs in the same order for both models).

    Statistic: ``delta = mean_t S_t(A) - mean_t S_t(B)``, with ``S_t`` the Spearman
    x 100 of task t. Resample r draws, for every task independently, its pairs with
    replacement, using the *same* indices for A and B (both models are scored on the
    same resampled pairs), and gives ``delta_r``. The bootstrap distribution of
    ``delta_r - delta`` approximates the distribution of ``delta`` under the null
    hypothesis of no difference (the "shifted null" of Efron and Tibshirani 1993,
    ch. 16, and of Berg-Kirkpatrick, Burkett and Klein, EMNLP 2012, whose test is its
    one-sided form, ``#{delta_r > 2 delta}``; Koehn, EMNLP 2004, introduced the paired
    bootstrap in NLP). Two-sided p-value, with the usual +1 so that it is never 0
    (Davison and Hinkley 1997, ch. 4)::

        p = (1 + #{r : |delta_r - delta| >= |delta|}) / (1 + n_resamples)

    ``interval`` is the percentile interval of ``delta_r`` at ``level``. Tasks are
    resampled in sorted order from ``numpy.random.default_rng(seed)``.
    """
    tasks = sorted(gold)
    if sorted(pred_a) != tasks or sorted(pred_b) != tasks:
        raise ValueError(f"paired_bootstrap_pvalue: both models need exactly the tasks {tasks}, got "
                         f"{sorted(pred_a)} and {sorted(pred_b)}")
    rng = np.random.default_rng(seed)
    observed, resampled = 0.0, np.zeros(n_resamples)
    for task in tasks:
        gold_t, a = _as_pairs(gold[task], pred_a[task], f"{task} (model A)")
        _, b = _as_pairs(gold[task], pred_b[task], f"{task} (model B)")
        observed += _spearman_x100(gold_t, a) - _spearman_x100(gold_t, b)
        values_a, values_b = resampled_spearman_x100(gold_t, [a, b], rng, n_resamples)
        resampled += values_a - values_b
    observed /= len(tasks)
    resampled /= len(tasks)
    resampled = resampled[~np.isnan(resampled)]
    extreme = int(np.count_nonzero(np.abs(resampled - observed) >= abs(observed)))
    return PairedTest(
        difference=float(observed),
        p_value=(1 + extreme) / (1 + len(resampled)),
        interval=percentile_interval(resampled, level),
        n_resamples=len(resampled),
    )


# --- seeds ---------------------------------------------------------------------------


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def aggregate_seeds(rows: Iterable[Mapping]) -> dict[str, dict[str, float | int | None]]:
    """Mean and sample standard deviation over seeds of every numeric score.

    ``rows`` are the metrics dicts of one method, one per seed. For each key with a
    finite number in at least one row: ``{"mean": mean, "std": s, "n": n}`` with
    ``s = sqrt(sum_i (x_i - mean)^2 / (n - 1))`` (ddof 1) over the ``n`` rows that
    have it, and ``std`` None when ``n == 1``. Non-numeric values (the ``model``
    block, intervals) are left out."""
    values: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if _is_number(value):
                values.setdefault(key, []).append(float(value))
    summary = {}
    for key, numbers in values.items():
        array = np.asarray(numbers)
        summary[key] = {
            "mean": float(array.mean()),
            "std": float(array.std(ddof=1)) if len(array) > 1 else None,
            "n": len(array),
        }
    return summary


def summarise_seed_runs(runs: Sequence[Mapping]) -> dict:
    """One method's metrics over its seeds, as one metrics dict: every score is the
    mean over the runs (:func:`aggregate_seeds`), ``<score>_std`` its sample standard
    deviation (ddof 1), ``n_seeds`` the number of runs; ``model`` is the first run's
    identity with ``name`` the method (the runs' names less their ``.seed<k>``) and
    ``seeds`` every seed; ``seed_runs`` keeps each run's name and STS average."""
    runs = list(runs)
    if not runs:
        raise ValueError("no runs to summarise")
    identities = [run.get("model", {}) for run in runs]
    names = {str(identity.get("name", "")).rsplit(".seed", 1)[0] for identity in identities}
    if len(names) != 1:
        raise ValueError(f"runs of different methods cannot be summarised together: {sorted(names)}")
    summary: dict = {
        "model": {**identities[0], "name": names.pop(), "seed": None,
                  "seeds": [identity.get("seed") for identity in identities]},
        "n_seeds": len(runs),
        "seed_runs": {identity.get("name"): run.get("sts_avg") for identity, run in zip(identities, runs)},
    }
    flat = [{key: value for key, value in run.items() if key != "n_seeds"} for run in runs]
    for key, stats in aggregate_seeds(flat).items():
        summary[key] = stats["mean"]
        summary[f"{key}_std"] = stats["std"]
    budgets = [run.get("training") or {} for run in runs]
    summary["training"] = {key: float(np.mean([b[key] for b in budgets])) if all(_is_number(b.get(key)) for b in budgets)
                           else None for key in ("examples_seen", "steps", "train_seconds")}
    return summary


def seed_interval(mean: float, std: float | None, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """The ``level`` confidence interval of a method's mean score over ``n`` seeds,
    from the seeds' sample standard deviation (ddof 1), with Student's t (the seeds'
    scores taken as a normal sample)::

        mean -+ t_{(1 + level) / 2, n - 1} * std / sqrt(n)

    None with fewer than two seeds (no spread to estimate). Three seeds give
    t = 4.30 at 95%: an interval over few seeds is wide on purpose."""
    if n < 2 or std is None or not math.isfinite(float(std)) or not math.isfinite(float(mean)):
        return None
    from scipy.stats import t

    half = float(t.ppf((1 + level) / 2, n - 1)) * float(std) / math.sqrt(n)
    return float(mean) - half, float(mean) + half


def format_mean_std(mean: float | None, std: float | None, digits: int = 1) -> str:
    """A table cell: ``"76.2 +- 0.4"``; ``"76.2"`` without a standard deviation
    (one seed); ``""`` without a value."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} +- {std:.{digits}f}"


# --- per-pair predictions on disk ----------------------------------------------------------

_FIELDS = ("gold", "predicted", "subset")


def save_pair_predictions(path: str | os.PathLike, pairs: Mapping[str, Mapping[str, np.ndarray]]) -> Path:
    """Write ``{task: {"gold", "predicted", "subset"}}`` to one compressed ``.npz``
    (keys ``<task>/gold`` etc.; ``subset`` as a unicode array, so no pickle is
    needed to read it back), atomically: a temporary file in the same folder,
    then one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for task, fields in pairs.items():
        if "/" in task:
            raise ValueError(f"task name {task!r} may not contain '/'")
        for name in _FIELDS:
            arrays[f"{task}/{name}"] = np.asarray(fields[name], dtype=np.str_ if name == "subset" else np.float64)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez_compressed(file, **arrays)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load_pair_predictions(path: str | os.PathLike) -> dict[str, dict[str, np.ndarray]]:
    """Read what :func:`save_pair_predictions` wrote: ``{task: {"gold", "predicted",
    "subset"}}``; a file without all three arrays for a task is an error naming it."""
    pairs: dict[str, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as archive:
        for key in archive.files:
            task, _, name = key.partition("/")
            pairs.setdefault(task, {})[name] = archive[key]
    for task, fields in pairs.items():
        missing = [name for name in _FIELDS if name not in fields]
        if missing:
            raise ValueError(f"{path}: task {task} lacks {', '.join(missing)}")
    return pairs
