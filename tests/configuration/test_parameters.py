"""Parameters from the command line and from DVC.

The shared values (``encoder``, ``seed``, ``on_bad_input``) are plain parameters that a
block's null key takes (``config.with_shared_values``); ``params.yaml`` is an overlay
between the environment and ``--params`` (``configuration.loader.ProjectConfigLoader``);
``--params`` keeps commas inside ``[...]`` and ``{...}`` (``cli.py``); a parameter
error is one line with the key, where it was set and a suggestion. Every ``kedro run
--params`` and ``dvc exp run -S`` the docs and the parameter files show is applied
here (DVC's own override code for ``-S``) and must give parameters that pass the strict
check, with the value it set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from contrastive_sentence_embeddings.configuration.blocks import run_blocks
from contrastive_sentence_embeddings.configuration.layering import (
    check_overlay_keys,
    explain_parameter_error,
    parse_params_text,
    read_parameters_yaml,
    split_params_text,
    with_shared_values,
)
from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.configuration.loader import ParameterCommandError, project_parameters
from contrastive_sentence_embeddings.pipelines.parameter_blocks import validate_parameters
from tests.helpers import PROJECT_ROOT, ScratchProject

SRC = PROJECT_ROOT / "src"


def value_at(tree, path: str):
    for part in path.split("."):
        tree = tree[part]
    return tree


def copy_configuration(root: Path) -> Path:
    """conf/ (no local) and params.yaml in ``root``: enough to load the parameters."""
    shutil.copytree(PROJECT_ROOT / "conf", root / "conf", ignore=shutil.ignore_patterns("local"))
    (root / "conf" / "local").mkdir()
    shutil.copy(PROJECT_ROOT / "params.yaml", root)
    return root


# --- shared values ----------------------------------------------------------------------------
def test_a_null_key_takes_the_shared_value_and_a_set_one_keeps_its_own():
    params = {"seed": 7, "on_bad_input": "error", "methods": ["a", "b"],
              "a": {"training": {"seed": None, "learning_rate": 1.0}}, "b": {"kind": "x", "training": {"seed": 3}},
              "data_processing": {"on_bad_input": None, "wiki_sentences": {"seed": None}, "declutr_spans": {}},
              "evaluation": {"batch_size": 8}}
    resolved = with_shared_values(params)
    assert resolved["a"]["training"] == {"seed": 7, "learning_rate": 1.0}
    assert resolved["b"]["training"]["seed"] == 3  # its own
    assert resolved["data_processing"] == {"on_bad_input": "error", "wiki_sentences": {"seed": 7},
                                           "declutr_spans": {"seed": 7}}
    assert resolved["evaluation"] == {"batch_size": 8, "on_bad_input": "error"}
    assert params["a"]["training"]["seed"] is None  # the input is not changed
    assert with_shared_values(resolved) == resolved
    # A block that is absent stays absent (the strict check would parse a made-up one).
    assert "data_processing" not in with_shared_values({"seed": 1, "methods": []})
    assert with_shared_values({"methods": ["a"], "a": {"kind": "x"}, "seed": 5})["a"]["training"] == {"seed": 5}


def test_no_parameter_file_uses_an_interpolation():
    """DVC resolves every parameter file it reads or edits with OmegaConf, which knows
    neither ``globals:`` nor ``runtime_params:``."""
    files = [*sorted((PROJECT_ROOT / "conf").glob("**/*.yml")), PROJECT_ROOT / "params.yaml"]
    assert len(files) > 10
    for path in files:
        text = "\n".join(line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines())
        assert "${" not in text, path
    assert not (PROJECT_ROOT / "conf" / "base" / "globals.yml").exists()


def test_the_shipped_parameters_resolve_every_seed_and_the_paper_keeps_its_encoder():
    base = project_parameters(PROJECT_ROOT)
    validate_parameters(base)
    assert base["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"
    seeds = {run: block["training"]["seed"] for run, block in run_blocks(base).items()}
    assert seeds == {**{run: 42 for run in seeds},
                     **{f"{method}.seed{k}": k for method in ("simcse", "declutr") for k in (42, 43, 44)}}
    assert base["data_processing"]["wiki_sentences"]["seed"] == base["data_processing"]["declutr_spans"]["seed"] == 42
    assert base["data_processing"]["on_bad_input"] == base["evaluation"]["on_bad_input"] == "skip"

    paper = project_parameters(PROJECT_ROOT, env="paper")
    validate_parameters(paper)
    assert paper["encoder"] == "bert-base-uncased"
    assert paper["simcse"]["training"]["max_steps"] is None  # conf/paper's null is not undone by params.yaml
    assert project_parameters(PROJECT_ROOT, env="paper", runtime_params={"encoder": "x"})["encoder"] == "x"


# --- params.yaml, between the environment and --params ---------------------------------------
def test_params_yaml_sits_above_the_environment_and_below_params(tmp_path):
    root = copy_configuration(tmp_path)
    overlay = yaml.safe_load((root / "params.yaml").read_text())
    overlay["seed"] = 5
    overlay["simcse"]["training"]["max_steps"] = 7
    overlay["declutr"]["seeds"] = [1, 2]
    (root / "params.yaml").write_text(yaml.safe_dump(overlay))

    for env in (None, "paper"):
        params = project_parameters(root, env=env)
        validate_parameters(params)
        assert params["simcse"]["training"]["max_steps"] == 7, env  # over conf/base's 120 and conf/paper's null
        assert params["seed"] == 5 and params["data_processing"]["declutr_spans"]["seed"] == 5
        assert {run: block["training"]["seed"] for run, block in run_blocks(params).items()
                if run.split(".")[0] == "declutr"} == {"declutr.seed1": 1, "declutr.seed2": 2}
        assert params["scd"]["training"]["learning_rate"] == 3.0e-5  # a null knob: as configured
    assert project_parameters(root, env="paper")["encoder"] == "bert-base-uncased"  # null: conf/paper's
    runtime = {"seed": 9, "simcse": {"training": {"max_steps": 3}}}
    params = project_parameters(root, runtime_params=runtime)
    assert params["simcse"]["training"]["max_steps"] == 3 and params["data_processing"]["wiki_sentences"]["seed"] == 9


def test_a_key_params_yaml_lists_must_be_a_parameter(tmp_path):
    root = copy_configuration(tmp_path)
    text = (root / "params.yaml").read_text()
    (root / "params.yaml").write_text(text.replace("    learning_rate:\n", "    lerning_rate:\n", 1))
    params = project_parameters(root)  # null: nothing merged, so the strict check alone would not see it
    validate_parameters(params)
    with pytest.raises(ParameterError, match=r"params.yaml names simcse.training.lerning_rate") as error:
        check_overlay_keys(yaml.safe_load((root / "params.yaml").read_text()), params)
    assert explain_parameter_error(error.value, ["params.yaml"]) == (
        "unknown parameter simcse.training.lerning_rate (set in params.yaml): did you mean learning_rate?")

    (root / "params.yaml").write_text("seed: [1\n")
    with pytest.raises(ParameterCommandError, match=r"params.yaml line 2: not valid YAML"):
        project_parameters(root)


# --- --params with lists -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("declutr.seeds=[42,43,44],seed=7", {"declutr": {"seeds": [42, 43, 44]}, "seed": 7}),
        ("simcse.training={learning_rate: 1.0e-4, max_steps: 20},encoder=a,b=[[1,2],[3]]",
         {"simcse": {"training": {"learning_rate": 1e-4, "max_steps": 20}}, "encoder": "a", "b": [[1, 2], [3]]}),
        ("a.b=1e-5, a.c=x", {"a": {"b": 1e-5, "c": "x"}}),
        ("", {}),
    ],
)
def test_params_text_keeps_commas_inside_brackets(text, expected):
    assert parse_params_text(text) == expected


def test_bad_params_text_is_named():
    assert split_params_text("a=[1,2],b={x: [3,4]},c=5") == ["a=[1,2]", "b={x: [3,4]}", "c=5"]
    with pytest.raises(ParameterError, match=r"'43' is not key=value"):
        parse_params_text("a=1,43")
    with pytest.raises(ParameterError, match=r"declutr.seeds=\[42,43: the value is not valid YAML"):
        parse_params_text("declutr.seeds=[42,43")


# --- reading parameter files without Kedro -------------------------------------------------
SCALARS = ["1e-5", "3e-05", "-2E+3", "1_000e3", "3.0e-5", ".5", "1_000", "0x10", "no", "off", "yes", "null",
           "2024-01-01", "2024-01-01 10:00:00", "1:30", ".inf", "6e", "e5", "1e-5x", "'1e-5'", "[1e-5, no]",
           "{a: 1E5, b: 2024-01-01}", "bert-base-uncased", "0.1.2"]


@pytest.mark.parametrize("text", SCALARS)
def test_a_parameter_value_read_without_kedro_is_typed_as_kedro_types_it(text):
    """The benchmarks read conf and --set without Kedro (OmegaConf is not on the GPU image):
    1e-5 must be a float there too (plain YAML 1.1 makes it a string), a date a string."""
    from omegaconf import OmegaConf

    expected = OmegaConf.to_container(OmegaConf.create(f"value: {text}"))["value"]
    read = read_parameters_yaml(f"value: {text}")["value"]
    assert read == expected and type(read) is type(expected)


def test_every_shipped_parameter_file_reads_the_same_without_kedro():
    from omegaconf import OmegaConf

    files = sorted((PROJECT_ROOT / "conf").glob("*/parameters*.yml")) + [PROJECT_ROOT / "params.yaml"]
    assert len(files) > 10
    for path in files:
        assert read_parameters_yaml(path.read_text(encoding="utf-8")) == OmegaConf.to_container(
            OmegaConf.load(path)), path
    # the difference the reader is for; PyYAML's own safe loader is left as it was
    assert yaml.safe_load("value: 1e-5") == {"value": "1e-5"}


def kedro(root: Path, mirror: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """The real ``kedro`` command line in project ``root`` (this checkout's package
    first), reading the offline ``mirror``."""
    from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
           MIRROR_ENV_VAR: str(mirror), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "kedro", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)


# --- the runs get the values --------------------------------------------------------------------
def test_params_seed_and_encoder_reach_every_block_a_node_reads(tmp_path, mirror_dir):
    """``--params seed=43`` changes the training seed of every single run and both data
    sampling seeds, ``--params encoder=...`` the encoder; each run's ``params:<run>`` in
    the catalog (what its training node reads) is ``config.run_blocks``' block."""
    from kedro.framework.session import KedroSession

    project = ScratchProject(tmp_path, mirror_dir)
    try:
        with KedroSession.create(project_path=tmp_path, runtime_params={"seed": 43, "encoder": "my/encoder"}) as session:
            context = session.load_context()
            catalog = context.catalog
            assert catalog.load("params:data_processing.wiki_sentences.seed") == 43
            assert catalog.load("params:data_processing.declutr_spans.seed") == 43
            assert catalog.load("params:encoder") == "my/encoder"
            blocks = run_blocks(context.params)
            for run, block in blocks.items():
                assert catalog.load(f"params:{run}") == block, run
            assert {run: block["training"]["seed"] for run, block in blocks.items()} == {
                **{f"{method}.seed{k}": k for method in ("simcse", "declutr") for k in (42, 43, 44)},  # own seeds
                **{name: 43 for name in ("scd", "imsimcse", "clsr_stsb", "clsr_nli", "simcse_decorrelation",
                                         "scd_offdrop", "declutr_dcl")}}
    finally:
        project.close()


