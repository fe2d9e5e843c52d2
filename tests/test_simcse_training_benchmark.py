"""``benchmarks/simcse_training.py``'s cap on the CPU's instruction set
(``--instruction-set avx2``): the stand-in, on a CPU with AVX-512, for the machines
without it that many users train on. Checked: that the three variables it sets do cap
each library (a cap one of them ignored would leave the matmuls on AVX-512 and the
figures under a wrong name), and that a short side-by-side run records and enforces
the kernels each trainer ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.records.provenance import INSTRUCTION_SET_CAPS, cpu_flags
from tests.helpers import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "simcse_training.py"

needs_avx2 = pytest.mark.skipif("avx2" not in cpu_flags(), reason="the cap needs a CPU with AVX2 to cap to")


PROBE = ("import torch; a = torch.randn(64, 64); a @ a; "
         "print('capability', torch.backends.cpu.get_cpu_capability())")
# The instruction-set extensions MKL's verbose banner names when it names its code path.
MKL_ISA_NAMES = ("AVX-512", "AVX2", "AVX", "SSE4")


def probe(capped: bool, **extra: str) -> str:
    """The probe's output in a child process, with or without the cap's variables."""
    environ = {name: value for name, value in os.environ.items() if name not in INSTRUCTION_SET_CAPS["avx2"]}
    if capped:
        environ.update(INSTRUCTION_SET_CAPS["avx2"])
    return subprocess.run([sys.executable, "-c", PROBE], env={**environ, **extra},
                          capture_output=True, text=True, check=True).stdout


def mkl_banner(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("MKL_VERBOSE") and "Lnx" in line)


@needs_avx2
def test_the_avx2_cap_reaches_aten():
    assert "capability AVX2" in probe(capped=True)
    if "avx512f" in cpu_flags():  # the control: without the cap this CPU runs wider kernels
        assert "capability AVX2" not in probe(capped=False)


@needs_avx2
def test_the_avx2_cap_reaches_mkl():
    """MKL names the code path it chose in its verbose banner only where it dispatches by
    instruction set (Intel CPUs); elsewhere (seen on AMD EPYC: "for Intel(R) 64
    architecture applications, Lnx ...") the banner names none and there is nothing to
    check, so the test skips and says so."""
    import torch

    if not torch.backends.mkl.is_available():
        pytest.skip("this torch build has no MKL")
    free = mkl_banner(probe(capped=False, MKL_VERBOSE="1"))
    if not any(name in free for name in MKL_ISA_NAMES):
        pytest.skip(f"MKL's banner names no instruction set on this CPU: {free}")
    capped = mkl_banner(probe(capped=True, MKL_VERBOSE="1"))
    assert "AVX2" in capped and "AVX-512" not in capped, capped


@needs_avx2
def test_a_capped_side_by_side_run_records_the_kernels_each_trainer_ran(tmp_path, tiny_bert_dir, mirror_dir):
    output = tmp_path / "simcse_training.json"
    environ = {name: value for name, value in os.environ.items() if name not in INSTRUCTION_SET_CAPS["avx2"]}
    subprocess.run([sys.executable, str(SCRIPT), "--encoder", str(tiny_bert_dir), "--steps", "2", "--batch-size", "8",
                    "--repeats", "1", "--no-dev", "--instruction-set", "avx2",
                    "--sentences", str(mirror_dir / "wiki" / "wiki1m_head.txt"), "--output", str(output)],
                   env=environ, check=True, capture_output=True, text=True, timeout=600)
    report = json.loads(output.read_text())
    assert report["instruction_set_cap"] == "avx2"
    for name, value in INSTRUCTION_SET_CAPS["avx2"].items():
        assert report["environment"][name] == value
    (repeat,) = report["repeats"]
    assert repeat["ours"]["cpu_capability"] == repeat["sentence_transformers_mnrl"]["cpu_capability"] == "AVX2"
    assert repeat["ours"]["examples_per_second"] > 0 and repeat["ratio"] > 0


def test_a_trainer_that_ran_other_kernels_than_the_cap_is_an_error():
    benchmark = load_script(SCRIPT)
    capped = type("Args", (), {"instruction_set": "avx2"})()
    rows = {"first": "ours", "ours": {"cpu_capability": "AVX2"}, "sentence_transformers_mnrl": {"cpu_capability": "AVX512"}}
    with pytest.raises(RuntimeError, match="sentence_transformers_mnrl ran torch's CPU kernels at AVX512"):
        benchmark.check_capability(capped, rows)
    benchmark.check_capability(capped, {**rows, "sentence_transformers_mnrl": {"cpu_capability": "AVX2"}})
    benchmark.check_capability(type("Args", (), {"instruction_set": None})(), rows)  # no cap: nothing to hold
