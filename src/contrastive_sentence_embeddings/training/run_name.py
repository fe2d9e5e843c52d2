"""The name of the run being trained (``simcse_decorrelation.seed42``), for its log
lines and progress bar.

A training node receives its method's block, not the name of its run: two runs of one
kind (``simcse`` and a composed ``simcse_decorrelation``, or a method's seeds) logged
"training simcse" alike. ``training.hooks.RunNameHook`` names the run as Kedro starts a training
node (the node's namespace is the run: ``<method>`` or ``<method>.seed<k>``), and the
fan-out carries it to its workers in their job (``fanout.TrainingJob.run_name``). This
module imports no Kedro: the trainer imports it, and the GPU benchmarks run the trainer
where Kedro is not installed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

_RUN_NAME: contextvars.ContextVar[str | None] = contextvars.ContextVar("cse_run_name", default=None)
TRAINING_TAG = "training"


def name_run(name: str) -> contextvars.Token:
    """Make ``name`` the current run until :func:`end_run` with the token returned."""
    return _RUN_NAME.set(name)


def end_run(token: contextvars.Token) -> None:
    _RUN_NAME.reset(token)


def current_run(default: str | None = None) -> str | None:
    """The run being trained in this context, else ``default``."""
    return _RUN_NAME.get() or default


@contextmanager
def named_run(name: str | None) -> Iterator[None]:
    """Within the block, :func:`current_run` is ``name`` (unchanged when it is None)."""
    token = _RUN_NAME.set(name) if name else None
    try:
        yield
    finally:
        if token is not None:
            _RUN_NAME.reset(token)
