"""Through Kedro, the issue's case: SimCSE trained for 4 steps and scored, then retrained
for 12 steps in a real `kedro run` killed during its evaluation (after the scoring,
before the metrics are saved: the new model on disk beside the old metrics). The run
says so when it saves the model; the leaderboard marks the old scores stale with
the reason and the command that rescores, summary.json and the experiments ranking mark
them too, and running that command makes the row current again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from contrastive_sentence_embeddings.runs.crash_points import CRASH_ENV_VAR, CRASH_EXIT_CODE
from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR
from contrastive_sentence_embeddings.records.experiments import Experiment, ranking_table
from contrastive_sentence_embeddings.encoders.fingerprint import model_fingerprint
from tests.helpers import ScratchProject, base_parameters

pytestmark = pytest.mark.integration

LONGER = {"simcse": {"training": {"max_steps": 12, "eval_every": 12}}}
# The STS scores of the method alone (no baseline, no intervals): what this test compares.
SCORED = ["simcse.metrics", "simcse.mteb_results"]
METRICS = "data/08_reporting/metrics/simcse.json"
MODEL = "data/06_models/simcse"


def leaderboard_row(project) -> pd.Series:
    table = pd.read_csv(project.root / "data/08_reporting/leaderboard.csv", keep_default_na=False)
    return table.set_index("model").loc["simcse"]


def summary(project) -> dict:
    return json.loads((project.root / "data/08_reporting/summary.json").read_text())


def test_a_retrained_model_without_its_evaluation_shows_the_old_scores_as_stale_until_rescored(
        tmp_path, mirror_dir, tiny_bert_dir):
    simcse = base_parameters("simcse", max_steps=4, eval_every=4, batch_size=8)
    simcse.update(seeds=None, max_examples=96)  # 12 batches: room for the longer run
    project = ScratchProject(tmp_path, mirror_dir, {
        "encoder": str(tiny_bert_dir), "simcse": simcse, "evaluation": {"sts_bootstrap_resamples": 0},
        "leaderboard": {"bootstrap_resamples": 20}})
    try:
        project.run(["simcse"], to_outputs=SCORED)
        project.run(["leaderboard"])
        scored = json.loads((tmp_path / METRICS).read_text())
        assert scored["model_fingerprint"] == model_fingerprint(MODEL)
        assert leaderboard_row(project)["status"] == "current"

        # Retrained for 12 steps and killed in its evaluation (a real `kedro run`, which
        # exits at once, as under kill -9, after scoring and before the metrics are saved).
        env = os.environ | {MIRROR_ENV_VAR: str(mirror_dir), CRASH_ENV_VAR: "evaluation:scored",
                            "COLUMNS": "2000",  # rich's log lines unwrapped
                            "PYTHONPATH": os.pathsep.join(sys.path),
                            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        command = [sys.executable, "-m", "kedro", "run", "--pipelines=simcse", f"--to-outputs={','.join(SCORED)}",
                   "--params=simcse.training.max_steps=12,simcse.training.eval_every=12"]
        killed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        output = killed.stdout + killed.stderr
        assert killed.returncode == CRASH_EXIT_CODE, output
        assert "exiting at evaluation:scored" in output
        # The run said, when it saved the new model, which scores are now an earlier model's.
        assert f"{MODEL} now holds a newly trained model: {METRICS}" in " ".join(output.split()), output
        assert json.loads((tmp_path / METRICS).read_text()) == scored  # kept, not deleted
        assert model_fingerprint(MODEL) != scored["model_fingerprint"]

        project.run(["leaderboard"], params=LONGER)
        row = leaderboard_row(project)
        command = "kedro run --namespaces=simcse,card.simcse --tags=evaluation"
        assert row["status"] == "stale"
        assert row["status_reason"] == (f"scores of an earlier model: the model now in {MODEL} was trained after "
                                        f"these scores were computed; rerun `{command}`")
        assert "stale: scores of an earlier model" in (tmp_path / "data/08_reporting/leaderboard.md").read_text()
        assert summary(project)["simcse"]["stale"] == 1
        assert summary(project)["simcse"]["sts_avg"] == round(scored["sts_avg"], 2)
        ranked = ranking_table([Experiment("workspace", "", "commit", {}, summary(project))], "simcse")
        assert f"{round(scored['sts_avg'], 2):g} (stale)" in ranked

        # The command the reason names, as `kedro run` parses it, scores the model there.
        namespaces = re.search(r"--namespaces=(\S+)", command).group(1).split(",")
        tags = re.search(r"--tags=(\S+)", command).group(1).split(",")
        project.run(None, params=LONGER, namespaces=namespaces, tags=tags)
        rescored = json.loads((tmp_path / METRICS).read_text())
        assert rescored["model_fingerprint"] == model_fingerprint(MODEL)
        assert rescored["provenance"]["parameters"]["training"]["max_steps"] == 12
        project.run(["leaderboard"], params=LONGER)
        assert leaderboard_row(project)["status"] == "current"
        assert "stale" not in summary(project)["simcse"]
    finally:
        project.close()
