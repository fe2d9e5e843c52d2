"""What a result records about what produced it: hashes of its parameters, code and
data, the git state, and which seed runs may be averaged together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from contrastive_sentence_embeddings.records import provenance
from contrastive_sentence_embeddings.configuration.blocks import run_blocks
from tests.helpers import PROJECT_ROOT

BLOCK = {"kind": "simcse", "pooling": "cls_before_pooler", "seeds": [42, 43, 44],
         "training": {"max_steps": 120, "seed": 7, "checkpoint_dir": "data/07_model_output/checkpoints/simcse"}}


def test_every_run_block_is_the_block_its_training_node_receives():
    blocks = run_blocks({"encoder": "enc", "methods": ["simcse", "scd"], "simcse": BLOCK,
                         "scd": {"kind": "scd", "pooling": "cls_before_pooler", "training": {"seed": 1}}})
    assert sorted(blocks) == ["scd", "simcse.seed42", "simcse.seed43", "simcse.seed44"]
    assert blocks["scd"]["training"] == {"seed": 1}
    assert blocks["simcse.seed43"]["training"]["seed"] == 43
    assert blocks["simcse.seed43"]["training"]["checkpoint_dir"] == "data/07_model_output/checkpoints/simcse/seed43"


def test_the_parameter_hash_follows_how_a_run_trains_and_nothing_else():
    blocks = run_blocks({"methods": ["simcse"], "simcse": BLOCK})
    seed42 = blocks["simcse.seed42"]
    # The list of seeds and the checkpoint folder do not change how seed 42's run trains.
    fewer_seeds = run_blocks({"methods": ["simcse"], "simcse": {**BLOCK, "seeds": [42, 43]}})["simcse.seed42"]
    assert provenance.params_hash(fewer_seeds) == provenance.params_hash(seed42)
    moved = {**seed42, "training": {**seed42["training"], "checkpoint_dir": "elsewhere"}}
    assert provenance.params_hash(moved) == provenance.params_hash(seed42)
    # Key order is not content.
    assert provenance.params_hash(dict(reversed(list(seed42.items())))) == provenance.params_hash(seed42)
    shorter = {**seed42, "training": {**seed42["training"], "max_steps": 4}}
    assert provenance.params_hash(shorter) != provenance.params_hash(seed42)
    # Two seeds of one configuration: different runs, one configuration.
    seed43 = blocks["simcse.seed43"]
    assert provenance.params_hash(seed43) != provenance.params_hash(seed42)
    assert provenance.config_hash(seed43) == provenance.config_hash(seed42)
    assert provenance.config_hash(shorter) != provenance.config_hash(seed42)
    assert provenance.parameter_changes(seed42, shorter) == ["training.max_steps 120 -> 4"]
    assert provenance.parameter_changes({"a": 1}, {"b": 2}) == ["a 1 -> unset", "b unset -> 2"]
    assert len(provenance.short(provenance.params_hash(seed42))) == 12


def test_settings_that_cannot_change_the_weights_are_not_in_the_parameter_hashes():
    seed42 = run_blocks({"methods": ["simcse"], "simcse": BLOCK})["simcse.seed42"]
    # How the weights are scored (compared as evaluation settings), how often the loss is
    # logged and whether a run resumes change neither hash.
    for changed in ({**seed42, "evaluation": {"batch_size": 8}},
                    {**seed42, "training": {**seed42["training"], "log_every": 1}},
                    {**seed42, "training": {**seed42["training"], "resume": False}}):
        assert provenance.params_hash(changed) == provenance.params_hash(seed42)
        assert provenance.config_hash(changed) == provenance.config_hash(seed42)
    # A record whose stored hash was computed with the evaluation block in it compares by its parameters.
    old_record = {"parameters": {**seed42, "evaluation": {"batch_size": 8}},
                  "params_hash": provenance.sha256_of({**seed42, "evaluation": {"batch_size": 8}})}
    assert provenance.recorded_params_hash(old_record) == provenance.params_hash(seed42)
    assert provenance.recorded_params_hash({"params_hash": "abc"}) == "abc"


def test_the_source_hash_follows_the_package_files_not_bytecode(tmp_path):
    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "results.yml").write_text("k: v\n")
    before = provenance.source_hash(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0compiled")
    assert provenance.source_hash(package) == before
    (package / "sub" / "results.yml").write_text("k: w\n")
    assert provenance.source_hash(package) != before
    # The installed package's own hash is stable from one call to the next.
    assert provenance.source_hash() == provenance.source_hash()


def test_git_state_is_unknown_outside_a_repository_and_dirty_only_for_code(tmp_path):
    assert provenance.git_state(tmp_path) == {"commit": "unknown", "dirty": None}

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("x = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "metrics.json").write_text("{}\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    clean = provenance.git_state(tmp_path)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (tmp_path / "data" / "metrics.json").write_text('{"sts_avg": 1}\n')  # a run rewrites its outputs
    assert provenance.git_state(tmp_path)["dirty"] is False
    (tmp_path / "src" / "m.py").write_text("x = 2\n")
    assert provenance.git_state(tmp_path)["dirty"] is True


def test_a_benchmark_records_the_commit_dirty_when_tracked_files_changed_or_the_one_it_is_told(tmp_path, monkeypatch):
    monkeypatch.delenv(provenance.CODE_VERSION_ENV_VAR, raising=False)
    assert provenance.results_commit(tmp_path) == "unknown (no git history here; set CSE_CODE_VERSION)"

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    (tmp_path / "bench.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    head = git("rev-parse", "HEAD").strip()
    assert provenance.results_commit(tmp_path) == head
    (tmp_path / "results.json").write_text("{}\n")  # its own untracked output: still that commit's figures
    assert provenance.results_commit(tmp_path) == head
    (tmp_path / "bench.py").write_text("x = 2\n")  # any tracked file changed: maybe not that commit's
    assert provenance.results_commit(tmp_path) == head + "+dirty"
    # a copy without its history (the GPU machine) is told which commit it was copied from
    monkeypatch.setenv(provenance.CODE_VERSION_ENV_VAR, "0fafb97")
    assert provenance.results_commit(tmp_path / "elsewhere") == "0fafb97"


def test_data_fingerprints_come_from_the_content_or_the_data_set_state():
    import datasets

    table = pd.DataFrame({"sentence": ["a b c", "d e f"]})
    same = provenance.data_fingerprint(table.copy(), "wiki_sentences")
    assert same == provenance.data_fingerprint(table, "wiki_sentences")
    assert same["rows"] == 2 and same["dataset"] == "wiki_sentences"
    assert provenance.data_fingerprint(pd.DataFrame({"sentence": ["a b c", "d e g"]}))["fingerprint"] != \
        same["fingerprint"]
    dataset = datasets.Dataset.from_pandas(table, preserve_index=False)
    recorded = provenance.data_fingerprint(dataset, "wiki_sentences")
    assert recorded["fingerprint"] == dataset._fingerprint and recorded["rows"] == 2


# --- seed runs of one configuration ----------------------------------------------------------
def seed_run(seed: int, max_steps: int, evaluated_at: str, sts_avg: float, source: str = "code-1") -> dict:
    block = run_blocks({"methods": ["simcse"], "simcse": {**BLOCK, "training": {**BLOCK["training"],
                                                                               "max_steps": max_steps}}})[
        f"simcse.seed{seed}"]
    return {"model": {"name": f"simcse.seed{seed}", "method": "simcse", "seed": seed}, "sts_avg": sts_avg,
            "evaluated_at": evaluated_at,
            "provenance": {"parameters": block, "params_hash": provenance.params_hash(block),
                           "config_hash": provenance.config_hash(block), "seed": seed, "encoder": "enc",
                           "training": {"code": {"source_hash": source},
                                        "data": {"sentences": {"fingerprint": "wiki-1"}}}}}


def test_only_runs_of_the_newest_runs_configuration_are_averaged():
    """The issue's case: this checkout's 2 seeds of a 4-step run beside the repository's
    seed 44 of a 120-step run (its committed record, which has no provenance)."""
    committed = json.loads((PROJECT_ROOT / "data/08_reporting/metrics/simcse.seed44.json").read_text())
    assert committed["training"]["steps"] == 120
    # The record as written before records carried provenance (today's committed one has it).
    committed = {key: value for key, value in committed.items() if key != "provenance"}
    ours = [seed_run(42, 4, "2027-01-01T10:00:00+00:00", 74.2), seed_run(43, 4, "2027-01-01T10:05:00+00:00", 74.4)]
    kept, left_out = provenance.runs_of_one_configuration([*ours, committed])
    assert kept == ours
    assert list(left_out) == ["simcse.seed44"] and "no provenance" in left_out["simcse.seed44"]

    # A seed 44 of the 120-step configuration, with provenance: left out for its parameters.
    old = seed_run(44, 120, "2026-11-23T13:20:48+00:00", 76.68)
    kept, left_out = provenance.runs_of_one_configuration([*ours, old])
    assert kept == ours
    assert left_out == {"simcse.seed44": "other parameters: training.max_steps 120 (kept runs: 4)"}
    # Same parameters but other code: left out too.
    other_code = seed_run(44, 4, "2026-12-01T00:00:00+00:00", 74.0, source="code-0")
    assert "other code" in provenance.runs_of_one_configuration([*ours, other_code])[1]["simcse.seed44"]
    # All of one configuration: all kept.
    same = seed_run(44, 4, "2026-12-01T00:00:00+00:00", 74.0)
    assert provenance.runs_of_one_configuration([*ours, same]) == ([*ours, same], {})


def scored_with(record: dict, settings: dict, overrides: dict | None = None) -> dict:
    """``record`` scored with evaluation ``settings``, its block holding the ``overrides``."""
    trained = dict(record["provenance"])
    if overrides is not None:
        trained["parameters"] = {**trained["parameters"], "evaluation": overrides}
    return {**record, "provenance": {**trained, "evaluation": {"settings": settings,
                                                               "settings_hash": provenance.sha256_of(settings)}}}


def test_seeds_scored_with_other_settings_are_not_averaged_but_a_batch_size_override_splits_nothing():
    ours = [scored_with(seed_run(42, 4, "2027-01-01T10:00:00+00:00", 74.2), {"k_folds": 5}),
            scored_with(seed_run(43, 4, "2027-01-01T10:05:00+00:00", 74.4), {"k_folds": 5})]
    # Seed 44's block asked for another batch size (an execution-only setting, not in the record's settings).
    batch = scored_with(seed_run(44, 4, "2026-12-01T00:00:00+00:00", 74.0), {"k_folds": 5}, {"batch_size": 8})
    assert provenance.runs_of_one_configuration([*ours, batch]) == ([*ours, batch], {})
    folds = scored_with(seed_run(44, 4, "2026-12-01T00:00:00+00:00", 74.0), {"k_folds": 10}, {"k_folds": 10})
    kept, left_out = provenance.runs_of_one_configuration([*ours, folds])
    assert kept == ours
    assert left_out == {"simcse.seed44": "scored with other evaluation settings: k_folds 10 (kept runs: 5)"}


CPUINFO_TWO_PROCESSORS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse2 avx2 avx512f amx_tile amx_bf16
vmx flags\t: vnmi ept
bugs\t\t: spectre_v1

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse2 avx2
"""


