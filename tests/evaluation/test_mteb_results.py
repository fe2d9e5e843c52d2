"""MTEB's result files beside ours: a real scored (tiny) model's STS scores written in
MTEB's results layout and ``TaskResult`` schema, with MTEB's task names, pinned data
set revisions and 0-1 scale; a task only where the pairs are MTEB's (SentEval's SICK-R
test split is not MTEB's SICK-R), the reason written where not. The schema is checked
here without mteb; where the ``mteb`` package is installed its own loader reads the
files back and its task definitions are compared with ours."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr

from contrastive_sentence_embeddings.pipelines.datasets import MtebResultsDataset, SentenceEncoderDataset
from contrastive_sentence_embeddings.evaluation.mteb_results import (
    MTEB_STS_TASKS,
    MTEB_VERSION,
    REPORT_FILE,
    mteb_files,
)
from contrastive_sentence_embeddings.pipelines.graph import graph_parameters
from contrastive_sentence_embeddings.pipelines.evaluation.nodes import (
    evaluate_model,
    write_baseline_mteb_results,
    write_mteb_results,
)
from contrastive_sentence_embeddings.training.run import TrainedEncoder
from tests.helpers import PROJECT_ROOT

TASK_NAMES = {task.key: task.name for task in MTEB_STS_TASKS}


@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_bert, tokenizer, sts_partitions, transfer_partitions):
    """The tiny BERT saved as a run and scored by the evaluation node on the real STS
    files of the mirror (SentEval's): its metrics and per-pair predictions."""
    folder = tmp_path_factory.mktemp("models") / "simcse"
    SentenceEncoderDataset(str(folder), name="simcse").save(
        TrainedEncoder(tiny_bert, tokenizer, "mean", {"method": "simcse", "base_encoder": "tiny", "seed": 42}))
    evaluation = {**graph_parameters(PROJECT_ROOT)["evaluation"], "sts_bootstrap_resamples": 0}
    metrics, pairs = evaluate_model(str(folder), sts_partitions, transfer_partitions, evaluation, {})
    return metrics, pairs


def test_each_sts_task_on_mteb_pairs_is_an_mteb_task_file(scored):
    metrics, pairs = scored
    files = write_mteb_results(metrics, pairs)
    folder = f"results/contrastive-sentence-embeddings__simcse/{metrics['model_fingerprint']}"
    written = {path.rsplit("/", 1)[1] for path in files if path.startswith(folder)}
    # SentEval's STS12-16 and STS-B test files have MTEB's number of pairs; its SICK-R is
    # SICK's test split (4,927 pairs), MTEB's all of SICK (9,927): not written.
    assert metrics["evaluation_report"]["pairs"]["sickr"] == 4927
    assert written == {f"{TASK_NAMES[k]}.json" for k in ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb")} | {
        "model_meta.json"}
    report = files[REPORT_FILE]
    assert set(report["not_written"]) == {"SICK-R"}
    assert "4,927 pairs" in report["not_written"]["SICK-R"] and "9,927" in report["not_written"]["SICK-R"]
    for task in MTEB_STS_TASKS:
        if task.key == "sickr":
            continue
        result = files[f"{folder}/{task.name}.json"]
        assert result["task_name"] == task.name and result["dataset_revision"] == task.revision
        assert result["mteb_version"] == MTEB_VERSION and result["evaluation_time"] == metrics["eval_seconds"]
        [scores] = result["scores"]["test"]
        assert scores["hf_subset"] == "default" and scores["languages"] == ["eng-Latn"]
        # The metrics file's number (x 100, SentEval's "all") on MTEB's 0-1 scale.
        assert scores["main_score"] == scores["cosine_spearman"] == metrics[task.key] / 100
        gold, predicted = pairs[task.key]["gold"], pairs[task.key]["predicted"]
        assert scores["cosine_pearson"] == pytest.approx(pearsonr(gold, predicted).statistic, abs=1e-12)
        assert len(gold) == task.test_pairs
        assert report["written"][task.name]["main_score"] == scores["main_score"]
        assert "SentEval's files" in report["written"][task.name]["data"]
        json.dumps(result)  # JSON as it is


def test_hub_data_at_mteb_revisions_give_every_task_other_revisions_none(scored):
    """The paper environment without the mirror reads MTEB's own copies: at the pinned
    revisions (and SICK-R's 9,927 pairs) every task is MTEB's; a replaced repository or
    revision is not."""
    metrics, pairs = copy.deepcopy(scored)
    report = metrics["evaluation_report"]
    report["sts_source"] = "hub"
    report["sts_hub"] = {task.key: {"repo_id": task.repo_id, "revision": task.revision} for task in MTEB_STS_TASKS}
    report["pairs"]["sickr"] = 9927
    rng = np.random.default_rng(0)  # SICK as a whole, scored: the Spearman of these pairs is the metrics'
    gold, predicted = rng.uniform(1, 5, 9927), rng.uniform(0, 1, 9927)
    from scipy.stats import spearmanr

    pairs["sickr"] = {"gold": gold, "predicted": predicted, "subset": np.full(9927, "hub")}
    metrics["sickr"] = float(spearmanr(predicted, gold).statistic * 100)
    files = mteb_files(metrics, pairs)
    assert set(files[REPORT_FILE]["written"]) == set(TASK_NAMES.values()) and not files[REPORT_FILE]["not_written"]
    report["sts_hub"]["sts13"]["revision"] = "0123abcd"
    report["sts_hub"]["sickr"]["repo_id"] = "someone/sick"
    files = mteb_files(metrics, pairs)
    assert set(files[REPORT_FILE]["not_written"]) == {"STS13", "SICK-R"}
    assert "revision 0123abcd, not MTEB's mteb/sts13-sts" in files[REPORT_FILE]["not_written"]["STS13"]


def test_predictions_of_another_evaluation_are_refused(scored):
    metrics, pairs = copy.deepcopy(scored)
    pairs["sts12"]["predicted"] = pairs["sts12"]["predicted"][::-1].copy()
    with pytest.raises(ValueError, match="sts12 give Spearman .* not from the same evaluation"):
        mteb_files(metrics, pairs)


def test_the_folder_is_published_whole_and_never_over_someone_elses(scored, tmp_path):
    metrics, pairs = scored
    files = write_mteb_results(metrics, pairs)
    target = tmp_path / "mteb" / "simcse"
    dataset = MtebResultsDataset(str(target))
    dataset.save(files)
    assert dataset.load() == json.loads(json.dumps(files))
    older = {**files, "results/stale/x/STS12.json": {"old": True}}
    dataset.save(older)
    dataset.save(files)  # the old folder goes as a whole: no file of the previous save stays
    assert not (target / "results/stale").exists() and sorted(p.name for p in target.parent.iterdir()) == ["simcse"]
    foreign = tmp_path / "mteb" / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="not MTEB results this project wrote"):
        MtebResultsDataset(str(foreign)).save(files)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_the_baseline_writes_one_folder_per_configured_pooling(scored):
    metrics, pairs = scored
    poolings = {"baseline-mean": metrics, "baseline-cls": metrics, "simcse": metrics}
    renamed = {name: {**value, "model": {**value["model"], "name": name}} for name, value in poolings.items()}
    results = write_baseline_mteb_results({name: (lambda v=v: v) for name, v in renamed.items()},
                                          {name: (lambda: pairs) for name in renamed}, {"poolings": ["mean"]})
    assert list(results) == ["baseline-mean"]
    assert results["baseline-mean"][REPORT_FILE]["model_name"] == "contrastive-sentence-embeddings/baseline-mean"
    with pytest.raises(ValueError, match="baseline-first_last_avg: no metrics"):
        write_baseline_mteb_results(renamed, {}, {"poolings": ["first_last_avg"]})


