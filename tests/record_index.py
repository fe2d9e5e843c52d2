"""The index of the record, docs/record/README.md: every page of measurements and every
committed results file (``benchmarks/results/``), each file with the page and section
that quote it. Generated, so that no results file goes unlisted::

    python -m tests.record_index --write docs/record/README.md

``tests/test_docs_links.py`` checks that the committed page is what this writes."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tests.test_docs_links import anchor  # GitHub's anchors, as the link check reads them

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "record"
RESULTS = ROOT / "benchmarks" / "results"

# The record's pages, in the order a reader meets them, with one line each.
PAGES = {
    "results.md": "the results of record (every method's STS, transfer and learning curves from one `make results` "
                  "run, the stage times, what the CPU defaults cost) and the CPU benchmarks, with the test suite's size",
    "gpu.md": "every GPU run (H100 runs 1-5, H200 run 6): throughput, MFU, profiles, CUDA graphs, gradient caching, "
              "DeCLUTR's memory and shapes, CUDA numerics, what a paper run costs",
    "data_scale.md": "data preparation at paper scale: time and memory per step, and the versions before the "
                     "out-of-core rewrite",
}

HEADER = """# The record

What was measured, on which machine, and how it changed: the pages below hold the numbers the
guides quote (`tests/test_docs_figures.py` checks every quoted figure against them), and each
number names the results file it comes from. The guides (how to train, compare, use your own
data, compose a method, run on a GPU) are one folder up, in [docs/](../).

This page is generated (`python -m tests.record_index --write docs/record/README.md`).

## Pages

"""


def quoting_section(name: str) -> tuple[str, str] | None:
    """The first record page that names results file ``name``, and the heading above the
    first mention there; None when no page names it."""
    for page in PAGES:
        text = (RECORD / page).read_text(encoding="utf-8")
        at = text.find(name)
        if at < 0:
            continue
        headings = re.findall(r"^#+ (.+)$", text[:at], re.M)
        return page, headings[-1] if headings else ""
    return None


def render() -> str:
    lines = [HEADER.rstrip("\n"), ""]
    lines += [f"- [{page}]({page}): {what}" for page, what in PAGES.items()]
    lines += ["", "## Results files", "",
              "Every file in [benchmarks/results/](../../benchmarks/results/), with where the record quotes it; "
              "a file named on no page is listed so that none is lost (each file records the command and commit that made it).", "",
              "| file | quoted in |", "|---|---|"]
    for path in sorted(RESULTS.iterdir()):
        if not path.is_file():
            continue
        found = quoting_section(path.name)
        where = (f"[{found[0]}: {found[1]}]({found[0]}#{anchor(found[1])})" if found and found[1]
                 else f"[{found[0]}]({found[0]})" if found else "named on no page")
        lines.append(f"| `{path.name}` | {where} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="write the page here (else print it)")
    args = parser.parse_args()
    text = render()
    if args.write:
        args.write.write_text(text, encoding="utf-8")
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
