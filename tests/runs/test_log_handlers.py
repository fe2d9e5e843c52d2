"""The run's log (runs/log_handlers.py, conf/logging.yml): one line per record in files and
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

from contrastive_sentence_embeddings.runs.log_handlers import (
    CONSOLE,
    RUN_LOG,
    OneLineFormatter,
    install,
)

from tests.helpers import copy_project_configuration

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory, mirror_dir):
    """``kedro run --pipelines=baseline --params encoder=<a folder that is not there>``
    with its output piped, in a scratch copy of the project (conf/, params.yaml)."""
    from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR

    project = tmp_path_factory.mktemp("project")
    copy_project_configuration(project)
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "DVC_NO_ANALYTICS": "1",
                   MIRROR_ENV_VAR: str(mirror_dir)}
    missing = project / "no_such_model"
    done = subprocess.run([Path(sys.executable).parent / "kedro", "run", "--pipelines=baseline", "--params",
                           f"encoder={missing}"],
                          cwd=project, env=environment, capture_output=True, text=True, timeout=600)
    return project, missing, done


STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: ")


def test_kedro_run_in_a_pipe_logs_one_line_per_record(failed_run):
    """Every line of the console and of logs/kedro.log is a record (time, level,
    logger), multi-line reports and the traceback included."""
    project, _, done = failed_run
    records = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(records) > 10
    assert all(STAMP.match(line) for line in records), [line for line in records if not STAMP.match(line)][:3]
    assert any("evaluation_data: left out 13497 (unscored pair" in line for line in records)
    run_log = (project / "logs" / "kedro.log").read_text(encoding="utf-8").splitlines()
    assert all(STAMP.match(line) for line in run_log)
    assert any("Traceback (most recent call last)" in line for line in run_log)


def test_an_encoder_that_is_not_there_is_one_message_naming_the_parameter(failed_run):
    project, missing, done = failed_run
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.startswith(f"Error: encoder '{missing}': no such folder; set the `encoder` parameter"), \
        done.stderr[-3000:]
    assert f"(the traceback is in {project / 'logs' / 'kedro.log'})" in done.stderr
