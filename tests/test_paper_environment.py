"""The paper configuration (``conf/paper``, ``kedro run --env paper``) run offline, in
miniature, in CI.

Without this, the first time conf/paper is loaded is on a user's rented GPU machine,
where a typo or a missing key costs the machine's hours. Here every user pipeline the
registry defines runs with ``env="paper"`` on the offline mirror, with overrides for
sizes and sources only (:func:`miniature_overrides`, the one place they are listed);
everything else is the paper's configuration. A paper-configured training run is also
killed half-way and restarted through the real ``kedro run --env paper`` command, and
must end with the uninterrupted run's model and scores.

Precision needs no override: conf/paper leaves ``training.mixed_precision`` at ``auto``
and ``device`` at null, which the trainer turns into bf16 (or fp16) on CUDA and fp32 on
a CPU (``trainer._mixed_precision``), so the same configuration runs here as it is.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import datasets
import pandas as pd
from datasets import load_from_disk
import pytest
import yaml

from contrastive_sentence_embeddings.configuration.strict import ParameterError, parse_strict
from contrastive_sentence_embeddings.runs.crash_points import CRASH_ENV_VAR, CRASH_EXIT_CODE
from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR, RAW_SOURCES, RawDataConfig
from contrastive_sentence_embeddings.pipelines.parameter_blocks import method_configs
from tests.helpers import PROJECT_ROOT, ScratchProject

pytestmark = pytest.mark.integration

ENV = "paper"
SRC = PROJECT_ROOT / "src"


# --- the only differences from the paper's configuration --------------------------------
MINIATURE_TRAINING = {"batch_size": 4, "max_steps": 4, "eval_every": 2}


def miniature_overrides(encoder_dir: Path, methods) -> dict:
    """``--params`` for a run that finishes in seconds on 2 CPU cores: sizes and
    sources, nothing else. Every key must already exist in conf/base + conf/paper
    (checked below), so an override cannot hide a key the paper's files lack."""
    return {
        # bert-base-uncased is a Hub download: a tiny random BERT with the same vocabulary.
        "encoder": str(encoder_dir),
        # The external pipeline scores the model named on the command line (none is configured).
        "external": {"model": str(encoder_dir)},
        # conf/paper downloads from the Hub; here everything comes from the offline mirror.
        "raw_data": {"mode": "mirror"},
        "data_processing": {
            # All of wiki1m (null) would be the mirror's 11,913 sentences: a few batches are enough.
            "wiki_sentences": {"n_sentences": 64},
            # The mirror's OpenWebText documents have 550-900 tokens, not the paper's 2048 ...
            "long_documents": {"min_doc_tokens": 256},
            # ... so the spans shrink with them: 2 anchors x one 64-token cell each fit in 256
            # tokens (the tiny BERT also has only 128 positions).
            "declutr_spans": {"max_length": 64, "anchor_gap": 64},
        },
        # Every method: batches of 4 examples, at most 4 steps (CLSR's 2000 epochs included),
        # an evaluation (and so a checkpoint) every 2: the resume test kills a run between.
        **{name: {"training": dict(MINIATURE_TRAINING)} for name in methods},
        # Two of the seven transfer tasks (one single-sentence, one pair task), fewer folds,
        # and 20 bootstrap resamples instead of 1000: the STS intervals of every scored
        # model and the leaderboard's paired tests (rebuilt after every pipeline) would
        # otherwise take most of this file's time.
        "evaluation": {"transfer_tasks": ["TREC", "MRPC"], "k_folds": 2, "sts_bootstrap_resamples": 20},
        "leaderboard": {"bootstrap_resamples": 20},
    }


def leaf_paths(tree: dict, prefix: str = "") -> list[str]:
    paths = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        paths += leaf_paths(value, f"{path}.") if isinstance(value, dict) else [path]
    return paths


def has_path(tree: dict, path: str) -> bool:
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def paper_parameters(conf: Path = PROJECT_ROOT / "conf") -> dict:
    """conf/base with conf/paper merged in, as ``kedro run --env paper`` loads them."""
    from contrastive_sentence_embeddings.configuration.loader import project_parameters

    return project_parameters(conf.parent, env=ENV)


