"""The registry derives every user pipeline from one graph: each method's pipeline runs
only the data steps its inputs need, no evaluation can run before the model it
scores, and a new method needs only a parameter block and its name in ``methods``."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging

import pandas as pd
import pytest
import yaml
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.pipelines.hooks import (
    NOT_WRITTEN_BY_THIS_RUN,
    LeaderboardOrderingHook,
    StaleLeaderboardHook,
)
from contrastive_sentence_embeddings.pipelines.parameter_blocks import method_configs
from contrastive_sentence_embeddings.pipelines.graph import build_graph, graph_parameters, user_pipelines
from contrastive_sentence_embeddings.pipelines.leaderboard.pipeline import NODE_NAME, is_metrics, ordering_inputs
from tests.helpers import PROJECT_ROOT, ScratchProject, assert_card_states_the_metrics, base_parameters

RAW = {f"ingest_{source}" for source in ("wiki", "longdocs", "openwebtext", "sts", "nli", "transfer")}
SENTENCE_STEPS = {"ingest_wiki", "ingest_longdocs", "collect_sentence_candidates", "sample_sentences"}
SCORING_INPUTS = {"ingest_sts", "ingest_transfer"}
LEADERBOARD = {"build_leaderboard", "summarise_leaderboard", "paper_table"}
# A trained row's `vs base` is tested against the baseline's per-pair predictions: every method's pipeline scores it.
ROW = SCORING_INPUTS | {"baseline.evaluate"} | LEADERBOARD


@pytest.fixture(scope="module")
def shipped():
    params = graph_parameters(PROJECT_ROOT)
    methods = method_configs(params)
    return params, methods, user_pipelines(build_graph(methods), methods)


def node_names(pipeline) -> set[str]:
    return {node.name for node in pipeline.nodes}


def test_each_method_pipeline_runs_only_what_its_metrics_need(shipped):
    _, _, pipelines = shipped
    for method in ("scd", "imsimcse"):
        assert node_names(pipelines[method]) == SENTENCE_STEPS | ROW | {
            f"{method}.train", f"{method}.evaluate", f"{method}.mteb_results", f"card.{method}.model_card"}
    # SimCSE and DeCLUTR run for three seeds (the results of record), summarised into one metrics file;
    # each run has its card.
    seeded = {f"{run}.{step}" for run in ("seed42", "seed43", "seed44")
              for step in ("train", "evaluate", "mteb_results")}
    summary = {"aggregate_metrics", "aggregate_curves"}

    def cards(method):
        return {f"card.{method}.{run}.model_card" for run in ("seed42", "seed43", "seed44")}

    assert node_names(pipelines["simcse"]) == SENTENCE_STEPS | ROW | {
        f"simcse.{node}" for node in seeded | summary} | cards("simcse")
    assert node_names(pipelines["declutr"]) == ROW | {
        "ingest_longdocs", "ingest_openwebtext", "build_long_documents", "sample_declutr_spans"} | {
        f"declutr.{node}" for node in seeded | summary} | cards("declutr")
    assert node_names(pipelines["clsr_stsb"]) == ROW | {
        "extract_stsb_pairs", "clsr_stsb.embed_pairs", "clsr_stsb.train", "clsr_stsb.evaluate",
        "clsr_stsb.mteb_results", "card.clsr_stsb.model_card"}
    assert node_names(pipelines["clsr_nli"]) == ROW | {
        "ingest_nli", "extract_nli_pairs", "clsr_nli.embed_pairs", "clsr_nli.train", "clsr_nli.evaluate",
        "clsr_nli.mteb_results", "card.clsr_nli.model_card"}


def test_the_other_user_pipelines(shipped):
    _, methods, pipelines = shipped
    assert node_names(pipelines["raw_data"]) == RAW
    assert node_names(pipelines["data_processing"]) == RAW - {"ingest_transfer"} | {
        "collect_sentence_candidates", "sample_sentences", "build_long_documents", "sample_declutr_spans",
        "extract_stsb_pairs", "extract_nli_pairs"}
    assert node_names(pipelines["baseline"]) == ROW | {"baseline.mteb_results"}
    # The transfer tasks score the models already trained: no training, no data preparation.
    assert node_names(pipelines["evaluation"]) == {f"transfer.{m}.evaluate" for m in methods} | {
        "baseline.transfer"} | LEADERBOARD
    assert node_names(pipelines["leaderboard"]) == LEADERBOARD
    # Any encoder as its own row: the raw evaluation data, its scoring and the leaderboard, no baseline.
    assert node_names(pipelines["external"]) == SCORING_INPUTS | {"external.evaluate"} | LEADERBOARD
    every_node = node_names(pipelines["__default__"])
    for name, pipeline in pipelines.items():
        if name != "external":  # not in the default run: it needs a model named in --params
            assert node_names(pipeline) <= every_node, name


def test_no_evaluation_runs_before_the_training_that_writes_its_model(shipped):
    """In every pipeline, a node that reads a model comes after the node that writes
    it (Kedro runs ``pipeline.nodes`` in this topological order), and in the whole
    graph every model read is written by a node of the graph."""
    _, methods, pipelines = shipped
    for name, pipeline in pipelines.items():
        order = {node.name: index for index, node in enumerate(pipeline.nodes)}
        writer = {output: node.name for node in pipeline.nodes for output in node.outputs}
        for node in pipeline.nodes:
            for model in (i for i in node.inputs if i.endswith(".model")):
                if name == "__default__":
                    assert model in writer, (node.name, model)
                if model in writer:
                    assert order[writer[model]] < order[node.name], (name, node.name, model)
    default = pipelines["__default__"]
    for method, config in methods.items():
        runs = list(config.run_names(method))
        for index, run in enumerate(runs):
            readers = {node.name for node in default.nodes if f"{run}.model" in node.inputs}
            # The transfer tasks score the method's model, or its first seed's.
            assert readers == {f"{run}.evaluate", f"card.{run}.model_card"} | (
                {f"transfer.{method}.evaluate"} if index == 0 else set())
            # The card quotes the run's own metrics, so it is written after they are.
            card = next(node for node in default.nodes if node.name == f"card.{run}.model_card")
            assert f"{run}.metrics" in card.inputs and card.outputs == [f"{run}.model_card"]
    leaderboard = next(node for node in default.nodes if node.name == "build_leaderboard")
    assert set(leaderboard.inputs) >= {f"{m}.metrics" for m in methods} | {f"{m}.metrics_full" for m in methods}


def summed(pipelines, names) -> Pipeline:
    """What ``kedro run --pipelines=a,b,...`` runs (``KedroSession.run`` sums them the same way)."""
    combined = Pipeline([])
    for name in names:
        combined += pipelines[name]
    return combined


def test_any_user_pipelines_sum_into_one_run_with_one_leaderboard_after_all_its_metrics(shipped):
    """``--pipelines=simcse,scd`` used to stop at once on two nodes named build_leaderboard."""
    _, _, pipelines = shipped
    names = list(pipelines)
    for combination in [*itertools.combinations(names, 2), tuple(names), ("scd", "simcse", "declutr")]:
        run = summed(pipelines, combination)
        order = {node.name: index for index, node in enumerate(run.nodes)}  # Kedro's topological order
        boards = [node for node in run.nodes if node.name == NODE_NAME]
        expected = any(NODE_NAME in node_names(pipelines[name]) for name in combination)
        assert len(boards) == int(expected), combination
        if not expected:
            continue
        writers = {node.name for node in run.nodes if any(is_metrics(output) for output in node.outputs)}
        assert all(order[writer] < order[NODE_NAME] for writer in writers), combination
        assert order[NODE_NAME] < order["summarise_leaderboard"]


def test_the_leaderboard_is_one_node_waiting_for_every_metrics_data_set_of_the_graph(shipped):
    _, methods, pipelines = shipped
    graph = pipelines["__default__"]
    boards = {next(node for node in pipeline.nodes if node.name == NODE_NAME)
              for pipeline in pipelines.values() if NODE_NAME in node_names(pipeline)}
    assert len(boards) == 1  # identical everywhere, which is what lets Kedro merge them
    [board] = boards
    every_metrics = {output for pipeline in pipelines.values() for output in pipeline.all_outputs()
                     if is_metrics(output)}
    assert set(ordering_inputs(board)) == every_metrics
    runs = {run for method, config in methods.items() for run in config.run_names(method)}
    assert every_metrics == {"baseline_metrics", "baseline_transfer_metrics", "external_metrics"} | {
        f"{m}.metrics" for m in methods} | {f"{m}.metrics_full" for m in methods} | {f"{run}.metrics" for run in runs}
    # The per-pair predictions the leaderboard tests with are written by nodes that also write metrics, so
    # waiting for the metrics waits for them.
    for node in {node for pipeline in pipelines.values() for node in pipeline.nodes}:
        if any(output.endswith("sts_pairs") for output in node.outputs):
            assert any(is_metrics(output) for output in node.outputs), node.name


def test_each_method_pipeline_scores_the_baseline_its_vs_base_is_tested_against(shipped):
    _, methods, pipelines = shipped
    for method in methods:
        outputs = pipelines[method].all_outputs()
        assert {"baseline_sts_pairs", "baseline_metrics", f"{method}.metrics"} <= outputs, method
        assert "baseline_transfer_metrics" not in outputs  # the transfer tasks stay in `evaluation`


def test_the_metrics_a_run_does_not_write_are_not_loaded_by_the_leaderboard(shipped, caplog):
    """In ``--pipelines=simcse`` the leaderboard's inputs from other methods are free
    inputs; they get a placeholder (replacing a configured entry without a warning),
    while what the run writes, and a free input another node reads, are left to the
    catalog."""
    from kedro.io import MemoryDataset

    _, _, pipelines = shipped
    run = summed(pipelines, ["simcse", "leaderboard"])
    catalog = DataCatalog({"baseline_transfer_metrics": MemoryDataset({"configured": True})})
    with caplog.at_level(logging.INFO, logger="kedro.io.data_catalog"):
        LeaderboardOrderingHook().before_pipeline_run(run, catalog)
    assert not [r for r in caplog.records if "Replacing" in r.getMessage()]
    assert catalog.load("declutr.metrics") == NOT_WRITTEN_BY_THIS_RUN
    assert catalog.load("baseline_transfer_metrics") == NOT_WRITTEN_BY_THIS_RUN
    assert "simcse.metrics" not in catalog and "baseline_metrics" not in catalog  # written by this run
    # `--nodes=card.declutr.seed42.model_card,build_leaderboard`: the card reads its run's metrics from disk.
    card = pipelines["__default__"].only_nodes("card.declutr.seed42.model_card", NODE_NAME)
    catalog = DataCatalog()
    LeaderboardOrderingHook().before_pipeline_run(card, catalog)
    assert "declutr.seed42.metrics" not in catalog and "simcse.metrics" in catalog


def test_a_run_that_writes_metrics_without_the_leaderboard_says_how_to_refresh_it(shipped, caplog):
    _, _, pipelines = shipped
    nodes = {node.name: node for node in pipelines["__default__"].nodes}
    hook = StaleLeaderboardHook()
    with caplog.at_level(logging.WARNING, logger="contrastive_sentence_embeddings.pipelines.hooks"):
        # kedro run --namespaces=simcse,card.simcse
        hook.before_pipeline_run()
        for name in ("simcse.seed42.metrics", "simcse.metrics", "simcse.seed42.model_card"):
            hook.after_dataset_saved(name)
        hook.after_pipeline_run()
        [warning] = caplog.records
        assert "simcse.seed42.metrics, simcse.metrics" in warning.getMessage()
        assert "`kedro run --pipelines=leaderboard`" in warning.getMessage() and "model_card" not in warning.getMessage()
        caplog.clear()
        # kedro run --pipelines=simcse: the leaderboard runs after the metrics
        hook.before_pipeline_run()
        hook.after_dataset_saved("simcse.metrics")
        hook.after_node_run(nodes[NODE_NAME])
        hook.after_pipeline_run()
        # a run that failed before its leaderboard
        hook.before_pipeline_run()
        hook.after_dataset_saved("baseline_metrics")
        hook.on_pipeline_error()
        [warning] = caplog.records
        assert "(baseline_metrics)" in warning.getMessage()


def test_methods_read_their_family_inputs_and_their_own_block(shipped):
    _, methods, pipelines = shipped
    graph = pipelines["__default__"]
    train = {node.name: node for node in graph.nodes if node.name.endswith(".train")}
    assert "wiki_sentences" in train["scd.train"].inputs and "params:scd" in train["scd.train"].inputs
    # Each seed's run reads the block for its seed (pipelines.hooks.SeedRunsHook puts it in the catalog).
    assert "params:simcse.seed43" in train["simcse.seed43.train"].inputs
    assert {"long_documents", "declutr_spans"} <= set(train["declutr.seed42.train"].inputs)
    embed = {node.name: node for node in graph.nodes if node.name.endswith(".embed_pairs")}
    assert "nli_pairs" in embed["clsr_nli.embed_pairs"].inputs and "stsb_pairs" in embed["clsr_stsb.embed_pairs"].inputs
    assert train["clsr_nli.train"].outputs == ["clsr_nli.model", "clsr_nli.training_curve"]


def test_each_card_reads_the_data_reports_of_the_steps_that_fed_its_training(shipped):
    _, _, pipelines = shipped
    cards = {node.name: node for node in pipelines["__default__"].nodes if node.name.endswith(".model_card")}
    reports = {name: {i for i in node.inputs if i.startswith("report_")} for name, node in cards.items()}
    assert reports["card.scd.model_card"] == {"report_sentence_candidates", "report_wiki_sentences"}
    assert reports["card.declutr.seed42.model_card"] == {"report_long_documents", "report_declutr_spans"}
    assert reports["card.clsr_stsb.model_card"] == {"report_stsb_pairs"}
    assert reports["card.clsr_nli.model_card"] == {"report_nli_pairs"}
    # One card per trained run; the transfer instances score a model a second time and write none.
    assert set(cards) == {f"card.{run}.model_card" for method, config in shipped[1].items()
                          for run in config.run_names(method)}


def test_a_method_on_its_own_data_prepares_it_and_reads_no_built_in_data(shipped):
    params, _, _ = shipped
    own = {**params,
           "simcse": {**params["simcse"], "data": {"sentences": "my/sentences.txt"}},
           "declutr": {**params["declutr"], "data": {"documents": {"path": "my/docs", "min_tokens": 64}}},
           "clsr_nli": {**params["clsr_nli"], "data": {"pairs": {"hub": "someone/pairs", "column1": "q",
                                                                  "column2": "a"}}}}
    methods = method_configs(own)
    graph = build_graph(methods)
    pipelines = user_pipelines(graph, methods)
    seeded = {f"simcse.seed{seed}.{step}" for seed in (42, 43, 44) for step in ("train", "evaluate", "mteb_results")}
    cards = {f"card.simcse.seed{seed}.model_card" for seed in (42, 43, 44)}
    assert node_names(pipelines["simcse"]) == ROW | seeded | cards | {
        "simcse.prepare_sentences", "simcse.aggregate_metrics", "simcse.aggregate_curves"}
    # The card states the report of the method's own data, not the built-in steps'.
    card = next(node for node in graph.nodes if node.name == "card.simcse.seed42.model_card")
    assert {i for i in card.inputs if i.startswith("report_")} == {"report_simcse.sentences"}
    nodes = {node.name: node for node in graph.nodes}
    assert nodes["simcse.prepare_sentences"].inputs == ["params:simcse.data.sentences",
                                                       "params:data_processing.on_bad_input",
                                                       "params:data_processing.num_proc"]
    assert nodes["simcse.prepare_sentences"].outputs == ["simcse.own_sentences", "report_simcse.sentences"]
    assert all("simcse.own_sentences" in nodes[f"simcse.seed{s}.train"].inputs for s in (42, 43, 44))
    # Own documents bring their own spans, sampled with data_processing.declutr_spans.
    assert nodes["declutr.sample_spans"].inputs == ["declutr.own_documents", "params:data_processing.declutr_spans",
                                                     "params:data_processing.num_proc"]
    assert {"declutr.own_documents", "declutr.own_spans"} <= set(nodes["declutr.seed42.train"].inputs)
    assert not node_names(pipelines["declutr"]) & {"ingest_longdocs", "build_long_documents", "sample_declutr_spans"}
    assert "clsr_nli.own_pairs" in nodes["clsr_nli.embed_pairs"].inputs
    assert "ingest_nli" not in node_names(pipelines["clsr_nli"])
    # `--pipelines=data_processing` prepares the built-in data and every method's own data.
    assert {"simcse.prepare_sentences", "declutr.prepare_documents", "declutr.sample_spans",
            "clsr_nli.prepare_pairs"} <= node_names(pipelines["data_processing"])


def test_own_spans_cannot_be_mixed_with_own_documents(shipped):
    params, _, _ = shipped
    block = {**params["declutr"], "data": {"documents": "my/docs.jsonl", "spans": "declutr_spans"}}
    with pytest.raises(ParameterError, match="declutr.data.spans: the spans of your own documents are sampled"):
        method_configs({**params, "declutr": block})


def test_runtime_params_reach_the_graph_and_a_changed_run_rebuilds_it(tmp_path, mirror_dir):
    """``kedro run --params "simcse.data.sentences=..."`` must change the graph, though
    Kedro's ``register_pipelines()`` takes no parameters; and a later session in the same
    process with other parameters must not get the cached graph of the first."""
    from kedro.framework.project import pipelines
    from kedro.framework.session import KedroSession

    project = ScratchProject(tmp_path, mirror_dir)
    try:
        for runtime, expected in (({"simcse": {"data": {"sentences": "mine.txt"}}}, True), (None, False),
                                  ({"simcse": {"data": {"sentences": {"path": "t.csv", "column": "c"}}}}, True)):
            with KedroSession.create(project_path=tmp_path, runtime_params=runtime) as session:
                session.load_context()  # what session.run does before it reads the pipelines
                assert ("simcse.prepare_sentences" in node_names(pipelines["simcse"])) is expected, runtime
                assert ("sample_sentences" in node_names(pipelines["simcse"])) is not expected, runtime
    finally:
        project.close()


def test_the_methods_list_is_checked(shipped):
    params, _, _ = shipped
    with pytest.raises(ParameterError, match="methods lists nope but no parameter block"):
        method_configs({**params, "methods": ["simcse", "nope"]})
    with pytest.raises(ParameterError, match="unknown method kind 'simcsee'"):
        method_configs({**params, "simcse": {**params["simcse"], "kind": "simcsee"}})


# --- through Kedro, as a user runs it -----------------------------------------------------
@pytest.mark.integration
def test_a_method_added_by_parameters_alone_trains_for_its_seeds_and_reaches_the_leaderboard(
        tmp_path, mirror_dir, tiny_bert_dir):
    """A throw-away method: a SimCSE variant at another temperature, run for two seeds,
    declared by a parameter block and one more name in ``methods``, nothing else."""
    block = base_parameters("simcse", max_steps=2, eval_every=2, batch_size=16,
                            checkpoint_dir="data/07_model_output/checkpoints/simcse_t01")
    block.update(seeds=[1, 2], max_examples=64, method={**block["method"], "temperature": 0.1})
    methods = graph_parameters(PROJECT_ROOT)["methods"]
    project = ScratchProject(tmp_path, mirror_dir, {"encoder": str(tiny_bert_dir)})
    try:
        (tmp_path / "conf/base/parameters_simcse_t01.yml").write_text(yaml.safe_dump({"simcse_t01": block}))
        base = tmp_path / "conf/base/parameters.yml"
        base.write_text(base.read_text().replace("methods: [", "methods: [simcse_t01, "))
        assert graph_parameters(tmp_path)["methods"] == ["simcse_t01", *methods]
        project.run(["simcse_t01"])
        runs = {}
        for seed in (1, 2):
            folder = tmp_path / f"data/06_models/simcse_t01/seed{seed}"
            metadata = json.loads((folder / "cse_metadata.json").read_text())
            assert metadata["name"] == f"simcse_t01.seed{seed}" and metadata["seed"] == seed
            assert metadata["method"] == "simcse" and metadata["method_params"]["temperature"] == 0.1
            assert metadata["train_sentences"] == 64 and metadata["examples_seen"] == 2 * 16
            runs[seed] = json.loads((tmp_path / f"data/08_reporting/metrics/simcse_t01.seed{seed}.json").read_text())
            assert runs[seed]["training"]["examples_seen"] == 32
            assert (tmp_path / f"data/07_model_output/sts_pairs/simcse_t01.seed{seed}.npz").is_file()
            # Each seed's folder has its own card, with its own run's scores.
            assert_card_states_the_metrics((folder / "README.md").read_text(encoding="utf-8"), runs[seed])
        assert runs[1]["sts_avg"] != runs[2]["sts_avg"]  # two seeds, two different models
        assert not (tmp_path / "data/06_models/simcse_t01/README.md").exists()  # the summary is not a model
        summary = json.loads((tmp_path / "data/08_reporting/metrics/simcse_t01.json").read_text())
        assert summary["model"]["name"] == "simcse_t01" and summary["model"]["seeds"] == [1, 2]
        assert summary["n_seeds"] == 2
        assert summary["sts_avg"] == pytest.approx((runs[1]["sts_avg"] + runs[2]["sts_avg"]) / 2)
        assert summary["sts_avg_std"] == pytest.approx(abs(runs[1]["sts_avg"] - runs[2]["sts_avg"]) / 2 ** 0.5)
        curve = pd.read_csv(tmp_path / "data/08_reporting/training_curves/simcse_t01.csv")
        dev = pd.read_csv(tmp_path / "data/08_reporting/dev_curves/simcse_t01.csv")
        assert set(curve["seed"]) == set(dev["seed"]) == {1, 2}  # every seed's rows, each kind in its own file
        assert not dev.isna().any().any() and curve["loss"].notna().all()
        checkpoints = tmp_path / "data/07_model_output/checkpoints/simcse_t01"
        assert not checkpoints.exists() or not any(p for p in checkpoints.rglob("*") if p.is_file())
        assert "simcse_t01" in set(pd.read_csv(tmp_path / "data/08_reporting/leaderboard.csv")["model"])
    finally:
        project.close()


@contextlib.contextmanager
def hook_warnings():
    """The warnings the project's hooks log during a Kedro session (which sets up its own
    logging, so pytest's root-level capture would miss them)."""
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Collect(logging.WARNING)
    # each concern's hooks log under their own module (settings.py lists them)
    loggers = [logging.getLogger(f"contrastive_sentence_embeddings.{concern}.hooks")
               for concern in ("runs", "pipelines", "training", "evaluation")]
    for hooks_logger in loggers:
        hooks_logger.addHandler(handler)
    try:
        yield records
    finally:
        for hooks_logger in loggers:
            hooks_logger.removeHandler(handler)


