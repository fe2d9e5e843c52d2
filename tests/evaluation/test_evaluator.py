"""The evaluator on real data with a tiny model: every part scored, the one-pass
multi-pooling path equal to scoring each pooling alone, and the transfer cache used."""

import numpy as np
import pytest

from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation import evaluator
from contrastive_sentence_embeddings.evaluation.sts import evaluate_sts


def count_encodings(monkeypatch) -> list[tuple[int, tuple[str, ...]]]:
    """Every ``SentenceEncoder.encode_poolings`` call from here on, as (sentences, poolings),
    in the list returned; the encodings themselves run as before."""
    calls = []
    original = SentenceEncoder.encode_poolings

    def counting(self, sentences, poolings, show_progress=None):
        calls.append((len(sentences), tuple(poolings)))
        return original(self, sentences, poolings, show_progress)

    monkeypatch.setattr(SentenceEncoder, "encode_poolings", counting)
    return calls


def test_every_part_for_two_poolings_in_one_pass(tiny_bert_dir, sts_partitions, transfer_partitions, tmp_path,
                                                 monkeypatch):
    settings = evaluator.EvaluationSettings(transfer=True, transfer_tasks=["TREC", "MRPC"], k_folds=3,
                                            cache_dir=str(tmp_path / "cache"), device="cpu")
    data = evaluator.EvaluationData.read(sts_partitions, transfer_partitions, settings)
    specs = [evaluator.ModelSpec(f"tiny-{p}", str(tiny_bert_dir), p, "test", "tiny") for p in ("mean", "cls")]

    calls = count_encodings(monkeypatch)
    metrics = evaluator.evaluate_models(specs, data, settings)
    # one encoding of the STS sentences and one per transfer task, each for both poolings
    assert len(calls) == 3 and all(p == ("mean", "cls") for _, p in calls)
    for spec in specs:
        result = metrics[spec.name]
        assert result["model"]["pooling"] == spec.pooling
        for key in ("sts12", "sts16_wmean", "stsb", "sickr", "sts_avg", "sts_avg_wmean", "TREC", "MRPC", "MRPC_f1",
                    "alignment", "uniformity"):
            assert np.isfinite(result[key]), key
        assert "transfer_avg" not in result  # only defined over all 7 tasks

    # the shared pass gives what scoring one pooling alone gives
    alone = evaluate_sts(data.sts, SentenceEncoder.load(str(tiny_bert_dir), "cls", device="cpu").encode)
    assert metrics["tiny-cls"]["sts_avg"] == pytest.approx(alone["sts_avg"], abs=1e-6)

    # a second run reads the transfer embeddings from the cache: only STS is encoded
    calls.clear()
    again = evaluator.evaluate_models(specs, data, settings)
    assert len(calls) == 1
    assert again["tiny-mean"]["TREC"] == metrics["tiny-mean"]["TREC"]
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 4  # 2 tasks x 2 poolings

    # embeddings computed in another precision (bf16 on a GPU) are never read back by this
    # fp32 evaluation, nor the other way round: the key names the precision
    monkeypatch.setattr(evaluator, "precision_tag", lambda device: "cuda-bf16")
    calls.clear()
    evaluator.evaluate_models(specs, data, settings)
    assert len(calls) == 3
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 8


SCORES = ("sts12", "sts16_wmean", "stsb", "sickr", "sts_avg", "sts_avg_ci", "sts_avg_wmean", "alignment", "uniformity")


