"""Every score says what it was computed on, and a bad gold score or a stale file can
never change a reported number unseen. Inputs are small files the tests write."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contrastive_sentence_embeddings.data.report import BadInputError, EmptyInputError, StepReport
from contrastive_sentence_embeddings.evaluation import leaderboard, sts
from contrastive_sentence_embeddings.evaluation.evaluator import (
    EvaluationData,
    EvaluationSettings,
    ModelSpec,
    evaluate_encoder,
)
from contrastive_sentence_embeddings.evaluation.transfer import read_transfer_tasks

WORDS = "river bridge mill stone cat dog bird tree house road field cloud".split()


def sentence(i: int) -> str:
    return f"the {WORDS[i % 12]} near the {WORDS[(i * 5 + 1) % 12]} is {WORDS[(i * 7 + 2) % 12]}"


def stsb_row(i: int, score: float, *extra: str) -> str:
    return "\t".join(["main-captions", "MSRvid", "2012test", f"{i:04d}", str(score), sentence(i), sentence(i + 1),
                      *extra])


@pytest.fixture
def small_benchmark(write_file, partitions):
    """The 7-task layout with a few pairs per task; STS-B test has rows with source columns."""
    files = {}
    for year in sts.STS_YEARS:
        files[f"{year}-en-test/STS.input.news.txt"] = write_file(
            f"sts/{year}-en-test/STS.input.news.txt", "".join(f"{sentence(i)}\t{sentence(i + 3)}\n" for i in range(6)))
        files[f"{year}-en-test/STS.gs.news.txt"] = write_file(
            f"sts/{year}-en-test/STS.gs.news.txt", "".join(f"{s}\n" for s in (0.5, 4.0, 2.5, 1.0, 3.2, 5.0)))
    files["STSBenchmark/sts-test.csv"] = write_file("sts/STSBenchmark/sts-test.csv", "\n".join(
        [stsb_row(0, 1.5), stsb_row(1, 4.5, "2012 MSRvid", "src.1"), stsb_row(2, 3.0),
         stsb_row(3, 0.5, "2012 MSRvid", "src.3"), stsb_row(4, 2.2)]) + "\n")
    sick = ["pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"]
    sick += [f"{i}\t{sentence(i)}\t{sentence(i + 2)}\t{score}\tNEUTRAL" for i, score in enumerate((1.2, 4.4, 3.3, 2.1))]
    files["SICK/SICK_test_annotated.txt"] = write_file("sts/SICK/SICK_test_annotated.txt", "\n".join(sick) + "\n")
    return partitions(files)


def test_stsb_rows_with_source_columns_are_all_scored(small_benchmark):
    report = StepReport("evaluation_data")
    subset = sts.read_stsb_split(small_benchmark["STSBenchmark/sts-test.csv"](), "test", report)
    assert len(subset) == 5 and subset.scores.tolist() == [1.5, 4.5, 3.0, 0.5, 2.2]
    assert report.variants == {"extra source columns (9 fields, first 7 read)": 2}


@pytest.mark.parametrize("bad, reason", [("nan", "gold score is nan"), ("5.5", "gold score outside 0-5"),
                                         ("-1", "gold score outside 0-5"), ("inf", "gold score is inf")])
def test_nan_and_out_of_range_sts_gold_scores_are_counted_or_refused(write_file, bad, reason):
    inputs = write_file("STS.input.x.txt", "a b\tc d\ne f\tg h\ni j\tk l\n")
    gold = write_file("STS.gs.x.txt", f"4.2\n{bad}\n1\n")
    report = StepReport("sts")
    subset = sts.read_sts_subset(inputs, gold, "STS12", "x", report)
    assert subset.scores.tolist() == [4.2, 1.0]
    assert report.dropped == {reason: 1} and report.examples[reason] == [f"{gold.label}:2"]
    with pytest.raises(BadInputError, match=rf"STS\.gs\.x\.txt:2: {reason}"):
        sts.read_sts_subset(inputs, gold, "STS12", "x", StepReport("sts"), on_bad_input="error")


@pytest.mark.parametrize("bad, reason", [("nan", "relatedness score is nan"),
                                         ("0.5", "relatedness score outside 1-5"),
                                         ("5.2", "relatedness score outside 1-5")])
def test_nan_and_out_of_range_sick_scores_are_counted_or_refused(write_file, bad, reason):
    raw = write_file("SICK_test_annotated.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\t"
                     "entailment_judgment\n1\ta b\tc d\t4.5\tNEUTRAL\n2\te f\tg h\t" + bad + "\tNEUTRAL\n")
    report = StepReport("sick")
    assert sts.read_sick(raw, "test", report).scores.tolist() == [4.5]
    assert report.dropped == {reason: 1} and report.examples[reason] == [f"{raw.label}:3"]
    with pytest.raises(BadInputError, match=rf"SICK_test_annotated\.txt:3: {reason}"):
        sts.read_sick(raw, "test", StepReport("sick"), on_bad_input="error")


@pytest.mark.filterwarnings("ignore:An input array is constant")
def test_an_undefined_sts_score_raises_instead_of_becoming_nan():
    subset = sts.StsSubset("STSB", "test", ["a", "b", "c"], ["d", "e", "f"], np.array([1.0, 2.0, 3.0]))
    same = {s: np.ones(4) for s in "abcdef"}  # a collapsed encoder: every similarity equal
    with pytest.raises(FloatingPointError, match="undefined \\(NaN\\) for stsb"):
        sts.score_sts({"stsb": [subset]}, same)


def test_pair_counts_are_checked_against_the_benchmark_sizes(caplog):
    assert sts.check_pair_counts({"sts12": 3108, "stsb": 1379, "sickr": 4927}) == []
    warnings = sts.check_pair_counts({"stsb": 1103, "sts13": 1500})
    assert warnings == ["stsb: evaluated on 1103 pairs, the benchmark has 1379; its score is not comparable "
                        "with published ones"]
    assert "evaluated on 1103 pairs" in caplog.text


def test_metrics_record_pairs_drops_and_time_and_count_stsb_test_once(small_benchmark, tiny_bert_dir, caplog):
    settings = EvaluationSettings(sts=True, alignment=True, transfer=False, cache_dir=None, device="cpu")
    caplog.set_level("INFO")
    data = EvaluationData.read(small_benchmark, {}, settings)
    # 5 x 6 STS pairs, 5 STS-B rows (read once although alignment uses them too), 4 SICK rows.
    assert data.report.rows_in == 30 + 5 + 4
    assert "evaluation_data: 39 rows in, 39 rows out" in caplog.text
    metrics = evaluate_encoder([ModelSpec("tiny", str(tiny_bert_dir), "mean")], data, settings)["tiny"]
    report = metrics["evaluation_report"]
    assert report["pairs"] == {"sts12": 6, "sts13": 6, "sts14": 6, "sts15": 6, "sts16": 6, "stsb": 5, "sickr": 4}
    assert report["benchmark_pairs"]["stsb"] == 1379
    assert len(report["warnings"]) == 7  # every task is short of its benchmark here
    assert report["data"]["variants"] == {"extra source columns (9 fields, first 7 read)": 2}
    assert report["alignment_pairs"] == 5
    assert leaderboard.evaluated_at(metrics).year >= 2024
    assert metrics["model_fingerprint"]
    json.dumps(metrics)  # what the metrics data set writes


def entry(sts_avg, at, fingerprint="w1", **more):
    metrics = {"model": {"name": "simcse", "method": "simcse", "pooling": "cls"}, "sts_avg": sts_avg,
               "model_fingerprint": fingerprint, **more}
    if at:
        metrics["evaluated_at"] = at
    return metrics


def test_the_newest_result_of_a_model_wins():
    old_full = {"simcse": entry(70.0, "2025-01-01T10:00:00+00:00", "w1", transfer_avg=80.0)}
    fresh_sts = {"simcse": entry(75.0, "2025-02-01T10:00:00+00:00", "w2")}
    merged = leaderboard.newest_metrics(fresh_sts, old_full)
    # Retrained weights: the old transfer scores describe another model and are left out.
    assert merged["simcse"]["sts_avg"] == 75.0 and "transfer_avg" not in merged["simcse"]
    # Same weights re-scored on STS only: the full evaluation's transfer scores stay.
    same = leaderboard.newest_metrics({"simcse": entry(75.0, "2025-02-01T10:00:00+00:00", "w1")}, old_full)
    assert same["simcse"]["sts_avg"] == 75.0 and same["simcse"]["transfer_avg"] == 80.0
    # A newer full evaluation wins over an older STS run, whatever the argument order.
    newer_full = {"simcse": entry(76.0, "2025-03-01T10:00:00+00:00", "w2", transfer_avg=81.0)}
    assert leaderboard.newest_metrics(fresh_sts, newer_full)["simcse"]["sts_avg"] == 76.0
    assert leaderboard.newest_metrics(newer_full, fresh_sts)["simcse"]["sts_avg"] == 76.0
    # A file from before results were dated loses to any dated one.
    assert leaderboard.newest_metrics({"simcse": entry(75.0, None)}, old_full)["simcse"]["sts_avg"] == 70.0
    assert old_full["simcse"]["sts_avg"] == 70.0  # inputs untouched


def test_a_seeded_methods_transfer_scores_join_its_first_seed_not_its_summary():
    """transfer.<method> scores the first seed's model but is saved as
    metrics_full/<method>.json: entries are matched by the model they name, so the
    method's summary row stays and the seed's run is listed once, with its transfer scores."""
    def named(name, sts_avg, at, **more):
        metrics = entry(sts_avg, at, "w42", **more)
        return {**metrics, "model": {**metrics["model"], "name": name}}

    sts_only = {"simcse": named("simcse", 76.0, "2025-01-01T10:00:00+00:00", n_seeds=3),
                "simcse.seed42": named("simcse.seed42", 75.5, "2025-01-01T10:00:00+00:00")}
    full = {"simcse": named("simcse.seed42", 75.5, "2025-01-02T10:00:00+00:00", transfer_avg=82.0)}
    merged = leaderboard.newest_metrics(sts_only, full)
    assert set(merged) == {"simcse", "simcse.seed42"}
    assert merged["simcse"]["n_seeds"] == 3 and "transfer_avg" not in merged["simcse"]
    assert merged["simcse.seed42"]["transfer_avg"] == 82.0


def test_the_table_says_when_each_row_was_produced():
    table = leaderboard.metrics_table({"simcse": entry(75.0, "2025-02-01T10:00:05+00:00"),
                                       "old": {**entry(60.0, None), "model": {"name": "old", "method": "x"}}})
    assert dict(zip(table["model"], table["evaluated_at"])) == {"simcse": "2025-02-01 10:00", "old": ""}
    markdown = leaderboard.leaderboard_markdown(table, leaderboard.reported_table([]))
    assert "evaluated (UTC)" in markdown and "2025-02-01 10:00" in markdown


def test_an_empty_single_sentence_transfer_file_names_task_and_file(write_file, partitions):
    files = {"MR/rt-polarity.neg": write_file("transfer/MR/rt-polarity.neg", ""),
             "MR/rt-polarity.pos": write_file("transfer/MR/rt-polarity.pos", "a fine film\n")}
    with pytest.raises(EmptyInputError, match=r"transfer task MR: .*rt-polarity\.neg has no sentences"):
        read_transfer_tasks(partitions(files), StepReport("t"), ("MR",))


def test_an_empty_split_transfer_file_names_task_and_file(write_file, partitions):
    files = {"TREC/train_5500.label": write_file("transfer/TREC/train_5500.label", "HUM:ind Who wrote it ?\n"),
             "TREC/TREC_10.label": write_file("transfer/TREC/TREC_10.label", "")}
    with pytest.raises(EmptyInputError, match=r"transfer task TREC: .*TREC_10\.label \(test split\) has no rows"):
        read_transfer_tasks(partitions(files), StepReport("t"), ("TREC",))


def test_a_re_encoded_trec_file_is_decoded_right(write_file, partitions):
    text = "DESC:def What is a caf\u00e9 ?\nHUM:ind Who wrote Faust ?\n"
    for stored_as, fallbacks in (("utf-8", 0), ("iso-8859-1", 1)):
        files = {"TREC/train_5500.label": write_file(f"{stored_as}/TREC/train_5500.label", text.encode(stored_as)),
                 "TREC/TREC_10.label": write_file(f"{stored_as}/TREC/TREC_10.label", "NUM:date When ?\n")}
        report = StepReport("t")
        task = read_transfer_tasks(partitions(files), report, ("TREC",))["TREC"]
        assert task.train.sentences[0] == "What is a caf\u00e9 ?"
        assert sum(report.variants.values()) == fallbacks
