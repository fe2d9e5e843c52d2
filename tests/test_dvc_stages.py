"""``dvc.yaml`` states no graph of its own: its stage templates run namespaces and tags of
the Kedro graph, over the ``methods`` list of the parameters, and every path it names
is the catalog's. These tests check that against the graph and the catalog, so a
renamed data set or a new input cannot leave a stage with stale dependencies."""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import PurePosixPath

import pytest
import yaml

from contrastive_sentence_embeddings.pipelines.parameter_blocks import method_configs
from contrastive_sentence_embeddings.pipelines.graph import (
    build_graph,
    graph_parameters,
    leaderboard_pipeline,
    user_pipelines,
)
from tests.helpers import PROJECT_ROOT

PACKAGE = "src/contrastive_sentence_embeddings"


def locked_stages() -> dict:
    """dvc.lock's stages, as committed."""
    return yaml.safe_load((PROJECT_ROOT / "dvc.lock").read_text())["stages"]


def git_tracked() -> set[str]:
    """Every path git tracks in the project."""
    import subprocess

    return set(subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              check=True).stdout.splitlines())


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
            return relative(value)
    return None


def relative(path) -> str:
    text = str(path)
    return text[len(str(PROJECT_ROOT)) + 1:] if text.startswith(str(PROJECT_ROOT)) else text


def expand(entries, item: str | None = None) -> list[str]:
    """A stage's deps/outs/metrics as plain paths, ``${item}`` filled in."""
    paths = []
    for entry in entries or []:
        path = next(iter(entry)) if isinstance(entry, dict) else entry
        paths.append(path.replace("${item}", item) if item else path)
    return paths


# Folders of every model's files of which a method's stage reads the baseline's alone (its
# model card's comparison with the starting encoder).
BASELINE_FOLDERS = ("baseline_metrics", "baseline_sts_pairs")


def covered(path: str, deps: list[str]) -> bool:
    return any(PurePosixPath(path) == PurePosixPath(dep) or PurePosixPath(dep) in PurePosixPath(path).parents
               for dep in deps)


def test_the_templates_iterate_over_the_dvc_lists(project):
    params, _, _, _, stages = project
    assert stages["vars"] == ["conf/base/parameters.yml:dvc"]
    assert stages["stages"]["train"]["foreach"] == "${dvc.train}"
    assert stages["stages"]["transfer"]["foreach"] == "${dvc.transfer}"
    # The default graph is the results of record: every method and combination trained,
    # the transfer tasks of every method of a paper (the combinations' are left out for
    # time); the main job (Makefile's MAIN_PIPELINES) is one of its train stages.
    main_job = re.search(r"^MAIN_PIPELINES \?= (\S+)$", (PROJECT_ROOT / "Makefile").read_text(), re.M).group(1)
    assert sorted(params["dvc"]["train"]) == sorted(params["methods"])
    combinations = {"simcse_decorrelation", "scd_offdrop", "declutr_dcl"}
    assert sorted(params["dvc"]["transfer"]) == sorted(set(params["methods"]) - combinations)
    assert main_job in params["dvc"]["train"]


def test_every_method_stage_runs_its_namespace_and_depends_on_all_it_reads(project):
    params, methods, graph, catalog, stages = project
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
            if name in BASELINE_FOLDERS:  # the card reads the baseline's records in them: the baseline stage's outs
                baseline_outs = [out for out in expand(stages["stages"]["baseline"]["outs"]) if covered(out, [path])]
                assert baseline_outs and all(out in deps for out in baseline_outs), (method, name, deps)
                continue
            assert path is not None and covered(path, deps), (method, name, path, deps)
        # The detailed metrics are outputs: DVC's metrics are the summary (leaderboard stage).
        assert expand(train["outs"], method) == [path_of(catalog, f"{method}.model"),
                                                 path_of(catalog, f"{method}.mteb_results"),
                                                 path_of(catalog, f"{method}.metrics"),
                                                 path_of(catalog, f"{method}.training_curve")]
        assert "metrics" not in train
        curve = catalog.get(f"{method}.training_curve")
        # ... and the run's live log (DVCLive's folder, training.live_log_dir; per seed a folder inside).
        assert expand(train["plots"], method) == [relative(curve._terms_filepath), relative(curve._dev_filepath),
                                                  params[method]["training"]["live_log_dir"]]
        assert f"conf/base/parameters_{method}.yml" in str(train["params"]).replace("${item}", method)
        assert (PROJECT_ROOT / f"conf/base/parameters_{method}.yml").is_file()

        assert transfer["cmd"].replace("${item}", method) == f"kedro run --namespaces=transfer.{method}"
        scored = graph.only_nodes_with_namespaces([f"transfer.{method}"])
        deps = expand(transfer["deps"], method)
        for name in scored.inputs():
            if not name.startswith("params:"):
                assert covered(path_of(catalog, name), deps), (method, name)
        assert expand(transfer["outs"], method) == [path_of(catalog, f"{method}.metrics_full")]


