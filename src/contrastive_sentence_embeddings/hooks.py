"""Project hooks."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

import click
from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.config import (
    ParameterError,
    check_data_set_names,
    check_overlay_keys,
    explain_parameter_error,
    listed_method_configs,
    offending_key,
    run_blocks,
    where_set,
)
from contrastive_sentence_embeddings.config_loader import OVERLAY_FILE, ParameterCommandError
from contrastive_sentence_embeddings.launch_guard import launched_processes, refuse_launcher_processes
from contrastive_sentence_embeddings.library_messages import held_messages
from contrastive_sentence_embeddings.project_paths import project_relative
from contrastive_sentence_embeddings.scratch import RunGuard, remove_left_behind, set_project

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


class GraphParametersHook:
    """Hands the session's merged parameters (``conf``, its environment and ``--params``)
    to the registry before anything loads the pipelines, so that the graph is built from
    what this run was given: ``--params "simcse.data.sentences=my.txt"`` adds the
    preparation of that file (``pipeline_registry.use_run_parameters``). ``tryfirst``:
    the strict check below reads ``context.params``, which loads the pipelines."""

    @hook_impl(tryfirst=True)
    def after_context_created(self, context) -> None:
        from contrastive_sentence_embeddings.pipeline_registry import use_run_parameters

        use_run_parameters(context.project_path, context.config_loader["parameters"])


class StrictParametersHook:
    """Parses every parameter block (``parameter_blocks.validate_parameters``) and checks every key
    ``params.yaml`` lists as soon as the configuration is loaded, before any node runs,
    so a typo fails at once instead of being ignored (or failing hours into a run). The
    error is one line naming the key, where it was set (``--params``, ``params.yaml`` or
    the parameter files) and the closest key the block takes; ``kedro`` prints it as
    ``Error: ...`` without a traceback (``ParameterCommandError``). A value of the wrong
    type or range is named the same way, and so is a method's data set name that the
    run cannot read (a misspelt name, or a file path without an extension)."""

    @hook_impl
    def after_context_created(self, context) -> None:
        loader = context.config_loader
        overlay = getattr(loader, "overlay", {})
        try:
            parameters = context.params
            check_overlay_keys(overlay, parameters, OVERLAY_FILE)
            from contrastive_sentence_embeddings.parameter_blocks import validate_parameters

            validate_parameters(parameters)
            check_data_set_names(parameters, readable_data_sets(loader, parameters), Path(context.project_path))
        except ParameterCommandError:
            raise
        except ParameterError as error:
            project = Path(context.project_path)
            conf_root = project / loader.conf_source
            environments = [loader.base_env, context.env or loader.default_run_env]
            key = offending_key(error)
            sources = where_set(key, loader.runtime_params or {}, overlay, OVERLAY_FILE,
                                [conf_root / env for env in environments if env]) if key else []
            # The value in effect is the highest-precedence source's: name that one.
            # (named conf/local/parameters.yml, not by its absolute path; --params and
            # params.yaml are labels, not paths, and stay as they are)
            sources = [project_relative(source, project) if Path(source).is_absolute() else source
                       for source in sources[:1]]
            raise ParameterCommandError(explain_parameter_error(error, sources), key=key) from None


def readable_data_sets(loader, parameters: Mapping) -> set[str]:
    """The data sets a run of these parameters can read: the catalog's named entries
    (a factory pattern such as ``raw_{source}`` names no data set of its own) and every
    output of the project's graph."""
    from kedro.config import MissingConfigException

    from contrastive_sentence_embeddings.pipeline_registry import build_graph

    try:
        entries = {name for name in loader["catalog"] if "{" not in name}
    except MissingConfigException:
        entries = set()
    from contrastive_sentence_embeddings.parameter_blocks import method_configs

    return entries | build_graph(method_configs(parameters)).all_outputs()


def _method_parameters(parameters: Mapping) -> Mapping | None:
    """The run's parameters as ``after_catalog_created`` receives them (Kedro passes the
    ``params:`` feed and the whole dict under ``parameters``), or None when ``methods``
    names a method without a block (``validate_parameters`` reports that)."""
    parameters = parameters.get("parameters", parameters)
    names = parameters.get("methods") or []
    if not names or not all(name in parameters for name in names):
        return None
    return parameters


