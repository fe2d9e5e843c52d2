import re

import numpy as np
import pytest

from contrastive_sentence_embeddings.data.report import BadInputError, StepReport
from contrastive_sentence_embeddings.evaluation import sts


def test_all_and_wmean_by_hand():
    predicted = [np.array([1.0, 2, 3]), np.array([1.0, 2])]
    gold = [np.array([1.0, 2, 3]), np.array([2.0, 1])]
    # wmean: (3 * 100 + 2 * -100) / 5
    assert sts.aggregate_wmean(predicted, gold) == pytest.approx(20.0)
    # all: ranks of [1,2,3,1,2] are [1.5,3.5,5,1.5,3.5], of [1,2,3,2,1] are
    # [1.5,3.5,5,3.5,1.5]; their Pearson correlation is 5 / 9.
    assert sts.aggregate_all(predicted, gold) == pytest.approx(100 * 5 / 9)


def test_unscored_pairs_are_dropped_and_counted(write_file):
    inputs = write_file("STS.input.x.txt", "a\tb\nc\td\ne\tf\ng h\n")
    gold = write_file("STS.gs.x.txt", "4.2\n\n1\n3\n")
    report = StepReport("sts")
    subset = sts.read_sts_subset(inputs, gold, "STS16", "x", report)
    assert subset.sentence1 == ["a", "e"] and subset.sentence2 == ["b", "f"]
    assert subset.scores.tolist() == [4.2, 1.0]
    assert report.dropped == {"unscored pair": 1, "expected 2 tab-separated sentences, found 1 fields": 1}
    assert report.examples["unscored pair"] == [f"{gold.label}:2"]


def test_misaligned_files_are_an_error_naming_both(write_file):
    inputs = write_file("STS.input.x.txt", "a\tb\nc\td\n")
    gold = write_file("STS.gs.x.txt", "4.2\n")
    with pytest.raises(BadInputError, match=r"STS\.input\.x\.txt has 2 lines but .*STS\.gs\.x\.txt has 1"):
        sts.read_sts_subset(inputs, gold, "STS12", "x", StepReport("sts"))


def test_real_sts12_to_16_keep_exactly_the_scored_pairs(mirror_dir, sts_partitions):
    folder = mirror_dir / "sts"
    report = StepReport("sts")
    years = sts.read_sts_years(sts_partitions, report)
    assert sorted(years) == list(sts.STS_YEARS)
    assert "SMT" not in {s.subset for s in years["STS13"]}
    for year, subsets in years.items():
        scored = sum(
            sum(1 for line in (folder / f"{year}-en-test/STS.gs.{s.subset}.txt").read_text().splitlines() if line.strip())
            for s in subsets
        )
        assert sum(map(len, subsets)) == scored, year
        for subset in subsets:
            assert len(subset.sentence1) == len(subset.sentence2) == len(subset.scores)
            assert ((subset.scores >= 0) & (subset.scores <= 5)).all()
    assert report.dropped.get("unscored pair", 0) > 0  # STS16's gold files have empty lines


SICK_HEADER_LINE = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"


def test_sick_reader_skips_the_header_and_counts_bad_rows(write_file):
    raw = write_file(
        "SICK_test_annotated.txt",
        SICK_HEADER_LINE + "1\tA man\tA person\t4.5\tENTAILMENT\n2\tonly\tthree\n3\tx\ty\tnan?\tNEUTRAL\n\n",
    )
    report = StepReport("sick")
    subset = sts.read_sick(raw, "test", report)
    assert (subset.sentence1, subset.sentence2, subset.scores.tolist()) == (["A man"], ["A person"], [4.5])
    assert report.rows_in == 4 and report.rows_out == 1
    assert report.dropped == {"expected 5 tab-separated columns, found 3": 1,
                              "relatedness score is not a number": 1, "empty line": 1}
    assert report.examples["relatedness score is not a number"] == [f"{raw.label}:4"]
    with pytest.raises(BadInputError, match=r"SICK_test_annotated\.txt:3"):
        sts.read_sick(raw, "test", StepReport("sick"), on_bad_input="error")


def test_a_file_without_the_sick_header_is_rejected(write_file):
    raw = write_file("SICK_trial.txt", "1\tA man\tA person\t4.5\tENTAILMENT\n")
    with pytest.raises(BadInputError, match=r"SICK_trial\.txt:1: expected the SICK header"):
        sts.read_sick(raw, "trial", StepReport("sick"))


