"""The live log (DVCLive) and the step-0 dev scores remembered per starting point, on a
tiny BERT trained on real Wikipedia sentences and the real STS-B dev / SICK-R trial sets."""

import copy
import csv
import json

import numpy as np
import pytest
import torch

from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.training.live_log import drop_rows_after, metric_name, open_live_log
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train
from tests.helpers import wiki_sentences


@pytest.fixture(scope="module")
def sentences(mirror_dir):
    return wiki_sentences(mirror_dir, min_words=5, limit=200)


@pytest.fixture(scope="module")
def dev_sets(sts_partitions):
    return sts_partitions


def read_tsv(path):
    with path.open(newline="") as stream:
        rows = list(csv.reader(stream, delimiter="\t"))
    return rows[0], [[float(cell) for cell in row] for row in rows[1:]]


def model_of(tiny_bert, method="simcse", seed=0):
    torch.manual_seed(seed)
    return ContrastiveModel(copy.deepcopy(tiny_bert), "mean", build_method(method))


def test_metric_names_put_dev_scores_apart_from_training_rows():
    assert metric_name("dev/stsb_dev") == "dev/stsb_dev"
    assert metric_name("loss") == "train/loss"
    assert metric_name("info_nce") == "train/info_nce"


def test_dvclive_logs_every_curve_row_as_the_run_trains(tiny_bert, tokenizer, sentences, dev_sets, tmp_path):
    live = tmp_path / "live" / "simcse"
    config = TrainingConfig(batch_size=16, learning_rate=1e-4, device="cpu", max_steps=4, log_every=2, eval_every=2,
                            live_log_dir=str(live))
    scorer = DevScorer(dev_sets)
    result = train(model_of(tiny_bert), tokenizer, tokenize_sentences(tokenizer, sentences, 32), config, scorer)
    metrics = live / "plots" / "metrics"
    written = sorted(str(p.relative_to(metrics)) for p in metrics.rglob("*.tsv"))
    assert written == ["dev/dev_avg.tsv", "dev/sickr_dev.tsv", "dev/stsb_dev.tsv", "train/examples_per_second.tsv",
                       "train/info_nce.tsv", "train/loss.tsv", "train/lr.tsv", "train/peak_memory_gib.tsv"]
    # The same numbers as the run's curve, at the same steps: the loss every log_every
    # steps, the dev score at step 0 and every eval_every steps.
    curve = result.curve
    header, rows = read_tsv(metrics / "train" / "loss.tsv")
    assert header == ["step", "loss"]
    logged = curve.dropna(subset=["loss"])
    assert [row[0] for row in rows] == logged["step"].tolist() == [2, 4]
    np.testing.assert_allclose([row[1] for row in rows], logged["loss"], rtol=1e-12)
    _, dev_rows = read_tsv(metrics / "dev" / "stsb_dev.tsv")
    scored = curve.dropna(subset=["dev/stsb_dev"])
    assert [row[0] for row in dev_rows] == scored["step"].tolist() == [0, 2, 4]
    np.testing.assert_allclose([row[1] for row in dev_rows], scored["dev/stsb_dev"], rtol=1e-12)
    # DVCLive's summary file is not written: a plot folder holding it breaks `dvc plots show`.
    assert not (live / "metrics.json").exists()


def test_without_dvclive_the_same_files_are_written_and_a_warning_says_why(tiny_bert, tokenizer, sentences, dev_sets,
                                                                            tmp_path, monkeypatch, caplog):
    """A machine without DVC (the GPU image) cannot import DVCLive: the run trains, the
    live folder holds the same curves (every row at its step), and one warning says why."""
    import sys

    monkeypatch.setitem(sys.modules, "dvclive", None)  # `import dvclive` raises ImportError
    live = tmp_path / "live" / "simcse"
    config = TrainingConfig(batch_size=16, learning_rate=1e-4, device="cpu", max_steps=4, log_every=2, eval_every=2,
                            live_log_dir=str(live))
    with caplog.at_level("WARNING"):
        result = train(model_of(tiny_bert), tokenizer, tokenize_sentences(tokenizer, sentences, 32), config,
                       DevScorer(dev_sets))
    header, rows = read_tsv(live / "plots" / "metrics" / "train" / "loss.tsv")
    logged = result.curve.dropna(subset=["loss"])
    assert header == ["step", "loss"] and [row[0] for row in rows] == logged["step"].tolist() == [2, 4]
    np.testing.assert_allclose([row[1] for row in rows], logged["loss"], rtol=1e-12)
    _, dev_rows = read_tsv(live / "plots" / "metrics" / "dev" / "dev_avg.tsv")
    assert [row[0] for row in dev_rows] == [0, 2, 4]
    warnings = [r.getMessage() for r in caplog.records if "DVCLive could not start" in r.getMessage()]
    assert len(warnings) == 1 and "import of dvclive" in warnings[0], warnings