def test_data_stages_write_what_the_catalog_names(project):
    _, _, graph, catalog, stages = project
    prepared = graph.only_nodes_with_tags("data_processing")
    outs = expand(stages["stages"]["data_processing"]["outs"])
    files = {path_of(catalog, name) for name in prepared.all_outputs() if not name.startswith("report_")}
    reports = {str(PurePosixPath(path_of(catalog, name)).parent) for name in prepared.all_outputs()
               if name.startswith("report_")}
    assert sorted(outs) == sorted(files | reports)
    deps = expand(stages["stages"]["data_processing"]["deps"])
    for name in prepared.inputs():
        if not name.startswith("params:"):
            assert covered(path_of(catalog, name), deps), name
    raw = graph.only_nodes_with_tags("raw_data")
    assert sorted(expand(stages["stages"]["raw_data"]["outs"])) == sorted(path_of(catalog, n) for n in raw.all_outputs())
    assert stages["stages"]["raw_data"]["cmd"] == "kedro run --tags=raw_data"
    assert stages["stages"]["data_processing"]["cmd"] == "kedro run --tags=data_processing"


def test_baseline_stages_list_the_files_their_parameters_produce(project):
    """The metrics of each pooling, and its per-pair predictions: the trained rows' `vs
    base` needs them, and they are not in git, so a fresh clone's `dvc repro` must see
    them missing and run the stage."""
    params, _, graph, catalog, stages = project
    poolings = params["baseline"]["poolings"]
    metrics, pairs = path_of(catalog, "baseline_metrics"), path_of(catalog, "baseline_sts_pairs")
    mteb = path_of(catalog, "baseline_mteb_results")
    assert expand(stages["stages"]["baseline"]["outs"]) == [f"{mteb}/baseline-{p}" for p in poolings] + [
        f"{metrics}/baseline-{p}.json" for p in poolings] + [f"{pairs}/baseline-{p}.npz" for p in poolings]
    assert "metrics" not in stages["stages"]["baseline"]
    transfer = {re.sub(r"^data/08_reporting/metrics_full/|\.json$", "", p)
                for p in expand(stages["stages"]["baseline_transfer"]["outs"])}
    assert transfer == {f"baseline-{pooling}" for pooling in params["transfer_evaluation"]["baseline_poolings"]}
    node_names = {node.name for node in graph.nodes}
    for stage in ("baseline", "baseline_transfer"):
        nodes = stages["stages"][stage]["cmd"].split("--nodes=")[1].split(",")
        assert set(nodes) <= node_names
    written = {"baseline": {"baseline_metrics", "baseline_sts_pairs", "baseline_mteb_results"},
               "baseline_transfer": {"baseline_transfer_metrics"}}
    for stage, outputs in written.items():
        nodes = stages["stages"][stage]["cmd"].split("--nodes=")[1].split(",")
        assert graph.only_nodes(*nodes).all_outputs() == outputs, stage