def paper_files() -> dict:
    """What conf/paper's own parameter files set (no base merged in)."""
    merged: dict = {}
    for path in sorted((PROJECT_ROOT / "conf" / ENV).glob("parameters*.yml")):
        merged.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return merged


# --- the machine ---------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The tiny BERT's matrices are too small to share between threads; on 2 busy cores a
    second intra-op thread made encoding ~10x slower (it spins waiting for a core)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --- no network ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def no_network():
    """The Hub clients refuse to download (conftest sets HF_HUB_OFFLINE and
    HF_DATASETS_OFFLINE before they are imported), and any other attempt to open an
    internet connection raises here instead of waiting on a socket."""
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        assert os.environ.get(variable) == "1", variable

    original = socket.socket.connect

    def refuse(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise OSError(f"test_paper_environment: a network connection to {address} was attempted")
        return original(sock, address)

    patch = pytest.MonkeyPatch()
    patch.setattr(socket.socket, "connect", refuse)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def miniature_mirror(tmp_path_factory, mirror_dir) -> Path:
    """The offline mirror as links, except that SNLI's dev split also appears as
    ``train``: the paper trains CLSR on NLI *train* pairs, which the Hub has and the
    mirror does not. Its dev and test stay beside it, so reading them would show."""
    mirror = tmp_path_factory.mktemp("mirror")
    for source in mirror_dir.iterdir():
        if source.is_dir() and source.name != "nli":
            (mirror / source.name).symlink_to(source, target_is_directory=True)
    snli = mirror / "nli" / "snli"
    snli.mkdir(parents=True)
    for real in sorted((mirror_dir / "nli" / "snli").iterdir()):
        (snli / real.name).symlink_to(real)
        if real.suffix == ".dev":
            (snli / f"{real.stem}.train").symlink_to(real)
    return mirror


def run_order(pipelines: dict) -> list[str]:
    """The user pipelines (all but ``__default__``), each after those whose outputs it
    reads (``evaluation`` scores the models the method pipelines train); otherwise in
    the registry's order. The leaderboard's metrics inputs only order it within a run
    (every pipeline's leaderboard lists every metrics data set), so they are no need."""
    from contrastive_sentence_embeddings.pipelines.leaderboard import is_metrics

    names = [name for name in pipelines if name != "__default__"]
    reads = {name: {i for i in pipelines[name].inputs() if not is_metrics(i)} for name in names}
    needs = {name: {other for other in names if other != name
                    and reads[name] & pipelines[other].all_outputs()} for name in names}
    order: list[str] = []
    while len(order) < len(names):
        ready = [name for name in names if name not in order and needs[name] <= set(order)]
        assert ready, f"the user pipelines depend on each other in a cycle: {needs}"
        order.append(ready[0])
    return order


@pytest.fixture(scope="module")
def paper_project(tmp_path_factory, miniature_mirror, tiny_bert_dir, no_network):
    """A scratch project in which every user pipeline has run under ``--env paper``."""
    from kedro.framework.project import pipelines

    methods = list(method_configs(paper_parameters()))
    overrides = miniature_overrides(tiny_bert_dir, methods)
    scratch = ScratchProject(tmp_path_factory.mktemp("paper_project"), miniature_mirror)
    order = run_order(dict(pipelines))
    for name in order:
        scratch.run([name], env=ENV, params=overrides)
    scratch.order, scratch.overrides, scratch.methods = order, overrides, methods
    yield scratch
    scratch.close()


# --- the overrides are only sizes and sources, and only keys the paper has ---------------------
def test_every_override_names_a_key_of_the_paper_configuration(tiny_bert_dir):
    params = paper_parameters()
    overrides = miniature_overrides(tiny_bert_dir, method_configs(params))
    missing = [path for path in leaf_paths(overrides) if not has_path(params, path)]
    assert not missing, f"overrides of keys conf/base + conf/paper do not have: {missing}"


def test_a_misspelt_override_stops_the_paper_run_before_any_node(tmp_path, mirror_dir, tiny_bert_dir):
    """What makes the check above bite at run time too: the strict parsing of every
    block (pipelines.hooks.StrictParametersHook) refuses a key the paper's blocks do not take."""
    scratch = ScratchProject(tmp_path, mirror_dir)
    try:
        with pytest.raises(ParameterError, match=r"simcse\.training\.max_step\b") as error:
            scratch.run(["simcse"], env=ENV, params={"simcse": {"training": {"max_step": 3}}})
        assert "(set in --params)" in str(error.value) and "did you mean max_steps?" in str(error.value)
        assert not (tmp_path / "data" / "01_raw").exists()  # stopped before the first node
    finally:
        scratch.close()


# --- every user pipeline under --env paper -------------------------------------------------
def test_every_user_pipeline_ran(paper_project):
    from kedro.framework.project import pipelines

    assert sorted(paper_project.order) == sorted(set(pipelines) - {"__default__"})
    assert set(paper_project.methods) <= set(paper_project.order)
    assert paper_project.order.index("evaluation") > max(map(paper_project.order.index, paper_project.methods))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def model_folders(root: Path, name: str) -> list[Path]:
    """A method's saved models: one, or one per seed."""
    folder = root / "data" / "06_models" / name
    return sorted(folder.glob("seed*")) or [folder]


def test_each_method_trained_with_the_papers_settings(paper_project, tiny_bert_dir):
    """Every key conf/paper sets for a method (its training schedule, its method's
    hyper-parameters) reached the trainer, except the miniature's sizes."""
    paper = paper_files()
    for name in paper_project.methods:
        overridden = paper_project.overrides[name]["training"]
        for folder in model_folders(paper_project.root, name):
            metadata = read_json(folder / "cse_metadata.json")
            assert metadata["base_encoder"] == str(tiny_bert_dir)
            assert metadata["training"]["batch_size"] == 4 and 0 < metadata["steps"] <= 4
            for key, value in (paper.get(name, {}).get("training") or {}).items():
                if key not in overridden:
                    assert metadata["training"][key] == value, (name, key)
            for key, value in (paper.get(name, {}).get("method") or {}).items():
                assert metadata["method_params"][key] == value, (name, key)


def test_the_data_steps_read_what_the_paper_reads(paper_project):
    root = paper_project.root
    candidates = datasets.load_from_disk(str(root / "data/02_intermediate/sentence_candidates")).to_pandas()
    assert candidates["source"].str.startswith("data/01_raw/wiki/").all()  # wiki1m only, no WikiText
    assert len(datasets.load_from_disk(str(root / "data/05_model_input/wiki_sentences"))) == 64
    documents = load_from_disk(str(root / "data/03_primary/long_documents")).to_pandas()
    assert len(documents) and documents["source"].str.startswith("data/01_raw/openwebtext/").all()
    spans = load_from_disk(str(root / "data/05_model_input/declutr_spans")).to_pandas()
    assert set(spans["epoch"]) == {0}  # one epoch of spans, as one epoch of training
    nli = datasets.load_from_disk(str(root / "data/05_model_input/nli_pairs")).to_pandas()
    assert set(nli["split"]) == {"snli/train"}  # the training split only, never dev or test


def test_every_model_is_scored(paper_project):
    root = paper_project.root
    for name in paper_project.methods:
        metrics = read_json(root / f"data/08_reporting/metrics/{name}.json")
        assert pd.notna(metrics["sts_avg"]), name
        full = read_json(root / f"data/08_reporting/metrics_full/{name}.json")
        assert {"TREC", "MRPC"} <= set(full), name
    assert (root / "data/08_reporting/metrics_full/baseline-mean.json").is_file()


def test_every_method_has_its_leaderboard_row(paper_project):
    table = pd.read_csv(paper_project.root / "data/08_reporting/leaderboard.csv")
    assert set(paper_project.methods) <= set(table["model"])
    assert not table["model"].duplicated().any()


# --- the Hub sources --------------------------------------------------------------------
def test_the_paper_asks_the_hub_only_for_what_it_has():
    """conf/paper downloads the training data, but a source the Hub has no copy of (the
    transfer tasks, which every method's evaluation reads) must come from the mirror, or
    every paper run stops at its ingestion; STS may come from the Hub only when the
    mirror lacks SentEval's files (the Hub's SICK-R is all of SICK, not its test split)."""
    config = parse_strict(RawDataConfig, paper_parameters()["raw_data"], "raw_data")
    assert config.mode == "hub"
    lacking = {name for name, source in RAW_SOURCES.items() if source.fetch_from_hub is None}
    assert lacking and {name: config.mode_for(name) for name in lacking} == dict.fromkeys(lacking, "mirror")
    assert config.mode_for("sts") == "auto"


# --- a killed paper run resumes ------------------------------------------------------------
# One method's run: imsimcse trains once (no seeds), so the kill lands in the run compared.
RESUMED_METHOD = "imsimcse"


def kedro_run(root: Path, mirror: Path, pipeline: str, params: dict, crash_at: str | None = None):
    """``kedro run --env paper --pipelines=<pipeline>`` with ``params`` as its
    ``--params`` (given through ``--config``, which takes them nested), in a process of
    its own: one a crash point can kill."""
    run_config = root / "run_config.yml"
    run_config.write_text(yaml.safe_dump({"run": {"env": ENV, "pipelines": pipeline, "params": params}}))
    env = {**os.environ, MIRROR_ENV_VAR: str(mirror), "OMP_NUM_THREADS": "1",  # as one_torch_thread
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.pop(CRASH_ENV_VAR, None)
    if crash_at:
        env[CRASH_ENV_VAR] = crash_at
    return subprocess.run([sys.executable, "-m", "kedro", "run", "--config", str(run_config)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_killed_paper_run_resumes_to_the_uninterrupted_result(paper_project, miniature_mirror, tmp_path):
    from safetensors.torch import load_file

    assert RESUMED_METHOD in paper_project.methods
    root = tmp_path / "project"
    root.mkdir()
    scratch = ScratchProject(root, miniature_mirror)
    try:
        # Killed the moment its first checkpoint (step 2 of 4) is published.
        killed = kedro_run(root, miniature_mirror, RESUMED_METHOD, paper_project.overrides,
                           crash_at="checkpoint:after_publish@1")
        assert killed.returncode == CRASH_EXIT_CODE, killed.stderr[-4000:]
        checkpoints = root / "data/07_model_output/checkpoints" / RESUMED_METHOD
        assert sorted(p.name for p in checkpoints.glob("step-*")) == ["step-2"]
        assert not (root / "data/06_models" / RESUMED_METHOD).exists()

        rerun = kedro_run(root, miniature_mirror, RESUMED_METHOD, paper_project.overrides)
        log = rerun.stdout + rerun.stderr
        assert rerun.returncode == 0, log[-4000:]
        assert "resumed from" in log and "at step 2 " in log
    finally:
        scratch.close()

    # The uninterrupted run is the one every-pipeline fixture made with the same overrides.
    straight = paper_project.root
    weights = load_file(root / "data/06_models" / RESUMED_METHOD / "model.safetensors")
    expected = load_file(straight / "data/06_models" / RESUMED_METHOD / "model.safetensors")
    assert weights.keys() == expected.keys()
    assert all(torch_equal(weights[key], expected[key]) for key in expected)
    resumed, uninterrupted = (read_json(folder / f"data/08_reporting/metrics/{RESUMED_METHOD}.json")
                              for folder in (root, straight))
    for metrics in (resumed, uninterrupted):  # when and where, not what: the clock, and the
        # fingerprint of the model folder's path and files' times (embedding_cache.model_fingerprint)
        metrics.pop("evaluated_at"), metrics.pop("eval_seconds"), metrics["training"].pop("train_seconds")
        metrics.pop("model_fingerprint")
    # What produced them: the same configuration, seed, encoder, code and data. The rest of
    # the provenance is when and where (times, the model's fingerprint) and the block as
    # given, whose resume and checkpoint settings differ by design and are not in its hashes.
    same = ("params_hash", "config_hash", "seed", "encoder")
    produced = [metrics.pop("provenance") for metrics in (resumed, uninterrupted)]
    assert [{key: record[key] for key in same} for record in produced][0] == {key: produced[1][key] for key in same}
    # The training data: the same data set and rows (its `datasets` fingerprint names each
    # write of the prepared data, and the two projects prepared theirs apart).
    code_and_data = [(record["training"]["code"]["source_hash"],
                      {name: {k: v for k, v in data.items() if k != "fingerprint"}
                       for name, data in record["training"]["data"].items()}) for record in produced]
    assert code_and_data[0] == code_and_data[1]
    assert resumed == uninterrupted


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))
