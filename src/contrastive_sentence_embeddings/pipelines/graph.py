"""Project pipelines, derived from one graph.

The graph is built once (:func:`build_graph`) from the ``methods`` list of the
parameters: raw-data ingestion, data preparation, the baseline, and for every listed
method one namespaced instance of its data family's training pipeline followed by the
shared ``evaluate`` sub-pipeline (``<method>.train``, ``<method>.evaluate``), a
``card.<method>`` instance of the model card, written into the model's folder once it
is scored (``<method>.model_card``), and a ``transfer.<method>`` instance of
``evaluate`` that adds the SentEval transfer tasks.
Everything a user runs is cut from that graph, never restated:

* ``<method>``: what the graph needs for ``<method>.metrics``, its training curve and
  its runs' model cards and MTEB result files (``to_outputs``: only the data steps that method
  reads), the baseline's per-pair predictions its ``vs base`` is tested against, and the leaderboard;
* ``baseline``, ``data_processing``, ``raw_data``: the same cut for their outputs;
* ``evaluation``: the transfer instances and the baseline's transfer scores, for the
  models already trained, and the leaderboard;
* ``leaderboard``: the table (and its summary) from the metrics files present;
* ``external``: any encoder (``--params "external.model=<folder or Hub id>"``) scored on
  every evaluation as its own leaderboard row (``external.evaluate``; not in the default
  run, which has no model to name);
* ``__default__``: the whole graph; every evaluation reads the model data set it scores,
  so Kedro orders it after that model's training.

The leaderboard is the same node in every user pipeline that has it, so any of them
sum (``kedro run --pipelines=simcse,scd``) into a run with one leaderboard, built after
every metrics file the run writes (:func:`leaderboard_pipeline`).

``kedro run --namespaces=simcse,card.simcse`` runs one method's nodes and its model
cards on prepared data (what DVC's stage template does; the leaderboard is not among
them: ``pipelines.hooks.StaleLeaderboardHook`` says so); ``--namespaces=transfer.simcse`` its
transfer evaluation.

Adding a method is a parameter block (``conf/base/parameters_<name>.yml`` with its
``kind``) and its name in ``methods`` (``conf/base/parameters.yml``); see
``docs/architecture.md``.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

from kedro.pipeline import Pipeline

from contrastive_sentence_embeddings.pipelines.parameter_blocks import method_configs
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.pipelines import (
    data_processing,
    evaluation,
    leaderboard,
    own_data,
    raw_data,
    training,
)
from contrastive_sentence_embeddings.pipelines.data_processing.pipeline import PREPARED

TRANSFER_NAMESPACE = "transfer"
# The model cards have their own namespace: inside the method's, the method's
# namespace would read the data reports (reporting) and write per-pair predictions
# (model_output) and models, a cycle among kedro-viz's layers that switches them off.
CARD_NAMESPACE = "card"

# The leaderboard and the transfer instances read a method's data sets (simcse.metrics,
# simcse.model) from outside its namespace on purpose; Kedro warns about the dot in
# such names on every run.
warnings.filterwarnings("ignore", message="One or more dataset names contain '.'", category=UserWarning)


def data_reports(graph: Pipeline, run: str) -> list[str]:
    """The ``report_<step>`` outputs of the nodes ``graph`` runs before ``<run>.train``:
    the data steps that prepared what the run trains on (none for data that no node
    of the graph writes). Read from the graph, so any step that reports is found."""
    upstream = graph.to_nodes(f"{run}.train")
    return sorted(output for output in upstream.all_outputs() if output.startswith("report_"))


def method_pipeline(name: str, config: MethodBlock) -> Pipeline:
    """``name``'s training (its family's template) and scoring, under namespace
    ``name``: ``<name>.model``, ``<name>.training_curve``, ``<name>.metrics``. With
    ``seeds``, one such run per seed under ``<name>.seed<k>`` (reading the block
    ``params:<name>.seed<k>``, see ``pipelines.hooks.SeedRunsHook``), and ``<name>.aggregate``
    summarising them into ``<name>.metrics`` (mean and standard deviation over seeds)
    and ``<name>.training_curve`` (every seed's curve)."""
    runs = config.run_names(name)
    pipeline = Pipeline([])
    for run in runs:
        template = training.create_pipeline(config.family) + evaluation.create_pipeline()
        pipeline += Pipeline(
            template,
            namespace=run,
            inputs={**config.inputs(name), **{shared: shared for shared in training.pipeline.SHARED_INPUTS
                                          | evaluation.pipeline.SHARED_INPUTS
                                          if shared in template.inputs()}},
            parameters={"params:block": f"params:{run}", "params:encoder": "params:encoder",
                        "params:evaluation": "params:evaluation"},
            tags=["method", config.kind, config.family],
        )
    if config.seeds:
        pipeline += Pipeline(
            evaluation.seeds_pipeline(len(runs)),
            namespace=name,
            inputs={f"metrics_{i}": f"{run}.metrics" for i, run in enumerate(runs)}
            | {f"training_curve_{i}": f"{run}.training_curve" for i, run in enumerate(runs)},
            tags=["method", config.kind, config.family],
        )
    return pipeline


def card_pipeline(name: str, config: MethodBlock, graph: Pipeline) -> Pipeline:
    """The model card of each of ``name``'s runs, under namespace ``card.<run>``:
    ``<run>.model`` and ``<run>.metrics`` and the reports of the data steps that fed
    the training in ``graph`` -> ``<run>.model_card`` (README.md in the model's folder)."""
    pipeline = Pipeline([])
    for run in config.run_names(name):
        reports = data_reports(graph, run)
        pipeline += Pipeline(
            evaluation.model_card_pipeline(reports),
            namespace=f"{CARD_NAMESPACE}.{run}",
            inputs={"model": f"{run}.model", "metrics": f"{run}.metrics", "sts_pairs": f"{run}.sts_pairs",
                    "baseline_metrics": "baseline_metrics", "baseline_sts_pairs": "baseline_sts_pairs",
                    **{report: report for report in reports}},
            outputs={"model_card": f"{run}.model_card"},
            parameters={"params:data_processing": "params:data_processing", "params:raw_data": "params:raw_data",
                        "params:leaderboard": "params:leaderboard"},
            tags=["method", config.kind, config.family],
        )
    return pipeline


def own_data_pipeline(name: str, config: MethodBlock) -> Pipeline:
    """The preparation of ``name``'s own data: for every template input whose
    ``data.<input>`` is a source (a path or a mapping), not a catalog data set, the
    ``own_data`` template under namespace ``name``, reading ``params:<name>.data.<input>``
    and writing ``<name>.own_<input>`` and its report ``report_<name>.<input>``. Every
    seed of the method trains on the same prepared data."""
    pipeline = Pipeline([])
    for input_name in config.sources:
        template = own_data.create_pipeline(input_name, name)
        reports = ({"report_documents": f"report_{name}.documents", "report_spans": f"report_{name}.spans"}
                   if input_name == "documents" else {"report": f"report_{name}.{input_name}"})
        shared = {p: p for p in own_data.pipeline.SHARED_PARAMETERS if p in template.inputs()}
        pipeline += Pipeline(
            template,
            namespace=name,
            outputs=reports,
            parameters={own_data.pipeline.SOURCE: f"params:{name}.data.{input_name}", **shared},
            tags=["own_data", config.kind, config.family],
        )
    return pipeline


def first_run(name: str, config: MethodBlock) -> str:
    """The run whose model the transfer tasks score: the method's, or its first seed's."""
    return next(iter(config.run_names(name)))


def transfer_pipeline(name: str, config: MethodBlock) -> Pipeline:
    """``name``'s model (its first seed's, with ``seeds``) scored with the transfer
    tasks too, under namespace ``transfer.<name>``: ``<name>.metrics_full``."""
    return Pipeline(
        evaluation.create_pipeline(mteb_results=False),
        namespace=f"{TRANSFER_NAMESPACE}.{name}",
        inputs={"model": f"{first_run(name, config)}.model", "raw_sts": "raw_sts", "raw_transfer": "raw_transfer"},
        outputs={"metrics": f"{name}.metrics_full", "sts_pairs": f"{name}.transfer_sts_pairs"},
        parameters={"params:evaluation": "params:evaluation", "params:block": "params:transfer_evaluation"},
        tags=[TRANSFER_NAMESPACE],
    )


def build_graph(methods: Mapping[str, MethodBlock]) -> Pipeline:
    """Every node of the project once."""
    graph = raw_data.create_pipeline() + data_processing.create_pipeline() + evaluation.baseline_pipeline()
    for name, config in methods.items():
        graph += own_data_pipeline(name, config) + method_pipeline(name, config) + transfer_pipeline(name, config)
    for name, config in methods.items():  # the cards read what the graph prepared for each run
        graph += card_pipeline(name, config, graph)
    return graph


def leaderboard_pipeline(graph: Pipeline) -> Pipeline:
    """The leaderboard, waiting for every metrics data set of ``graph``: one and the
    same node in every user pipeline, so that a sum of user pipelines holds it once and
    runs it after all the metrics the run writes (``leaderboard.pipeline``)."""
    return leaderboard.create_pipeline(after=[name for name in graph.all_outputs() if leaderboard.is_metrics(name)])


def baseline_scoring(graph: Pipeline) -> Pipeline:
    """What writes the baseline's per-pair STS predictions (``baseline.evaluate``, every
    pooling from one encoding, and the raw data it reads): a trained row's ``vs base``
    is a paired test against the baseline with the same pooling. Scoring one pooling
    would cost most of what scoring the five from the same encoding does (52 s against
    76 s for the default encoder on 2 CPU cores), so the node is not split."""
    return graph.to_outputs("baseline_sts_pairs")


def user_pipelines(graph: Pipeline, methods: Iterable[str]) -> dict[str, Pipeline]:
    """What ``kedro run --pipelines=<name>`` runs, each cut from ``graph``; any of them
    can be summed (``--pipelines=a,b``)."""
    methods = list(methods)
    external = evaluation.external_pipeline()
    # The board waits for the external row too, so that `--pipelines=external` builds it after the scoring.
    board = leaderboard_pipeline(graph + external)
    pipelines = {
        "raw_data": graph.only_nodes_with_tags("raw_data"),
        # the built-in prepared data and every method's own data (they read no input)
        "data_processing": graph.to_outputs(*PREPARED) + graph.only_nodes_with_tags("own_data"),
        "baseline": graph.to_outputs("baseline_metrics", "baseline_mteb_results") + board,
        "leaderboard": board,
        # Any encoder scored as its own row; not in the default run, which has no model to name.
        "external": graph.to_outputs(*(i for i in external.inputs() if not i.startswith("params:"))) + external
        + board,
    }
    for name in methods:
        per_run = sorted(output for output in graph.all_outputs()
                         if re.fullmatch(rf"{re.escape(name)}(\.seed\d+)?\.(model_card|mteb_results)", output))
        # The method's row, and the baseline it is tested against, so that its `vs base` is there on a fresh clone.
        pipelines[name] = graph.to_outputs(f"{name}.metrics", f"{name}.training_curve", *per_run) + baseline_scoring(
            graph) + board
    transfer_nodes = graph.only_nodes_with_namespaces([TRANSFER_NAMESPACE]) + graph.only_nodes("baseline.transfer")
    pipelines["evaluation"] = transfer_nodes + board
    pipelines["__default__"] = graph + board
    return pipelines


# --- the parameters the graph is built from ----------------------------------------------
def project_root(start: Path | None = None) -> Path:
    """The Kedro project folder at or above ``start`` (the working directory)."""
    from kedro.utils import find_kedro_project

    root = find_kedro_project(start or Path.cwd())
    if root is None:
        raise RuntimeError(f"no Kedro project (pyproject.toml with [tool.kedro]) at or above {start or Path.cwd()}")
    return Path(root)


# The parameters of the Kedro session about to run (its environment and `--params`
# included), keyed by its project folder; set by pipelines.hooks.GraphParametersHook.
_run_parameters: tuple[Path, dict] | None = None


def use_run_parameters(project_path: Path | str, parameters: Mapping) -> None:
    """Build the graph from ``parameters``, the merged parameters of the session about
    to run, rather than from ``conf`` alone: Kedro calls ``register_pipelines()``
    without arguments, so without this ``kedro run --params "simcse.data.sentences=my.txt"``
    (a method's own data, which adds preparation nodes to the graph) could not change
    the graph. Kedro caches the pipelines it loaded; when the parameters differ from
    those the cache was built from, it is told to load them again."""
    global _run_parameters
    chosen = (Path(project_path).resolve(), dict(parameters))
    if chosen == _run_parameters:
        return
    _run_parameters = chosen
    from kedro.framework.project import PACKAGE_NAME, pipelines

    if PACKAGE_NAME:
        pipelines.configure(f"{PACKAGE_NAME}.pipeline_registry")  # public API: drops the cached pipelines


def run_parameters(root: Path) -> dict | None:
    """The session's parameters (:func:`use_run_parameters`) when they are ``root``'s."""
    if _run_parameters is not None and _run_parameters[0] == Path(root).resolve():
        return _run_parameters[1]
    return None


def graph_parameters(root: Path | None = None, env: str | None = None) -> dict:
    """The merged parameters the graph's shape comes from: ``conf/base``, the
    environment in ``KEDRO_ENV`` and ``params.yaml``, loaded as ``kedro run`` loads them
    (``configuration/loader.py``; the ``methods`` list belongs in ``conf/base``, so that every
    environment, DVC and kedro-viz see the same graph)."""
    from contrastive_sentence_embeddings.configuration.loader import project_parameters

    return project_parameters(root or project_root(), env or os.environ.get("KEDRO_ENV"))


def register_pipelines() -> dict[str, Pipeline]:
    """The user pipelines, from the running session's parameters (``--params`` included)
    or, outside a session (kedro viz, DVC's checks), from ``conf``."""
    root = project_root()
    methods = method_configs(run_parameters(root) or graph_parameters(root))
    return user_pipelines(build_graph(methods), methods)
