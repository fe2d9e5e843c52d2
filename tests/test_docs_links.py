"""Every link between the project's pages resolves: README.md, docs/*.md and the record
(docs/record/*.md) link to files
that exist and to headings that exist (GitHub's anchors), so moving a section from one
page to another cannot leave a reader at a dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores
    dropped, spaces turned into hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {anchor(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def test_github_anchors_by_hand():
    assert anchor("One state for Kedro and DVC") == "one-state-for-kedro-and-dvc"
    assert anchor("Data preparation (`data_processing`)") == "data-preparation-data_processing"
    assert anchor("Any encoder on the harness: external rows") == "any-encoder-on-the-harness-external-rows"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    dead = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check offline
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            dead.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            dead.append(f"{target}: no heading #{fragment} in {linked.relative_to(ROOT)}")
    assert not dead, "\n".join(dead)


def test_the_record_index_lists_every_results_file():
    """docs/record/README.md is what ``python -m tests.record_index`` writes now: a results
    file added, renamed or removed, or a page's section renamed, shows here."""
    from tests.record_index import RECORD, RESULTS, render

    committed = (RECORD / "README.md").read_text(encoding="utf-8")
    assert committed == render(), "docs/record/README.md is stale: run python -m tests.record_index --write docs/record/README.md"
    listed = set(re.findall(r"^\| `([^`]+)` \|", committed, re.M))
    assert listed == {path.name for path in RESULTS.iterdir() if path.is_file()}