@pytest.mark.parametrize("method", ["baseline", "external"])
def test_an_untrained_encoders_sts_embeddings_are_encoded_once(tiny_bert_dir, sts_partitions, tmp_path, monkeypatch,
                                                               method):
    """The baseline (and an external row) is scored again by every pipeline that needs
    its row: the second scoring reads its STS embeddings from the cache and gives the
    same numbers to the last digit."""
    settings = evaluator.EvaluationSettings(cache_dir=str(tmp_path / "cache"), device="cpu")
    data = evaluator.EvaluationData.read(sts_partitions, {}, settings)
    specs = [evaluator.ModelSpec(f"untrained-{p}", str(tiny_bert_dir), p, method) for p in ("mean", "cls")]
    calls = count_encodings(monkeypatch)
    first = evaluator.evaluate_models(specs, data, settings)
    assert len(calls) == 1 and calls[0][1] == ("mean", "cls")
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2  # one file per pooling
    calls.clear()
    second = evaluator.evaluate_models(specs, data, settings)
    assert calls == []
    for spec in specs:
        assert {k: second[spec.name][k] for k in SCORES} == {k: first[spec.name][k] for k in SCORES}
    # A trained model's embeddings are not kept (it is scored once): the cache holds
    # nothing more after scoring one.
    trained = [evaluator.ModelSpec("trained", str(tiny_bert_dir), "mean", "simcse")]
    evaluator.evaluate_models(trained, data, settings)
    assert len(calls) == 1 and len(list((tmp_path / "cache").glob("*.npy"))) == 2
    # Without a cache folder every scoring encodes.
    calls.clear()
    evaluator.evaluate_models(specs, data, evaluator.EvaluationSettings(cache_dir=None, device="cpu"))
    assert len(calls) == 1


def test_settings_reject_unknown_parameters():
    with pytest.raises(ValueError, match="unknown evaluation parameter\\(s\\): trasnfer"):
        evaluator.EvaluationSettings.from_params({"trasnfer": True})


def test_duplicate_metric_names_are_refused(tiny_bert_dir):
    spec = evaluator.ModelSpec("same", str(tiny_bert_dir), "mean")
    with pytest.raises(ValueError, match="same metrics file: same"):
        evaluator.evaluate_models([spec, spec], evaluator.EvaluationData(), evaluator.EvaluationSettings())


def test_model_fingerprint_changes_with_the_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"one")
    first = evaluator.model_fingerprint(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"three")
    assert evaluator.model_fingerprint(str(tmp_path)) != first
    assert evaluator.model_fingerprint("bert-base-uncased") == "bert-base-uncased"


