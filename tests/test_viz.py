"""`make viz`: kedro-viz's static site built with the project's hooks (every seed's
parameter block in its catalog: without them it warned "Cannot find parameter
'simcse.seed42' in the catalog" for each), into build/, which is the site's alone (the
DVC plots page lives with the install), with the main job's pipeline as a page of its own,
and the address `make viz-serve` prints opening on a view a person can read: the main job's
method focused, not the whole pipeline, whose leaderboard node waits on every method's
metrics (about 30 inputs in a row, 13% zoom on first open)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.helpers import copy_project_configuration

ROOT = Path(__file__).resolve().parent.parent


def main_job() -> str:
    """The pipeline `make viz` opens on: the first of the Makefile's MAIN_PIPELINES, as its VIZ_PIPELINE."""
    makefile = (ROOT / "Makefile").read_text()
    return re.search(r"^MAIN_PIPELINES \?= (\S+)$", makefile, re.M).group(1).split(",")[0]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The site `make viz` builds (its own command, read from the Makefile) in a copy of the project."""
    project = tmp_path_factory.mktemp("viz")
    copy_project_configuration(project)
    makefile = (ROOT / "Makefile").read_text()
    command = re.search(r"^viz: install\n\t\$\(BIN\)/(kedro viz build[^\n]*)$", makefile, re.M).group(1).split()
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    done = subprocess.run([str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=project,
                          env=environment, capture_output=True, text=True, timeout=300)
    return project, command, done


def test_the_viz_site_builds_with_every_parameter_and_a_page_per_pipeline(built_site):
    project, command, done = built_site
    makefile = (ROOT / "Makefile").read_text()
    assert "--include-hooks" in command
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Cannot find parameter" not in done.stdout + done.stderr
    assert (project / "build" / "index.html").is_file()
    assert (project / "build" / "api" / "pipelines" / main_job()).is_file()
    assert "PLOTS_PAGE := $(VENV)/" in makefile  # not in build/


def printed_address() -> str:
    """The address `make viz-serve` tells a user to open (make -n: printed, not served)."""
    shown = subprocess.run(["make", "-n", "viz-serve"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return re.search(r"(http://\S+)", shown).group(1)


def task_names_under(pipeline: dict, modular: str) -> set[str]:
    """The task nodes kedro-viz draws inside a focused modular pipeline (its children, recursively)."""
    tree = pipeline["modular_pipelines"]
    names = {node["id"]: node.get("full_name") or node["name"] for node in pipeline["nodes"]}
    found, pending = set(), [modular]
    while pending:
        for child in tree[pending.pop()]["children"]:
            if child["type"] == "modularPipeline":
                pending.append(child["id"])
            elif child["type"] == "task":
                found.add(names[child["id"]])
    return found


def test_the_printed_address_opens_on_the_main_jobs_method_focused(built_site):
    project, _, done = built_site
    assert done.returncode == 0, done.stderr[-2000:]
    job = main_job()
    query = {key: values[0] for key, values in parse_qs(urlsplit(printed_address()).query).items()}
    assert query["pid"] == job and query["expandAllPipelines"] == "true"
    page = json.loads((project / "build" / "api" / "pipelines" / query["pid"]).read_text())
    # kedro-viz answers an unknown fid with an error banner and the whole graph
    assert query["fid"] in page["modular_pipelines"]
    focused = task_names_under(page, query["fid"])
    seeds = sorted({name.split(".")[1] for name in focused if ".seed" in name})
    assert seeds, focused
    # every seed's training and evaluation is in view, the leaderboard and its inputs are not
    for seed in seeds:
        assert {f"{job}.{seed}.train", f"{job}.{seed}.evaluate"} <= focused
    assert not any("leaderboard" in name for name in focused)
    everything = [node for node in page["nodes"] if node["type"] == "task"]
    assert len(focused) < len(everything) / 2
