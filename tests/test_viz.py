"""`make viz`: kedro-viz's static site built with the project's hooks (every seed's
parameter block in its catalog: without them it warned "Cannot find parameter
'simcse.seed42' in the catalog" for each), into build/, which is the site's alone (the
DVC plots page lives with the install), with the main job's pipeline as a page of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import copy_project_configuration

ROOT = Path(__file__).resolve().parent.parent


def test_the_viz_site_builds_with_every_parameter_and_a_page_per_pipeline(tmp_path):
    copy_project_configuration(tmp_path)
    makefile = (ROOT / "Makefile").read_text()
    command = re.search(r"^viz: install\n\t\$\(BIN\)/(kedro viz build[^\n]*)$", makefile, re.M).group(1).split()
    assert "--include-hooks" in command
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    done = subprocess.run([str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=tmp_path,
                          env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Cannot find parameter" not in done.stdout + done.stderr
    main_job = re.search(r"^MAIN_PIPELINES \?= (\S+)$", makefile, re.M).group(1)
    assert (tmp_path / "build" / "index.html").is_file()
    assert (tmp_path / "build" / "api" / "pipelines" / main_job).is_file()
    assert "PLOTS_PAGE := $(VENV)/" in makefile  # not in build/
