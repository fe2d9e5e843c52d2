"""The results of record's own record: ``make results`` runs ``dvc repro`` through
``python -m contrastive_sentence_embeddings.records.results_of_record dvc repro`` and, when it
succeeds, writes ``data/08_reporting/results_of_record.json``: the command, the commit
it ran at (``+dirty`` when a tracked file differed), when it started and ended, its wall
time, each stage DVC ran with the seconds until the next one began (DVC prints
``Running stage '<name>':`` as it starts one), the stages it skipped as unchanged, and
the machine and library versions. docs/record/results.md quotes its wall time from this file.

The command's output passes through unchanged, line by line. A failed command writes no
record (the previous one stays, describing the previous run) and exits with its status.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path

RECORD_FILE = Path("data/08_reporting/results_of_record.json")
STARTED = re.compile(r"Running stage '([^']+)'")
SKIPPED = re.compile(r"Stage '([^']+)' didn't change, skipping")


def stage_times(timed_lines: Iterable[tuple[float, str]], end: float) -> tuple[dict[str, float], list[str]]:
    """From ``(seconds since start, line)`` pairs of DVC's output: each stage that ran,
    with the seconds from its ``Running stage`` line to the next stage's (or ``end``),
    in the order DVC ran them; and the stages DVC skipped as unchanged."""
    starts: list[tuple[str, float]] = []
    skipped: list[str] = []
    for at, line in timed_lines:
        if match := STARTED.search(line):
            starts.append((match.group(1), at))
        elif match := SKIPPED.search(line):
            skipped.append(match.group(1))
    ran = {name: round((starts[k + 1][1] if k + 1 < len(starts) else end) - at, 1)
           for k, (name, at) in enumerate(starts)}
    return ran, skipped


def run_and_time(command: Sequence[str], echo: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> tuple[int, float, list[tuple[float, str]]]:
    """Run ``command`` (stderr into stdout), echo each line as it comes, and return its
    exit status, its wall seconds and each line with the seconds since the start."""
    start = clock()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1, errors="replace") as process:
        assert process.stdout is not None
        for line in process.stdout:
            echo(line)
            lines.append((clock() - start, line))
        status = process.wait()
    return status, clock() - start, lines


def build_record(command: Sequence[str], commit: str, started: datetime, wall_seconds: float,
                 lines: list[tuple[float, str]]) -> dict:
    """The record of one successful run (module docstring)."""
    from contrastive_sentence_embeddings.records.provenance import environment_record

    ran, skipped = stage_times(lines, wall_seconds)
    finished = datetime.now(timezone.utc)
    return {"command": shlex.join(command),
            "commit": commit,
            "started_utc": started.isoformat(timespec="seconds"),
            "finished_utc": finished.isoformat(timespec="seconds"),
            "wall_seconds": round(wall_seconds, 1),
            "stages_run_seconds": ran,
            "stages_skipped": skipped,
            "environment": environment_record()}


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        print("usage: python -m contrastive_sentence_embeddings.records.results_of_record <command ...> "
              "(make results: dvc repro)", file=sys.stderr)
        return 2
    root = Path.cwd()
    started = datetime.now(timezone.utc)
    # Before the command runs: the commit it ran at, not one a later `git commit` made.
    from contrastive_sentence_embeddings.records.provenance import results_commit
    commit = results_commit(root)

    def echo(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    status, wall, lines = run_and_time(command, echo)
    if status != 0:
        print(f"results_of_record: '{' '.join(command)}' failed (exit status {status}) after {wall:.0f} s; "
              f"{RECORD_FILE} not written", file=sys.stderr)
        return status
    record = build_record(command, commit, started, wall, lines)
    from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
    target = root / RECORD_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(target, json.dumps(record, indent=2) + "\n")
    print(f"results_of_record: {len(record['stages_run_seconds'])} stages ran in {wall / 60:.1f} min; "
          f"recorded in {RECORD_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
