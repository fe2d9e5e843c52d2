"""``benchmarks/declutr_shapes.py``: the shapes of DeCLUTR's passes at the paper's
settings for each ``pad_to_multiple_of`` and ``bucket_tokens`` (docs/record/results.md quotes
its table). Run on the mirror's WikiText articles, as the committed results were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "declutr_shapes.py"


def test_new_shapes_are_counted_after_the_warm_up_and_padding_over_every_pass():
    shapes = load_script(SCRIPT)
    # step 0: (8, 100) with 700 real tokens, (4, 200) with 600; step 1: (8, 100) again, (8, 96) new
    steps = [[(8, 100, 700), (4, 200, 600)], [(8, 100, 750), (8, 96, 700)]]
    summary = shapes.summarise(steps, warmup=1)
    assert summary["new_shapes_per_step_after_warmup"] == 1.0
    assert summary["share_of_passes_with_a_new_shape"] == 0.5
    assert summary["distinct_shapes"] == 3 and summary["passes_per_step"] == 2.0
    padded, real = 800 + 800 + 800 + 768, 700 + 600 + 750 + 700
    assert summary["padding_share"] == round(1 - real / padded, 4)


def test_rounding_widths_cuts_new_shapes_and_keeps_the_real_tokens(tmp_path, mirror_dir):
    output = tmp_path / "shapes.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps", "12", "--warmup", "4", "--multiples", "1,64",
                           "--bucket-tokens", "8192,32768", "--mirror", str(mirror_dir), "--output", str(output)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(output.read_text(encoding="utf-8"))
    rows = {(row["bucket_tokens"], row["pad_to_multiple_of"]): row for row in report["rows"]}
    assert set(rows) == {(8192, 1), (8192, 64), (32768, 1), (32768, 64)}
    assert len({row["real_tokens_per_step"] for row in rows.values()}) == 1  # the same batches, padded otherwise
    for budget in (8192, 32768):
        free, rounded = rows[(budget, 1)], rows[(budget, 64)]
        assert rounded["padding_share"] > free["padding_share"]
        assert rounded["distinct_shapes"] < free["distinct_shapes"]
        assert rounded["new_shapes_per_step_after_warmup"] <= free["new_shapes_per_step_after_warmup"]
    assert rows[(32768, 1)]["passes_per_step"] < rows[(8192, 1)]["passes_per_step"]  # fewer, larger passes
    assert report["conf_paper_bucket_tokens"] == 8192 and report["batch_size"] == 16


@pytest.mark.parametrize("arguments, message", [
    (["--multiples", "0,8"], "each >= 1"), (["--bucket-tokens", "lots"], "expected integers"),
    (["--steps", "10", "--warmup", "10"], "below --steps")])
def test_bad_arguments_are_refused_before_any_batch_is_built(arguments, message):
    done = subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr
