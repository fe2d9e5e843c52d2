"""``dvc.yaml`` states no graph of its own: its stage templates run namespaces and tags of
the Kedro graph, over the ``methods`` list of the parameters, and every path it names
is the catalog's. These tests check that against the graph and the catalog, so a
renamed data set or a new input cannot leave a stage with stale dependencies."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pytest
import yaml

from contrastive_sentence_embeddings.config import method_configs
from contrastive_sentence_embeddings.pipeline_registry import build_graph, graph_parameters
from tests.helpers import PROJECT_ROOT

PACKAGE = "src/contrastive_sentence_embeddings"


@pytest.fixture(scope="module")
def project():
    from kedro.config import OmegaConfigLoader
    from kedro.io import DataCatalog

    params = graph_parameters(PROJECT_ROOT)
    methods = method_configs(params)
    loader = OmegaConfigLoader(str(PROJECT_ROOT / "conf"), base_env="base", default_run_env="local")
    catalog = DataCatalog.from_config(loader["catalog"])
    stages = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())
    return params, methods, build_graph(methods), catalog, stages


def path_of(catalog, name: str) -> str | None:
    """The file or folder a catalog data set reads and writes, relative to the project."""
    dataset = catalog.get(name)
    for attribute in ("_filepath", "_path"):
        value = getattr(dataset, attribute, None)
        if value is not None:
            text = str(value)
            return text[len(str(PROJECT_ROOT)) + 1:] if text.startswith(str(PROJECT_ROOT)) else text
    return None


def expand(entries, item: str | None = None) -> list[str]:
    """A stage's deps/outs/metrics as plain paths, ``${item}`` filled in."""
    paths = []
    for entry in entries or []:
        path = next(iter(entry)) if isinstance(entry, dict) else entry
        paths.append(path.replace("${item}", item) if item else path)
    return paths


def covered(path: str, deps: list[str]) -> bool:
    return any(PurePosixPath(path) == PurePosixPath(dep) or PurePosixPath(dep) in PurePosixPath(path).parents
               for dep in deps)


def test_the_templates_iterate_over_the_dvc_lists(project):
    params, _, _, _, stages = project
    assert stages["vars"] == ["conf/base/parameters.yml:dvc"]
    assert stages["stages"]["train"]["foreach"] == "${dvc.train}"
    assert stages["stages"]["transfer"]["foreach"] == "${dvc.transfer}"
    # The default graph is the main job (Makefile's MAIN_PIPELINES) and its transfer scores.
    main_job = re.search(r"^MAIN_PIPELINES \?= (\S+)$", (PROJECT_ROOT / "Makefile").read_text(), re.M).group(1)
    assert params["dvc"] == {"train": [main_job], "transfer": [main_job]}


def test_every_method_stage_runs_its_namespace_and_depends_on_all_it_reads(project):
    _, methods, graph, catalog, stages = project
    train, transfer = stages["stages"]["train"]["do"], stages["stages"]["transfer"]["do"]
    for method in methods:
        assert train["cmd"].replace("${item}", method) == f"kedro run --namespaces={method},card.{method}"
        nodes = graph.only_nodes_with_namespaces([method, f"card.{method}"])
        # The cards are written into the model folders the stage outputs.
        assert {path_of(catalog, f"{run}.model_card") for run in methods[method].run_names(method)} == {
            f"{path_of(catalog, f'{run}.model')}/README.md" for run in methods[method].run_names(method)}
        deps = expand(train["deps"], method)
        assert PACKAGE in deps
        for name in sorted(nodes.inputs()):
            if name.startswith("params:") or name == "clsr_embedding_cache":  # parameters; a cache, not an input
                continue
            path = path_of(catalog, name)
            assert path is not None and covered(path, deps), (method, name, path, deps)
        assert expand(train["outs"], method) == [path_of(catalog, f"{method}.model"),
                                                 path_of(catalog, f"{method}.mteb_results")]
        assert expand(train["metrics"], method) == [path_of(catalog, f"{method}.metrics")]
        assert expand(train["plots"], method) == [path_of(catalog, f"{method}.training_curve")]
        assert f"conf/base/parameters_{method}.yml" in str(train["params"]).replace("${item}", method)
        assert (PROJECT_ROOT / f"conf/base/parameters_{method}.yml").is_file()

        assert transfer["cmd"].replace("${item}", method) == f"kedro run --namespaces=transfer.{method}"
        scored = graph.only_nodes_with_namespaces([f"transfer.{method}"])
        deps = expand(transfer["deps"], method)
        for name in scored.inputs():
            if not name.startswith("params:"):
                assert covered(path_of(catalog, name), deps), (method, name)
        assert expand(transfer["metrics"], method) == [path_of(catalog, f"{method}.metrics_full")]


