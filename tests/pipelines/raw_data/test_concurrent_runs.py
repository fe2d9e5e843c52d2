"""Two real `kedro run` in one checkout: the second stops at once naming the first
(runs/run_locks.py, runs.hooks.RunLockHook), the first completes, and a killed run holds no lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR
from tests.helpers import ScratchProject

# `kedro run --pipelines=raw_data` whose first ingestion waits, inside the node, until
# the test lets it go: a run that is certainly under way when the second one starts.
WAITING_RUN = """
import pathlib, sys, time
from contrastive_sentence_embeddings.pipelines.raw_data import nodes
inside, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
real = nodes.materialise_raw_source
def waiting(*args, **kwargs):
    inside.touch()
    while not go.exists():
        time.sleep(0.1)
    return real(*args, **kwargs)
nodes.materialise_raw_source = waiting
from kedro.framework.cli import main
sys.argv = ["kedro", "run", "--pipelines=raw_data"]
main()
"""


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_second_run_in_the_same_checkout_stops_at_once_naming_the_first_which_completes(tmp_path, mirror_dir):
    (tmp_path / "project").mkdir()
    project = ScratchProject(tmp_path / "project", mirror_dir)
    project.close()  # the runs are subprocesses in the project folder
    root = project.root
    env = os.environ | {MIRROR_ENV_VAR: str(mirror_dir), "PYTHONPATH": os.pathsep.join(sys.path),
                        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    inside, go = tmp_path / "inside", tmp_path / "go"

    def start_first() -> subprocess.Popen:
        inside.unlink(missing_ok=True)
        first = subprocess.Popen([sys.executable, "-c", WAITING_RUN, str(inside), str(go)], cwd=root, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_for(inside, first)
        return first

    def second_run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=raw_data"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300)

    first = start_first()
    try:
        refused = second_run()
        assert refused.returncode == 1, refused.stdout + refused.stderr
        error = refused.stderr + refused.stdout
        assert "is locked: another live run writes it" in error and f"pid {first.pid} on " in error, error
        assert "kedro run --pipelines=raw_data" in error and "Traceback" not in error
        go.touch()
        output, _ = first.communicate(timeout=300)
        assert first.returncode == 0, output
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    sts = root / "data/01_raw/sts/STS12-en-test"
    assert sorted(p.name for p in sts.iterdir()) == sorted(p.name for p in (mirror_dir / "sts/STS12-en-test").iterdir())
    assert not (root / "data/.locks").exists()  # the completed run released its locks

    go.unlink()
    first = start_first()
    first.send_signal(signal.SIGKILL)  # killed inside a node, with its locks held
    first.wait()
    go.touch()
    after_kill = second_run()
    assert after_kill.returncode == 0, after_kill.stdout + after_kill.stderr
    assert not (root / "data/.locks").exists()