# --- with the mteb package, when it is installed ----------------------------------------------
def test_mteb_reads_the_files_and_defines_the_tasks_as_we_do(scored, tmp_path):
    mteb = pytest.importorskip("mteb")
    from mteb import TaskResult

    metrics, pairs = scored
    target = tmp_path / "simcse"
    MtebResultsDataset(str(target)).save(write_mteb_results(metrics, pairs))
    task_files = sorted(p for p in target.rglob("*.json") if p.name not in (REPORT_FILE, "model_meta.json"))
    assert len(task_files) == 6
    for path in task_files:
        result = TaskResult.from_disk(path)
        ours = json.loads(path.read_text())
        assert result.task_name == ours["task_name"] and result.dataset_revision == ours["dataset_revision"]
        assert result.get_score() == pytest.approx(ours["scores"]["test"][0]["main_score"], abs=1e-12)
        assert result.eval_splits == ["test"] and result.hf_subsets == ["default"]
    # mteb's own cache reader takes the run's folder as a results cache: model, revision, scores.
    loaded = mteb.ResultCache(cache_path=target).load_results(
        models=["contrastive-sentence-embeddings/simcse"], tasks=[path.stem for path in task_files])
    [model] = loaded.model_results
    assert (model.model_name, model.model_revision) == ("contrastive-sentence-embeddings/simcse",
                                                        metrics["model_fingerprint"])
    assert {r.task_name: r.get_score() for r in model.task_results} == pytest.approx(
        {path.stem: json.loads(path.read_text())["scores"]["test"][0]["main_score"] for path in task_files})
    for task in MTEB_STS_TASKS:
        [definition] = mteb.get_tasks(tasks=[task.name])
        meta = definition.metadata
        assert (meta.dataset["path"], meta.revision) == (task.repo_id, task.revision), task.name
        assert meta.main_score == "cosine_spearman" and meta.eval_splits == ["test"]
        assert meta.eval_langs == ["eng-Latn"]
        stats = Path(mteb.__file__).parent / "descriptive_stats" / "STS" / f"{task.name}.json"
        assert json.loads(stats.read_text())["test"]["num_samples"] == task.test_pairs, task.name
    meta_file = next(target.rglob("model_meta.json"))
    from mteb.models.model_meta import ModelMeta

    meta = ModelMeta.model_validate(json.loads(meta_file.read_text()))
    assert meta.name == "contrastive-sentence-embeddings/simcse" and meta.revision == metrics["model_fingerprint"]