def test_the_direct_writer_writes_dvclives_bytes(tmp_path, monkeypatch):
    """The files written without DVCLive are DVCLive's own, byte for byte (names, headers,
    number format), and a new run clears the metric files an earlier run left."""
    import sys

    rows = [{"step": 0, "dev/stsb_dev": 71.25, "dev/dev_avg": 70.0},
            {"step": 2, "loss": 3.141592653589793, "lr": 1e-05, "examples_per_second": 512.0, "flag": True},
            {"step": 4, "loss": float("nan"), "lr": 2.5e-06, "dev/stsb_dev": 72.125}]

    def write(folder):
        log = open_live_log(folder, main_process=True)
        for row in rows:
            log.log(row)
        log.close()
        metrics = folder / "plots" / "metrics"
        return {str(p.relative_to(metrics)): p.read_bytes() for p in sorted(metrics.rglob("*.tsv"))}

    monkeypatch.chdir(tmp_path)  # DVCLive looks for a DVC repository from here: none
    with_dvclive = write(tmp_path / "dvclive")
    monkeypatch.setitem(sys.modules, "dvclive", None)
    stale = tmp_path / "direct" / "plots" / "metrics" / "train" / "old_term.tsv"
    stale.parent.mkdir(parents=True)
    stale.write_text("step\told_term\n9\t1.0\n")
    direct = write(tmp_path / "direct")
    assert direct == with_dvclive
    assert sorted(direct) == ["dev/dev_avg.tsv", "dev/stsb_dev.tsv", "train/examples_per_second.tsv",
                              "train/loss.tsv", "train/lr.tsv"]


def test_a_resumed_run_drops_the_rows_logged_after_its_checkpoint(tmp_path):
    metrics = tmp_path / "plots" / "metrics" / "train"
    metrics.mkdir(parents=True)
    (metrics / "loss.tsv").write_text("step\tloss\n2\t1.5\n4\t1.25\n6\t1.0\n")
    drop_rows_after(tmp_path, 4)
    assert read_tsv(metrics / "loss.tsv") == (["step", "loss"], [[2.0, 1.5], [4.0, 1.25]])


def test_the_encoding_key_follows_the_encoder_and_pooling_not_the_heads(tiny_bert):
    first, second = model_of(tiny_bert, seed=0), model_of(tiny_bert, seed=1)
    # SimCSE's MLP head is initialised from the seed: the heads differ, the encoder does not.
    assert not torch.equal(*(m.heads["mlp"][0].weight for m in (first, second)))
    assert first.encoding_key() == second.encoding_key()
    assert model_of(tiny_bert, method="scd").encoding_key() == first.encoding_key()
    other_pooling = ContrastiveModel(copy.deepcopy(tiny_bert), "cls", build_method("simcse"))
    assert other_pooling.encoding_key() != first.encoding_key()
    with torch.no_grad():
        second.encoder.embeddings.word_embeddings.weight[0, 0] += 1e-6
    assert second.encoding_key() != first.encoding_key()


def test_starting_scores_are_scored_once_per_starting_point(dev_sets, tmp_path, caplog):
    caplog.set_level("INFO", logger="contrastive_sentence_embeddings.evaluation.sts")
    scorer = DevScorer(dev_sets, memo_dir=tmp_path)
    rng = np.random.default_rng(0)
    table = {sentence: rng.normal(size=8) for sentence in scorer.sentences}
    calls = []

    def encode(batch):
        calls.append(len(batch))
        return np.stack([table[s] for s in batch])

    first = scorer.starting_scores("weights A", encode)
    assert calls == [len(scorer.sentences)] and first == scorer(encode)
    calls.clear()
    again = DevScorer(dev_sets, memo_dir=tmp_path).starting_scores("weights A", encode)  # another run, same start
    assert calls == [] and again == first
    assert "read from" in caplog.text
    DevScorer(dev_sets, memo_dir=tmp_path).starting_scores("weights B", encode)  # another start: scored
    assert calls == [len(scorer.sentences)]
    # A damaged memo is scored again, not trusted.
    for path in tmp_path.glob("*.json"):
        path.write_text("{not json")
    calls.clear()
    assert scorer.starting_scores("weights A", encode) == first and calls
    # Without a key (a model that has none) or a folder, nothing is remembered.
    calls.clear()
    DevScorer(dev_sets).starting_scores("weights A", encode)
    scorer.starting_scores(None, encode)
    assert len(calls) == 2
    # The damaged memo of "weights A" was replaced by its new scores; B's stays damaged.
    readable = [json.loads(p.read_text()) for p in tmp_path.glob("*.json") if p.read_text() != "{not json"]
    assert readable == [{"weights_key": "weights A", "scores": first}]


def test_a_second_seed_reads_step_zero_and_trains_the_same(tiny_bert, tokenizer, sentences, dev_sets, tmp_path):
    """The memo changes nothing a run computes: a second run from the same starting
    weights reads step 0's scores (no encoding) and its curve equals a run scored afresh."""
    examples = tokenize_sentences(tokenizer, sentences, 32)
    config = TrainingConfig(batch_size=16, learning_rate=1e-4, device="cpu", max_steps=2, log_every=1, eval_every=2)
    counted = []

    class CountingScorer(DevScorer):
        def __call__(self, encode):
            counted.append(1)
            return super().__call__(encode)

    afresh = train(model_of(tiny_bert), tokenizer, examples, config, CountingScorer(dev_sets))
    assert len(counted) == 2  # steps 0 and 2
    counted.clear()
    train(model_of(tiny_bert, seed=1), tokenizer, examples, config, CountingScorer(dev_sets, memo_dir=tmp_path))
    assert len(counted) == 2  # the first run from this start scores step 0 itself
    counted.clear()
    memo = train(model_of(tiny_bert), tokenizer, examples, config, CountingScorer(dev_sets, memo_dir=tmp_path))
    assert len(counted) == 1  # step 2 only: step 0 was read
    assert memo.curve.equals(afresh.curve.assign(examples_per_second=memo.curve["examples_per_second"],
                                                 peak_memory_gib=memo.curve["peak_memory_gib"]))
    assert memo.best_step == afresh.best_step