class SeedRunsHook:
    """A method with ``seeds: [42, 43, 44]`` runs once per seed, each run a namespace
    ``<method>.seed<k>`` whose training node reads ``params:<method>.seed<k>``: the
    method's block with that training seed (``config.seeded_block``). This hook puts
    those blocks (``config.run_blocks``) in the catalog beside the configured parameters."""

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        parameters = _method_parameters(parameters)
        if parameters is None:
            return
        for run, block in run_blocks(parameters).items():
            if run not in parameters:  # a method's own block is in the catalog already
                catalog[f"params:{run}"] = block


# What the leaderboard node is given for a metrics data set it waits for but that the
# run does not write: it reads the metrics folders, never this.
NOT_WRITTEN_BY_THIS_RUN = "not written by this run"


class LeaderboardOrderingHook:
    """The leaderboard node is the same in every user pipeline, so it lists every
    metrics data set of the graph as an input, to be run after those the run writes
    (``pipelines.leaderboard``). Those the run does not write would be loaded from disk,
    and a method never run has no file: before the run, each such input, read by no
    other node, gets a placeholder in the catalog instead."""

    @hook_impl
    def before_pipeline_run(self, pipeline, catalog) -> None:
        from contrastive_sentence_embeddings.pipelines.leaderboard.pipeline import NODE_NAME, ordering_inputs

        board = next((node for node in pipeline.nodes if node.name == NODE_NAME), None)
        if board is None:
            return
        free = pipeline.inputs()
        read_elsewhere = {name for node in pipeline.nodes if node is not board for name in node.inputs}
        placeholders = [name for name in ordering_inputs(board) if name in free and name not in read_elsewhere]
        # Replacing a configured entry is the point here; Kedro would warn about each one.
        replacing = [rf"^Replacing dataset '{re.escape(name)}'$" for name in placeholders]
        with held_messages("kedro.io.data_catalog", *replacing):
            for name in placeholders:
                catalog[name] = NOT_WRITTEN_BY_THIS_RUN


class StaleLeaderboardHook:
    """A run that writes metrics without the leaderboard node (``kedro run
    --namespaces=simcse,card.simcse``, which DVC's train stages run, or ``--nodes=...``)
    leaves ``leaderboard.{md,csv}`` and ``summary.json`` on the previous results; this
    says so once, at the end of the run (or when it fails), with the command that
    refreshes them."""

    def __init__(self) -> None:
        self._written: list[str] = []

    @hook_impl
    def before_pipeline_run(self) -> None:
        self._written = []

    @hook_impl
    def after_dataset_saved(self, dataset_name: str) -> None:
        from contrastive_sentence_embeddings.pipelines.leaderboard.pipeline import is_metrics

        if is_metrics(dataset_name):
            self._written.append(dataset_name)

    @hook_impl
    def after_node_run(self, node) -> None:
        from contrastive_sentence_embeddings.pipelines.leaderboard.pipeline import NODE_NAME

        if node.name == NODE_NAME:
            self._written = []  # the leaderboard has read every metrics file saved so far

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._warn_if_stale()

    @hook_impl
    def on_pipeline_error(self) -> None:
        self._warn_if_stale()

    def _warn_if_stale(self) -> None:
        # Under `dvc repro` (DVC names the stage it runs) the leaderboard is a stage of its own
        # that depends on these metrics: DVC runs it next, so there is nothing to warn about.
        if self._written and not os.environ.get("DVC_STAGE"):
            logger.warning(
                "This run wrote new metrics (%s) but did not rebuild the leaderboard: "
                "data/08_reporting/leaderboard.{md,csv} and summary.json still show the previous results. "
                "Refresh them with `kedro run --pipelines=leaderboard` (DVC: `dvc repro leaderboard`).",
                ", ".join(self._written))
            self._written = []


