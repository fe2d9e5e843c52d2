"""``make results`` records its own run: the wall time, each stage's time read from DVC's
output as it streams by, the skipped stages, the commit and the machine; a failed
command leaves the previous record in place."""

from __future__ import annotations

import json
import subprocess
import sys

from contrastive_sentence_embeddings.records.results_of_record import RECORD_FILE, stage_times

DVC_OUTPUT = [
    (0.0, "Stage 'raw_data' didn't change, skipping\n"),
    (0.2, "Running stage 'baseline':\n"),
    (0.3, "> kedro run --nodes=baseline.evaluate,baseline.mteb_results\n"),
    (50.4, "Updating lock file 'dvc.lock'\n"),
    (50.5, "Running stage 'train@declutr':\n"),
    (230.0, "Running stage 'leaderboard':\n"),
]


def test_each_stage_lasts_until_the_next_one_starts_and_skipped_ones_are_named():
    ran, skipped = stage_times(DVC_OUTPUT, end=241.25)
    assert list(ran) == ["baseline", "train@declutr", "leaderboard"]  # DVC's order
    assert ran == {"baseline": 50.3, "train@declutr": 179.5, "leaderboard": 11.2}
    assert skipped == ["raw_data"]
    assert stage_times([], end=3.0) == ({}, [])


def stage_script(*lines: str, sleep: float = 0.0, status: int = 0) -> list[str]:
    body = "; ".join([*(f"print({line!r}, flush=True)" for line in lines), f"time.sleep({sleep})",
                      f"sys.exit({status})"])
    return [sys.executable, "-c", f"import sys, time; {body}"]


def run_module(cwd, command):
    return subprocess.run([sys.executable, "-m", "contrastive_sentence_embeddings.records.results_of_record", *command],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_successful_run_passes_its_output_through_and_writes_the_record(tmp_path):
    command = stage_script("Running stage 'train@simcse':", "some kedro line",
                           "Stage 'baseline' didn't change, skipping", sleep=0.3)
    done = run_module(tmp_path, command)
    assert done.returncode == 0, done.stderr
    assert "some kedro line" in done.stdout and "ran in" in done.stdout
    record = json.loads((tmp_path / RECORD_FILE).read_text())
    assert record["command"].startswith(sys.executable) and record["stages_skipped"] == ["baseline"]
    assert list(record["stages_run_seconds"]) == ["train@simcse"]
    assert 0.3 <= record["wall_seconds"] < 60 and record["stages_run_seconds"]["train@simcse"] <= record["wall_seconds"]
    assert record["commit"].startswith("unknown")  # no git here, and it says how to name one
    assert record["environment"]["machine"]["cpu"] and record["environment"]["libraries"]["torch"]
    assert record["started_utc"] <= record["finished_utc"]


def test_a_failed_run_keeps_the_previous_record_and_exits_with_its_status(tmp_path):
    previous = tmp_path / RECORD_FILE
    previous.parent.mkdir(parents=True)
    previous.write_text('{"wall_seconds": 1}\n')
    done = run_module(tmp_path, stage_script("Running stage 'train@scd':", status=3))
    assert done.returncode == 3
    assert "failed (exit status 3)" in done.stderr and "not written" in done.stderr
    assert previous.read_text() == '{"wall_seconds": 1}\n'
    assert run_module(tmp_path, []).returncode == 2  # no command: the usage, nothing run
