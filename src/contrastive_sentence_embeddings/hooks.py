"""Project hooks."""

from __future__ import annotations

import os
from pathlib import Path

from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.config import (
    ParameterError,
    files_setting,
    method_configs,
    offending_key,
    seeded_block,
    validate_parameters,
)
from contrastive_sentence_embeddings.launch_guard import launched_processes, refuse_launcher_processes


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
    """Parses every parameter block (``config.validate_parameters``) as soon as the
    configuration is loaded, before any node runs, and names the file(s) that set the
    offending key, so a typo fails at once instead of being ignored (or failing hours
    into a run)."""

    @hook_impl
    def after_context_created(self, context) -> None:
        try:
            validate_parameters(context.params)
        except ParameterError as error:
            conf_root = Path(context.project_path) / context.config_loader.conf_source
            environments = [context.config_loader.base_env, context.env or context.config_loader.default_run_env]
            key = offending_key(error)
            files = files_setting(key, [conf_root / env for env in environments if env]) if key else []
            where = f" (set in {', '.join(files)})" if files else (
                " (not in any parameters file: from --params?)" if key else "")
            named = str(error) if not key or key in str(error) else f"parameter {key}: {error}"
            raise ParameterError(f"{named}{where}", key=key) from None


class SeedRunsHook:
    """A method with ``seeds: [42, 43, 44]`` runs once per seed, each run a namespace
    ``<method>.seed<k>`` whose training node reads ``params:<method>.seed<k>``: the
    method's block with that training seed (``config.seeded_block``). This hook puts
    those blocks in the catalog beside the configured parameters."""

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        parameters = parameters.get("parameters", parameters)  # Kedro passes the params: feed and the whole dict
        names = parameters.get("methods") or []
        if not names or not all(name in parameters for name in names):
            return  # validate_parameters reports it
        for name, config in method_configs(parameters).items():
            for run, seed in config.run_names(name).items():
                if seed is not None:
                    catalog[f"params:{run}"] = seeded_block(parameters[name], seed)


class StaleModelsHook:
    """After a change of ``seeds`` or of a method's parameters, no model of the old
    setting may stay where a loader still finds it: switching ``seeds: null`` to a list
    would leave the single run's model in ``data/06_models/<method>`` beside ``seed42/``
    (and ``SentenceTransformer("data/06_models/<method>")`` would still load it), the
    reverse would leave ``seed<k>/`` folders, a shorter list the dropped seeds' models.
    Just before a run's model is saved (the run has trained, under the parameters now
    in force), this hook removes the method's models that are not among its runs now,
    and its other seeds' models trained with another configuration
    (``training.saving.remove_stale_models``: only folders holding the project's metadata
    for that run; each removal is logged). A run that trains nothing removes nothing."""

    def __init__(self) -> None:
        self._catalog = None
        self._runs: dict[str, tuple[str, set[str]]] = {}  # "<run>.model" -> (method, its runs)

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        self._catalog, self._runs = catalog, {}
        parameters = parameters.get("parameters", parameters)
        names = parameters.get("methods") or []
        if not names or not all(name in parameters for name in names):
            return  # validate_parameters reports it
        try:
            configs = method_configs(parameters)
        except ParameterError:
            return  # StrictParametersHook has reported it
        for name, config in configs.items():
            runs = set(config.run_names(name))
            self._runs.update({f"{run}.model": (name, runs) for run in runs})

    @hook_impl
    def before_dataset_saved(self, dataset_name: str, data, node) -> None:
        if dataset_name not in self._runs or self._catalog is None:
            return
        from contrastive_sentence_embeddings.training.saving import remove_stale_models, run_configuration

        method, runs = self._runs[dataset_name]
        dataset = self._catalog.get(f"{method}.model")
        folder = getattr(dataset, "filepath", None)
        if folder is None:  # not the project's model data set: its layout is not ours to judge
            return
        metadata = getattr(data, "metadata", None)
        configuration = run_configuration({"pooling": getattr(data, "pooling", None), **metadata}) if metadata else None
        remove_stale_models(folder, method, runs, configuration, saving=dataset_name.removesuffix(".model"))