def test_every_plot_is_a_file_a_stage_writes_and_renders_on_its_own_axes(project):
    """No top-level plot list naming every method's file (`dvc plots show` warned about
    each method not run, and drew all on one x axis): each train stage declares its own
    method's curves, with the template that draws one line per seed, and the leaderboard
    its two figures."""
    _, _, _, catalog, stages = project
    assert "plots" not in stages
    train = stages["stages"]["train"]["do"]
    *curves, live = train["plots"]
    for entry in curves:
        (path, props), = entry.items()
        assert props["cache"] is False and props["x"] == "step"
        assert "${item}" in path and "${item}" in props["title"]
        template = json.loads((PROJECT_ROOT / f".dvc/plots/{props['template']}.json").read_text())
        assert template["data"] == {"values": "<DVC_METRIC_DATA>"}
    # The loss with each term on its own axis, and the dev score the kept weights were chosen by.
    assert [(next(iter(entry.values()))["template"], next(iter(entry.values()))["y"]) for entry in curves] \
        == [("loss_terms", "value"), ("dev_curve", "dev/selection")]
    # The live log: a folder of one TSV per quantity (DVCLive's), a chart each on DVC's own
    # template, each titled by its file's path (one title for the folder would name them all alike).
    (path, props), = live.items()
    assert path == "data/08_reporting/live/${item}" and props["cache"] is False and props["x"] == "step"
    assert "title" not in props and "template" not in props
    assert expand(stages["stages"]["leaderboard"]["plots"]) == [path_of(catalog, "alignment_uniformity_plot"),
                                                                 path_of(catalog, "sts_comparison_plot")]


# --- parameters: what each stage lists --------------------------------------------------
OVERLAY = "params.yaml"
SHARED_FILE = "conf/base/parameters.yml"


def listed_params(stage: dict, item: str | None = None) -> dict[str, list[str] | None]:
    """A stage's ``params:`` as {file: keys} (None: the whole file), ``${item}`` filled in."""
    listed: dict[str, list[str] | None] = {}
    for entry in stage.get("params") or []:
        if isinstance(entry, str):  # a key of params.yaml, DVC's default file
            listed.setdefault(OVERLAY, []).append(entry)
            continue
        for file, keys in entry.items():
            file = file.replace("${item}", item) if item else file
            listed[file] = None if keys is None else [k.replace("${item}", item) if item else k for k in keys]
    return listed


def stage_nodes(stages: dict, graph, methods, name: str, method: str | None = None):
    """The graph's nodes a stage's ``kedro run`` command runs."""
    stage = stages["stages"][name]
    cmd = stage["do"]["cmd"].replace("${item}", method) if method else stage["cmd"]
    option, _, value = cmd.removeprefix("kedro run ").partition("=")
    if option == "--tags":
        return graph.only_nodes_with_tags(*value.split(","))
    if option == "--namespaces":
        return graph.only_nodes_with_namespaces(value.split(","))
    if option == "--nodes":
        return graph.filter(node_names=value.split(","))
    assert option == "--pipelines", cmd
    return user_pipelines(graph, methods)[value]


def shared_values_read(nodes, params: dict) -> set[str]:
    """The shared values (encoder, seed, on_bad_input) that reach ``nodes``: read
    directly (``params:seed``) or through a key that inherits it when null (a method's
    ``training.seed``, ``data_processing``'s sampling seeds, the ``on_bad_input`` keys)."""
    from contrastive_sentence_embeddings.configuration.layering import SHARED_VALUES, inheriting_keys

    read = set()
    for name in nodes.inputs():
        if not name.startswith("params:"):
            continue
        path = re.sub(r"\.seed\d+$", "", name.removeprefix("params:"))  # a seeded run reads its method's block
        if path in SHARED_VALUES:
            read.add(path)
        read |= {shared for key, shared in inheriting_keys(params).items()
                 if key == path or key.startswith(f"{path}.") or path.startswith(f"{key}.")}
    return read


def test_every_stage_lists_the_shared_values_and_overlay_keys_that_reach_it(project):
    """``dvc exp run -S seed=43`` (params.yaml) or a changed shared value in
    conf/base/parameters.yml must rerun every stage the value reaches, and only those;
    a method's params.yaml block reruns its train stage."""
    params, methods, graph, _, stages = project
    overlay = yaml.safe_load((PROJECT_ROOT / OVERLAY).read_text())
    instances = [(name, None) for name, stage in stages["stages"].items() if "foreach" not in stage]
    instances += [(name, method) for name in ("train", "transfer") for method in methods]
    for name, method in instances:
        stage = stages["stages"][name]["do"] if method else stages["stages"][name]
        listed = listed_params(stage, method)
        reached = shared_values_read(stage_nodes(stages, graph, methods, name, method), params)
        assert set(listed.get(SHARED_FILE) or []) == reached, (name, method, listed.get(SHARED_FILE), reached)
        expected = {key for key in reached if key in overlay} | ({method} if name == "train" else set())
        assert set(listed.get(OVERLAY) or []) == expected, (name, method, listed.get(OVERLAY))
    # The seed reaches data preparation and every training, not the baseline's scores.
    assert "seed" in listed_params(stages["stages"]["data_processing"])[OVERLAY]
    assert "seed" not in (listed_params(stages["stages"]["baseline"]).get(OVERLAY) or [])


