"""The hooks that keep every ``kedro run`` safe: one process per run (the launch guard),
locks on the data sets it writes and reads, the report of a data step that stopped, and
the scratch area cleaned after killed runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.runs.launch_guard import launched_processes, refuse_launcher_processes
from contrastive_sentence_embeddings.runs.project_paths import project_relative
from contrastive_sentence_embeddings.runs.scratch import RunGuard, remove_left_behind, set_project

logger = logging.getLogger(__name__)


class SingleProcessRunHook:
    """Stops a ``kedro run`` that a launcher started several times over
    (``torchrun --nproc_per_node 2 -m kedro run``, ``accelerate launch --multi_gpu
    ... -m kedro run``, torch elastic, ``mpirun``: ``WORLD_SIZE`` or its MPI
    equivalent > 1), as soon as the context exists, before the catalog is built or any
    node runs: every process would otherwise run ingestion, data preparation,
    evaluation and the leaderboard into the same files. The message names the
    supported way, ``<method>.training.num_processes``.

    The project's own training launcher sets ``CSE_TRAINING_WORKER=1`` in the workers
    it starts (``launch_guard.WORKER_ENV_VAR``); those are never refused."""

    @hook_impl(tryfirst=True)  # before GraphParametersHook (also tryfirst, registered earlier)
    def after_context_created(self, context) -> None:
        if launched_processes(os.environ) is None:
            return  # the usual case: no need to read the parameters for the message
        methods = None
        try:
            methods = list(context.params.get("methods") or [])
        except Exception:  # noqa: BLE001 - the message only uses the names as an example
            pass
        refuse_launcher_processes(os.environ, methods)


# Where a run's data set locks live (runs/run_locks.py), relative to the project.
DATA_LOCK_DIR = "data/.locks"


def persistent_datasets(pipeline, catalog) -> tuple[set[str], set[str]]:
    """The data sets on disk that ``pipeline`` writes, and those it only reads (memory
    data sets and parameters are the run's own and need no lock)."""

    def on_disk(name: str) -> bool:
        if name == "parameters" or name.startswith("params:"):
            return False
        kind = catalog.get_type(name)
        return kind is not None and not kind.endswith(("MemoryDataset", "SharedMemoryDataset"))

    writes = {name for name in pipeline.all_outputs() if on_disk(name)}
    reads = {name for name in pipeline.inputs() if on_disk(name)} - writes
    return writes, reads


class RunLockedError(click.ClickException):
    """A data set this run needs is locked by another live run: ``kedro`` prints
    ``Error: <message>`` (naming that run) and exits with status 1, no traceback."""


class RunLockHook:
    """Before any node runs, locks every data set on disk the run writes (exclusive)
    and reads (shared), in ``data/.locks`` (``run_locks.acquire``), so that a second
    ``kedro run`` in the same checkout that would write what this one writes or reads
    (both re-linking ``data/01_raw``, the same method twice) stops at once, naming this
    run's pid, host, start time and command line, instead of failing halfway through
    on a file the other run replaced. The locks are released when the run ends, and by
    the operating system when it is killed. Training workers the run starts
    (``CSE_TRAINING_WORKER=1``) run no pipeline and take none."""

    def __init__(self) -> None:
        self._project: Path | None = None
        self._locks = None

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project = Path(context.project_path)

    @hook_impl
    def before_pipeline_run(self, pipeline, catalog) -> None:
        from contrastive_sentence_embeddings.runs.launch_guard import WORKER_ENV_VAR
        from contrastive_sentence_embeddings.runs.run_locks import LockHeld, acquire

        if os.environ.get(WORKER_ENV_VAR) == "1":
            return
        self._release()
        writes, reads = persistent_datasets(pipeline, catalog)
        try:
            self._locks = acquire((self._project or Path.cwd()) / DATA_LOCK_DIR, writes, reads, what="data set",
                                  advice="Wait for that run to end or stop it (a killed run releases its locks); "
                                         "runs in separate checkouts do not conflict.", locks_only=True)
        except LockHeld as error:
            raise RunLockedError(str(error)) from None
        logger.debug("locked %d data sets written and %d read by this run", len(writes), len(reads))

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._release()

    @hook_impl
    def on_pipeline_error(self) -> None:
        self._release()

    def _release(self) -> None:
        if self._locks is not None:
            self._locks.release()
            self._locks = None


class StoppedStepReportHook:
    """Writes the data report of a data step that stopped because nothing of its input
    could be used (a file that is not text, every row bad or filtered out): the node
    returns nothing then, yet its report is what says why. The error carries the counts
    (``data.report.carry_report``); this saves them through the catalog as the node's
    ``report_<step>`` output (atomically, as any report) and names the file in the
    error, so the message points at the counts."""

    @hook_impl
    def on_node_error(self, error: Exception, node, catalog) -> None:
        for step, counts in (getattr(error, "data_reports", None) or {}).items():
            name = f"report_{step}"
            if name not in node.outputs:
                continue
            try:
                catalog.save(name, {step: counts})
            except Exception as failure:  # noqa: BLE001 - the node's own error is the one to report
                logger.warning("%s: could not write the data report %s of the stopped step (%s)", node.name, name,
                               failure)
                continue
            filepath = getattr(catalog.get(name), "_filepath", None)
            written = project_relative(Path(str(filepath))) if filepath is not None else name
            logger.error("%s stopped; its data report, with the counts of why, is written to %s", node.name, written)
            if error.args and isinstance(error.args[0], str):
                error.args = (f"{error.args[0]} (the counts: {written})", *error.args[1:])


class ScratchHook:
    """A run starts by removing what earlier runs of the project left when they were
    killed (``scratch.remove_left_behind``: marked scratch folders in the temporary area,
    hidden siblings of atomic writes under ``data/``, only those whose owner process has
    ended; one log line each). While it runs, the workers it forks die with it, SIGTERM
    stops it as Ctrl-C does, and other libraries' temporary files go into its marked
    folder (``scratch.RunGuard``)."""

    def __init__(self) -> None:
        self._guard: RunGuard | None = None

    @hook_impl
    def before_pipeline_run(self, run_params) -> None:
        set_project(run_params.get("project_path") or Path.cwd())
        remove_left_behind()
        self._guard = RunGuard()
        self._guard.start()

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._stop()

    @hook_impl(trylast=True)  # after every other hook's own handling of the error
    def on_pipeline_error(self) -> None:
        guard = self._guard
        self._stop()
        if guard is not None:
            guard.exit_if_terminated()

    def _stop(self) -> None:
        if self._guard is not None:
            self._guard.stop()
            self._guard = None
