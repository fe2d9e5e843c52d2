"""The tables of docs/record/results.md's "Results of record" section, rendered from the committed
files the run wrote (``data/08_reporting/leaderboard.csv``, ``dev_curves/``,
``results_of_record.json``, ``paper_table.md``). tests/test_docs_figures.py checks that the page holds them
exactly, every column; after a new ``make results``, rewrite the page's marked blocks
with

    python -m tests.results_tables --write docs/record/results.md

(without ``--write`` it prints them).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTING = ROOT / "data" / "08_reporting"
STS = ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr"]
TRANSFER = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]
# The untrained encoder's rows shown beside the methods: the two poolings the methods use.
BASELINE_ROWS = ["baseline-mean", "baseline-cls_before_pooler"]


def leaderboard_rows(root: Path = ROOT) -> dict[str, dict[str, str]]:
    with open(root / "data" / "08_reporting" / "leaderboard.csv", newline="", encoding="utf-8") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def methods(root: Path = ROOT) -> list[str]:
    import yaml

    return yaml.safe_load((root / "conf" / "base" / "parameters.yml").read_text(encoding="utf-8"))["methods"]


def number(text: str) -> float | None:
    return None if text in ("", None) else float(text)


def score(row: dict, key: str) -> str:
    value, spread = number(row.get(key, "")), number(row.get(f"{key}_std", ""))
    if value is None:
        return ""
    return f"{value:.2f}" if spread is None or int(row["n_seeds"] or 1) == 1 else f"{value:.2f} +- {spread:.2f}"


def versus_base(row: dict) -> str:
    delta, p = number(row["delta_vs_base"]), number(row["p_vs_base"])
    if delta is None:
        return ""
    seeds = int(row["n_seeds"] or 1)
    return f"{delta:+.2f} (p {'<= ' if seeds > 1 else ''}{p:.3f})"


def seed_runs(rows: dict[str, dict], name: str) -> list[dict]:
    """A method's runs: its seeds' rows (``<name>.seed<k>``) when its row summarises
    several, else its own row (an older run's seed rows may still be listed, carried)."""
    if int(rows[name]["n_seeds"] or 1) == 1:
        return [rows[name]]
    return sorted((row for model, row in rows.items() if model.startswith(f"{name}.seed")),
                  key=lambda row: int(row["seed"]))


def transfer_row(rows: dict[str, dict], name: str) -> tuple[str, dict] | None:
    """The row holding ``name``'s transfer scores, labelled: its own, or for a method with
    seeds its first seed's (``transfer@<method>`` scores that run)."""
    candidates = [(name, rows[name])]
    if int(rows[name]["n_seeds"] or 1) > 1:
        first = seed_runs(rows, name)[0]
        candidates.append((f"{name} (seed {first['seed']})", first))
    for label, row in candidates:
        if number(row.get("transfer_avg", "")) is not None:
            return label, row
    return None


def record_table(root: Path = ROOT) -> str:
    """Every method's row (mean +- std over its seeds) and the two baseline rows."""
    rows = leaderboard_rows(root)
    header = ("| model | pooling | status | n seeds | STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R "
              "| STS avg | vs base | transfer avg | kept step (per seed) | examples seen | train s |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for name in [*BASELINE_ROWS, *methods(root)]:
        row = rows[name]
        runs = seed_runs(rows, name) if not name.startswith("baseline") else []
        kept = ", ".join(str(int(float(run["best_step"]))) for run in runs if run["best_step"] != "")
        seconds = number(row["train_seconds"])
        examples = number(row["examples_seen"])
        transfer = transfer_row(rows, name)
        cells = [name, row["pooling"], row["status"], row["n_seeds"] or "1",
                 *(score(row, key) for key in [*STS, "sts_avg"]), versus_base(row),
                 "" if transfer is None else score(transfer[1], "transfer_avg"),
                 kept, "" if examples is None else f"{examples:,.0f}",
                 "" if seconds is None else f"{seconds:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def transfer_table(root: Path = ROOT) -> str:
    """The transfer tasks of every row that has them (accuracy; MRPC also F1)."""
    rows = leaderboard_rows(root)
    header = "| model | " + " | ".join(TRANSFER) + " | MRPC F1 | transfer avg |"
    lines = [header, "|" + "---|" * (header.count(" | ") + 1)]
    for name in [*BASELINE_ROWS, *methods(root)]:
        found = transfer_row(rows, name)
        if found is None:
            continue
        label, row = found
        lines.append("| " + " | ".join([label, *(f"{float(row[key]):.2f}" for key in [*TRANSFER, "MRPC_f1",
                                                                                       "transfer_avg"])]) + " |")
    # What the scores are not the benchmark's in (a training split cut on the CPU default):
    # each transfer record's warnings, once for the rows that share them.
    records = sorted((root / "data" / "08_reporting" / "metrics_full").glob("*.json"))
    said: dict[str, list[str]] = {}
    for path in records:
        for warning in (json.loads(path.read_text(encoding="utf-8")).get("evaluation_report") or {}).get("warnings", []):
            said.setdefault(warning, []).append(path.stem)
    for warning, models in said.items():
        lines += ["", f"{'Every row' if len(models) == len(records) else ', '.join(models)}: {warning}."]
    return "\n".join(lines)


def dev_curve_runs(root: Path, name: str) -> list[tuple[str, list[dict]]]:
    folder = root / "data" / "08_reporting" / "dev_curves"
    paths = sorted((folder / name).glob("seed*.csv"), key=lambda p: int(p.stem[4:])) or [folder / f"{name}.csv"]
    runs = []
    for path in paths:
        with open(path, newline="", encoding="utf-8") as handle:
            label = name if path.parent == folder else f"{name}.{path.stem}"
            runs.append((label, list(csv.DictReader(handle))))
    return runs


def learning_table(root: Path = ROOT) -> str:
    """Each run's dev score on its selection criterion (training.select_by) at step 0,
    at the kept step and at the last evaluation: did training move it, and where."""
    header = "| run | evaluated steps | at step 0 | kept step | at the kept step | gain | at the last step |"
    lines = [header, "|---|---|---:|---:|---:|---:|---:|"]
    for name in methods(root):
        for label, curve in dev_curve_runs(root, name):
            points = [(int(float(point["step"])), float(point["dev/selection"])) for point in curve
                      if point["dev/selection"] not in ("", None) and math.isfinite(float(point["dev/selection"]))]
            kept = [int(float(point["step"])) for point in curve if point.get("dev/kept") in ("1", "1.0")]
            start = dict(points)[0]
            kept_step = kept[0]
            at_kept = dict(points)[kept_step]
            steps = [step for step, _ in points]
            shown = (", ".join(map(str, steps)) if len(steps) <= 6
                     else f"{steps[0]}, {steps[1]}, ..., {steps[-1]} ({len(steps)})")
            lines.append(f"| {label} | {shown} | {start:.2f} | {kept_step} "
                         f"| {at_kept:.2f} | {at_kept - start:+.2f} | {points[-1][1]:.2f} |")
    return "\n".join(lines)


def record_summary(root: Path = ROOT) -> str:
    """One line: the command, its commit, wall time and machine, from the run's record."""
    record = json.loads((root / "data" / "08_reporting" / "results_of_record.json").read_text(encoding="utf-8"))
    minutes, seconds = divmod(round(record["wall_seconds"]), 60)
    machine = record["environment"]["machine"]
    flags = ", ".join(machine["cpu_flags"])
    return (f"`{record['command']}` at {record['commit'][:12]}, {record['started_utc']} to "
            f"{record['finished_utc']}: {minutes} min {seconds} s wall on {machine['cpu']} ({flags}), "
            f"torch {record['environment']['libraries']['torch']}, "
            f"{len(record['stages_run_seconds'])} stages run")


def stage_table(root: Path = ROOT) -> str:
    record = json.loads((root / "data" / "08_reporting" / "results_of_record.json").read_text(encoding="utf-8"))
    lines = ["| stage | wall time |", "|---|---:|"]
    for stage, seconds in record["stages_run_seconds"].items():
        minutes, rest = divmod(round(seconds), 60)
        lines.append(f"| `{stage}` | {minutes} min {rest} s |")
    return "\n".join(lines)


def paper_table(root: Path = ROOT) -> str:
    """The committed paper table (``paper_table.md``, written by the leaderboard
    pipeline): its table and its notes, without the page's title."""
    text = (root / "data" / "08_reporting" / "paper_table.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("| ") or line.startswith("No current"))
    return "\n".join(lines[start:]).strip()


TABLES = {"record": record_table, "transfer": transfer_table, "learning": learning_table, "stages": stage_table,
          "paper": paper_table}


def fill(page: Path, root: Path = ROOT) -> str:
    """``page`` with each ``<!-- results:<name> -->`` ... ``<!-- /results:<name> -->``
    block replaced by what the committed files give (``summary`` and every table)."""
    import re

    text = page.read_text(encoding="utf-8")
    for name, render in {"summary": record_summary, **TABLES}.items():
        pattern = re.compile(rf"(<!-- results:{name} -->\n)(?:.*?\n)?(<!-- /results:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{page}: no <!-- results:{name} --> block")
        text = pattern.sub(lambda match: match.group(1) + render(root) + "\n" + match.group(2), text)
    return text


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--write"]:
        target = Path(sys.argv[2])
        target.write_text(fill(target), encoding="utf-8")
    else:
        print(record_summary(), end="\n\n")
        for title, table in TABLES.items():
            print(f"<!-- {title} -->\n{table()}\n")