class StaleModelsHook:
    """After a change of ``seeds`` or of a method's parameters, no model of the old
    setting may stay where a loader still finds it: switching ``seeds: null`` to a list
    would leave the single run's model in ``data/06_models/<method>`` beside ``seed42/``
    (and ``SentenceTransformer("data/06_models/<method>")`` would still load it), the
    reverse would leave ``seed<k>/`` folders, a shorter list the dropped seeds' models.
    Just before a run's model is saved (the run has trained, under the parameters now
    in force), this hook removes the method's models that are not among its runs now,
    and its other seeds' models of another configuration than the one being saved, by
    the rule the average over seeds uses (``training.saving.remove_stale_models``: only
    folders holding the project's metadata for that run), and the MTEB result folders
    of the runs it no longer has (``remove_stale_results``: only folders with the
    ``export_report.json`` the project writes), so the run's own results can be written
    where they belong. Each removal is logged. A run that trains nothing removes nothing."""

    def __init__(self) -> None:
        self._catalog = None
        self._runs: dict[str, tuple[str, set[str]]] = {}  # "<run>.model" -> (method, its runs)

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        self._catalog, self._runs = catalog, {}
        parameters = _method_parameters(parameters)
        if parameters is None:
            return
        try:
            configs = listed_method_configs(parameters)  # the run names only
        except ParameterError:
            return  # StrictParametersHook has reported it
        for name, config in configs.items():
            runs = set(config.run_names(name))
            self._runs.update({f"{run}.model": (name, runs) for run in runs})

    @hook_impl
    def before_dataset_saved(self, dataset_name: str, data, node) -> None:
        if dataset_name not in self._runs or self._catalog is None:
            return
        from contrastive_sentence_embeddings.training.saving import remove_stale_models, remove_stale_results

        method, runs = self._runs[dataset_name]
        folder = getattr(self._catalog.get(f"{method}.model"), "filepath", None)
        if folder is None:  # not the project's model data set: its layout is not ours to judge
            return
        provenance = (getattr(data, "metadata", None) or {}).get("provenance")
        remove_stale_models(folder, method, runs, provenance, saving=dataset_name.removesuffix(".model"))
        results = getattr(self._catalog.get(f"{method}.mteb_results"), "path", None)
        if results is not None:
            remove_stale_results(results, method, runs)


