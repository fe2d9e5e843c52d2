"""The hooks that shape a run's graph and its parameters: the graph built from the run's
own parameters, every block parsed strictly before any node, a method's seeded blocks in
the catalog, and the leaderboard node ordered after every metrics data set."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from kedro.framework.hooks import hook_impl

from contrastive_sentence_embeddings.configuration.blocks import check_data_set_names, run_blocks
from contrastive_sentence_embeddings.configuration.layering import (
    check_overlay_keys,
    explain_parameter_error,
    method_parameters,
    offending_key,
    where_set,
)
from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.configuration.loader import OVERLAY_FILE, ParameterCommandError
from contrastive_sentence_embeddings.runs.library_messages import held_messages
from contrastive_sentence_embeddings.runs.project_paths import project_relative

logger = logging.getLogger(__name__)


class GraphParametersHook:
    """Hands the session's merged parameters (``conf``, its environment and ``--params``)
    to the registry before anything loads the pipelines, so that the graph is built from
    what this run was given: ``--params "simcse.data.sentences=my.txt"`` adds the
    preparation of that file (``pipelines.graph.use_run_parameters``). ``tryfirst``:
    the strict check below reads ``context.params``, which loads the pipelines."""

    @hook_impl(tryfirst=True)
    def after_context_created(self, context) -> None:
        from contrastive_sentence_embeddings.pipelines.graph import use_run_parameters

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
            from contrastive_sentence_embeddings.pipelines.parameter_blocks import validate_parameters

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

    from contrastive_sentence_embeddings.pipelines.graph import build_graph

    try:
        entries = {name for name in loader["catalog"] if "{" not in name}
    except MissingConfigException:
        entries = set()
    from contrastive_sentence_embeddings.pipelines.parameter_blocks import method_configs

    return entries | build_graph(method_configs(parameters)).all_outputs()


class SeedRunsHook:
    """A method with ``seeds: [42, 43, 44]`` runs once per seed, each run a namespace
    ``<method>.seed<k>`` whose training node reads ``params:<method>.seed<k>``: the
    method's block with that training seed (``config.seeded_block``). This hook puts
    those blocks (``config.run_blocks``) in the catalog beside the configured parameters."""

    @hook_impl
    def after_catalog_created(self, catalog, parameters) -> None:
        parameters = method_parameters(parameters)
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