def test_the_cpu_is_named_with_its_wide_units():
    from contrastive_sentence_embeddings.records.provenance import cpu_description, cpu_fields, cpu_flags

    # The first processor's fields decide; "vmx flags" is another field, not the flags.
    xeon = cpu_fields(CPUINFO_TWO_PROCESSORS)
    assert cpu_description(xeon) == "Intel(R) Xeon(R) Platinum 8488C (AVX-512, AMX)"
    assert cpu_flags(xeon) == {"fpu", "sse2", "avx2", "avx512f", "amx_tile", "amx_bf16"}
    epyc = cpu_fields("model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n")
    assert cpu_description(epyc) == "AMD EPYC (no AVX-512, no AMX)"
    assert cpu_description(cpu_fields("model name\t: AMD EPYC 9R14\nflags\t: avx2 avx512f\n")) == "AMD EPYC 9R14 (AVX-512)"

    # This machine, from one reading of /proc/cpuinfo. The units are read from the
    # parentheses as a list: "no AVX-512, no AMX" contains both names as substrings.
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        assert cpu_description()
        return
    text = cpuinfo.read_text(encoding="utf-8")
    fields = cpu_fields(text)
    model = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
    flags = next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags"))
    described = cpu_description(fields)
    assert described.startswith(model)
    units = described[len(model):].strip().strip("()").split(", ")
    assert ("AVX-512" in units) == ("avx512f" in flags) and ("AMX" in units) == ("amx_tile" in flags)
    assert (units == ["no AVX-512", "no AMX"]) == ("avx512f" not in flags and "amx_tile" not in flags)
    assert cpu_flags(fields) == set(flags)