class EarlierScoresHook:
    """When a run's new model is published in ``data/06_models/<run>``, the scores its run
    had (``metrics/<run>.json``, its seed summary, ``metrics_full/<method>.json``, its MTEB
    folder) describe the model it replaced until this run's evaluation rewrites them. If
    the run stops before that (Ctrl-C, an OOM kill, a job's time limit) or does not
    evaluate (``--tags=training``), those files would pass for the new model's scores.
    At the save this hook names them (a warning when the run does not write them again,
    else an info line: if the run dies, the line is already in the log), and at the end of
    the run, or when it fails, it warns about those still not rewritten, with the command
    that scores the new model. It deletes nothing: the files stay for what they are, and
    the leaderboard marks their rows stale ("scores of an earlier model"), comparing
    fingerprints (``model_fingerprint.py``)."""

    def __init__(self) -> None:
        self._catalog = None
        self._writes: set[str] = set()
        self._outdated: dict[str, tuple[str, str]] = {}  # data set -> (its path, the run whose model changed)

    @hook_impl
    def after_catalog_created(self, catalog) -> None:
        self._catalog = catalog

    @hook_impl
    def before_pipeline_run(self, pipeline) -> None:
        self._writes, self._outdated = set(pipeline.all_outputs()), {}

    @hook_impl
    def after_dataset_saved(self, dataset_name: str) -> None:
        self._outdated.pop(dataset_name, None)
        if not dataset_name.endswith(".model") or self._catalog is None:
            return
        folder = getattr(self._catalog.get(dataset_name), "filepath", None)
        if folder is None:  # not the project's model data set
            return
        from contrastive_sentence_embeddings.model_fingerprint import model_fingerprint

        run = dataset_name.removesuffix(".model")
        outdated = self._scores_of_other_models(run, model_fingerprint(str(folder)))
        if not outdated:
            return
        self._outdated.update({name: (path, run) for name, path in outdated.items()})
        rewritten = all(name in self._writes for name in outdated)
        logger.log(logging.INFO if rewritten else logging.WARNING,
                   "%s now holds a newly trained model: %s still hold the scores of the model it replaced (the "
                   "leaderboard marks them stale: scores of an earlier model); %s",
                   project_relative(folder), ", ".join(outdated.values()),
                   "this run's evaluation rewrites them next" if rewritten
                   else f"run {_scoring_commands(run, outdated)} to score the new model")

    @hook_impl
    def after_pipeline_run(self) -> None:
        self._warn_if_outdated()

    @hook_impl
    def on_pipeline_error(self) -> None:
        self._warn_if_outdated()

    def _scores_of_other_models(self, run: str, fingerprint: str) -> dict[str, str]:
        """``{data set: path}`` of the files holding ``run``'s scores of another model."""
        from contrastive_sentence_embeddings.evaluation.leaderboard import method_block
        from contrastive_sentence_embeddings.evaluation.mteb_results import REPORT_FILE
        from contrastive_sentence_embeddings.model_fingerprint import scores_of_other_models

        method = method_block(run)
        names = dict.fromkeys([f"{run}.metrics", f"{method}.metrics", f"{method}.metrics_full", f"{run}.mteb_results"])
        records, paths = {}, {}
        for name in names:
            dataset = self._catalog.get(name)
            if dataset is None or not dataset.exists():
                continue
            try:
                record = dataset.load()
            except Exception:  # noqa: BLE001 - an unreadable file is the leaderboard's to report
                continue
            records[name] = record.get(REPORT_FILE) if name.endswith(".mteb_results") else record
            # (JSON data sets keep their file in _filepath; the MTEB data set names its folder `path`)
            paths[name] = project_relative(getattr(dataset, "_filepath", None) or getattr(dataset, "path", name))
        return {name: paths[name] for name in scores_of_other_models(records, run, fingerprint)}

    def _warn_if_outdated(self) -> None:
        runs = dict.fromkeys(run for _, run in self._outdated.values())
        for run in runs:
            outdated = {name: path for name, (path, owner) in self._outdated.items() if owner == run}
            logger.warning("This run replaced the model of %s but did not score it again: %s still hold the "
                           "previous model's scores (the leaderboard marks them stale); score the new model with %s",
                           run, ", ".join(outdated.values()), _scoring_commands(run, outdated))
        self._outdated = {}


def _scoring_commands(run: str, data_sets) -> str:
    """The commands that rewrite ``run``'s ``data_sets`` (its STS scores, and the transfer
    scores when ``<method>.metrics_full`` is among them), each in backquotes."""
    from contrastive_sentence_embeddings.evaluation.leaderboard import evaluation_command

    scopes = ["transfer"] if all(name.endswith(".metrics_full") for name in data_sets) else ["sts"]
    if "transfer" not in scopes and any(name.endswith(".metrics_full") for name in data_sets):
        scopes.append("transfer")
    return " and ".join(f"`{evaluation_command(run, scope)}`" for scope in scopes)


# Where a run's data set locks live (run_locks.py), relative to the project.
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
        from contrastive_sentence_embeddings.launch_guard import WORKER_ENV_VAR
        from contrastive_sentence_embeddings.run_locks import LockHeld, acquire

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


class RunNameHook:
    """A training node's namespace is the name of its run while it runs
    (``training/run_name.py``: its log lines and progress bar name the run)."""

    def __init__(self):
        self._tokens: dict = {}

    @hook_impl
    def before_node_run(self, node) -> None:
        from contrastive_sentence_embeddings.training.run_name import TRAINING_TAG, name_run

        if node.namespace and TRAINING_TAG in node.tags:
            self._tokens[node.name] = name_run(node.namespace)

    @hook_impl
    def after_node_run(self, node) -> None:
        self._reset(node)

    @hook_impl
    def on_node_error(self, node) -> None:
        self._reset(node)

    def _reset(self, node) -> None:
        from contrastive_sentence_embeddings.training.run_name import end_run

        token = self._tokens.pop(node.name, None)
        if token is not None:
            end_run(token)