@pytest.mark.integration
def test_two_method_pipelines_run_as_one_with_one_leaderboard_and_their_vs_base(tmp_path, mirror_dir, tiny_bert_dir):
    """``kedro run --pipelines=simcse,scd`` in a project where nothing was scored before
    (a fresh clone has no baseline predictions): one run, one leaderboard with both
    rows, each with its ``vs base`` (the baseline it is tested against is scored in the
    same run) and the summary DVC shows. Then a run that writes metrics without the
    leaderboard says so, naming the command that refreshes it."""
    training = {"max_steps": 2, "eval_every": 2, "batch_size": 16}
    simcse, scd = base_parameters("simcse", **training), base_parameters("scd", **training)
    scd["method"] = {**scd["method"], "projector_widths": [64, 64, 64]}  # the tiny encoder has 32 dimensions
    for block in (simcse, scd):
        block.update(seeds=None, data={"sentences": "my_sentences.txt"})
    quick = {"sts_bootstrap_resamples": 20}
    project = ScratchProject(tmp_path, mirror_dir, {"encoder": str(tiny_bert_dir), "simcse": simcse, "scd": scd,
                                                    "evaluation": quick, "leaderboard": {"bootstrap_resamples": 50}})
    words = "river market stone winter garden letter engine harbour silver forest window candle".split()
    (tmp_path / "my_sentences.txt").write_text(
        "\n".join(" ".join(words[(i + j) % len(words)] for j in range(4 + i % 5)) + f" {i}." for i in range(64)))
    try:
        with hook_warnings() as warnings:
            project.run(["simcse", "scd"])
        assert not warnings  # the leaderboard ran after the metrics
        table = pd.read_csv(tmp_path / "data/08_reporting/leaderboard.csv").set_index("model")
        poolings = {simcse["pooling"], scd["pooling"]}
        for pooling in poolings:
            assert (tmp_path / f"data/07_model_output/sts_pairs/baseline-{pooling}.npz").is_file()
        for method in ("simcse", "scd"):
            assert pd.notna(table.loc[method, "delta_vs_base"]) and pd.notna(table.loc[method, "p_vs_base"]), method
        # The summary DVC shows: the same numbers, rounded.
        summary = json.loads((tmp_path / "data/08_reporting/summary.json").read_text())
        assert set(summary) == {"simcse", "scd", "baseline"}
        for method in ("simcse", "scd"):
            assert summary[method]["sts_avg"] == round(table.loc[method, "sts_avg"], 2)
            assert summary[method]["vs_base"] == round(table.loc[method, "delta_vs_base"], 2)
            assert summary[method]["examples"] == 2 * 16
        assert set(summary["baseline"]) == set(table.loc[table["method"] == "baseline", "pooling"]) >= poolings

        # A run that writes metrics without the leaderboard (as `--namespaces=simcse` does; here a re-scoring
        # with nothing but the identity to score, to be quick) leaves the table as it was, and says so.
        board = (tmp_path / "data/08_reporting/leaderboard.csv").read_bytes()
        with hook_warnings() as warnings:
            project.run(["__default__"], node_names=["simcse.evaluate"],
                        params={"evaluation": {"sts": False, "alignment": False}})
        [warning] = warnings
        assert "(simcse.metrics)" in warning and "`kedro run --pipelines=leaderboard`" in warning
        assert (tmp_path / "data/08_reporting/leaderboard.csv").read_bytes() == board
    finally:
        project.close()


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"simcse": {"training": {"lerning_rate": 1e-4}}}, "simcse.training.lerning_rate"),
        ({"simcse": {"pooling_method": "mean"}}, "simcse.pooling_method"),
        ({"declutr": {"method": {"temprature": 0.1}}}, "declutr.method.temprature"),
        ({"data_processing": {"declutr_spans": {"num_anchor": 3}}}, "data_processing.declutr_spans.num_anchor"),
        ({"evaluation": {"batchsize": 3}}, "evaluation.batchsize"),
        ({"raw_data": {"mirror": "x"}}, "raw_data.mirror"),
        ({"simcsee": {"kind": "simcse"}}, "simcsee"),
        ({"simcse": {"data": {"sentences": {"path": "my.txt", "colum": "x"}}}}, "simcse.data.sentences.colum"),
    ],
)
def test_a_misspelt_parameter_stops_the_run_naming_the_key_and_the_file(tmp_path, mirror_dir, overrides, key):
    project = ScratchProject(tmp_path, mirror_dir, overrides)
    try:
        with pytest.raises(ParameterError) as error:
            project.run(["raw_data"])
    finally:
        project.close()
    message = str(error.value)
    assert key in message and "conf/local/parameters.yml" in message, message
    assert not (tmp_path / "data/01_raw").exists() or not any((tmp_path / "data/01_raw").iterdir())  # nothing ran


def test_under_dvc_the_leaderboard_stage_follows_so_no_warning(caplog, monkeypatch):
    monkeypatch.setenv("DVC_STAGE", "train@simcse")  # what `dvc repro` sets for a stage's command
    hook = StaleLeaderboardHook()
    with caplog.at_level(logging.WARNING, logger="contrastive_sentence_embeddings.pipelines.hooks"):
        hook.before_pipeline_run()
        hook.after_dataset_saved("simcse.metrics")
        hook.after_pipeline_run()
    assert not caplog.records