# --- the message -------------------------------------------------------------------------------
def test_a_misspelt_key_is_one_line_naming_where_and_the_closest_key(tmp_path, mirror_dir):
    scratch = ScratchProject(tmp_path, mirror_dir)
    scratch.close()  # only its files: the command runs in a process of its own
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=raw_data", "--params", "simcse.training.lerning_rate=1e-5")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: unknown parameter simcse.training.lerning_rate (set in --params): did you mean learning_rate?"]
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "data" / "01_raw").exists()  # nothing ran

    (tmp_path / "conf/local/parameters.yml").write_text("declutr:\n  method:\n    tempreture: 0.1\n")
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=raw_data")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        "Error: unknown parameter declutr.method.tempreture (set in conf/local/parameters.yml): "
        "did you mean temperature?"]


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"simcse": {"training": {"fooo": 1}}},
         "unknown parameter simcse.training.fooo (set in --params)\nsimcse.training takes: attention_backends, batch_size, "),
        ({"simcsee": {"kind": "simcse"}}, "unknown parameter simcsee (set in --params): did you mean simcse?"),
        ({"evaluation": {"batchsize": 3}},
         "unknown parameter evaluation.batchsize (set in --params): did you mean batch_size?"),
        ({"data_processing": {"declutr_spans": {"num_anchor": 3}}},
         "unknown parameter data_processing.declutr_spans.num_anchor (set in --params): did you mean num_anchors?"),
        ({"simcse": {"training": {"num_processes": 0}}},
         "simcse.training.num_processes = 0 (set in --params): must be an integer >= 1 or 'auto'"),
    ],
)
def test_python_callers_get_a_parameter_error_with_the_same_message(tmp_path, mirror_dir, overrides, line):
    project = ScratchProject(tmp_path, mirror_dir)
    try:
        with pytest.raises(ParameterError) as error:
            project.run(["raw_data"], params=overrides)
    finally:
        project.close()
    assert isinstance(error.value, ParameterCommandError)
    assert str(error.value).startswith(line)
    assert len(str(error.value).splitlines()) <= 2