def test_writing_a_model_card_does_not_change_the_fingerprint(tmp_path):
    """The card is written after evaluation: the transfer scores and the leaderboard
    must still see the weights they scored."""
    (tmp_path / "model.safetensors").write_bytes(b"one")
    before = evaluator.model_fingerprint(str(tmp_path))
    (tmp_path / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n")
    (tmp_path / ".README.md.writing-0123").write_text("half a card")
    assert evaluator.model_fingerprint(str(tmp_path)) == before
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text("{}")
    assert evaluator.model_fingerprint(str(tmp_path)) != before


def test_sts_intervals_and_per_pair_predictions_for_significance(tiny_bert_dir, sts_partitions, tmp_path):
    from scipy.stats import spearmanr

    from contrastive_sentence_embeddings.evaluation.significance import (
        bootstrap_task_intervals,
        load_pair_predictions,
        save_pair_predictions,
    )
    from contrastive_sentence_embeddings.evaluation.sts import STS_TASKS

    settings = evaluator.EvaluationSettings(alignment=False, device="cpu", sts_bootstrap_resamples=200)
    data = evaluator.EvaluationData.read(sts_partitions, {}, settings)
    spec = evaluator.ModelSpec("tiny-mean", str(tiny_bert_dir), "mean", "test", "tiny")
    predictions = {}
    metrics = evaluator.evaluate_models([spec], data, settings, pair_predictions=predictions)["tiny-mean"]

    pairs = predictions["tiny-mean"]
    assert set(pairs) == set(STS_TASKS)
    for task in STS_TASKS:
        gold = np.concatenate([subset.scores for subset in data.sts[task]])
        np.testing.assert_array_equal(pairs[task]["gold"], gold)  # every scored pair, in the suite's order
        assert len(pairs[task]["predicted"]) == len(gold)
        # the saved predictions are the ones the reported "all" score was computed from
        assert spearmanr(pairs[task]["predicted"], gold).statistic * 100 == pytest.approx(metrics[task], abs=1e-9)
        low, high = metrics[f"{task}_ci"]
        assert low < metrics[task] < high
    assert sorted(set(pairs["sts12"]["subset"])) == sorted(subset.subset for subset in data.sts["sts12"])
    low, high = metrics["sts_avg_ci"]
    assert low < metrics["sts_avg"] < high

    # the intervals are the library's, seeded by the settings, on exactly these pairs
    assert bootstrap_task_intervals(pairs, 200, settings.sts_bootstrap_seed)["sts12_ci"] == metrics["sts12_ci"]
    # 0 resamples switches them off (STS-B alone, to encode little)
    off = evaluator.EvaluationSettings(alignment=False, device="cpu", sts_bootstrap_resamples=0)
    small = evaluator.EvaluationData(sts={"stsb": data.sts["stsb"]})
    scored = evaluator.evaluate_models([spec], small, off)["tiny-mean"]
    assert "stsb" in scored and not any(key.endswith("_ci") for key in scored)

    loaded = load_pair_predictions(save_pair_predictions(tmp_path / "tiny-mean.sts_pairs.npz", pairs))
    np.testing.assert_array_equal(loaded["sickr"]["predicted"], pairs["sickr"]["predicted"])


def test_a_task_with_no_pair_left_is_marked_missing_and_the_others_scored(tiny_bert_dir, mirror_dir, tmp_path,
                                                                          caplog):
    """Every line of STS13's files ends in a tab (each pair dropped as bad input): the
    task is named before encoding, the six others are scored, and every table says
    ``missing`` for it and ``n/a`` for the averages over the tasks."""
    import re
    import shutil

    from contrastive_sentence_embeddings.data.raw_file import folder_partitions
    from contrastive_sentence_embeddings.evaluation import leaderboard, summary
    from contrastive_sentence_embeddings.publishing.model_card import _evaluation

    copy = tmp_path / "sts"
    shutil.copytree(mirror_dir / "sts", copy)
    for path in (copy / "STS13-en-test").glob("STS.input.*.txt"):
        path.write_text("".join(line + "\t\n" for line in path.read_text(encoding="utf-8").splitlines()),
                        encoding="utf-8")
    settings = evaluator.EvaluationSettings(device="cpu")
    with caplog.at_level("WARNING"):
        data = evaluator.EvaluationData.read(folder_partitions(copy), {}, settings)
    assert "sts13 is not scored (no pair left): STS13/FNWN: no pair left of 189 lines" in caplog.text
    specs = [evaluator.ModelSpec("baseline-mean", str(tiny_bert_dir), "mean", "baseline", "tiny"),
             evaluator.ModelSpec("simcse", str(tiny_bert_dir), "cls", "simcse", "tiny")]
    metrics = evaluator.evaluate_models(specs, data, settings)
    record = metrics["simcse"]
    assert "sts13" not in record and "sts_avg" not in record and "sts_avg_wmean" not in record
    assert all(np.isfinite(record[task]) for task in ("sts12", "sts14", "sts15", "sts16", "stsb", "sickr"))
    report = record["evaluation_report"]
    assert list(report["missing_tasks"]) == ["sts13"] and "sts13" not in report["pairs"]
    assert report["warnings"][0].startswith("sts13: not scored, STS13/FNWN: no pair left of 189 lines")

    table = leaderboard.metrics_table(metrics)
    page = leaderboard.leaderboard_markdown(table, leaderboard.reported_table([]), metrics_by_model=metrics)
    header = next(line for line in page.splitlines() if line.startswith("| model"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    for name in ("baseline-mean", "simcse"):
        row = next(line for line in page.splitlines() if line.startswith(f"| {name} "))
        cells = dict(zip(columns, (cell.strip() for cell in row.strip("|").split("|"))))
        assert cells["STS13"] == "missing" and cells["STS avg"] == "n/a"
        assert re.fullmatch(r"\d+\.\d\d", cells["STS12"])
    assert "**simcse: scored on fewer pairs than the benchmark**" in page and "sts13 not scored, no pair left" in page
    assert leaderboard.csv_table(table)["not_scored"].tolist() == ["sts13", "sts13"]
    assert summary.leaderboard_summary(table)["simcse"] == {"tasks_not_scored": 1}
    card = _evaluation(record)
    assert re.search(r"\| STS12 \| \d+\.\d\d \|.*\n\| STS13 \| missing \|( \|)? 0 \|\n\| STS14 \|", card)
    assert re.search(r"\| average \(sts_avg\) \| n/a \|", card)
