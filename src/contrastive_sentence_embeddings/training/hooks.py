"""The hooks of training: no model of an old setting left where a loader finds it, and a
training node's log lines named after its run."""

from __future__ import annotations

from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.configuration.blocks import listed_method_configs
from contrastive_sentence_embeddings.configuration.layering import method_parameters
from contrastive_sentence_embeddings.configuration.strict import ParameterError


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
        parameters = method_parameters(parameters)
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