def test_data_stages_write_what_the_catalog_names(project):
    _, _, graph, catalog, stages = project
    prepared = graph.only_nodes_with_tags("data_processing")
    outs = expand(stages["stages"]["data_processing"]["outs"])
    files = sorted(path_of(catalog, name) for name in prepared.all_outputs() if not name.startswith("report_"))
    assert sorted(outs) == files
    reports = {path_of(catalog, name) for name in prepared.all_outputs() if name.startswith("report_")}
    assert {str(PurePosixPath(p).parent) for p in reports} == set(expand(stages["stages"]["data_processing"]["metrics"]))
    deps = expand(stages["stages"]["data_processing"]["deps"])
    for name in prepared.inputs():
        if not name.startswith("params:"):
            assert covered(path_of(catalog, name), deps), name
    raw = graph.only_nodes_with_tags("raw_data")
    assert sorted(expand(stages["stages"]["raw_data"]["outs"])) == sorted(path_of(catalog, n) for n in raw.all_outputs())
    assert stages["stages"]["raw_data"]["cmd"] == "kedro run --tags=raw_data"
    assert stages["stages"]["data_processing"]["cmd"] == "kedro run --tags=data_processing"


def test_baseline_stages_list_the_files_their_parameters_produce(project):
    params, _, graph, _, stages = project
    baseline = {re.sub(r"^data/08_reporting/metrics/|\.json$", "", p)
                for p in expand(stages["stages"]["baseline"]["metrics"])}
    assert baseline == {f"baseline-{pooling}" for pooling in params["baseline"]["poolings"]}
    transfer = {re.sub(r"^data/08_reporting/metrics_full/|\.json$", "", p)
                for p in expand(stages["stages"]["baseline_transfer"]["metrics"])}
    assert transfer == {f"baseline-{pooling}" for pooling in params["transfer_evaluation"]["baseline_poolings"]}
    mteb = {re.sub(r"^data/08_reporting/mteb/", "", p) for p in expand(stages["stages"]["baseline"]["outs"])}
    assert mteb == {f"baseline-{pooling}" for pooling in params["baseline"]["poolings"]}
    node_names = {node.name for node in graph.nodes}
    for stage in ("baseline", "baseline_transfer"):
        nodes = stages["stages"][stage]["cmd"].split("--nodes=")[1].split(",")
        assert set(nodes) <= node_names
    written = {"baseline": {"baseline_metrics", "baseline_sts_pairs", "baseline_mteb_results"},
               "baseline_transfer": {"baseline_transfer_metrics"}}
    for stage, outputs in written.items():
        nodes = stages["stages"][stage]["cmd"].split("--nodes=")[1].split(",")
        assert graph.only_nodes(*nodes).all_outputs() == outputs, stage


def test_bytecode_does_not_count_as_a_code_change():
    ignored = (PROJECT_ROOT / ".dvcignore").read_text().split()
    assert "__pycache__/" in ignored and "*.pyc" in ignored


@pytest.mark.parametrize(
    ("dvc", "message"),
    [
        ({"train": ["declutr", "simcs"]}, r"dvc.train names simcs, not in `methods`"),
        ({"train": ["simcse"], "transfer": ["declutr"]}, r"dvc.transfer names declutr, not in dvc.train"),
        ({"train": ["declutr"], "tranfer": ["declutr"]}, r"tranfer"),
    ],
)
def test_a_dvc_list_naming_no_method_or_no_trained_model_is_refused(project, dvc, message):
    from contrastive_sentence_embeddings.config import ParameterError, validate_parameters

    params = {**project[0], "dvc": dvc}
    with pytest.raises(ParameterError, match=message):
        validate_parameters(params)


def test_every_method_can_be_listed_for_dvc(project):
    from contrastive_sentence_embeddings.config import validate_parameters

    params = project[0]
    validate_parameters({**params, "dvc": {"train": list(params["methods"]), "transfer": list(params["methods"])}})
