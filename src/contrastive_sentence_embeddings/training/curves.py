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

What a chart needs besides (DVC's plots, dvc.yaml):

* the dev curve says which score picked the kept weights and where
  (:func:`with_selection`): ``dev/selection`` is the run's ``training.select_by``
  score at each scored step, ``dev/kept`` 1 at the step whose weights were kept, 0
  elsewhere; a chart of ``dev/dev_avg`` for a run that selects by ``stsb_dev`` showed
  training "making the model worse" while the kept weights were the best on STS-B dev;
* each loss term on its own (:func:`loss_terms`): the training log's loss and terms
  in long form (``seed``, ``step``, ``term``, ``value``), so a chart draws each term on
  its own axis; the sum alone was dominated by a freshly initialised MLM head.
"""

from __future__ import annotations

import pandas as pd

DEV_PREFIX = "dev/"  # the trainer's name for a dev score column: dev/<scorer key>
KEY_COLUMNS = ("seed", "step")  # seed: present when the runs of a method share one file
SELECTION = f"{DEV_PREFIX}selection"  # the select_by score (with_selection)
KEPT = f"{DEV_PREFIX}kept"  # 1 at the step whose weights were kept
# Training-log columns that are not a loss: what loss_terms leaves out.
NOT_LOSS_COLUMNS = ("epoch", "lr", "examples_per_second", "peak_memory_gib")


def with_selection(curve: pd.DataFrame, select_by: str, kept_step: int) -> pd.DataFrame:
    """``curve`` with :data:`SELECTION` (the ``select_by`` dev score, on the steps that
    scored it) and :data:`KEPT` (1.0 at ``kept_step``'s scored row, 0.0 at the others);
    a curve without dev scores (a run with no dev scorer, a fan-out's other ranks) as it is."""
    column = f"{DEV_PREFIX}{select_by}"
    if not any(str(name).startswith(DEV_PREFIX) for name in curve.columns):
        return curve
    if column not in curve.columns:
        raise ValueError(f"the curve has no {column} column to mark the selection by")
    curve = curve.copy()
    scored = curve[column].notna()
    curve[SELECTION] = curve[column]
    curve[KEPT] = (curve["step"] == kept_step).astype(float).where(scored)
    return curve


def loss_terms(training_log: pd.DataFrame) -> pd.DataFrame:
    """The training log's ``loss`` and every term in long form: ``seed`` (when present),
    ``step``, ``term``, ``value``, the sum first, then the terms in the log's order; a
    step where a term was not logged has no row for it."""
    keys = key_columns(training_log)
    terms = [c for c in training_log.columns if c not in keys and c not in NOT_LOSS_COLUMNS
             and not str(c).startswith(DEV_PREFIX)]
    terms = sorted(terms, key=lambda term: term != "loss")
    long = training_log.melt(id_vars=keys, value_vars=terms, var_name="term", value_name="value")
    order = {term: index for index, term in enumerate(terms)}
    long = long.dropna(subset=["value"]).assign(_order=lambda table: table["term"].map(order))
    return long.sort_values(["_order", *keys]).drop(columns="_order").reset_index(drop=True)


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
