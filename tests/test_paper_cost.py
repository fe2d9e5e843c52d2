"""``benchmarks/paper_cost.py``: what a ``conf/paper`` run costs, from a measured
throughput run (docs/record/gpu.md quotes its tables). Checked by hand for SimCSE, for the
variant row it can cost instead (CUDA graphs), and by regenerating every committed cost
file from the command it records, so a change to ``conf/paper`` or to the script that
would change the docs' figures fails here."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "paper_cost.py"
RESULTS = ROOT / "benchmarks" / "results"
RUN4 = RESULTS / "training_throughput_cuda_h100_run4.json"


def paper_cost(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def rows_of(path: Path) -> dict[str, dict]:
    return {row["method"]: row for row in json.loads(path.read_text(encoding="utf-8"))["rows"]}


def test_simcse_costs_its_paper_steps_and_dev_evaluations(tmp_path):
    output = tmp_path / "cost.json"
    done = paper_cost(str(RUN4.relative_to(ROOT)), "--output", str(output))
    assert done.returncode == 0, done.stderr
    measured = {row["method"]: row for row in json.loads(RUN4.read_text(encoding="utf-8"))["rows"]}["simcse"]
    simcse = rows_of(output)["simcse"]
    # the paper: 1M wiki sentences, 1 epoch, batch 64, STS-B dev every 250 steps (+ at the start and the end)
    steps, evaluations = 1_000_000 // 64, 1_000_000 // 64 // 250 + 2
    assert (simcse["steps"], simcse["dev_evaluations"]) == (15_625, 64) == (steps, evaluations)
    seconds = steps * measured["step_ms"] / 1000 + evaluations * measured["dev_eval_seconds"]
    assert simcse["hours_one_gpu"] == round(seconds / 3600, 2)
    assert simcse["hours_8_gpus_same_per_gpu_batch"] == round(
        (steps * measured["step_ms"] / 1000 / 8 + evaluations * measured["dev_eval_seconds"]) / 3600, 2)
    # methods the run did not measure are said to be missing, not costed from nothing
    assert rows_of(output)["scd"] == {"method": "scd", "missing": f"no measured row in {RUN4.name}"}
    recorded = json.loads(output.read_text(encoding="utf-8"))["command"]
    assert recorded.startswith(f"python benchmarks/paper_cost.py {RUN4.relative_to(ROOT)} --output <elsewhere>/")


def test_simcse_can_be_costed_from_an_ablation_row_with_the_default_rows_evaluation(tmp_path):
    output = tmp_path / "cost.json"
    done = paper_cost(str(RUN4), "--simcse-variant", "cuda-graphs", "--output", str(output))
    assert done.returncode == 0, done.stderr
    throughput = json.loads(RUN4.read_text(encoding="utf-8"))
    graphs = {row["variant_key"]: row for row in throughput["ablation"]}["cuda-graphs"]
    default = {row["method"]: row for row in throughput["rows"]}["simcse"]
    simcse = rows_of(output)["simcse"]
    assert simcse["step_ms"] == graphs["step_ms"] and simcse["peak_memory_gib"] == graphs["peak_memory_gib"]
    assert simcse["training_settings"] == {"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True}
    assert simcse["dev_eval_seconds"] == round(default["dev_eval_seconds"], 3)  # scored uncompiled
    assert simcse["measured_in"] == f"{RUN4.name}, ablation cuda-graphs"
    assert simcse["hours_one_gpu"] < rows_of(RESULTS / "paper_cost_nvidia_h100_run4.json")["simcse"]["hours_one_gpu"]

    done = paper_cost(str(RUN4), "--simcse-variant", "cuda-grpahs", "--output", str(output))
    assert done.returncode == 2
    assert "cuda-grpahs" in done.stderr and RUN4.name in done.stderr and "cuda-graphs" in done.stderr


def test_a_declutr_variant_is_not_taken_for_simcse(tmp_path):
    throughput = json.loads(RUN4.read_text(encoding="utf-8"))
    declutr = {row["method"]: row for row in throughput["rows"]}["declutr"]
    throughput["ablation"].append({**declutr, "variant": "DeCLUTR, bucket widths a multiple of 64",
                                   "variant_key": "declutr-pad-64"})
    results = tmp_path / "with_declutr_variants.json"
    results.write_text(json.dumps(throughput), encoding="utf-8")
    done = paper_cost(str(results), "--simcse-variant", "declutr-pad-64", "--output", str(tmp_path / "cost.json"))
    assert done.returncode == 2 and "declutr-pad-64" in done.stderr and "cuda-graphs" in done.stderr


RUN5 = RESULTS / "training_throughput_cuda_h100_run5.json"
RUN5_DECLUTR = RESULTS / "declutr_ablation_cuda_h100_run5.json"


def test_declutr_can_be_costed_from_an_ablation_row_of_its_own_file(tmp_path):
    """Run 5's DeCLUTR without cuDNN's attention (the settings its blocks train with
    since) is an ablation row of the DeCLUTR file: 495,243 documents / 16 a step."""
    output = tmp_path / "cost.json"
    done = paper_cost(str(RUN5), "--declutr", str(RUN5_DECLUTR), "--declutr-variant",
                      "declutr-pad-1-no-cudnn-attention", "--output", str(output))
    assert done.returncode == 0, done.stderr
    measured = {row["variant_key"]: row for row in json.loads(RUN5_DECLUTR.read_text(encoding="utf-8"))["ablation"]}[
        "declutr-pad-1-no-cudnn-attention"]
    declutr = rows_of(output)["declutr"]
    assert declutr["steps"] == 495_243 // 16 and declutr["step_ms"] == measured["step_ms"]
    assert declutr["attention_backends"] == ["flash", "efficient", "math"]
    assert declutr["method_settings"] == {"pad_to_multiple_of": 1}
    assert declutr["measured_in"] == f"{RUN5_DECLUTR.name}, ablation declutr-pad-1-no-cudnn-attention"
    assert rows_of(output)["simcse"]["measured_in"] == RUN5.name  # SimCSE's default row, untouched
    # a SimCSE row is not taken for DeCLUTR, and a wrong key names the file and the keys it has
    done = paper_cost(str(RUN5), "--declutr-variant", "cuda-graphs", "--output", str(output))
    assert done.returncode == 2 and RUN5.name in done.stderr and "it has: none" in done.stderr


@pytest.mark.parametrize("committed", sorted(RESULTS.glob("paper_cost_*.json")), ids=lambda path: path.name)
def test_every_committed_cost_file_is_what_its_command_gives_now(committed, tmp_path):
    recorded = json.loads(committed.read_text(encoding="utf-8"))
    arguments = shlex.split(recorded["command"])
    assert arguments[:2] == ["python", "benchmarks/paper_cost.py"]
    arguments = arguments[2:]
    if "--output" in arguments:  # written elsewhere this time
        at = arguments.index("--output")
        del arguments[at:at + 2]
    regenerated = tmp_path / committed.name
    arguments += ["--output", str(regenerated)]
    done = paper_cost(*arguments)
    assert done.returncode == 0, done.stderr
    assert json.loads(regenerated.read_text(encoding="utf-8"))["rows"] == recorded["rows"]
