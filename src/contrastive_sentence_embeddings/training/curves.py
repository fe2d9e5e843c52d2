"""A training curve as two tables: what was logged while training, and what was
evaluated.

The trainer (:func:`~.trainer.train`) returns one table with a row per step at which it
logged the loss (every ``log_every`` steps) or scored the dev sets (every
``eval_every`` steps, at step 0 and at the end), the two kinds merged per step. A step
that only one of them ran has empty cells in the other's columns, and a plot of that
column (DVC's, a spreadsheet's) reads the empty cells as 0: a dev curve zigzagging
between 83 and 0, a loss curve starting at 0. So the curve is stored split:

* the *training log*: the key columns (``seed`` when present, ``step``) and every
  column that is not a dev score (loss and its terms, learning rate, epoch,
  examples/s, peak memory), on the steps where the loss was logged;
* the *dev curve*: the key columns and the ``dev/...`` scores, on the steps where the
  dev sets were scored, and no other step.

:func:`join_curve` puts the two back into the trainer's table.
"""

from __future__ import annotations

import pandas as pd

DEV_PREFIX = "dev/"  # the trainer's name for a dev score column: dev/<scorer key>
KEY_COLUMNS = ("seed", "step")  # seed: present when the runs of a method share one file


def key_columns(table: pd.DataFrame) -> list[str]:
    """The columns that identify a row: ``step``, after ``seed`` when the table has one."""
    if "step" not in table.columns:
        raise ValueError(f"a training curve needs a 'step' column; it has {', '.join(map(str, table.columns))}")
    return [column for column in KEY_COLUMNS if column in table.columns]


def split_curve(curve: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(training_log, dev_curve)``: each with the key columns and its own columns, and
    only the rows where at least one of its own columns has a value, so neither has an
    empty cell that stands for "not measured at this step"."""
    keys = key_columns(curve)
    dev = [c for c in curve.columns if str(c).startswith(DEV_PREFIX)]
    logged = [c for c in curve.columns if c not in keys and c not in dev]
    return _rows_with_values(curve, keys, logged), _rows_with_values(curve, keys, dev)


def join_curve(training_log: pd.DataFrame, dev_curve: pd.DataFrame) -> pd.DataFrame:
    """The trainer's table again: the rows of both, one per step (and seed), in order,
    dev scores first as the trainer writes them."""
    keys = key_columns(training_log)
    if key_columns(dev_curve) != keys:
        raise ValueError(f"the training log is keyed by {keys} but the dev curve by {key_columns(dev_curve)}")
    joined = dev_curve.merge(training_log, on=keys, how="outer", sort=True)
    return joined.reset_index(drop=True)


def _rows_with_values(curve: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    if not columns:
        return curve.loc[[], keys].reset_index(drop=True)
    rows = curve.loc[curve[columns].notna().any(axis=1), keys + columns]
    return rows.sort_values(keys).reset_index(drop=True)
