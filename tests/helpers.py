"""Helpers the tests import (fixtures stay in conftest.py): a scratch copy of the
project to run pipelines in, a method's shipped parameters, the mirror's Wikipedia
sentences, the check that a saved model loads in sentence-transformers as it embeds
here, and a benchmark script loaded as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> ModuleType:
    """A script that is not a package module (``benchmarks/...``) imported from its file,
    under its file's name, so that its functions can be tested one by one."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_project_configuration(root: Path) -> None:
    """The project's configuration (``pyproject.toml``, ``params.yaml``, ``conf/`` without
    ``conf/local``, then an empty ``conf/local``) and an empty ``src/`` in ``root``: a
    project Kedro runs with the installed package."""
    import shutil

    shutil.copy(PROJECT_ROOT / "pyproject.toml", root)
    shutil.copy(PROJECT_ROOT / "params.yaml", root)
    shutil.copytree(PROJECT_ROOT / "conf", root / "conf", ignore=shutil.ignore_patterns("local"))
    (root / "conf" / "local").mkdir()
    (root / "src").mkdir()


class ScratchProject:
    """A copy of the project's configuration (``conf/`` and the ``params.yaml`` overlay)
    in a scratch folder (the package itself is installed), chdir-ed into, reading the
    mirror. ``run`` goes through ``KedroSession`` like ``kedro run``."""

    def __init__(self, root: Path, mirror: Path, parameters: dict | None = None):
        import yaml
        from kedro.framework.startup import bootstrap_project

        from contrastive_sentence_embeddings.data.raw_sources import MIRROR_ENV_VAR

        self.root = root
        copy_project_configuration(root)
        if parameters:  # conf/local overrides conf/base key by key, as on a user's machine
            (root / "conf" / "local" / "parameters.yml").write_text(yaml.safe_dump(parameters))
        self.patch = pytest.MonkeyPatch()
        self.patch.chdir(root)
        self.patch.setenv(MIRROR_ENV_VAR, str(mirror))
        bootstrap_project(root)

    def run(self, pipelines: list[str], params: dict | None = None, env: str | None = None, **kwargs):
        """``kedro run --pipelines=... [--env <env>]``; ``params`` are what ``--params``
        gives (runtime parameters, a nested dict as Kedro's command line makes of
        ``a.b=c``). Under another ``env`` conf/local is not read, as with ``kedro run --env``."""
        from kedro.framework.session import KedroSession

        with KedroSession.create(project_path=self.root, env=env, runtime_params=params) as session:
            return session.run(pipeline_names=pipelines, **kwargs)

    def close(self) -> None:
        self.patch.undo()


