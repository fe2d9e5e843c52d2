"""One state for Kedro and DVC, as a new user meets it (docs/architecture.md): a
repository whose committed ``dvc.lock`` records the results of record of two methods
(``dvc repro`` of every stage), cloned afresh (no model, no DVC cache), then the main
job as ``make run`` runs it (``dvc repro train@<main>``, then the leaderboard alone).
After it ``dvc status`` has nothing to say of the main job's stages, and the documented
first experiment on the main method (``dvc exp run -S ... --downstream train@<main>``)
runs that method's stage and the leaderboard only: not the data, not the baseline, not
the other method, whose model the clone never had. A plain ``dvc repro`` would retrain
the other method, which is why the docs name the stage.

Tiny scale (the tiny random encoder, a few steps; ``conf/tiny`` with ``KEDRO_ENV``), about
4 min on 2 CPU cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_dvc_experiments import METHOD, make_repository, tiny_environment

pytestmark = pytest.mark.integration

OTHER = "clsr_stsb"   # a second method the results of record hold and the main job does not run


def ran_stages(output: str) -> list[str]:
    return re.findall(r"Running stage '([^']+)'", output)


@pytest.fixture(scope="module")
def results_of_record(tmp_path_factory, mirror_dir, tiny_bert_dir):
    """The committed repository (its lock and results from a full ``dvc repro``) and a
    command runner for any folder."""
    root = tmp_path_factory.mktemp("results_of_record")
    make_repository(root, tiny_bert_dir, train=(METHOD, OTHER))
    tiny = tiny_environment(tiny_bert_dir)
    tiny[OTHER] = {"seeds": None, "training": {"epochs": 2, "batch_size": 64, "eval_every": 4, "log_every": 2}}
    (root / "conf/tiny/parameters.yml").write_text(yaml.safe_dump(tiny))
    from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update({"PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                "KEDRO_ENV": "tiny", MIRROR_ENV_VAR: str(mirror_dir), "OMP_NUM_THREADS": "1",
                "DVC_NO_ANALYTICS": "1", "KEDRO_DISABLE_TELEMETRY": "1"})

    def run(folder: Path, *command: str) -> str:
        result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, (command, (result.stdout + result.stderr)[-4000:])
        return result.stdout + result.stderr

    for command in (["git", "init", "-q"], ["git", "config", "user.email", "test@example.com"],
                    ["git", "config", "user.name", "test"], ["dvc", "init", "-q"]):
        run(root, *command)
    ran = ran_stages(run(root, "dvc", "repro"))
    assert {f"train@{METHOD}", f"train@{OTHER}", "baseline", "leaderboard"} <= set(ran), ran
    run(root, "git", "add", "-A")
    run(root, "git", "commit", "-qm", "results of record: dvc.lock and what the run wrote")
    return root, run


def test_after_the_main_job_on_a_fresh_clone_an_experiment_reruns_only_what_its_parameter_reaches(
        results_of_record, tmp_path):
    root, run = results_of_record
    clone = tmp_path / "clone"
    run(tmp_path, "git", "clone", "-q", str(root), str(clone))
    assert not (clone / f"data/06_models/{METHOD}").exists() and not (clone / f"data/06_models/{OTHER}").exists()

    # make run (Makefile, MAIN_PIPELINES=<main>): the stage and what it needs, then the leaderboard.
    made = ran_stages(run(clone, "dvc", "repro", f"train@{METHOD}"))
    assert made == ["raw_data", "data_processing", "baseline", f"train@{METHOD}"], made
    assert ran_stages(run(clone, "dvc", "repro", "--single-item", "leaderboard")) == ["leaderboard"]

    # The main job's stages, with everything upstream: nothing to say.
    status = run(clone, "dvc", "status", "--with-deps", f"train@{METHOD}")
    assert "Data and pipelines are up to date" in status, status
    # The other method's stage is not current here (no model; the baseline it read was
    # rewritten), so a plain repro would retrain it:
    assert f"train@{OTHER}" in ran_stages(run(clone, "dvc", "repro", "--dry"))

    # The documented experiment (README, "Reproducibility with DVC").
    experiment = run(clone, "dvc", "exp", "run", "-S", f"{METHOD}.training.learning_rate=1e-4",
                     "--downstream", f"train@{METHOD}")
    assert ran_stages(experiment) == [f"train@{METHOD}", "leaderboard"], experiment[-3000:]
    assert not (clone / f"data/06_models/{OTHER}").exists()


def _files(folder: Path, paths: list[str]) -> dict[str, bytes]:
    """Every file under ``paths`` (files or folders) with its bytes."""
    found = {}
    for path in paths:
        target = folder / path
        for file in ([target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())):
            found[file.relative_to(folder).as_posix()] = file.read_bytes()
    return found


@pytest.mark.parametrize("setting, said", [
    (f"{METHOD}.training.learning_rate=-1", "learning_rate"),
    (f"{METHOD}.training.batch_size=abc", "batch_size"),
    (f"+{METHOD}.training.learning_rat=1e-4", "did you mean learning_rate"),  # DVC adds a new key with +
])
def test_an_experiment_with_a_bad_value_stops_and_leaves_the_results_in_place(results_of_record, setting, said):
    """``dvc exp run -S`` with a value the strict check refuses: DVC would remove the
    stage's outputs before running it (the `cache: false` metrics and curves for good);
    with ``persist`` the run stops with the one-line error and every result is as it was."""
    root, _ = results_of_record
    kept = [f"data/06_models/{METHOD}", f"data/08_reporting/metrics/{METHOD}.json",
            f"data/08_reporting/training_curves/{METHOD}.csv", f"data/08_reporting/mteb/{METHOD}",
            "data/08_reporting/summary.json", "data/08_reporting/leaderboard.md"]
    before = _files(root, kept)
    assert f"data/06_models/{METHOD}/model.safetensors" in before and f"data/08_reporting/metrics/{METHOD}.json" in before
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update({"PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                "KEDRO_ENV": "tiny", "DVC_NO_ANALYTICS": "1", "KEDRO_DISABLE_TELEMETRY": "1"})
    done = subprocess.run(["dvc", "exp", "run", "-S", setting, "--downstream", f"train@{METHOD}"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and said in errors[0], output[-3000:]
    assert _files(root, kept) == before
    subprocess.run(["git", "checkout", "--", "params.yaml"], cwd=root, check=True)


def test_the_readme_documents_the_experiment_with_its_stage():
    from tests.helpers import PROJECT_ROOT

    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    assert "dvc exp run -S 'declutr.training.learning_rate=1e-4' --downstream train@declutr" in readme