def test_the_environment_variables_that_tune_speed_or_memory_are_recorded():
    from contrastive_sentence_embeddings.records.provenance import tuning_environment

    environ = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "8", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1",
               "OMP_NUM_THREADS": "2", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
               "TORCHINDUCTOR_CACHE_DIR": "c", "HOME": "/root", "PATH": "/usr/bin", "HF_TOKEN": "secret",
               "OMP_NUM_THREADS_X": "left out: OMP_ names are listed whole, not matched as a prefix",
               # the instruction-set cap (--instruction-set avx2 of the CPU side-by-side)
               "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    assert tuning_environment(environ) == {
        "ATEN_CPU_CAPABILITY": "avx2", "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "8",
        "OMP_NUM_THREADS": "2", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TORCHINDUCTOR_CACHE_DIR": "c"}
    assert list(tuning_environment(environ)) == sorted(tuning_environment(environ))
    # a folder set on purpose is a setting, where the machine keeps it is not
    assert tuning_environment({"TORCHINDUCTOR_CACHE_DIR": "/home/someone/inductor"}) == {
        "TORCHINDUCTOR_CACHE_DIR": "<elsewhere>/inductor"}


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="reads Linux's /proc/self/environ")
def test_a_child_starts_with_this_processs_starting_environment_and_its_own_variables(monkeypatch):
    """Run 5's child for TORCH_CUDNN_SDPA_AVOID_RECOMPILE inherited the folder TorchInductor
    had set in the parent and recorded it as its own: a child gets the parent's variables
    with each tuning variable as the parent started with it, plus the setting it measures."""
    from contrastive_sentence_embeddings.records.provenance import child_environment, starting_environment

    started = starting_environment()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/set_by_a_library_in_the_parent")
    monkeypatch.setenv("CSE_SET_BY_THIS_PROCESS", "1")  # not a tuning variable: the child needs it as set
    monkeypatch.setenv("OMP_NUM_THREADS", started.get("OMP_NUM_THREADS", "") + "7")  # changed since the start
    child = child_environment({"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"})
    assert child["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"] == "1" and child["CSE_SET_BY_THIS_PROCESS"] == "1"
    assert child.get("TORCHINDUCTOR_CACHE_DIR") == started.get("TORCHINDUCTOR_CACHE_DIR")  # as at the start
    assert child.get("OMP_NUM_THREADS") == started.get("OMP_NUM_THREADS")


