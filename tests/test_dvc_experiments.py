"""DVC experiments end to end: ``dvc exp run -S`` and a queued grid, in a scratch git + DVC
repository made of the project's own files (``dvc.yaml``, ``params.yaml``, ``conf/``,
the package), at a tiny scale: a 2-layer random BERT, SimCSE for 2 steps on 64
sentences, the transfer tasks cut to MRPC. Only ``conf/base/parameters.yml``'s ``dvc``
block (which methods DVC trains) and a ``conf/tiny`` environment (``KEDRO_ENV=tiny``)
differ from the project.

About 2.5 min on 2 CPU cores (measured: the full ``dvc exp run`` 65 s, the queued grid
of 2 runs, train@simcse and the leaderboard only, 71 s), 4.5 min when other work
shares the cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import PROJECT_ROOT

pytestmark = pytest.mark.integration

METHOD = "simcse"
# Where `dvc exp show --json` finds a run's score: DVC's one metrics file, the
# leaderboard's summary (evaluation/summary.py), under the method's entry.
SCORE_FILE = "data/08_reporting/summary.json"


def tiny_environment(encoder: Path) -> dict:
    """conf/tiny/parameters.yml: sizes only."""
    return {
        "encoder": str(encoder),
        "data_processing": {"wiki_sentences": {"inputs": ["sentence_per_line"], "n_sentences": 64}},
        METHOD: {"seeds": None, "training": {"batch_size": 8, "max_steps": 2, "eval_every": 2}},
        "evaluation": {"sts_bootstrap_resamples": 0, "transfer_tasks": ["MRPC"], "k_folds": 2},
        "leaderboard": {"bootstrap_resamples": 20},
    }


def make_repository(root: Path, encoder: Path, train: tuple[str, ...] = (METHOD,),
                    transfer: tuple[str, ...] = ()) -> None:
    """The project's DVC pipeline and configuration in a fresh git + DVC repository, DVC
    tracking the methods ``train`` (and the transfer tasks of ``transfer``)."""
    for name in ("pyproject.toml", "params.yaml", "dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    shutil.copytree(PROJECT_ROOT / "conf", root / "conf", ignore=shutil.ignore_patterns("local"))
    shutil.copytree(PROJECT_ROOT / "src" / "contrastive_sentence_embeddings", root / "src" / "contrastive_sentence_embeddings",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for keep in PROJECT_ROOT.glob("data/*/.gitkeep"):
        (root / keep.relative_to(PROJECT_ROOT)).parent.mkdir(parents=True, exist_ok=True)
        (root / keep.relative_to(PROJECT_ROOT)).touch()
    shared = root / "conf/base/parameters.yml"
    text = shared.read_text()
    lists = re.compile(r"^  train: \[.*\]\n  transfer: \[.*\]\n", re.M)
    assert lists.search(text), "conf/base/parameters.yml: the dvc block's two lists moved"
    shared.write_text(lists.sub(f"  train: [{', '.join(train)}]\n  transfer: [{', '.join(transfer)}]\n", text))
    (root / "conf/tiny").mkdir()
    (root / "conf/tiny/parameters.yml").write_text(yaml.safe_dump(tiny_environment(encoder)))


@pytest.fixture(scope="module")
def repository(tmp_path_factory, mirror_dir, tiny_bert_dir):
    root = tmp_path_factory.mktemp("dvc_project")
    make_repository(root, tiny_bert_dir)
    from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # the repository's own src/
    env.update({"PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
                "KEDRO_ENV": "tiny", MIRROR_ENV_VAR: str(mirror_dir), "OMP_NUM_THREADS": "1",
                "DVC_NO_ANALYTICS": "1", "KEDRO_DISABLE_TELEMETRY": "1"})

    def run(*command: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
        result = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert result.returncode == 0, (command, (result.stdout + result.stderr)[-4000:])
        return result

    run("git", "init", "-q")
    run("git", "config", "user.email", "test@example.com")
    run("git", "config", "user.name", "test")
    run("dvc", "init", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "the project at a tiny scale")
    yield root, run
    run("dvc", "queue", "stop", check=False)


def experiments(shown: list) -> dict[str, dict]:
    """``dvc exp show --json`` as {experiment name: its data} (workspace and commits left out)."""
    found = {}
    for row in shown:
        for experiment in row.get("experiments") or []:
            for rev in experiment.get("revs") or []:
                found[rev.get("name") or rev["rev"]] = rev["data"]
    return found


def score(data: dict) -> float:
    return data["metrics"][SCORE_FILE]["data"][METHOD]["sts_avg"]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_an_experiment_with_a_set_param_runs_end_to_end_then_a_queued_grid_reruns_only_training(repository):
    root, run = repository

    # `dvc exp run -S seed=43` (params.yaml): every stage runs, with seed 43.
    started = time.monotonic()
    run("dvc", "exp", "run", "-S", "seed=43")
    single_seconds = time.monotonic() - started
    metadata = read_json(root / f"data/06_models/{METHOD}/cse_metadata.json")
    assert metadata["seed"] == 43 and metadata["training"]["seed"] == 43
    first = experiments(json.loads(run("dvc", "exp", "show", "--json").stdout))
    [(name, data)] = first.items()
    assert data["params"]["params.yaml"]["data"]["seed"] == 43
    assert score(data) == read_json(root / SCORE_FILE)[METHOD]["sts_avg"] == round(
        read_json(root / f"data/08_reporting/metrics/{METHOD}.json")["sts_avg"], 2)
    run("git", "add", "-A")
    run("git", "commit", "-qm", "keep the seed-43 experiment")

    # A grid of two learning rates, queued, then run by the queue's worker.
    queued = run("dvc", "exp", "run", "--queue", "-S", f"{METHOD}.training.learning_rate=1e-4,1e-3")
    assert queued.stdout.count("Queued experiment") == 2, queued.stdout
    started = time.monotonic()
    run("dvc", "queue", "start")
    while True:
        status = run("dvc", "queue", "status").stdout
        if "Queued" not in status and "Running" not in status:
            break
        assert time.monotonic() - started < 900, status
        time.sleep(5)
    grid_seconds = time.monotonic() - started
    assert status.count("Success") == 2, status

    grid = experiments(json.loads(run("dvc", "exp", "show", "--json").stdout))
    runs = {name: data for name, data in grid.items() if name != next(iter(first))}
    rates = {data["params"]["params.yaml"]["data"][METHOD]["training"]["learning_rate"]: score(data)
             for data in runs.values()}
    assert set(rates) == {1e-4, 1e-3} and all(isinstance(value, float) for value in rates.values()), rates
    assert rates[1e-4] != rates[1e-3]  # two trainings, two models
    for name in runs:  # only what the learning rate reaches ran again
        log = run("dvc", "queue", "logs", name).stdout
        assert f"Running stage 'train@{METHOD}'" in log and "Running stage 'leaderboard'" in log, log[-3000:]
        assert "Running stage 'data_processing'" not in log and "Running stage 'baseline'" not in log
    print(f"\ndvc exp run: {single_seconds:.0f} s; queued grid of 2: {grid_seconds:.0f} s")