def test_the_overlay_lists_only_parameters_of_the_configuration_all_null(project):
    """params.yaml's keys are parameters of conf/ (base, and base + paper), every value
    null ("as configured"); every method has its block, so any `dvc.train` list finds
    the keys its train stages list."""
    from contrastive_sentence_embeddings.configuration.layering import flatten, has_key
    from contrastive_sentence_embeddings.configuration.loader import project_parameters

    params, methods, _, _, _ = project
    overlay = yaml.safe_load((PROJECT_ROOT / OVERLAY).read_text())
    paper = project_parameters(PROJECT_ROOT, env="paper")
    keys = list(flatten(overlay))
    assert keys and all(has_key(params, key) and has_key(paper, key) for key in keys), [
        key for key in keys if not (has_key(params, key) and has_key(paper, key))]
    assert all(overlay_value is None for overlay_value in (
        functools.reduce(lambda node, part: node[part], key.split("."), overlay) for key in keys))
    assert set(methods) <= set(overlay)
    for method in methods:  # the knobs the docs promise, per method
        assert {f"{method}.training.{k}" for k in ("learning_rate", "batch_size", "max_steps", "epochs")} | {
            f"{method}.seeds"} <= set(keys), method


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
    from contrastive_sentence_embeddings.configuration.strict import ParameterError
    from contrastive_sentence_embeddings.pipelines.parameter_blocks import validate_parameters

    params = {**project[0], "dvc": dvc}
    with pytest.raises(ParameterError, match=message):
        validate_parameters(params)


def test_every_method_can_be_listed_for_dvc(project):
    from contrastive_sentence_embeddings.pipelines.parameter_blocks import validate_parameters

    params = project[0]
    validate_parameters({**params, "dvc": {"train": list(params["methods"]), "transfer": list(params["methods"])}})


def test_dvc_metrics_are_the_leaderboard_summary_alone(project):
    """``dvc metrics show`` and ``dvc exp show`` print every metrics file's every key:
    only the summary is one; the detailed files are plain outputs (cache: false, in git)."""
    _, _, graph, catalog, stages = project
    declared = {stage: expand(spec.get("do", spec).get("metrics")) for stage, spec in stages["stages"].items()}
    assert {stage: paths for stage, paths in declared.items() if paths} == {
        "leaderboard": [path_of(catalog, "leaderboard_summary")]}
    leaderboard = stages["stages"]["leaderboard"]
    assert leaderboard["cmd"] == "kedro run --pipelines=leaderboard"
    written = sorted(path_of(catalog, name) for name in leaderboard_pipeline(graph).all_outputs())
    declared = expand(leaderboard["outs"]) + expand(leaderboard["metrics"]) + expand(leaderboard.get("plots"))
    assert sorted(declared) == written
    for entry in [*leaderboard["outs"], *leaderboard["metrics"]]:
        assert next(iter(entry.values())) == {"cache": False, "persist": True}  # small files, kept in git


def test_the_leaderboard_waits_for_every_data_set_written_into_the_folders_it_reads(project):
    """``leaderboard.is_metrics`` (the names the leaderboard node is ordered after, and
    the hook's "metrics written" check) names exactly what the graph writes into the
    metrics folders."""
    from contrastive_sentence_embeddings.pipelines.leaderboard import is_metrics

    _, _, graph, catalog, _ = project
    folders = [path_of(catalog, name) for name in ("model_metrics", "full_model_metrics")]
    for name in graph.all_outputs():
        path = path_of(catalog, name)
        assert is_metrics(name) == (path is not None and covered(path, folders)), (name, path)


def test_the_leaderboard_stage_reruns_when_any_runs_parameters_change(project):
    """A row's status compares its record with today's parameters: the stage lists the
    overlay and every file a run's block or the evaluation settings come from, whole."""
    _, methods, _, _, stages = project
    listed = listed_params(stages["stages"]["leaderboard"])
    expected = {OVERLAY, SHARED_FILE, "conf/base/parameters_evaluation.yml",
                *(f"conf/base/parameters_{method}.yml" for method in methods)}
    assert set(listed) == expected and all(keys is None for keys in listed.values()), listed


