"""Refusing a ``kedro run`` started as one of several launcher processes.

``torchrun --nproc_per_node 2 -m kedro run`` (or ``accelerate launch --multi_gpu``,
torch elastic, ``mpirun``) starts the whole Kedro run in every process: each would run
raw-data ingestion, data preparation, evaluation and the leaderboard into the same
files. Only training can use several processes, and its node starts its own workers
(``<method>.training.num_processes``), so a run that finds itself launched that way
stops before it touches anything.

The launchers announce themselves through the environment of the processes they start:
``WORLD_SIZE`` (torchrun, torch elastic, ``accelerate launch --multi_gpu``, DeepSpeed),
``OMPI_COMM_WORLD_SIZE`` (Open MPI's ``mpirun``, which ``accelerate launch --cpu
--mpirun_hostfile`` uses) and ``PMI_SIZE`` (MPICH, Intel MPI, ``srun``). Note that
``accelerate launch --cpu --num_processes 2`` without ``--mpirun_hostfile`` starts ONE
process (accelerate's simple launcher; ``--num_processes`` only sizes an MPI or
multi-GPU launch), so that command is an ordinary single-process run, not refused.
"""

from __future__ import annotations

from collections.abc import Mapping

# Set by the project's own training launcher in the worker processes it starts: those
# are meant to be several, and run the training entry point, not a whole Kedro run.
WORKER_ENV_VAR = "CSE_TRAINING_WORKER"
# The number of processes a launcher started, by the variable it sets.
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
RANK_VARS = {"WORLD_SIZE": "RANK", "OMPI_COMM_WORLD_SIZE": "OMPI_COMM_WORLD_RANK", "PMI_SIZE": "PMI_RANK"}


class LauncherRunRefused(RuntimeError):
    """``kedro run`` was started as one of several processes by a launcher."""


def launched_processes(env: Mapping[str, str]) -> tuple[str, int] | None:
    """``(variable, number of processes)`` when ``env`` is that of one of several
    processes a launcher started, else None. A worker of the project's own launcher
    (``CSE_TRAINING_WORKER=1``) is never one; a size that is not an integer is ignored
    (no launcher writes one)."""
    if env.get(WORKER_ENV_VAR) == "1":
        return None
    for variable in WORLD_SIZE_VARS:
        try:
            size = int(env.get(variable, "").strip())
        except ValueError:
            continue
        if size > 1:
            return variable, size
    return None


def refusal_message(env: Mapping[str, str], methods: list[str] | None = None) -> str | None:
    """Why this run must not go on, naming the supported ways; None when it may."""
    launched = launched_processes(env)
    if launched is None:
        return None
    variable, size = launched
    rank = env.get(RANK_VARS[variable], "?")
    method = methods[0] if methods else "<method>"
    return (
        f"kedro run was started as process {rank} of {size} by a launcher ({variable}={size}: torchrun, "
        "accelerate launch --multi_gpu, torch elastic or mpirun). Every process would run the whole "
        "pipeline (raw data, data preparation, evaluation, leaderboard) into the same files, so this run "
        "stops before any node. Run `kedro run` once, as a single process; to train on several processes "
        f"set `{method}.training.num_processes` (see docs/training.md#scaling-out): the training node "
        "launches its own workers. For several machines, prepare the data with one kedro run and start "
        "`torchrun ... -m contrastive_sentence_embeddings.training.entry --method <method>` (`cse-train`) on each "
        "machine (docs/training.md#scaling-out), not kedro run."
    )


def refuse_launcher_processes(env: Mapping[str, str], methods: list[str] | None = None) -> None:
    """Raise :class:`LauncherRunRefused` when ``env`` is one of several launcher processes."""
    message = refusal_message(env, methods)
    if message:
        raise LauncherRunRefused(message)
