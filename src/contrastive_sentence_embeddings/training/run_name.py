"""The name of the run being trained (``simcse_decorrelation.seed42``), for its log
lines and progress bar.

A training node receives its method's block, not the name of its run: two runs of one
kind (``simcse`` and a composed ``simcse_decorrelation``, or a method's seeds) logged
"training simcse" alike. :class:`RunNameHook` names the run as Kedro starts a training
node (the node's namespace is the run: ``<method>`` or ``<method>.seed<k>``), and the
fan-out carries it to its workers in their job (``fanout.TrainingJob.run_name``).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

from kedro.framework.hooks import hook_impl

_RUN_NAME: contextvars.ContextVar[str | None] = contextvars.ContextVar("cse_run_name", default=None)
TRAINING_TAG = "training"


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


class RunNameHook:
    """Kedro hook: a training node's namespace is the name of its run while it runs."""

    def __init__(self):
        self._tokens: dict[str, contextvars.Token] = {}

    @hook_impl
    def before_node_run(self, node) -> None:
        if node.namespace and TRAINING_TAG in node.tags:
            self._tokens[node.name] = _RUN_NAME.set(node.namespace)

    @hook_impl
    def after_node_run(self, node) -> None:
        self._reset(node)

    @hook_impl
    def on_node_error(self, node) -> None:
        self._reset(node)

    def _reset(self, node) -> None:
        token = self._tokens.pop(node.name, None)
        if token is not None:
            _RUN_NAME.reset(token)