# --- every documented command ------------------------------------------------------------------
DOCUMENTED = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md")),
              PROJECT_ROOT / "conf" / "README.md", *sorted((PROJECT_ROOT / "conf").glob("*/*.yml")),
              PROJECT_ROOT / "params.yaml", PROJECT_ROOT / "dvc.yaml"]


def documented_commands(program: str) -> list[tuple[str, str]]:
    """(file, command) for every ``kedro run`` / ``dvc exp run`` line of the docs and
    the parameter files' comments (continuation lines joined), placeholders excluded."""
    found = []
    for path in DOCUMENTED:
        text = re.sub(r"\\\n[#\s]*", " ", path.read_text(encoding="utf-8"))
        for match in re.finditer(rf"{program}\b[^\n`]*", text):
            command = match.group(0)
            if not re.search(r"<\w+>|\.\.\.|=N\b|key=value", command):  # placeholders
                found.append((str(path.relative_to(PROJECT_ROOT)), command))
    return found


def test_every_documented_params_option_gives_valid_parameters_with_its_values():
    commands = [(where, command, re.search(r"""--params[ =](?:"([^"]*)"|'([^']*)'|(\S+))""", command))
                for where, command in documented_commands("kedro run")]
    commands = [(where, command, text) for where, command, text in commands if text]
    assert len(commands) >= 10, commands
    for where, command, text in commands:
        runtime = parse_params_text(next(group for group in text.groups() if group is not None))
        env = re.search(r"--env[ =](\w+)", command)
        params = project_parameters(PROJECT_ROOT, env=env and env.group(1), runtime_params=runtime)
        validate_parameters(params)
        for key, value in flat(runtime).items():
            assert value_at(params, key) == value, (where, command, key)


