"""Reading the metrics records the leaderboard publishes, and refusing a broken one.

A record (``data/08_reporting/metrics/<run>.json``, ``metrics_full/<run>.json``) is read
only if it is whole and agrees with itself: a file cut short, a record that is not an
object, or an average that is not the mean of the scores it averages (a record edited
by hand, or written by another version) would otherwise reach the leaderboard and the
summary DVC shows as it is. Each problem is named with the file in one line
(:class:`BrokenRecord`); the fix is to restore the file or to score the model again.

The averages are recomputed exactly as the evaluator computes them (``sts_avg``: the mean
of the seven STS tasks, ``sts_avg_wmean`` of their weighted means, ``transfer_avg`` of
the seven transfer accuracies), so a record the project wrote always agrees; the bound
only absorbs the JSON round trip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from contrastive_sentence_embeddings.data.report import BadInputError
from contrastive_sentence_embeddings.evaluation.sts import STS_TASKS
from contrastive_sentence_embeddings.evaluation.transfer import TRANSFER_TASKS

# The methods of the rows nobody trained here: the baseline (the starting encoder with
# each pooling) and an external row (any folder or Hub id scored on the harness,
# ``kedro run --pipelines=external``). Their parameters are the encoder and the pooling.
# The evaluator writes them, the leaderboard reads them: both take them from here.
BASELINE = "baseline"
EXTERNAL = "external"
UNTRAINED_ROWS = (BASELINE, EXTERNAL)

# Averages and what they average, as the evaluator writes them (sts.py, evaluator.py).
AVERAGES = {
    "sts_avg": STS_TASKS,
    "sts_avg_wmean": tuple(f"{task}_wmean" for task in STS_TASKS),
    "transfer_avg": TRANSFER_TASKS,
}
# Scores are percentages written with full float precision: anything beyond this is an edit.
TOLERANCE = 1e-6


class BrokenRecord(BadInputError):
    """A metrics record that cannot be read or does not agree with itself."""


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def record_problems(record) -> list[str]:
    """What is inconsistent in one metrics record: each average against the mean of
    the scores it averages, each score with a confidence interval inside it; [] when
    nothing is."""
    if not isinstance(record, Mapping):
        return [f"holds a JSON {type(record).__name__}, not a metrics record (an object)"]
    problems = []
    for average, parts in AVERAGES.items():
        if average not in record:
            continue
        value, scores = _number(record[average]), [_number(record.get(part)) for part in parts]
        if value is None:
            problems.append(f"{average} is {record[average]!r}, not a number")
        elif all(score is not None for score in scores):
            mean = math.fsum(scores) / len(scores)
            if abs(value - mean) > TOLERANCE * max(1.0, abs(mean)):
                problems.append(f"{average} is {value:.4f} but the mean of its {len(parts)} scores is {mean:.4f}")
        elif any(part in record for part in parts):
            missing = [part for part, score in zip(parts, scores) if score is None]
            problems.append(f"{average} is given but {', '.join(missing)} is missing or not a number")
    for key, interval in record.items():
        if not key.endswith("_ci") or key[:-3] not in record:
            continue
        value = _number(record[key[:-3]])
        if (value is not None and isinstance(interval, list) and len(interval) == 2
                and all(_number(end) is not None for end in interval) and not interval[0] <= value <= interval[1]):
            problems.append(f"{key[:-3]} {value:.4f} lies outside its own interval {key} "
                            f"[{interval[0]:.4f}, {interval[1]:.4f}]")
    return problems


def _cause(error: BaseException) -> BaseException:
    """The innermost error behind ``error`` (Kedro wraps a data set's in its own)."""
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def read_records(loaders: Mapping[str, Callable[[], object]], folder: str) -> dict[str, Mapping]:
    """Every partition of ``folder`` loaded and checked (module docstring); the first
    broken one stops the build with :class:`BrokenRecord` naming its file."""
    records = {}
    for name, load in loaders.items():
        file = f"{folder}/{name}.json"
        try:
            record = load()
        except Exception as error:  # noqa: BLE001 - a data set's error of any kind is this file's
            cause = _cause(error)
            raise BrokenRecord(f"{file}: not a readable metrics record ({type(cause).__name__}: {cause}); "
                               "restore it (`dvc checkout`) or score the model again") from error
        problems = record_problems(record)
        if problems:
            raise BrokenRecord(f"{file}: {'; '.join(problems)}: the record was edited or damaged; restore it "
                               "(`dvc checkout`) or score the model again")
        records[name] = record
    return records
