"""A run's STS scores as the result files of the MTEB benchmark, beside ours.

MTEB (the Massive Text Embedding Benchmark) keeps one JSON file per task and model in
a results folder laid out ``results/<model name, "/" as "__">/<model revision>/<task>.json``
(with a ``model_meta.json`` beside the task files): what ``mteb.ResultCache`` reads, and
what its leaderboard takes. :func:`mteb_files` writes that layout for one scored run,
from its metrics file and its per-pair predictions, without running the ``mteb``
package: the scores are this project's, computed as MTEB computes its STS tasks.

How MTEB scores STS12-16, STS-B and SICK-R (``AbsTaskSTS`` in mteb 2.x): one test split,
one subset (``default``), the gold scores rescaled to 0-1 (a linear map, which leaves
correlations unchanged), and the Spearman (and Pearson) correlation between the gold
scores and the cosine similarity of the two sentences' embeddings over every pair of
the split at once; ``main_score`` is ``cosine_spearman``, on a 0-1 scale. For STS12-16
that is SentEval's "all" setting, which this project reports (one Spearman over the
concatenated subsets), so the same number divided by 100.

A task file is written only where the pairs are MTEB's:

* STS from the Hub (``evaluation_report.sts_source: hub``): the task's repository and
  revision must be the ones MTEB pins (:data:`MTEB_STS_TASKS`, the same as
  ``data/sts_hub.py``'s defaults) and the number of pairs MTEB's;
* STS from the offline mirror (SentEval's files): the number of pairs must be MTEB's.
  STS12-16 and STS-B have as many test pairs in SentEval's files as in MTEB's copies;
  the rows themselves are not compared one by one, which the folder's report says.
  SentEval's SICK-R is SICK's test split (4,927 pairs) while MTEB's SICK-R
  (``mteb/sickr-sts``) is all of SICK (9,927 pairs): that score is not MTEB's SICK-R,
  and no SICK-R file is written for it.

``export_report.json`` at the top of the run's folder says, per task, what was written
and from which data, or why not. ``evaluation_time`` in a task file is the run's whole
evaluation (every task is encoded in one pass, so a task's own time does not exist);
``mteb_version`` is the release whose task definitions and result schema the files
follow (:data:`MTEB_VERSION`), not a version that computed them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from scipy.stats import pearsonr, spearmanr

from contrastive_sentence_embeddings.data.sts_hub import HUB_REPOS, PINNED_REVISIONS

# The mteb release whose STS task definitions (names, Hub data sets and revisions, split,
# main score) and TaskResult schema these files follow; tests/evaluation/test_mteb_results.py
# checks them against the installed mteb when there is one.
MTEB_VERSION = "2.26.24"
# The model names of MTEB are "<organisation>/<model>": a run is "<this>/<run>".
ORGANISATION = "contrastive-sentence-embeddings"
REPORT_FILE = "export_report.json"
RESULTS_FOLDER = "results"
MODEL_META_FILE = "model_meta.json"
NO_REVISION = "no_revision_available"  # MTEB's own name for a model without one
SPLIT = "test"
SUBSET = "default"
LANGUAGES = ["eng-Latn"]


@dataclass(frozen=True)
class MtebTask:
    """One of MTEB's STS tasks: the metrics key here, MTEB's task name, the Hub data set
    and revision MTEB pins, and the number of pairs in its test split (MTEB's
    descriptive statistics)."""

    key: str
    name: str
    repo_id: str
    revision: str
    test_pairs: int


_NAMES = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
          "stsb": "STSBenchmark", "sickr": "SICK-R"}
_TEST_PAIRS = {"sts12": 3108, "sts13": 1500, "sts14": 3750, "sts15": 3000, "sts16": 1186, "stsb": 1379,
               "sickr": 9927}
MTEB_STS_TASKS: tuple[MtebTask, ...] = tuple(
    MtebTask(key, _NAMES[key], HUB_REPOS[key], PINNED_REVISIONS[key], _TEST_PAIRS[key]) for key in _NAMES)


def model_name(run: str) -> str:
    """The MTEB model name of a run (``<organisation>/<run>``)."""
    return f"{ORGANISATION}/{run}"


def model_folder_name(name: str) -> str:
    """A model name as MTEB names its results folder: ``/`` as ``__``, spaces as ``_``."""
    return name.replace("/", "__").replace(" ", "_")


def task_decision(task: MtebTask, report: Mapping) -> tuple[bool, str]:
    """Whether ``task``'s score in a metrics file with this ``evaluation_report`` is a
    score on MTEB's pairs, and the data it came from (or why it is not), in words."""
    pairs = (report.get("pairs") or {}).get(task.key)
    if pairs is None:
        return False, "not scored"
    source = report.get("sts_source", "mirror")
    if source == "hub":
        read = (report.get("sts_hub") or {}).get(task.key) or {}
        if (read.get("repo_id"), read.get("revision")) != (task.repo_id, task.revision):
            return False, (f"scored on {read.get('repo_id')} at revision {read.get('revision')}, not MTEB's "
                           f"{task.repo_id} at {task.revision}")
        if pairs != task.test_pairs:
            return False, f"scored on {pairs:,} pairs of {task.repo_id}, MTEB's test split has {task.test_pairs:,}"
        return True, f"{task.repo_id} at revision {task.revision} (MTEB's data), {pairs:,} test pairs"
    if pairs != task.test_pairs:
        return False, (f"scored on {pairs:,} pairs of SentEval's files; MTEB's {task.name} ({task.repo_id}) has "
                       f"{task.test_pairs:,} test pairs, so this is not MTEB's benchmark"
                       + (" (SentEval's SICK-R is SICK's test split, MTEB's is all of SICK)"
                          if task.key == "sickr" else ""))
    return True, (f"SentEval's files from the offline mirror: as many test pairs ({pairs:,}) as MTEB's "
                  f"{task.repo_id}; the rows were not compared one by one")