def test_the_committed_lock_records_the_committed_code_parameters_and_results():
    """dvc.lock is the record of the committed results (docs/architecture.md, "One state
    for Kedro and DVC"): `dvc status` finds no difference on any path git tracks (the
    package, conf/, params.yaml, the metrics, leaderboard and curves kept in git), only
    on the data a clone does not have until it runs. A commit that changes the code or
    a parameter without `dvc repro` leaves this failing: the committed results would no
    longer be this code's."""
    import subprocess
    import sys

    environment = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=PROJECT_ROOT, env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tracked = git_tracked()

    def in_git(path: str) -> bool:
        """A folder holding only git's .gitkeep placeholder and DVC's .gitignore (the list of
        its outputs there) is data, not in git."""
        return path in tracked or any(name.startswith(path.rstrip("/") + "/")
                                      and PurePosixPath(name).name not in (".gitkeep", ".gitignore")
                                      for name in tracked)

    lock = locked_stages()
    outputs = [out["path"] for entry in lock.values() for out in entry.get("outs", [])]

    def lacks_an_output(path: str) -> bool:
        """A folder holding a DVC output this checkout has not pulled: git's part of it is
        checked against the lock by test_a_checkout_holds_every_locked_folder_as_it_was."""
        return any(inside(out, path) and not (PROJECT_ROOT / out).exists() for out in outputs)

    differences = []
    for stage, changes in json.loads(done.stdout or "{}").items():
        for change in changes:
            if not isinstance(change, dict):
                differences.append(f"{stage}: {change}")
                continue
            for kind, entries in change.items():
                for path, state in (entries.items() if isinstance(entries, dict) else [(str(entries), "")]):
                    if in_git(path) and not lacks_an_output(path):
                        differences.append(f"{stage}: {kind} {path} {state}")
    assert not differences, "dvc.lock is behind what git holds (run `dvc repro` and commit dvc.lock with its " \
                            "outputs):\n" + "\n".join(differences)


def test_the_lock_holds_only_the_stages_dvc_yaml_defines():
    """A stage renamed or removed from dvc.yaml keeps its entry in dvc.lock until removed
    by hand (``dvc repro`` rewrites only the stages it runs): six such entries, from
    before the train@/transfer@ templates, named folders that no longer exist."""
    import subprocess
    import sys

    environment = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    defined = subprocess.run([sys.executable, "-m", "dvc", "stage", "list", "--name-only"], cwd=PROJECT_ROOT,
                             env=environment, capture_output=True, text=True, timeout=300, check=True).stdout.split()
    locked = locked_stages()
    assert set(locked) == set(defined), sorted(set(locked) ^ set(defined))


def inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def files_a_checkout_has(folder: str, tracked: set[str], outs: list[dict]) -> int:
    """How many files ``folder`` holds in a clone once DVC has checked out its outputs
    (``dvc checkout``/``dvc pull``, and every workspace of DVC's queue): what git tracks
    there and what the lock's outputs put there (a folder output counts its ``nfiles``,
    which include any of its files git also tracks)."""
    folder_outs = {out["path"]: out["nfiles"] for out in outs if "nfiles" in out and inside(out["path"], folder)}
    loose = {path for path in tracked if inside(path, folder)}
    loose |= {out["path"] for out in outs if "nfiles" not in out and inside(out["path"], folder)}
    loose = {path for path in loose if not any(inside(path, parent) for parent in folder_outs)}
    return len(loose) + sum(folder_outs.values())


def checkout_folder_hash(folder: str, tracked: set[str], outs: list[dict], root) -> str | None:
    """DVC's hash of ``folder`` as a checkout holds it (the md5 of its sorted manifest of
    relative paths and md5s, + ".dir"): git's files read here, DVC's file outputs from the
    lock. None where a folder output lies inside it (its manifest is in the cache only)."""
    import hashlib

    if any("nfiles" in out and inside(out["path"], folder) for out in outs):
        return None
    md5s = {out["path"]: out["md5"] for out in outs if inside(out["path"], folder)}
    for path in tracked:
        if inside(path, folder) and path not in md5s:
            md5s[path] = hashlib.md5((root / path).read_bytes()).hexdigest()
    manifest = sorted(({"md5": md5, "relpath": path[len(folder.rstrip("/")) + 1:]} for path, md5 in md5s.items()),
                      key=lambda entry: entry["relpath"])
    return hashlib.md5(json.dumps(manifest, sort_keys=True).encode()).hexdigest() + ".dir"


