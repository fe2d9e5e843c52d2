"""What a second method's pipeline costs after a first one, before and after the work
done once (issue 41: the baseline's STS embeddings read from the embedding cache, step
0's dev scores remembered per starting encoder).

For each commit given, a fresh clone of this repository is made, and in it, as a user
would on a fresh clone:

1. ``kedro run --pipelines=<first>`` (default ``baseline``: the same baseline scoring every
   method's pipeline does), then
2. ``kedro run --pipelines=<second>`` (default ``imsimcse``), timed: raw ingestion, data
   preparation, the baseline's scores, training, evaluation and the leaderboard.

Both runs use this checkout's virtual environment (``.venv``; each clone imports its own
``src``). The wall time of each run and the pipeline's own log lines about the caches are
written to ``benchmarks/results/second_method.json`` with the machine and the commits.
Run on an idle machine: the two commits run one after the other, never side by side::

    .venv/bin/python benchmarks/second_method.py --before 5dbb96d --after HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "second_method.json"
CACHE_LINES = re.compile(r"embedding cache (hit|miss)|step-0 dev scores of these starting weights read")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def kedro_run(clone: Path, pipeline: str, environment: dict) -> dict:
    """One ``kedro run`` in ``clone``: its wall seconds, exit status, and the count of
    its log lines about each cache."""
    started = time.perf_counter()
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "kedro"), "run", f"--pipelines={pipeline}"], cwd=clone,
                          env=environment, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(log.splitlines()[-20:])
        raise RuntimeError(f"kedro run --pipelines={pipeline} failed in {clone} (exit {done.returncode}):\n{tail}")
    counts: dict[str, int] = {}
    for match in CACHE_LINES.finditer(log):
        counts[match.group(0)] = counts.get(match.group(0), 0) + 1
    return {"pipeline": pipeline, "wall_seconds": round(seconds, 1), "cache_log_lines": counts}


def measure(commit: str, first: str, second: str) -> dict:
    resolved = subprocess.run(["git", "rev-parse", commit], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    folder = Path(tempfile.mkdtemp(prefix="second_method_"))
    clone = folder / "clone"
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", resolved], cwd=clone, check=True)
        environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "DVC_NO_ANALYTICS": "1",
                       "CSE_DATA_MIRROR": os.environ.get("CSE_DATA_MIRROR", str((ROOT / "../shared/datasets").resolve()))}
        runs = [kedro_run(clone, first, environment), kedro_run(clone, second, environment)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"commit": resolved, "first": runs[0], "second": runs[1]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the commit before the change")
    parser.add_argument("--after", default="HEAD", help="the commit with it")
    parser.add_argument("--first", default="baseline")
    parser.add_argument("--second", default="imsimcse")
    args = parser.parse_args(argv)
    results = {"what": f"kedro run --pipelines={args.second} after --pipelines={args.first}, on a fresh clone",
               "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
               "before": measure(args.before, args.first, args.second),
               "after": measure(args.after, args.first, args.second)}
    before, after = results["before"]["second"]["wall_seconds"], results["after"]["second"]["wall_seconds"]
    results["second_pipeline_saved_seconds"] = round(before - after, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