def flat(tree: dict, prefix: str = "") -> dict:
    items = {}
    for key, value in tree.items():
        items |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return items


def test_every_documented_set_param_applies_with_dvc_and_gives_valid_parameters(tmp_path):
    """Each ``-S`` as ``dvc exp run`` applies it (DVC's grouping by file, its sweep
    expansion and its Hydra override of the file), then the parameters ``kedro run``
    would get: valid, and holding the value with its type (DVC writes 1e-5 as
    ``1e-05``, which must read back as a float)."""
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides, get_hydra_sweeps, to_hydra_overrides

    # The commands that set something (prose also names a bare `dvc exp run`).
    commands = [(where, command) for where, command in documented_commands("dvc exp run") if " -S" in command]
    assert len(commands) >= 5, commands
    runs = 0
    for where, command in commands:
        settings = [a or b for a, b in re.findall(r"""-S\s+(?:'([^']*)'|"([^"]*)")""", command)]
        assert settings, (where, command)
        for sweep in get_hydra_sweeps(to_path_overrides(settings)):
            root = tmp_path / f"run{runs}"
            root.mkdir()
            copy_configuration(root)
            for path, overrides in sweep.items():
                apply_overrides(root / path, overrides)
            params = project_parameters(root)
            validate_parameters(params)
            for override in to_hydra_overrides([o for overrides in sweep.values() for o in overrides]):
                assert value_at(params, override.key_or_group) == override.value(), (where, command, override)
            runs += 1
    assert runs >= len(commands)