def test_a_checkout_holds_every_locked_folder_as_it_was():
    """Every folder a stage depends on is, in a clone with DVC's outputs checked out, what
    the lock recorded: the same number of files and, where every file of it is git's or a
    DVC file output, the same hash. None of its files is one a run left behind that
    neither git nor DVC keeps: two such (DVC's own .gitignore beside the prepared data,
    git-ignored here until it was committed, and the trained runs' per-pair predictions,
    neither an output nor in git) made every train stage look changed in DVC's queue,
    which then retrained all nine for one queued SimCSE parameter."""
    lock = locked_stages()
    tracked = git_tracked()
    outs = [out for stage in lock.values() for out in stage.get("outs", [])]
    differ, hashed = [], 0
    for name, stage in lock.items():
        for dep in stage.get("deps", []):
            if "nfiles" not in dep:
                continue
            count = files_a_checkout_has(dep["path"], tracked, outs)
            if count != dep["nfiles"]:
                differ.append(f"{name}: {dep['path']} held {dep['nfiles']} files when locked, a checkout {count}")
                continue
            expected = checkout_folder_hash(dep["path"], tracked, outs, PROJECT_ROOT)
            if expected is not None:
                hashed += 1
                if expected != dep["md5"]:
                    differ.append(f"{name}: {dep['path']} is {dep['md5']} in the lock, {expected} in a checkout")
    assert not differ, "\n".join(differ)
    assert hashed  # the hash is checked, not only counts (the package, metrics, the per-pair predictions)


def test_the_file_count_of_a_checkout_by_hand():
    tracked = {"data/p/.gitkeep", "data/p/.gitignore", "data/r/report.json", "data/m/a.json"}
    outs = [{"path": "data/p/docs", "nfiles": 3}, {"path": "data/r", "nfiles": 2}, {"path": "data/m/a.json"},
            {"path": "data/m/b.json"}]
    assert files_a_checkout_has("data/p", tracked, outs) == 2 + 3
    assert files_a_checkout_has("data/r", tracked, outs) == 2  # the folder output counts its tracked file
    assert files_a_checkout_has("data/m", tracked, outs) == 2  # a tracked output counted once
    assert files_a_checkout_has("data/p", tracked - {"data/p/.gitignore"}, outs) == 1 + 3


def test_the_folder_hash_of_a_checkout_is_dvcs_own(tmp_path):
    """DVC's own hash of a folder (``dvc add``) equals ours, made from a git file read here
    and a file known only by its md5, as the lock knows a DVC output."""
    import hashlib
    import subprocess
    import sys

    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "kept.json").write_text('{"a": 1}\n')
    (folder / "z.npz").write_bytes(b"an output's bytes")
    environment = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    for command in (["init", "--no-scm", "-q"], ["add", "-q", "d"]):
        subprocess.run([sys.executable, "-m", "dvc", *command], cwd=tmp_path, env=environment, check=True,
                       capture_output=True, timeout=120)
    dvcs = yaml.safe_load((tmp_path / "d.dvc").read_text())["outs"][0]["md5"]
    out_md5 = hashlib.md5(b"an output's bytes").hexdigest()
    (folder / "z.npz").unlink()  # a checkout without DVC's file: only the lock's md5 of it
    assert checkout_folder_hash("d", {"d/kept.json"}, [{"path": "d/z.npz", "md5": out_md5}], tmp_path) == dvcs
    assert checkout_folder_hash("d", {"d/kept.json"}, [{"path": "d/sub", "nfiles": 2}], tmp_path) is None


def test_every_output_stays_in_place_while_its_stage_runs():
    """``persist: true`` on every output of every stage: DVC does not remove the previous
    results before the stage's command runs, so a run that fails (a bad parameter, an
    interrupted training) leaves them as they were (tests/test_dvc_main_job.py runs it)."""
    stages = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())["stages"]
    for name, stage in stages.items():
        stage = stage.get("do", stage)
        for kind in ("outs", "metrics", "plots"):
            for entry in stage.get(kind) or []:
                assert isinstance(entry, dict) and next(iter(entry.values())).get("persist") is True, (name, entry)