def test_score_sts_all_wmean_and_per_subset():
    vectors = {"a": np.array([1.0, 0]), "b": np.array([1.0, 0.1]), "c": np.array([0.0, 1]),
               "d": np.array([1.0, 1]), "e": np.array([-1.0, 0.2])}
    first = sts.StsSubset("STS12", "one", ["a", "a", "a"], ["b", "d", "c"], np.array([5.0, 3, 1]))
    second = sts.StsSubset("STS12", "two", ["c", "c"], ["d", "e"], np.array([1.0, 4]))
    metrics = sts.score_sts({"sts12": [first, second]}, vectors)
    # subset one ranks perfectly (cos 0.995 > 0.707 > 0); subset two is reversed (0.707 > 0.196)
    assert metrics["sts12/one"] == pytest.approx(100.0)
    assert metrics["sts12/two"] == pytest.approx(-100.0)
    assert metrics["sts12_wmean"] == pytest.approx((3 * 100 - 2 * 100) / 5)
    predicted = [sts.cosine_scores(np.stack([vectors[s] for s in x.sentence1]),
                                   np.stack([vectors[s] for s in x.sentence2])) for x in (first, second)]
    assert metrics["sts12"] == pytest.approx(sts.aggregate_all(predicted, [first.scores, second.scores]))
    assert "sts_avg" not in metrics  # only defined over the 7 tasks


def test_real_benchmark_sizes(sts_partitions):
    report = StepReport("sts")
    suite = sts.read_sts_benchmark(sts_partitions, report)
    sizes = {task: sum(len(s) for s in subsets) for task, subsets in suite.items()}
    # the dataset README's scored-pair counts, and SentEval's 4,927 SICK-R test pairs
    assert sizes == {"sts12": 3108, "sts13": 1500, "sts14": 3750, "sts15": 3000, "sts16": 1186,
                     "stsb": 1379, "sickr": 4927}
    assert set(report.dropped) == {"unscored pair"}
    dev = sts.read_dev_sets(sts_partitions, StepReport("dev"))
    assert [len(dev["stsb_dev"][0]), len(dev["sickr_dev"][0])] == [1500, 500]


def test_missing_benchmark_file_names_it(sts_partitions):
    partial = {pid: load for pid, load in sts_partitions.items() if not pid.startswith("SICK/")}
    with pytest.raises(FileNotFoundError, match="SICK-R test: expected the raw STS file SICK/SICK_test_annotated.txt"):
        sts.read_sts_benchmark(partial, StepReport("sts"))


