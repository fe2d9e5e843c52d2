"""The leaderboard in a few numbers: ``data/08_reporting/summary.json``, the metrics
file DVC shows (``dvc exp show``, ``dvc metrics show``, ``dvc metrics diff``) and the
one ``contrastive-sentence-embeddings experiments`` ranks by. The detailed metrics
files stay where the leaderboard reads them; this keeps only what compares runs::

    {"<model>": {"sts_avg": 79.23, "vs_base": 0.35, "p": 0.001, "examples": 336, "seconds": 181},
     "<stale model>": {"sts_avg": 76.1, ..., "stale": 1},
     ...,
     "baseline": {"<pooling>": 78.87, "<stale pooling>": 73.3, "<stale pooling>_stale": 1, ...}}

one entry per trained model and external encoder of the leaderboard (a seeded method's entry is its
summary over seeds; its single seeds' rows are left to the leaderboard) and the
untrained encoder's STS average for each pooling. ``vs_base`` is the STS average
minus the baseline's with the same pooling and ``p`` its paired bootstrap p-value
(the leaderboard's ``delta_vs_base``, ``p_vs_base``); ``examples`` the training
examples seen, ``seconds`` the training time. A value the leaderboard does not have
is left out (DVC shows ``-``); a model with an STS task it could not score (no pair left
in that task's files) has no ``sts_avg`` and ``tasks_not_scored`` counts them. Rows the leaderboard marks ``carried`` (results that came
with the repository, with no model behind them here) are left out too: the summary is
this checkout's runs, so an experiment's summary never shows another run's numbers as
its own. A row the leaderboard marks ``stale`` (its model is here, but its parameters,
encoder, evaluation settings or code changed since, or the model was retrained after
these scores: "scores of an earlier model"; the leaderboard's ``status_reason`` says
which) is kept and marked: ``"stale": 1`` in its model's entry, and
``"<pooling>_stale": 1`` beside a stale baseline pooling's score, so ``dvc exp show``
never shows a stale score as a current one. Keys are short on purpose: DVC's column headers are
``<model>.<key>``, and ``dvc exp show`` must fit a terminal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from contrastive_sentence_embeddings.evaluation.leaderboard import CARRIED, STALE, is_seed_run, not_scored_cell

BASELINE = "baseline"
STALE_MARK = 1  # the value of a stale entry's "stale" key: DVC shows numbers
REQUIRED_COLUMNS = ("model", "method", "pooling", "sts_avg")
# summary key -> (leaderboard column, digits kept; 0 for a count or whole seconds)
TRAINED_FIELDS = {
    "sts_avg": ("sts_avg", 2),
    "vs_base": ("delta_vs_base", 2),
    "p": ("p_vs_base", 3),
    "examples": ("examples_seen", 0),
    "seconds": ("train_seconds", 0),
    # against `leaderboard.reference` (absent without one)
    "vs_ref": ("delta_vs_ref", 2),
    "p_ref": ("p_vs_ref", 3),
}


def _number(value, digits: int) -> float | int | None:
    """``value`` rounded, or None when the cell holds no number (empty, or a note)."""
    number = pd.to_numeric(pd.Series([value]), errors="coerce").iloc[0]
    if number is None or (isinstance(number, float) and math.isnan(number)):
        return None
    return int(round(number)) if digits == 0 else round(float(number), digits)


def leaderboard_summary(table: pd.DataFrame) -> dict[str, Mapping]:
    """The summary (module docstring) of the leaderboard ``table``
    (``data/08_reporting/leaderboard.csv``)."""
    missing = [column for column in REQUIRED_COLUMNS if column not in table.columns]
    if missing:
        raise ValueError(f"the leaderboard table has no {', '.join(missing)} column: cannot summarise it")
    summary: dict[str, Mapping] = {}
    baseline: dict[str, float] = {}
    for row in table.to_dict("records"):
        status = str(row.get("status", ""))
        if status == CARRIED:
            continue
        if row["method"] == BASELINE:
            score = _number(row["sts_avg"], 2)
            if score is not None:
                baseline[str(row["pooling"])] = score
                if status == STALE:
                    baseline[f"{row['pooling']}_stale"] = STALE_MARK
            continue
        if is_seed_run(row["model"]):
            continue
        fields = {key: _number(row.get(column), digits) for key, (column, digits) in TRAINED_FIELDS.items()}
        entry = {key: value for key, value in fields.items() if value is not None}
        not_scored = not_scored_cell(row.get("not_scored"))
        if not_scored:  # no sts_avg: said as a count DVC can show
            entry["tasks_not_scored"] = len(not_scored)
        if status == STALE:
            entry["stale"] = STALE_MARK
        summary[str(row["model"])] = entry
    if baseline:
        summary[BASELINE] = baseline
    return summary
