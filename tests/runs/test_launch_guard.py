"""``kedro run`` under a multi-process launcher is refused before any node runs.

The detection over environments as the launchers set them, and for real: torchrun and
``accelerate launch --multi_gpu`` each start two ``kedro run`` processes in a scratch
copy of the project; both must exit non-zero with the message, and write nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.runs.launch_guard import (
    WORKER_ENV_VAR,
    LauncherRunRefused,
    launched_processes,
    refuse_launcher_processes,
)
from tests.helpers import ScratchProject

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0"}, None),  # torchrun --nproc_per_node 1
        ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, ("WORLD_SIZE", 2)),  # torchrun, accelerate
        ({"WORLD_SIZE": " 8 ", "RANK": "3"}, ("WORLD_SIZE", 8)),
        ({"LOCAL_RANK": "0"}, None),  # a rank with no size says nothing about other processes
        ({"WORLD_SIZE": "two"}, None),
        ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "0"}, ("OMPI_COMM_WORLD_SIZE", 4)),  # mpirun
        ({"PMI_SIZE": "2", "PMI_RANK": "1"}, ("PMI_SIZE", 2)),
        ({"ACCELERATE_USE_CPU": "True"}, None),  # accelerate launch --cpu: one process
        ({"WORLD_SIZE": "2", "RANK": "1", WORKER_ENV_VAR: "1"}, None),  # our own training workers
        ({"WORLD_SIZE": "2", "RANK": "1", WORKER_ENV_VAR: "0"}, ("WORLD_SIZE", 2)),
    ],
)
def test_launcher_processes_are_recognised_from_their_environment(env, expected):
    assert launched_processes(env) == expected


def test_the_refusal_names_the_supported_way():
    with pytest.raises(LauncherRunRefused) as caught:
        refuse_launcher_processes({"WORLD_SIZE": "2", "RANK": "1"}, ["simcse", "scd"])
    message = str(caught.value)
    assert "process 1 of 2" in message and "WORLD_SIZE=2" in message
    assert "`simcse.training.num_processes` (see docs/training.md#scaling-out)" in message
    refuse_launcher_processes({"WORLD_SIZE": "1"}, ["simcse"])  # a single process goes on


def test_the_hook_stops_a_session_before_any_node(mirror_dir, tmp_path, monkeypatch):
    project = ScratchProject(tmp_path, mirror_dir)
    try:
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(LauncherRunRefused, match="process 0 of 2"):
            project.run(["leaderboard"])
        assert not (tmp_path / "data").exists()
    finally:
        project.close()


LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                 "--master_port", "0"],
    # --cpu would start ONE process (accelerate's simple launcher ignores --num_processes
    # without --mpirun_hostfile); --multi_gpu starts two through torch elastic, GPU or not.
    "accelerate": [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", "0"],
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_a_kedro_run_under_a_launcher_is_refused_before_any_node(launcher, mirror_dir, tmp_path):
    project = ScratchProject(tmp_path, mirror_dir)
    project.close()  # only the copied project is needed; the run is another process
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           "CSE_DATA_MIRROR": str(mirror_dir), "HF_HOME": str(tmp_path / "hf_home")}
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK", WORKER_ENV_VAR):
        env.pop(variable, None)
    command = [*LAUNCHERS[launcher], "-m", "kedro", "run", "--pipelines=leaderboard"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    # The first process to refuse names itself; the launcher then stops the other (torchrun
    # sends SIGTERM as soon as one worker fails), which may be before it gets to print. Neither
    # reached a node.
    refused = [rank for rank in (0, 1) if f"kedro run was started as process {rank} of 2" in output]
    assert refused, output
    assert "Running node" not in output
    assert "training.num_processes` (see docs/training.md#scaling-out)" in output
    written = [p for p in tmp_path.rglob("*") if p.is_file() and "data" in p.relative_to(tmp_path).parts]
    assert written == []
    assert not (tmp_path / "data").exists()
