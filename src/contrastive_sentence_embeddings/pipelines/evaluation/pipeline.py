"""The scoring sub-pipeline every trained model goes through, instantiated by the
registry under each method's namespace (STS, alignment/uniformity) and under
``transfer.<method>`` (the SentEval transfer tasks as well)::

    model, raw_sts, raw_transfer -> evaluate -> metrics, sts_pairs (per-pair predictions)
    metrics, sts_pairs -> mteb_results -> mteb_results (MTEB's result files; not in transfer.<method>)

Each trained run also gets a model card, :func:`model_card_pipeline`, instantiated by
the registry under ``card.<run>`` (the transfer instances, which score a model a
second time, get none)::

    model, metrics, report_<step>... -> model_card -> model_card (README.md in the model's folder)

``params:block`` maps to the method's block, or to ``transfer_evaluation``; its
``evaluation`` mapping overrides ``params:evaluation``. The baseline (the untrained encoder with every
pooling, from one encoding) has its own nodes, in the ``baseline`` namespace; any
other encoder scored as its own row (:func:`external_pipeline`) in ``external``.
"""

from collections.abc import Sequence

from kedro.pipeline import Node, Pipeline

from . import nodes

SHARED_INPUTS = {"raw_sts", "raw_transfer"}


def create_pipeline(mteb_results: bool = True, **kwargs) -> Pipeline:
    """``evaluate`` and, unless ``mteb_results`` is False (the transfer instances, which
    score a model a second time), ``mteb_results``: the STS scores as MTEB's result
    files (``evaluation/mteb_results.py``)."""
    pipeline = [
        Node(nodes.evaluate_model, ["model", "raw_sts", "raw_transfer", "params:evaluation", "params:block"],
             ["metrics", "sts_pairs"], name="evaluate", tags=["evaluation"]),
    ]
    if mteb_results:
        pipeline.append(Node(nodes.write_mteb_results, ["metrics", "sts_pairs"], "mteb_results",
                             name="mteb_results", tags=["evaluation", "mteb_results"]))
    return Pipeline(pipeline)


def model_card_pipeline(reports: Sequence[str] = ()) -> Pipeline:
    """The model card of a run, written once its model is scored. ``reports``: the
    ``report_<step>`` data sets of the data steps that prepared its training data
    (the registry finds them in the graph)."""
    return Pipeline([
        Node(nodes.write_model_card,
             ["model", "metrics", "sts_pairs", "baseline_metrics", "baseline_sts_pairs", "params:leaderboard",
              "params:data_processing", "params:raw_data", *reports], "model_card",
             name="model_card", tags=["evaluation", "model_card"]),
    ])


def seeds_pipeline(runs: int) -> Pipeline:
    """A method's runs over seeds summarised: ``metrics_<i>`` -> ``metrics`` (mean and
    standard deviation of every score, and each run's) and ``training_curve_<i>`` ->
    ``training_curve`` (every run's curve, with its seed)."""
    return Pipeline([
        Node(nodes.aggregate_seed_runs, [f"metrics_{i}" for i in range(runs)], "metrics", name="aggregate_metrics",
             tags=["evaluation"]),
        Node(nodes.concat_seed_curves, [f"training_curve_{i}" for i in range(runs)], "training_curve",
             name="aggregate_curves", tags=["evaluation"]),
    ])


def baseline_pipeline() -> Pipeline:
    """``baseline.evaluate`` (STS for every pooling), ``baseline.mteb_results`` (their MTEB
    result files) and ``baseline.transfer`` (the transfer tasks for
    ``transfer_evaluation.baseline_poolings``)."""
    return Pipeline(
        [
            Node(nodes.evaluate_baseline,
                 ["raw_sts", "raw_transfer", "params:encoder", "params:baseline", "params:evaluation"],
                 ["baseline_metrics", "baseline_sts_pairs"], name="evaluate", tags=["evaluation"]),
            Node(nodes.write_baseline_mteb_results, ["baseline_metrics", "baseline_sts_pairs", "params:baseline"],
                 "baseline_mteb_results", name="mteb_results", tags=["evaluation", "mteb_results"]),
            Node(nodes.evaluate_baseline_transfer,
                 ["raw_sts", "raw_transfer", "params:encoder", "params:transfer_evaluation", "params:evaluation"],
                 "baseline_transfer_metrics", name="transfer", tags=["evaluation", "transfer"]),
        ],
        namespace="baseline",
        prefix_datasets_with_namespace=False,
    )


def external_pipeline() -> Pipeline:
    """``external.evaluate``: any encoder (``params:external``: a folder or Hub id and a
    pooling) scored on every evaluation the baseline gets, as its own row: its metrics,
    per-pair predictions and MTEB result files land beside the other rows' (the
    ``external_*`` data sets are the same folders), never replacing a baseline row."""
    return Pipeline(
        [
            Node(nodes.evaluate_external, ["raw_sts", "raw_transfer", "params:external", "params:evaluation",
                                           "params:methods"],
                 ["external_metrics", "external_sts_pairs", "external_mteb_results"], name="evaluate",
                 tags=["evaluation", "external"]),
        ],
        namespace="external",
        prefix_datasets_with_namespace=False,
    )