def wiki_sentences(mirror_dir: Path, min_words: int = 0, limit: int | None = None) -> list[str]:
    """The first ``limit`` sentences of the mirror's Wikipedia sample (``wiki/wiki1m_head.txt``,
    the file SimCSE trains on) with at least ``min_words`` words, in file order."""
    lines = (mirror_dir / "wiki" / "wiki1m_head.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if len(line.split()) >= min_words][:limit]


def base_parameters(block: str, **training) -> dict:
    """The ``block`` of ``conf/base/parameters_<block>.yml`` as the project resolves it
    (shared values filled in), with ``training`` settings overridden: a method's shipped
    defaults, shortened for a test run."""
    from contrastive_sentence_embeddings.configuration.loader import project_parameters

    params = dict(project_parameters(PROJECT_ROOT)[block])
    # No live log unless a test asks for one: the shipped folder is in the project's data.
    params["training"] = {**params["training"], "live_log_dir": None, **training}
    return params


def assert_loads_like_sentence_transformers(path, sentences=("a man is playing a guitar", "the weather is nice")):
    """``SentenceEncoder.load(path)`` (what evaluation uses) and
    ``SentenceTransformer(path)`` (what users load) give the same embeddings; returns
    our encoder for further checks."""
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder

    ours = SentenceEncoder.load(str(path), device="cpu")
    theirs = SentenceTransformer(str(path), device="cpu").encode(list(sentences))
    np.testing.assert_allclose(ours.encode(list(sentences)), theirs, rtol=0, atol=1e-5)
    return ours


def assert_card_states_the_metrics(card_text: str, metrics: dict) -> dict:
    """The model card's numbers are the metrics file's: every ``model-index`` value
    equals the metrics value of its task (to the last digit), the STS table shows the
    same values (to its two decimals) and the pairs each task was scored on. Returns
    the card's front matter."""
    import re

    from contrastive_sentence_embeddings.publishing.model_card import STS_BENCHMARKS, split_front_matter

    matter, body = split_front_matter(card_text)
    key_of = {name: key for key, name, _ in STS_BENCHMARKS}
    hub_of = {key: hub for key, _, hub in STS_BENCHMARKS}
    from contrastive_sentence_embeddings.evaluation.mteb_results import MTEB_STS_TASKS, task_decision

    # model-index lists only the tasks scored on the data set its Hub id names.
    claimed = [task.key for task in MTEB_STS_TASKS
               if task.key in metrics and task_decision(task, metrics.get("evaluation_report") or {})[0]]
    [index] = matter.get("model-index") or [{"name": metrics["model"]["name"], "results": []}]
    assert index["name"] == metrics["model"]["name"]
    scored = {}
    for result in index["results"]:
        assert result["task"]["type"] == "semantic-similarity"
        key = key_of[result["dataset"]["name"]]
        assert result["dataset"]["type"] == hub_of[key]
        [metric] = result["metrics"]
        assert metric["type"] == "spearman_cosine"
        scored[key] = metric["value"]
    expected_tasks = [key for key, _, _ in STS_BENCHMARKS if key in metrics]
    assert scored == {key: metrics[key] for key in claimed}

    table = body.split("## Evaluation", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"-?\d+\.\d\d", cells[1]):
            rows[cells[0]] = cells
    pairs = metrics["evaluation_report"]["pairs"]
    for key in expected_tasks:
        name = next(name for k, name, _ in STS_BENCHMARKS if k == key)
        assert rows[name][1] == f"{metrics[key]:.2f}", (name, rows[name])
        assert rows[name][-1].split(" ")[0] == f"{pairs[key]:,}", (name, rows[name])
    assert rows["average (sts_avg)"][1] == f"{metrics['sts_avg']:.2f}"
    assert len(rows) == len(expected_tasks) + 1  # no row the metrics do not have
    return matter


# --- a Hugging Face Hub snapshot on disk --------------------------------------------------
def write_hub_split(folder: Path, split: str, rows: list[dict], fmt: str = "jsonl.gz") -> None:
    """``rows`` as one split of a Hub data set repository: ``<split>.jsonl.gz`` (as the
    ``mteb/*-sts`` repositories hold them) or ``data/<split>-00000-of-00001.parquet``
    (the layout of a data set pushed with ``push_to_hub``)."""
    import gzip
    import json

    import pandas as pd

    if fmt == "jsonl.gz":
        folder.mkdir(parents=True, exist_ok=True)
        with gzip.open(folder / f"{split}.jsonl.gz", "wt", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
    else:
        (folder / "data").mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(folder / "data" / f"{split}-00000-of-00001.parquet", index=False)


def local_hub(monkeypatch, snapshot: Path, cache: Path) -> list[tuple]:
    """Make ``datasets.load_dataset(repo_id, split=..., revision=...)`` read
    ``snapshot/<repo_id>`` (a folder laid out like the Hub repository) through the real
    ``datasets`` loaders, with no network; returns the list of the calls made
    (``(repo_id, split, revision)``)."""
    import datasets

    real = datasets.load_dataset
    calls: list[tuple] = []

    def load_dataset(path, name=None, *, split=None, revision=None, **kwargs):
        calls.append((path, split, revision))
        return real(str(snapshot / path), split=split, cache_dir=str(cache))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls
