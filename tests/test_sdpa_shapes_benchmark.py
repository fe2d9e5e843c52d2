"""``benchmarks/sdpa_shapes.py``: attention's first call on a new shape against its
second, with PyTorch's choice of SDPA backend, without cuDNN's, and with cuDNN's asked
not to recompile per length (device_check.sh part 1 runs it on a lent GPU). Here in its
CPU mode: the shapes, the settings, the child process and the report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "sdpa_shapes.py"


def test_bucket_shapes_are_distinct_within_the_token_budget_and_avoid_those_seen():
    sdpa = load_script(SCRIPT)
    first = sdpa.bucket_shapes(30, seed=0)
    assert len(set(first)) == 30
    assert all(34 <= width <= 514 and 1 <= rows and rows * width <= sdpa.BUDGET for rows, width in first)
    assert not set(sdpa.bucket_shapes(30, seed=0, exclude=set(first))) & set(first)


def test_each_setting_times_a_first_and_a_repeated_call_on_shapes_of_its_own(tmp_path):
    output = tmp_path / "sdpa.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--shapes", "2", "--output", str(output)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text(encoding="utf-8"))
    assert [row["setting"] for row in report["rows"]] == ["default", "no-cudnn", "cudnn-avoid-recompile"]
    assert report["dtype"] == "float32" and report["git_commit"]
    assert "TORCH_CUDNN_SDPA_AVOID_RECOMPILE" not in report["environment"]  # the variable is the child's alone
    assert report["rows"][2]["environment"] == {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}
    seen = [tuple(shape) for row in report["rows"] for shape in row["shapes"]]
    assert len(seen) == len(set(seen)) == 6  # no setting finds another's shapes
    for row in report["rows"]:
        assert row["attention_kernel"] == "_scaled_dot_product_flash_attention_for_cpu"  # no cuDNN on a CPU
        assert len(row["first_call_ms"]) == len(row["repeat_call_ms"]) == 2
        assert all(ms > 0 for ms in row["first_call_ms"] + row["repeat_call_ms"])
        assert abs(row["first_calls_ms_total"] - sum(row["first_call_ms"])) < 0.1
    assert "no-cudnn:" in done.stdout


def test_a_setting_run_in_a_child_process_can_come_first(tmp_path):
    output = tmp_path / "sdpa.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--shapes", "1", "--settings",
                           "cudnn-avoid-recompile", "--output", str(output)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cudnn-avoid-recompile: " in done.stdout and "1 shapes" in done.stdout
    [row] = json.loads(output.read_text(encoding="utf-8"))["rows"]
    assert row["environment"] == {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"} and len(row["shapes"]) == 1


def test_an_unknown_setting_is_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--settings", "default,cudnn-only"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown ['cudnn-only']" in done.stderr
