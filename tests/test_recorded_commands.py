"""What results files record of the command that made them: nothing that says where a
checkout, or the machine's scratch folders, lived (``project_paths.recorded_command``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.runs.project_paths import recorded_command

ROOT = Path(__file__).resolve().parents[1]


def test_paths_inside_the_project_become_relative_and_others_lose_their_folders(tmp_path):
    project = tmp_path / "checkout"
    command = recorded_command(project / "benchmarks" / "x.py",
                               ["--device", "cuda", "--output", "/root/out/run.json",
                                f"--sentences={project}/data/a.txt", "42", "relative/kept.txt"], project)
    assert command == ("python benchmarks/x.py --device cuda --output <elsewhere>/run.json "
                       "--sentences=data/a.txt 42 relative/kept.txt")


def strings(value):
    """Every string a JSON value holds, at any depth."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, str):
        yield value


@pytest.mark.parametrize("results", sorted((ROOT / "benchmarks" / "results").glob("*.json")), ids=lambda p: p.name)
def test_committed_results_record_no_absolute_paths(results):
    absolute = re.compile(r"(?:^|[\s=])/(?:tmp|work|root|home|check)/")
    found = [text for text in strings(json.loads(results.read_text(encoding="utf-8")))
             if absolute.search(text)]
    assert not found, f"{results.name} records absolute paths: {found[:3]}"
