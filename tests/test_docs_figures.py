"""The docs quote their figures from one results page.

README.md and the pages under docs/ may quote a score or a measured time only if
docs/record/results.md (the results page) states it too, so that two pages can never disagree
on one fact and every figure has one place that says which run produced it.
docs/record/data_scale.md is the data-preparation benchmark's own page of results, docs/record/gpu.md the
GPU benchmarks' (each figure there names the results file of the device run it comes from).

The results page's results of record (its tables and the line naming the run) are
checked against the committed files they were made from, every column
(tests/results_tables.py renders them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.results_tables import TABLES, methods, record_summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "record" / "results.md"
RESULT_PAGES = {RESULTS, ROOT / "docs" / "record" / "data_scale.md", ROOT / "docs" / "record" / "gpu.md"}

# A score as the docs print them (Spearman x 100 with two decimals: 79.23) and a
# measured duration (4 min 32 s). Parameter values (0.05, 3e-5) and versions
# (2.13.0) do not match.
SCORE = re.compile(r"(?<![\d.])\d{2}\.\d{2}(?![\d.])")
DURATION = re.compile(r"\b\d+ min \d+ s\b")


def quoting_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p not in RESULT_PAGES)]


def figures(text: str) -> set[str]:
    return set(SCORE.findall(text)) | set(DURATION.findall(text))


def test_the_patterns_find_scores_and_durations_only():
    text = "STS avg 79.23 in 4 min 32 s; lr 3e-5, temperature 0.05, torch 2.13.0, Python 3.10+, 15 minutes"
    assert figures(text) == {"79.23", "4 min 32 s"}


# The GPU guide's table quotes a benchmark's results file directly (checked below).
GPU_GUIDE = ROOT / "docs" / "gpu_training.md"
PAPER_COST = ROOT / "benchmarks" / "results" / "paper_cost_nvidia_h100_run5.json"


def paper_cost_cells() -> dict[str, list[str]]:
    """Each measured method's row of the paper-cost file, as the guide's table writes it."""
    rows = json.loads(PAPER_COST.read_text(encoding="utf-8"))["rows"]
    return {row["method"]: [row["method"], row["encoder"], row["data"], str(row["batch"]), str(row["steps"]),
                            f"{row['hours_one_gpu']:.2f}", f"{row['hours_8_gpus_same_per_gpu_batch']:.2f}",
                            f"{row['peak_memory_gib']:.2f}"]
            for row in rows if "missing" not in row}


def test_the_gpu_guide_s_paper_costs_are_the_results_file_s():
    """Every measured method of paper_cost_nvidia_h100_run5.json is a row of the guide,
    cell for cell, and the guide names no method the file has no measurement of."""
    text = GPU_GUIDE.read_text(encoding="utf-8")
    assert PAPER_COST.name in text and json.loads(PAPER_COST.read_text())["device"] in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| method "))
    table = []  # the cost table: its header's rows up to the first line that is not a row
    for line in lines[start + 2:]:
        if not line.startswith("| "):
            break
        table.append(line)
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table]
    assert len([line for line in lines if line.startswith("| method ")]) == 1, "one cost table on the guide"
    assert rows == list(paper_cost_cells().values())


@pytest.mark.parametrize("page", quoting_pages(), ids=lambda p: p.name)
def test_every_figure_a_page_quotes_is_on_the_results_page(page: Path):
    results = RESULTS.read_text(encoding="utf-8")
    on_results_page = figures(results)
    if page == GPU_GUIDE:
        on_results_page |= {cell for row in paper_cost_cells().values() for cell in row}
    missing = sorted(figures(page.read_text(encoding="utf-8")) - on_results_page)
    assert not missing, (f"{page.relative_to(ROOT)} quotes {', '.join(missing)}, which docs/record/results.md does not "
                         "state: quote figures from the results page (and put new ones there first)")


@pytest.mark.parametrize("name", [*TABLES, "summary"])
def test_the_results_of_record_section_is_the_committed_files_every_column(name):
    """docs/record/results.md's results of record are the committed leaderboard, dev curves and
    run record rendered (tests/results_tables.py), every column of every row: a table
    or line that differs from what the files give fails here, naming which."""
    expected = record_summary() if name == "summary" else TABLES[name]()
    text = RESULTS.read_text(encoding="utf-8")
    assert expected in text, (f"docs/record/results.md does not hold the {name} table the committed files give; "
                              f"`python -m tests.results_tables` prints it:\n{expected}")


def test_every_method_of_the_results_of_record_is_on_the_page():
    text = RESULTS.read_text(encoding="utf-8")
    for name in methods():
        assert f"| {name} |" in text, name
