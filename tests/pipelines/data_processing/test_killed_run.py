"""A real ``kedro run`` of data preparation (the sentence steps, two workers) stopped
with SIGTERM, with SIGKILL while its workers run, and killed at a named moment inside
a save: no process of the run survives it, and the next run removes what was left
(saying so) and prepares what an uninterrupted run prepares."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.runs.crash_points import CRASH_ENV_VAR, CRASH_EXIT_CODE
from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR
from tests.helpers import ScratchProject

pytestmark = pytest.mark.integration

SRC = Path(__file__).resolve().parents[3] / "src"
SENTENCES = ["--pipelines=data_processing", "--tags=sentences", "--params", "data_processing.num_proc=2"]
OUTPUTS = ("data/02_intermediate/sentence_candidates", "data/05_model_input/wiki_sentences")


def start_kedro(root: Path, arguments: list[str], crash_at: str | None = None) -> subprocess.Popen:
    """``kedro run <arguments>`` in ``root`` (reading the mirror that ``root/mirror``
    names), in a session (process group) of its own, its temporary area the folder
    ``root/tmpdir`` names, its output (a wide terminal: one log line, one line) in
    ``root/run.log``."""
    env = {**os.environ, MIRROR_ENV_VAR: (root / "mirror").read_text(), "TMPDIR": (root / "tmpdir").read_text(),
           "COLUMNS": "300", "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.pop(CRASH_ENV_VAR, None)
    if crash_at:
        env[CRASH_ENV_VAR] = crash_at
    log = (root / "run.log").open("w")
    return subprocess.Popen([sys.executable, "-m", "kedro", "run", *arguments], cwd=root, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def group_members(group: int) -> list[int]:
    """The live processes of process group ``group`` (Linux ``/proc``): the run and
    every process it started, which keep its group unless they leave it."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def finish(process: subprocess.Popen, root: Path) -> tuple[int, str]:
    code = process.wait(timeout=300)
    return code, (root / "run.log").read_text()


def assert_no_survivor(group: int) -> None:
    deadline = time.monotonic() + 10
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = group_members(group)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"processes of the stopped run still alive: {survivors}"


def signal_while_workers_run(root: Path, temporary: Path, signum: int) -> tuple[int, str]:
    """Start the sentence steps and send ``signum`` to the run once its map workers and
    their ``pymp-*`` folder exist; returns the exit code and the log, once no process
    of the run is left."""
    run = start_kedro(root, SENTENCES)
    deadline = time.monotonic() + 120
    while not (len(group_members(run.pid)) >= 3 and list(temporary.glob("cse-*/pymp-*"))):
        assert run.poll() is None and time.monotonic() < deadline, (root / "run.log").read_text()[-3000:]
        time.sleep(0.05)
    os.kill(run.pid, signum)
    result = finish(run, root)
    assert_no_survivor(run.pid)
    return result


def prepared(root: Path) -> list:
    import datasets

    tables = [datasets.load_from_disk(str(root / name)).to_pandas() for name in OUTPUTS]
    reports = {path.name: path.read_text() for path in sorted((root / "data/08_reporting/data_report").iterdir())}
    return [*tables, reports]


@pytest.fixture
def temporary():
    """An empty temporary area of the run's own, at a short path: the workers' sockets
    live in it (at most 107 bytes of path)."""
    folder = Path(tempfile.mkdtemp(prefix="kill-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_stopped_or_killed_run_leaves_no_process_and_the_next_run_cleans_up(mirror_dir, tmp_path, temporary):
    root = tmp_path / "project"
    root.mkdir()
    ScratchProject(root, mirror_dir).close()  # the configuration, copied
    (root / "mirror").write_text(str(mirror_dir))
    (root / "tmpdir").write_text(str(temporary))
    code, log = finish(start_kedro(root, ["--pipelines=raw_data"]), root)
    assert code == 0, log[-3000:]
    code, log = finish(start_kedro(root, SENTENCES), root)
    assert code == 0, log[-3000:]
    uninterrupted = prepared(root)

    # SIGTERM: the run stops as on Ctrl-C, removing its workers and its scratch itself.
    code, log = signal_while_workers_run(root, temporary, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, log[-3000:]
    assert "Received SIGTERM: stopping the run" in log
    assert list(temporary.iterdir()) == []
    # SIGKILL: nothing of the run can clean up, but its workers die with it.
    code, _ = signal_while_workers_run(root, temporary, signal.SIGKILL)
    assert code == -signal.SIGKILL
    [left] = temporary.iterdir()
    # The next run removes that; it is killed between writing a data set and putting it in place.
    code, log = finish(start_kedro(root, SENTENCES, crash_at="dataset_save:before_replace"), root)
    assert code == CRASH_EXIT_CODE, log[-3000:]
    assert f"Removed {left} (" in log and not left.exists()
    [left] = temporary.iterdir()
    [half_written] = (root / "data/02_intermediate").glob(".sentence_candidates.writing-*")

    code, log = finish(start_kedro(root, SENTENCES), root)
    assert code == 0, log[-3000:]
    assert f"Removed {left} (" in log and f"Removed {half_written} (" in log
    assert list(temporary.iterdir()) == [] and not half_written.exists()
    assert not [path for path in (root / "data").rglob(".*") if ".writing-" in path.name or ".old-" in path.name]
    again = prepared(root)
    for table, expected in zip(again[:2], uninterrupted[:2]):
        assert table.equals(expected)
    assert again[2] == uninterrupted[2]
