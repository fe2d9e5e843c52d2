"""The run's log: one line per record wherever the log is read later, rich's columns
only where a person watches.

Kedro's default handler is rich's: on a terminal it is the readable one, but written to
a file or a pipe it wraps every record at 80 columns (its time, level and path columns
take a third of them), so one message became 5-10 lines that grep and ``tail`` cut
apart, and its markup ate any text in square brackets (the fan-out's ``[rank 0]``).

Kedro 1.x accepts only ``logging`` and ``kedro.logging`` classes in ``conf/logging.yml``
(others need an environment variable every user would have to set), so the file
declares a plain one-line console handler named ``console``, and :class:`RunLoggingHook`
finishes the setup as a session's context is created (:func:`install`):

- the ``console`` handler becomes Kedro's rich handler when its stream is a terminal
  (markup only for the records Kedro colours itself), and otherwise writes
  :class:`OneLineFormatter`'s lines;
- :class:`RunLogFileHandler` appends every record of the run, tracebacks included, in
  the same one-line form to ``<project>/logs/kedro.log``, so a message on the console
  can stay short while the file keeps the whole story.

A configuration given with ``KEDRO_LOGGING_CONFIG`` that names no ``console`` handler
keeps its own console handlers as they are; the run log is added all the same.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path
from typing import TextIO

from kedro.framework.hooks import hook_impl


class OneLineFormatter(logging.Formatter):
    """``time level logger: message``, with any line break of the message or its
    traceback written as the two characters ``\\n``: one record, one line."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt: str | None = None):
        super().__init__(fmt, datefmt)

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).replace("\r\n", "\n").replace("\n", "\\n")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _rich_handler(stream: TextIO, **options) -> logging.Handler:
    """Kedro's rich handler (its warnings capture and tracebacks), with markup only in
    the records Kedro marks up itself: a message's own square brackets are text."""
    import rich.console
    from kedro.logging import RichHandler

    class _Handler(RichHandler):
        def render_message(self, record, message):
            if not hasattr(record, "markup"):
                record.markup = hasattr(record, "rich_format")
            return super().render_message(record, message)

    return _Handler(console=rich.console.Console(file=stream), markup=False, **options)


class RunLogFileHandler(logging.handlers.RotatingFileHandler):
    """Every record appended to ``filename`` in :class:`OneLineFormatter`'s form; the
    file and its folder are created on the first record, so a command that logs nothing
    leaves nothing behind. At ``max_bytes`` the file moves to ``<name>.1`` (the oldest
    of ``backup_count`` kept goes), as the standard rotating handler does."""

    def __init__(self, filename: str | Path, level: int = logging.NOTSET, encoding: str = "utf-8",
                 max_bytes: int = 10 * 2**20, backup_count: int = 5):
        super().__init__(Path(filename), mode="a", maxBytes=max_bytes, backupCount=backup_count,
                         encoding=encoding, delay=True)
        self.setLevel(level)
        self.setFormatter(OneLineFormatter())

    def _open(self):
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


CONSOLE = "console"
RUN_LOG = "run_log"
RUN_LOG_PATH = Path("logs") / "kedro.log"


def console_handler(stream: TextIO) -> logging.Handler:
    """Rich on a terminal, :class:`OneLineFormatter` lines on a file or a pipe."""
    if _is_terminal(stream):
        handler = _rich_handler(stream, rich_tracebacks=True)
    else:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(OneLineFormatter())
    handler.set_name(CONSOLE)
    return handler


def _loggers_that_print_past(root: logging.Logger) -> list[logging.Logger]:
    """The loggers whose records stop at their own handlers (``propagate: False``, as
    the leaderboard's summary): the run log is added to them too."""
    loggers = [logger for logger in list(root.manager.loggerDict.values()) if isinstance(logger, logging.Logger)]
    return [logger for logger in loggers if not logger.propagate and logger.handlers]


def install(project_path: str | Path, root: logging.Logger | None = None) -> None:
    """The run's handlers on ``root`` (the root logger): the ``console`` handler of
    ``conf/logging.yml`` made terminal-aware, and one run log, ``project_path``'s
    (replacing another project's, as in one process that runs sessions of several),
    on the root and on every logger that does not propagate to it. Calling it again
    changes nothing."""
    root = root or logging.getLogger()
    wanted = (Path(project_path) / RUN_LOG_PATH).resolve()
    for index, handler in enumerate(list(root.handlers)):
        if handler.get_name() == CONSOLE and type(handler) is logging.StreamHandler:
            replacement = console_handler(handler.stream)
            replacement.setLevel(handler.level)
            for kept in handler.filters:
                replacement.addFilter(kept)
            root.handlers[index] = replacement
    run_log = next((h for h in root.handlers if h.get_name() == RUN_LOG), None)
    if run_log is None or Path(run_log.baseFilename) != wanted:
        new = RunLogFileHandler(wanted)
        new.set_name(RUN_LOG)
        for logger in [root, *_loggers_that_print_past(root)]:
            if run_log is not None and run_log in logger.handlers:
                logger.removeHandler(run_log)
        if run_log is not None:
            run_log.close()
        run_log = new
    for logger in [root, *_loggers_that_print_past(root)]:
        if run_log not in logger.handlers:
            logger.addHandler(run_log)


class RunLoggingHook:
    """Kedro hook: :func:`install` for the session's project, before the other hooks
    log anything about the run."""

    @hook_impl(tryfirst=True)
    def after_context_created(self, context) -> None:
        install(context.project_path)