def correlations(pairs: Mapping[str, np.ndarray]) -> tuple[float, float]:
    """``(spearman, pearson)`` of the predicted cosine against the gold score over every
    pair of a task (MTEB's ``cosine_spearman`` and ``cosine_pearson``, 0-1 scale)."""
    gold, predicted = np.asarray(pairs["gold"], float), np.asarray(pairs["predicted"], float)
    return float(spearmanr(gold, predicted).statistic), float(pearsonr(gold, predicted).statistic)


def task_result(task: MtebTask, spearman: float, pearson: float, evaluation_seconds: float | None,
                evaluated_at: str | None) -> dict:
    """A task file's content in MTEB's ``TaskResult`` schema. The model's similarity
    function is the cosine, so ``spearman``/``pearson`` (MTEB's scores with the model's
    own similarity) are the cosine ones; Manhattan and Euclidean scores are not
    computed here and not written."""
    scores = {"cosine_spearman": spearman, "cosine_pearson": pearson, "spearman": spearman, "pearson": pearson,
              "main_score": spearman, "hf_subset": SUBSET, "languages": list(LANGUAGES),
              "mteb_version": MTEB_VERSION}
    date = datetime.fromisoformat(evaluated_at).timestamp() if evaluated_at else None
    return {"dataset_revision": task.revision, "task_name": task.name, "mteb_version": MTEB_VERSION,
            "scores": {SPLIT: [scores]}, "evaluation_time": evaluation_seconds, "kg_co2_emissions": None,
            "date": date}


def model_meta(name: str, revision: str, model: Mapping) -> dict:
    """``model_meta.json``: MTEB's ``ModelMeta`` fields, what this project knows of the
    model and None where it does not know (MTEB's own value for unknown)."""
    return {"name": name, "revision": revision, "release_date": None, "languages": list(LANGUAGES),
            "n_parameters": None, "memory_usage_mb": None, "max_tokens": None, "embed_dim": None,
            "license": None, "open_weights": None, "public_training_code": None, "public_training_data": None,
            "framework": ["PyTorch"], "reference": None, "similarity_fn_name": "cosine", "use_instructions": False,
            "training_datasets": None, "adapted_from": model.get("base_encoder") or None, "superseded_by": None,
            "modalities": ["text"], "loader": None}


def mteb_files(metrics: Mapping, pairs: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """The MTEB results folder of one scored run, as ``{path in the folder: JSON
    content}``: a task file per STS task scored on MTEB's pairs
    (:func:`task_decision`), ``model_meta.json`` beside them and ``export_report.json``
    at the top. ``metrics`` is the run's metrics file, ``pairs`` its per-pair
    predictions (``{task: {"gold", "predicted", "subset"}}``): the Spearman of the pairs
    must be the metrics file's (they come from one evaluation), the Pearson is theirs."""
    model = metrics.get("model") or {}
    run = model.get("name")
    if not run:
        raise ValueError("the metrics name no model (model.name): cannot name its MTEB results")
    name = model_name(run)
    revision = str(metrics.get("model_fingerprint") or NO_REVISION)
    folder = f"{RESULTS_FOLDER}/{model_folder_name(name)}/{revision}"
    report = metrics.get("evaluation_report") or {}
    files: dict[str, Any] = {}
    written, not_written = {}, {}
    for task in MTEB_STS_TASKS:
        score = metrics.get(task.key)
        if not isinstance(score, (int, float)) or not math.isfinite(score):
            continue
        ours, data = task_decision(task, report)
        if not ours:
            not_written[task.name] = data
            continue
        if task.key not in pairs:
            raise ValueError(f"{run}: no per-pair predictions of {task.key}, which its metrics score")
        spearman, pearson = correlations(pairs[task.key])
        if not math.isclose(spearman * 100, float(score), abs_tol=1e-6):
            raise ValueError(f"{run}: the per-pair predictions of {task.key} give Spearman {spearman * 100:.6f}, its "
                             f"metrics {float(score):.6f}: they are not from the same evaluation")
        files[f"{folder}/{task.name}.json"] = task_result(task, float(score) / 100, pearson,
                                                          metrics.get("eval_seconds"), metrics.get("evaluated_at"))
        written[task.name] = {"main_score": float(score) / 100, "data": data,
                              "file": f"{folder}/{task.name}.json"}
    if written:
        files[f"{folder}/{MODEL_META_FILE}"] = model_meta(name, revision, model)
    files[REPORT_FILE] = {
        "run": run, "model_name": name, "revision": revision,
        "revision_is": "the fingerprint of the model's weights (model_fingerprint in its metrics file)",
        "metrics_evaluated_at": metrics.get("evaluated_at"), "mteb_version_followed": MTEB_VERSION,
        "computed_by": "contrastive-sentence-embeddings' evaluation, as MTEB scores STS tasks (not the mteb package)",
        "evaluation_time": "the run's whole evaluation, every task in one encoding pass",
        "written": written, "not_written": not_written,
    }
    return files