# --- a list through the real command line -------------------------------------------------------
@pytest.mark.integration
def test_a_list_of_seeds_through_params_trains_one_run_per_seed(tmp_path, mirror_dir, tiny_bert_dir):
    """``kedro run --params "<method>.seeds=[1,2],..."``: a list, a mapping and plain
    values in one ``--params``, through the real command line."""
    scratch = ScratchProject(tmp_path, mirror_dir)
    scratch.close()
    params = (f"clsr_stsb.seeds=[1,2],encoder={tiny_bert_dir},"
              "clsr_stsb.training={epochs: 2, batch_size: 64, eval_every: 8, log_every: 4},"
              "evaluation.sts_bootstrap_resamples=0,leaderboard.bootstrap_resamples=20")
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=clsr_stsb", "--params", params)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    for seed in (1, 2):
        metadata = json.loads((tmp_path / f"data/06_models/clsr_stsb/seed{seed}/cse_metadata.json").read_text())
        assert metadata["seed"] == seed and metadata["base_encoder"] == str(tiny_bert_dir)
        assert metadata["training"]["epochs"] == 2 and metadata["training"]["batch_size"] == 64
    summary = json.loads((tmp_path / "data/08_reporting/metrics/clsr_stsb.json").read_text())
    assert summary["model"]["seeds"] == [1, 2]


# --- every value of the right type and range, before any node --------------------------------
def parsed_dataclasses() -> list[type]:
    """Every dataclass a parameter block is parsed into: this project's (configuration/blocks.py) and
    the library's that the blocks feed (training, evaluation, every method, view and
    objective term, STS on the Hub)."""
    import dataclasses

    from contrastive_sentence_embeddings.configuration import blocks as config
    from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig
    from contrastive_sentence_embeddings.data.spans import SpansParams
    from contrastive_sentence_embeddings.data.sts_hub import StsHubOptions
    from contrastive_sentence_embeddings.pipelines.parameter_blocks import DataProcessingConfig
    from contrastive_sentence_embeddings.evaluation.evaluator import EvaluationSettings
    from contrastive_sentence_embeddings.training.methods import METHODS
    from contrastive_sentence_embeddings.training.objective import TERMS, VIEWS
    from contrastive_sentence_embeddings.training.trainer import TrainingConfig

    own = [value for value in vars(config).values() if isinstance(value, type) and dataclasses.is_dataclass(value)
           and value.__module__ == config.__name__]  # (the ranges are strict.py's, not blocks)
    return [*own, DataProcessingConfig, SpansParams, RawDataConfig, TrainingConfig, EvaluationSettings, StsHubOptions,
            *METHODS.values(), *VIEWS.values(), *TERMS.values()]


def test_every_numeric_or_true_false_setting_declares_its_values():
    """A setting typed int, float or bool (alone, in a union or a list) has a declared
    range; its default is in it and a mapping (or a word, for a number) is not. No declaration names a field that
    does not exist."""
    import dataclasses

    from contrastive_sentence_embeddings.configuration.strict import Allowed, ranges_of

    classes = parsed_dataclasses()
    assert len(classes) >= 20, classes
    checked = 0
    for cls in classes:
        declared = ranges_of(cls)
        for item in dataclasses.fields(cls):
            if re.search(r"\b(int|float|bool)\b", str(item.type)):
                assert item.name in declared, f"{cls.__name__}.{item.name} ({item.type}) declares no range"
            if item.name in declared:
                default = item.default_factory() if item.default_factory is not dataclasses.MISSING else item.default
                if default is not dataclasses.MISSING:
                    assert declared[item.name].problem(default) is None, (cls.__name__, item.name, default)
                assert declared[item.name].problem({"forty": 40}) is not None, (cls.__name__, item.name)
                if isinstance(declared[item.name], Allowed):  # keep_label's labels may be words
                    assert declared[item.name].problem("forty") is not None, (cls.__name__, item.name)
                checked += 1
    assert checked >= 70, checked


@pytest.mark.parametrize(
    ("value", "problem"),
    [("forty", "must be an integer >= 1"), (0, "must be an integer >= 1"), (2.0, "must be an integer >= 1"),
     (True, "must be an integer >= 1"), (None, "must be an integer >= 1")],
)
def test_a_value_of_the_wrong_type_or_range_is_named_with_what_it_must_be(value, problem):
    from contrastive_sentence_embeddings.configuration.strict import ParameterValueError

    params = with_shared_values(project_parameters(PROJECT_ROOT))
    params["simcse"]["training"]["batch_size"] = value
    with pytest.raises(ParameterValueError) as error:
        validate_parameters(params)
    assert (error.value.key, error.value.problem) == ("simcse.training.batch_size", problem)
    assert explain_parameter_error(error.value, ["--params"]) == (
        f"simcse.training.batch_size = {value!r} (set in --params): {problem}".replace("None", "null")
        .replace("True", "true"))


def test_every_numeric_value_of_the_shipped_parameters_is_checked_where_it_is_given():
    """Each int, float or true/false leaf of the shipped parameters (conf/base and
    conf/paper), replaced by a word, stops ``validate_parameters`` with an error naming
    that leaf: no block is parsed without its values checked."""
    from contrastive_sentence_embeddings.configuration.layering import flatten
    from contrastive_sentence_embeddings.configuration.strict import ParameterValueError

    for env in (None, "paper"):
        params = project_parameters(PROJECT_ROOT, env=env)
        leaves = [key for key, value in flatten(params).items() if isinstance(value, (int, float))]
        assert len(leaves) >= 60, leaves
        for key in leaves:
            broken = json.loads(json.dumps(params))
            *parents, leaf = key.split(".")
            node = broken
            for part in parents:
                node = node[part]
            node[leaf] = "forty"
            with pytest.raises(ParameterValueError) as error:
                validate_parameters(broken)
            assert error.value.key == key, (env, key, str(error.value))


@pytest.mark.parametrize(
    ("source", "key"),
    [({"path": "my.txt", "min_words": 0}, "min_words"), ({"path": "my.txt", "max_chars": "many"}, "max_chars"),
     ({"path": "my.txt", "max_rows": -1}, "max_rows")],
)
def test_own_data_values_are_checked_too(source, key):
    from contrastive_sentence_embeddings.configuration.strict import ParameterValueError

    params = project_parameters(PROJECT_ROOT, runtime_params={"simcse": {"data": {"sentences": source}}})
    with pytest.raises(ParameterValueError) as error:
        validate_parameters(params)
    assert error.value.key == f"simcse.data.sentences.{key}"