def test_stsb_test_spearman_equals_sentence_transformers(sts_partitions):
    """The protocol's number for the default encoder is the one sentence-transformers'
    own evaluator gives on the same pairs and pooling."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, resolve_encoder
    from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder

    suite = {"stsb": sts.read_sts_benchmark(sts_partitions, StepReport("sts"))["stsb"]}
    ours = sts.evaluate_sts(suite, SentenceEncoder.load(DEFAULT_ENCODER, "mean", device="cpu").encode)["stsb"]
    subset = suite["stsb"][0]
    evaluator = EmbeddingSimilarityEvaluator(subset.sentence1, subset.sentence2, subset.scores.tolist(), name="stsb")
    model = SentenceTransformer(resolve_encoder(DEFAULT_ENCODER), device="cpu")
    theirs = evaluator(model)[evaluator.primary_metric] * 100
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert ours > 75  # and it is a real score, not a degenerate one


def test_dev_scorer_on_real_dev_sets(sts_partitions):
    scorer = sts.DevScorer(sts_partitions)
    calls = []

    def encode(sentences):
        calls.append(len(sentences))
        rng = np.random.default_rng(0)
        return rng.normal(size=(len(sentences), 8))

    scores = scorer(encode)
    assert set(scores) == {"stsb_dev", "sickr_dev", "dev_avg"}
    assert len(calls) == 1 and calls[0] == len(set(scorer.sentences))  # each sentence encoded once
    assert abs(scores["stsb_dev"]) < 10  # random embeddings: no correlation
    assert scores["dev_avg"] == pytest.approx((scores["stsb_dev"] + scores["sickr_dev"]) / 2)


def test_unscored_pairs_are_logged_as_the_files_layout_not_as_lost_rows(caplog, tmp_path):
    """The 13,497 pairs STS12-16 list without a gold score are counted in the report as
    before, and the log says why they are left out instead of calling them dropped."""
    import logging

    from contrastive_sentence_embeddings.data.report import StepReport

    report = StepReport("evaluation_data", rows_in=5, rows_out=2)
    report.drop("unscored pair", 2, where="STS.gs.x.txt:2")
    report.drop("gold score is not a number", where="STS.gs.x.txt:4")
    with caplog.at_level(logging.INFO):
        report.log(logging.getLogger("tests.sts_report"))
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == "evaluation_data: 5 rows in, 2 rows out, 1 dropped, 2 left out by design"
    assert any(line.startswith("evaluation_data: left out 2 (unscored pair: the STS files list pairs without a gold "
                               "score") and "not a fault" in line for line in lines)
    assert "evaluation_data: dropped 1 (gold score is not a number), e.g. STS.gs.x.txt:4" in lines
    assert report.to_dict()["dropped"] == {"gold score is not a number": 1, "unscored pair": 2}


def test_a_subset_whose_every_line_is_bad_is_named_before_encoding_and_the_task_scored_on_the_rest(
        mirror_dir, tmp_path, caplog):
    """Lines ending in a tab (3 fields): every pair of STS12 MSRpar is dropped and counted;
    the subset is named with why, before anything is encoded, and STS12 is scored on its
    other four subsets (fewer pairs than the benchmark: the evaluation report says so)."""
    import shutil

    from contrastive_sentence_embeddings.data.raw_file import folder_partitions

    copy = tmp_path / "sts"
    shutil.copytree(mirror_dir / "sts", copy)
    broken = copy / "STS12-en-test" / "STS.input.MSRpar.txt"
    lines = broken.read_text(encoding="utf-8").splitlines()
    broken.write_text("".join(line + "\t\n" for line in lines), encoding="utf-8")
    report = StepReport("sts")
    with caplog.at_level("WARNING"):
        suite = sts.read_sts_benchmark(folder_partitions(copy), report)
    assert [subset.subset for subset in suite["sts12"]] == ["MSRvid", "SMTeuroparl", "surprise.OnWN",
                                                            "surprise.SMTnews"]
    [named] = report.extra["empty_subsets"]
    assert named.startswith(f"STS12/MSRpar: no pair left of {len(lines)} lines (expected 2 tab-separated sentences, "
                            f"found 3 fields: {len(lines)} (e.g. ")
    assert "STS12/MSRpar: no pair left" in caplog.text
    assert report.dropped["expected 2 tab-separated sentences, found 3 fields"] == len(lines)
    counts = sts.pair_counts(suite)
    assert counts["sts12"] == 3108 - 750 and sts.check_pair_counts(counts)[0].startswith(
        "sts12: evaluated on 2358 pairs, the benchmark has 3108")
    sentences = sts.distinct_sentences(suite)
    rng = np.random.default_rng(0)
    scores = sts.score_sts(suite, dict(zip(sentences, rng.normal(size=(len(sentences), 4)))))
    assert "sts12/MSRpar" not in scores and "sts12/MSRvid" in scores and np.isfinite(scores["sts_avg"])

    # Every subset of a task lost: the task is named with each file's reason, still before
    # encoding, and left out; the other six are scored, sts_avg is not computed.
    for other in (copy / "STS12-en-test").glob("STS.input.*.txt"):
        other.write_text("".join(line + "\t\n" for line in other.read_text(encoding="utf-8").splitlines()))
    report = StepReport("sts")
    with caplog.at_level("WARNING"):
        suite = sts.read_sts_benchmark(folder_partitions(copy), report)
    assert sorted(suite) == sorted(set(sts.STS_TASKS) - {"sts12"})
    assert re.match(r"STS12/MSRpar: no pair left of 750 lines \(expected 2 tab-separated sentences, found \d fields: "
                    r"750 \(e\.g\. .*STS12/SMTeuroparl: no pair left", report.extra["missing_tasks"]["sts12"])
    assert "sts12 is not scored (no pair left)" in caplog.text
    sentences = sts.distinct_sentences(suite)
    scores = sts.score_sts(suite, dict(zip(sentences, rng.normal(size=(len(sentences), 4)))))
    assert "sts12" not in scores and "sts_avg" not in scores and np.isfinite(scores["sts13"])

    # STS-B's test file with every line cut the same way: named by its file.
    stsb = copy / "STSBenchmark" / "sts-test.csv"
    stsb.write_text("".join(line.split("\t")[0] + "\n" for line in stsb.read_text(encoding="utf-8").splitlines()), encoding="utf-8")
    report = StepReport("sts")
    suite = sts.read_sts_benchmark(folder_partitions(copy), report)
    assert "stsb" not in suite and "STSBenchmark/sts-test.csv: no pair left of 1379 lines (expected 7 tab-separated columns" in (
        report.extra["missing_tasks"]["stsb"])

    # Nothing left anywhere: one error naming every task's reason.
    for path in copy.rglob("STS.input.*.txt"):
        path.write_text("".join(line + "\t\n" for line in path.read_text(encoding="utf-8").splitlines()))
    for path in [copy / "SICK" / "SICK_test_annotated.txt"]:
        lines = path.read_text(encoding="utf-8").splitlines()
        path.write_text("\n".join([lines[0], *(line + "\tx" for line in lines[1:])]) + "\n", encoding="utf-8")
    with pytest.raises(BadInputError, match=r"no STS task has a pair left to score: STS12/MSRpar: no pair left"):
        sts.read_sts_benchmark(folder_partitions(copy), StepReport("sts"))


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_benchmark_file_is_read_whole_with_its_non_ascii_lines(mirror_dir, tmp_path, codec):
    """The real SICK test file saved as UTF-16 (with a byte-order mark, and without one in
    either byte order): the same pairs as the original, non-ASCII sentences included,
    each line counted as decoded from UTF-16."""
    from contrastive_sentence_embeddings.data.raw_file import RawFile

    original = (mirror_dir / "sts/SICK/SICK_test_annotated.txt").read_text(encoding="utf-8")
    original = original.replace("A man is", "A café man is", 1)  # a non-ASCII sentence, as real exports have
    plain, wide = tmp_path / "plain.txt", tmp_path / "wide.txt"
    plain.write_text(original, encoding="utf-8")
    wide.write_bytes(original.encode(codec))
    expected = sts.read_sick(RawFile(plain), "test", StepReport("sick"))
    report = StepReport("sick")
    read = sts.read_sick(RawFile(wide), "test", report)
    assert (read.sentence1, read.sentence2, read.scores.tolist()) == (
        expected.sentence1, expected.sentence2, expected.scores.tolist())
    assert any("café" in sentence for sentence in read.sentence1)
    [variant] = [kind for kind in report.variants if kind.startswith("decoded as utf-16")]
    assert report.variants[variant] == len(original.splitlines())


def test_a_benchmark_file_cut_mid_line_loses_the_fragment_counted(mirror_dir, tmp_path):
    from contrastive_sentence_embeddings.data.raw_file import CUT_LINE, RawFile

    data = (mirror_dir / "sts/SICK/SICK_test_annotated.txt").read_bytes()
    cut = tmp_path / "cut.txt"
    cut.write_bytes(data[: len(data) - 20])  # the last line loses its end (score, label, line ending)
    report = StepReport("sick")
    read = sts.read_sick(RawFile(cut), "test", report)
    assert len(read) == 4927 - 1 and report.dropped[CUT_LINE] == 1
    assert report.examples[CUT_LINE] == [f"{RawFile(cut).label}:4928"]
    # A reader of one's own text keeps such a line (many texts end without a line ending).
    kept = StepReport("own")
    assert len(list(RawFile(cut).iter_lines(kept))) == 4928 and not kept.dropped


def test_a_sick_header_with_trailing_whitespace_is_read_and_another_is_named_column_by_column(write_file):
    spaced = write_file("SICK_trial.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment  \r\n"
                                          "1\tA man\tA person\t4.5\tENTAILMENT\n")
    assert len(sts.read_sick(spaced, "trial", StepReport("sick"))) == 1
    other = write_file("SICK_other.txt", "pair_ID\tsentence_A\tsentence_B\trelatedness\tentailment_judgment\n"
                                         "1\tA man\tA person\t4.5\tENTAILMENT\n")
    with pytest.raises(BadInputError, match=r"SICK_other\.txt:1: expected the SICK header .*column 4 is 'relatedness' "
                                            r"where the header has 'relatedness_score'"):
        sts.read_sick(other, "trial", StepReport("sick"))


def test_a_model_selection_set_with_no_pair_left_stops_before_training(mirror_dir, tmp_path):
    """STS-B dev with every line cut to one column: model selection cannot go on, so the
    dev sets' reader stops, naming the file and the reason, before any training step."""
    import shutil

    from contrastive_sentence_embeddings.data.raw_file import folder_partitions

    copy = tmp_path / "sts"
    shutil.copytree(mirror_dir / "sts", copy)
    dev = copy / "STSBenchmark" / "sts-dev.csv"
    lines = dev.read_text(encoding="utf-8").splitlines()
    dev.write_text("".join(line.split("\t")[0] + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(BadInputError, match=rf"STSBenchmark/sts-dev\.csv: no pair left of {len(lines)} lines "
                                            r"\(expected 7 tab-separated columns, found 1: \d+ .*stsb_dev is a "
                                            r"model-selection set"):
        sts.DevScorer(folder_partitions(copy))