@pytest.mark.skipif(not Path("/proc/self/environ").is_file(), reason="reads Linux's /proc/self/environ")
def test_the_recorded_environment_is_the_one_the_process_started_with():
    # scikit-learn sets its KMP_ pair at import, TorchInductor its cache folder when it
    # first compiles: a library's choice, not the run's setting, so they are not recorded.
    probe = ("import json, os\n"
             "os.environ['KMP_INIT_AT_FORK'] = 'FALSE'\n"
             "os.environ['TORCHINDUCTOR_CACHE_DIR'] = '/tmp/set_by_a_library'\n"
             "from contrastive_sentence_embeddings.records.provenance import tuning_environment\n"
             "print(json.dumps(tuning_environment()))\n")
    environ = {name: value for name, value in os.environ.items() if not name.startswith(("KMP_", "TORCHINDUCTOR_"))}
    environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = "128"
    printed = subprocess.run([sys.executable, "-c", probe], env=environ, capture_output=True, text=True, check=True)
    recorded = json.loads(printed.stdout)
    assert recorded["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "128"
    assert "KMP_INIT_AT_FORK" not in recorded and "TORCHINDUCTOR_CACHE_DIR" not in recorded


def test_a_status_reason_names_every_changed_key():
    """A run trained with --params (own data, a shorter run, another pooling) is stale
    at the next build, and its reason names each difference, not the first three."""
    before = {"data": {"sentences": "my.txt"}, "pooling": "mean",
              "training": {"max_steps": 20, "learning_rate": 1e-4, "batch_size": 32}}
    after = {"pooling": "cls_before_pooler", "training": {"max_steps": 120, "learning_rate": 3e-5, "batch_size": 64}}
    assert provenance.parameter_changes(before, after) == [
        'data {"sentences":"my.txt"} -> unset', 'pooling "mean" -> "cls_before_pooler"', "training.batch_size 32 -> 64",
        "training.learning_rate 0.0001 -> 3e-05", "training.max_steps 20 -> 120"]
    assert provenance.parameter_changes(before, after, limit=2)[-1] == "..."