@pytest.mark.parametrize(
    ("overrides", "line"),
    [
        ({"simcse": {"training": {"batch_size": 0}}},
         "simcse.training.batch_size = 0 (set in --params): must be an integer >= 1"),
        ({"simcse": {"training": {"max_steps": -5}}},
         "simcse.training.max_steps = -5 (set in --params): must be an integer >= 1 or null"),
        ({"seed": "forty"}, "seed = 'forty' (set in --params): must be an integer in [0, 4294967295]"),
        ({"scd": {"training": {"learning_rate": -0.1}}},
         "scd.training.learning_rate = -0.1 (set in --params): must be a number > 0"),
        ({"declutr": {"method": {"mlm_probability": 1.5}}},
         "declutr.method.mlm_probability = 1.5 (set in --params): must be a number in (0, 1)"),
        ({"evaluation": {"k_folds": 1}}, "evaluation.k_folds = 1 (set in --params): must be an integer >= 2"),
        ({"simcse": {"evaluation": {"batch_size": 0}}},
         "simcse.evaluation.batch_size = 0 (set in --params): must be an integer >= 1"),
        ({"data_processing": {"wiki_sentences": {"n_sentences": 0}}},
         "data_processing.wiki_sentences.n_sentences = 0 (set in --params): must be an integer >= 1 or null"),
        ({"data_processing": {"declutr_spans": {"min_length": "long"}}},
         "data_processing.declutr_spans.min_length = 'long' (set in --params): must be an integer >= 1"),
        ({"leaderboard": {"alpha": 0}}, "leaderboard.alpha = 0 (set in --params): must be a number in (0, 1)"),
        ({"clsr_stsb": {"max_examples": 0}},
         "clsr_stsb.max_examples = 0 (set in --params): must be an integer >= 1 or null"),
    ],
)
def test_an_out_of_range_value_stops_the_session_before_any_node(tmp_path, mirror_dir, overrides, line):
    project = ScratchProject(tmp_path, mirror_dir)
    try:
        with pytest.raises(ParameterCommandError) as error:
            project.run(["raw_data"], params=overrides)
    finally:
        project.close()
    assert str(error.value) == line
    assert not (tmp_path / "data" / "01_raw").exists()  # nothing ran


def test_a_bad_value_is_attributed_to_where_it_was_set(tmp_path, mirror_dir):
    """Through the real command line: ``--params`` when it gave the value; the conf
    file when it did, even when ``--params`` sets another key of the same block."""
    scratch = ScratchProject(tmp_path, mirror_dir)
    scratch.close()
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=raw_data", "--params", "simcse.training.batch_size=0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "Error: simcse.training.batch_size = 0 (set in --params): must be an integer >= 1"]
    assert not (tmp_path / "data" / "01_raw").exists()

    (tmp_path / "conf/local/parameters.yml").write_text("simcse:\n  training:\n    max_steps: -5\n")
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=raw_data", "--params", "simcse.training.batch_size=8")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        "Error: simcse.training.max_steps = -5 (set in conf/local/parameters.yml): must be an integer >= 1 or null"]
    assert "Traceback" not in result.stdout + result.stderr


def test_an_objective_term_s_bad_setting_says_where_its_list_was_set(tmp_path, mirror_dir):
    """A term's key is inside a list (``simcse_decorrelation.objective[0].weight``): the
    message names the file or ``--params`` that gave the list, like every other key."""
    ScratchProject(tmp_path, mirror_dir).close()
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=raw_data", "--params",
                   "simcse_decorrelation.objective=[{term: decorrelation, weight: -1}]")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        "Error: simcse_decorrelation.objective[0].weight = -1 (set in --params): must be a number >= 0"]
    (tmp_path / "conf/local/parameters.yml").write_text(
        "simcse_decorrelation:\n  objective:\n    - {term: decorrelation, weight: 0.1, off_diagonal_weigt: 3}\n")
    result = kedro(tmp_path, mirror_dir, "run", "--pipelines=raw_data")
    assert result.returncode == 1 and result.stderr.strip().splitlines() == [
        "Error: unknown parameter simcse_decorrelation.objective[0].off_diagonal_weigt (set in "
        "conf/local/parameters.yml): did you mean off_diagonal_weight?"]


