"""The run's log (log_handlers.py, conf/logging.yml): one line per record in files and
pipes, rich only on a terminal with a message's own brackets kept, the run log in the
project's logs/kedro.log, and a real ``kedro run`` written that way."""

from __future__ import annotations

import io
import logging
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.log_handlers import (
    CONSOLE,
    RUN_LOG,
    OneLineFormatter,
    install,
)

ROOT = Path(__file__).resolve().parent.parent


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def record_with_traceback(logger: logging.Logger) -> None:
    try:
        raise ValueError("broken\nsecond line of the error")
    except ValueError:
        logger.exception("first line\nsecond line [rank 0]")


@pytest.fixture
def scratch_root():
    """A logger tree of its own, with conf/logging.yml's console handler on a stream."""
    manager = logging.Manager(logging.RootLogger(logging.INFO))
    root = manager.root
    root.manager = manager
    yield root
    for handler in root.handlers:
        handler.close()


def console_like_logging_yml(stream) -> logging.Handler:
    handler = logging.StreamHandler(stream)
    handler.set_name(CONSOLE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


def test_a_record_with_line_breaks_and_a_traceback_is_one_line():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter())
    logger = logging.getLogger("tests.one_line")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        record_with_traceback(logger)
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    assert "first line\\nsecond line [rank 0]" in lines[0]
    assert "Traceback (most recent call last):\\n" in lines[0] and "second line of the error" in lines[0]


def test_a_pipe_gets_lines_and_the_project_gets_its_run_log(tmp_path, scratch_root):
    pipe = io.StringIO()
    scratch_root.addHandler(console_like_logging_yml(pipe))
    install(tmp_path, scratch_root)
    install(tmp_path, scratch_root)  # again: nothing changes
    assert [h.get_name() for h in scratch_root.handlers] == [CONSOLE, RUN_LOG]
    logger = scratch_root.manager.getLogger("contrastive_sentence_embeddings.somewhere")
    logger.info("a message long enough to be wrapped by rich at eighty columns, " * 3)
    record_with_traceback(logger)
    console = pipe.getvalue().splitlines()
    run_log = (tmp_path / "logs" / "kedro.log").read_text(encoding="utf-8").splitlines()
    assert len(console) == len(run_log) == 2
    assert all(" contrastive_sentence_embeddings.somewhere: " in line for line in console + run_log)
    assert "[rank 0]" in run_log[1] and "ValueError: broken\\nsecond line of the error" in run_log[1]


def test_another_project_moves_the_run_log_and_a_summary_logger_gets_it_too(tmp_path, scratch_root):
    summary = scratch_root.manager.getLogger("tests.summary")
    summary.propagate = False
    summary.addHandler(logging.StreamHandler(io.StringIO()))
    install(tmp_path / "first", scratch_root)
    install(tmp_path / "second", scratch_root)
    (run_log,) = [h for h in scratch_root.handlers if h.get_name() == RUN_LOG]
    assert Path(run_log.baseFilename) == (tmp_path / "second" / "logs" / "kedro.log").resolve()
    assert run_log in summary.handlers and len(summary.handlers) == 2
    summary.info("the best rows")
    assert "the best rows" in (tmp_path / "second" / "logs" / "kedro.log").read_text()
    assert not (tmp_path / "first" / "logs").exists()  # created on the first record only


def test_a_terminal_gets_rich_and_keeps_a_message_s_brackets(tmp_path, scratch_root):
    terminal = Terminal()
    scratch_root.addHandler(console_like_logging_yml(terminal))
    install(tmp_path, scratch_root)
    console = scratch_root.handlers[0]
    assert console.get_name() == CONSOLE and type(console).__name__ != "StreamHandler"
    scratch_root.manager.getLogger("tests.rich").info("[rank 0] dev stsb 81.2 at step 250")
    shown = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", terminal.getvalue()).split())
    assert "[rank 0] dev stsb 81.2" in shown  # rich markup would take "[rank 0]" for a style


def test_kedro_run_in_a_pipe_logs_one_line_per_record(tmp_path):
    """``kedro run`` with its output piped: every line of the console and of
    logs/kedro.log is a record (time, level, logger), a multi-line report included."""
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([Path(sys.executable).parent / "kedro", "run", "--pipelines=baseline", "--params",
                           f"encoder={tmp_path / 'no_such_model'}"],
                          cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    records = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(records) > 10
    stamp = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: "
    assert all(re.match(stamp, line) for line in records), [line for line in records if not re.match(stamp, line)][:3]
    assert any("evaluation_data: dropped" in line for line in records)