# --- a data set name the run cannot read ---------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("wiki_sentence", "simcse.data.sentences = 'wiki_sentence' (set in --params): taken as a catalog data set "
                          "name (a value without '.' or '/' is one), but the catalog has no data set "
                          "'wiki_sentence': did you mean wiki_sentences? To read a file of your own, give its path "
                          "with an extension (.txt, .csv, .tsv, .parquet, .jsonl), or its format: "
                          "simcse.data.sentences.path=wiki_sentence,simcse.data.sentences.format=txt"),
        ("corpus", "simcse.data.sentences = 'corpus' (set in --params): taken as a catalog data set name (a value "
                   "without '.' or '/' is one), but the catalog has no data set 'corpus'. There is a file 'corpus' in "
                   "the project: to read it, give its path with an extension (.txt, .csv, .tsv, .parquet, .jsonl), "
                   "or its format: simcse.data.sentences.path=corpus,simcse.data.sentences.format=txt"),
    ],
)
def test_a_data_set_name_not_in_the_catalog_is_named_before_any_node(tmp_path, mirror_dir, value, expected):
    project = ScratchProject(tmp_path, mirror_dir)
    (tmp_path / "corpus").write_text("a sentence of my own\n")
    try:
        with pytest.raises(ParameterCommandError) as error:
            project.run(["simcse"], params={"simcse": {"data": {"sentences": value}}})
    finally:
        project.close()
    assert str(error.value).startswith(expected), str(error.value)
    assert len(str(error.value).splitlines()) == 1
    assert not (tmp_path / "data" / "01_raw").exists()  # nothing ran


def test_params_yaml_is_named_where_it_gives_a_value_not_where_it_lists_a_null(tmp_path):
    from contrastive_sentence_embeddings.configuration.layering import where_set

    conf = [PROJECT_ROOT / "conf" / "base"]
    key = "simcse.training.max_steps"
    shipped = yaml.safe_load((PROJECT_ROOT / "params.yaml").read_text())
    assert value_at(shipped, key) is None  # the shipped overlay lists the key, as null
    assert where_set(key, {}, shipped, "params.yaml", conf) == [str(PROJECT_ROOT / "conf/base/parameters_simcse.yml")]
    shipped["simcse"]["training"]["max_steps"] = -5
    assert where_set(key, {}, shipped, "params.yaml", conf)[0] == "params.yaml"
    assert where_set(key, {"simcse": {"training": {"max_steps": 3}}}, shipped, "params.yaml", conf)[0] == "--params"
    assert where_set("simcse.training.lerning_rate", {}, {"simcse": {"training": {"lerning_rate": None}}},
                     "params.yaml", conf) == ["params.yaml"]  # a key only the overlay names


def test_a_block_missing_from_a_queued_experiment_s_copy_says_to_commit_it(tmp_path, monkeypatch):
    """DVC's queue runs an experiment in a copy of the files git tracks: a method block
    added in an uncommitted parameter file is missing there, and the error says so,
    naming the file and the command, instead of only that no such block exists."""
    from contrastive_sentence_embeddings.configuration.blocks import method_names

    workspace, copy = tmp_path / "workspace", tmp_path / "workspace" / ".dvc" / "tmp" / "exps" / "run1"
    (workspace / "conf" / "base").mkdir(parents=True)
    (copy / "conf" / "base").mkdir(parents=True)
    (workspace / "conf" / "base" / "parameters_simcse_decorrelation.yml").write_text(
        "simcse_decorrelation:\n  kind: simcse\n")
    params = {"methods": ["simcse", "simcse_decorrelation"], "simcse": {"kind": "simcse"}}
    monkeypatch.setenv("DVC_ROOT", str(workspace))
    monkeypatch.chdir(copy)
    with pytest.raises(ParameterError) as caught:
        method_names(params)
    message = str(caught.value)
    assert message.startswith("methods lists simcse_decorrelation but no parameter block of that name exists; "
                              "this DVC experiment runs in a copy of the files git tracks")
    assert "conf/base/parameters_simcse_decorrelation.yml in your workspace" in message
    assert "git add conf/base/parameters_simcse_decorrelation.yml && git commit" in message
    monkeypatch.chdir(workspace)  # in the workspace itself: the plain message
    with pytest.raises(ParameterError, match=r"exists$"):
        method_names(params)
