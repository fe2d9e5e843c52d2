"""SentEval transfer tasks: readers on the real mirror files and on hand-made bad
files, the classifier protocols on synthetic embeddings, and the embedding cache."""

from collections import Counter

import numpy as np
import pytest

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import BadInputError, StepReport
from contrastive_sentence_embeddings.evaluation import transfer
from contrastive_sentence_embeddings.encoders.embedding_cache import EmbeddingCache
from contrastive_sentence_embeddings.evaluation.transfer import (
    TransferSplit,
    TransferTask,
)

# The row counts published with the data (../shared/datasets/README.md).
README_COUNTS = {
    "MR": 10662,
    "CR": 3775,
    "SUBJ": 10000,
    "MPQA": 10606,
    "SST2": {"train": 67349, "dev": 872, "test": 1821},
    "TREC": {"train": 5452, "test": 500},
    "MRPC": {"train": 4076, "test": 1725},
}


def _line_count(path) -> int:
    return len(path.read_bytes().splitlines())


# ---------------------------------------------------------------- real mirror files


@pytest.fixture
def transfer_dir(mirror_dir):
    return mirror_dir / "transfer"


@pytest.fixture
def real_partitions(transfer_dir, partitions):
    return partitions(
        {p.relative_to(transfer_dir).as_posix(): RawFile(p) for p in transfer_dir.rglob("*") if p.is_file()}
    )


@pytest.fixture
def read_real(real_partitions):
    """Read some tasks from the mirror: ``(tasks, report)``."""

    def read(*names: str):
        report = StepReport("transfer")
        return transfer.read_transfer_tasks(real_partitions, report, tasks=names), report

    return read


def test_real_single_sentence_tasks_keep_every_line(read_real, transfer_dir):
    tasks, report = read_real("MR", "CR", "SUBJ", "MPQA")
    files = {
        "MR": ("MR/rt-polarity.neg", "MR/rt-polarity.pos"),
        "CR": ("CR/custrev.neg", "CR/custrev.pos"),
        "SUBJ": ("SUBJ/subj.subjective", "SUBJ/subj.objective"),
        "MPQA": ("MPQA/mpqa.neg", "MPQA/mpqa.pos"),
    }
    for name, (negative, positive) in files.items():
        task = tasks[name]
        assert task.protocol == "cv"
        lines = [_line_count(transfer_dir / negative), _line_count(transfer_dir / positive)]
        assert len(task) == sum(lines) == README_COUNTS[name], name
        assert Counter(task.data.labels.tolist()) == {0: lines[0], 1: lines[1]}, name
    # SentEval keeps the blank lines of CR and MPQA as (empty) sentences: reported, not dropped.
    blank = {
        name: sum(
            sum(1 for line in (transfer_dir / f).read_bytes().splitlines() if not line.strip())
            for f in files[name]
        )
        for name in ("CR", "MPQA")
    }
    assert blank["CR"] > 0 and blank["MPQA"] > 0
    assert tasks["CR"].data.sentences.count("") == blank["CR"]
    assert tasks["MPQA"].data.sentences.count("") == blank["MPQA"]
    kept = report.extra["blank sentences kept"]
    assert sum(v for k, v in kept.items() if "/CR/" in k) == blank["CR"]
    assert not report.dropped  # the mirror has no bad lines
    assert report.rows_in == report.rows_out


def test_real_sst2_splits(read_real, transfer_dir):
    sst = read_real("SST2")[0]["SST2"]
    assert sst.protocol == "split" and not sst.is_pair_task
    for split in ("train", "dev", "test"):
        part = getattr(sst, split)
        lines = (transfer_dir / f"SST/binary/sentiment-{split}").read_text(encoding="utf-8").splitlines()
        assert len(part) == len(lines) == README_COUNTS["SST2"][split]
        expected = Counter(int(line.rsplit("\t", 1)[1]) for line in lines)
        assert Counter(part.labels.tolist()) == expected
        assert set(expected) == {0, 1}
    # The label column is not part of the sentence; whitespace is normalised.
    assert all("\t" not in s and s == s.strip() for s in sst.train.sentences[:1000])


def test_sst2_training_rows_are_a_seeded_sample_and_the_test_set_is_whole(read_real):
    sst = read_real("SST2")[0]["SST2"]
    cut = transfer.subsample_train(sst, 10000, seed=1111)
    assert len(cut.train) == 10000 and cut.test is sst.test and cut.dev is sst.dev
    # The kept rows, each with its own label, are a subsequence of the file's rows (in file
    # order, none twice; SST-2 repeats some sentences, so rows are matched in order).
    rows = iter(zip(sst.train.sentences, sst.train.labels.tolist()))
    assert all(row in rows for row in zip(cut.train.sentences, cut.train.labels.tolist()))
    # The same seed draws the same rows; another seed others; both classes near the file's share.
    assert transfer.subsample_train(sst, 10000, seed=1111).train.sentences == cut.train.sentences
    assert transfer.subsample_train(sst, 10000, seed=7).train.sentences != cut.train.sentences
    assert abs(cut.train.labels.mean() - sst.train.labels.mean()) < 0.02
    assert transfer.subsample_train(sst, len(sst.train), seed=1111) is sst  # nothing to cut
    with pytest.raises(ValueError, match="MR: only a task with a training split"):
        transfer.subsample_train(read_real("MR")[0]["MR"], 100, seed=0)


def test_a_cut_training_split_is_said_in_the_evaluation_report(real_partitions, partitions):
    from contrastive_sentence_embeddings.evaluation.evaluator import EvaluationData, evaluation_settings

    settings = evaluation_settings({"sts": False, "alignment": False, "transfer": True,
                                    "transfer_tasks": ["SST2", "TREC"], "transfer_train_rows": {"SST2": 500, "TREC": None}})
    data = EvaluationData.read(partitions({}), real_partitions, settings)
    assert len(data.transfer["SST2"].train) == 500 and len(data.transfer["TREC"].train) == README_COUNTS["TREC"]["train"]
    report = data.evaluation_report()
    assert report["data"]["transfer training rows used"] == {"SST2": {"used": 500, "read": 67349, "seed": 1111}}
    assert report["warnings"] == ["SST2: the classifier trained on 500 of 67,349 training rows "
                                  "(evaluation.transfer_train_rows, seed 1111); tested on the whole test set"]


@pytest.mark.parametrize("rows, problem", [
    ({"MR": 100}, "evaluation.transfer_train_rows = {'MR': 100}: names 'MR', which is not one of SST2, TREC, MRPC"),
    ({"SST2": 1}, "evaluation.transfer_train_rows.SST2 = 1: must be an integer >= 2 or null"),
    ({"SST2": True}, "evaluation.transfer_train_rows.SST2 = true: must be an integer >= 2 or null"),
    ({"SST2": "10k"}, "evaluation.transfer_train_rows.SST2 = '10k': must be an integer >= 2 or null"),
    ([10000], "evaluation.transfer_train_rows = \\[10000\\]: must be a mapping of SST2 / TREC / MRPC")])
def test_a_bad_training_row_limit_is_a_parameter_error(rows, problem):
    from contrastive_sentence_embeddings.configuration.strict import ParameterError
    from contrastive_sentence_embeddings.evaluation.evaluator import evaluation_settings

    with pytest.raises(ParameterError, match=problem):
        evaluation_settings({"transfer_train_rows": rows})


def test_real_trec_has_six_coarse_classes_and_reads_latin1(read_real, transfer_dir):
    trec = read_real("TREC")[0]["TREC"]
    for split, name in (("train", "train_5500.label"), ("test", "TREC_10.label")):
        part = getattr(trec, split)
        text = (transfer_dir / "TREC" / name).read_bytes().decode("iso-8859-1")
        coarse = Counter(line.split(":", 1)[0] for line in text.splitlines())
        assert len(part) == sum(coarse.values()) == README_COUNTS["TREC"][split]
        assert Counter(trec.classes[label] for label in part.labels) == coarse
    assert len(set(trec.train.labels.tolist())) == 6 == len(trec.classes)
    # The one non-ASCII byte of the training file (0xF0) is read as ISO-8859-1, not lost.
    assert any("\u00f0" in s for s in trec.train.sentences)
    # The question, without the "COARSE:fine" label.
    assert trec.test.sentences[0] == "How far is it from Denver to Aspen ?"


def test_real_mrpc_pairs(read_real, transfer_dir):
    mrpc = read_real("MRPC")[0]["MRPC"]
    assert mrpc.is_pair_task
    for split in ("train", "test"):
        part = getattr(mrpc, split)
        lines = (transfer_dir / f"MRPC/msr_paraphrase_{split}.txt").read_text(encoding="utf-8-sig").splitlines()
        assert lines[0].startswith("Quality")
        assert len(part) == len(part.second) == len(lines) - 1 == README_COUNTS["MRPC"][split]
        assert set(part.labels.tolist()) == {0, 1}
        assert Counter(part.labels.tolist()) == Counter(int(line.split("\t")[0]) for line in lines[1:])
        assert all(s and t for s, t in zip(part.sentences, part.second))
    assert not mrpc.train.sentences[0].startswith("\ufeff")


# ----------------------------------------------------------------------- bad input


def _trec_files(write_file, train: bytes, test: bytes = b"NUM:dist How far ?\n"):
    return {
        "TREC/train_5500.label": write_file("TREC/train_5500.label", train),
        "TREC/TREC_10.label": write_file("TREC/TREC_10.label", test),
    }


def test_undecodable_line_is_counted_with_its_location(write_file, partitions):
    files = {
        "MR/rt-polarity.pos": write_file("MR/rt-polarity.pos", b"good film\n\xff\xfe broken\ngreat\n"),
        "MR/rt-polarity.neg": write_file("MR/rt-polarity.neg", "bad film\n"),
    }
    report = StepReport("transfer")
    tasks = transfer.read_transfer_tasks(partitions(files), report, tasks=("MR",))
    assert tasks["MR"].data.sentences == ["bad film", "good film", "great"]
    assert tasks["MR"].data.labels.tolist() == [0, 1, 1]
    assert sum(report.dropped.values()) == 1
    (reason,) = report.dropped
    assert reason.startswith("not utf-8")
    assert report.examples[reason] == [f"{files['MR/rt-polarity.pos'].label}:2 (byte 0)"]  # the offset of the first bad byte within the line
    assert report.rows_in == 4 and report.rows_out == 3
    with pytest.raises(BadInputError, match=r"rt-polarity\.pos:2"):
        transfer.read_transfer_tasks(partitions(files), StepReport("t"), tasks=("MR",), on_bad_input="error")


def test_trec_train_is_read_as_latin1_and_a_line_without_colon_is_bad(write_file, partitions):
    files = _trec_files(write_file, b"LOC:city Which sister\xf0city ?\nDESC How did it go ?\nHUM:ind Who ?\n")
    report = StepReport("transfer")
    trec = transfer.read_transfer_tasks(partitions(files), report, tasks=("TREC",))["TREC"]
    assert trec.train.sentences == ["Which sister\u00f0city ?", "Who ?"]
    assert [trec.classes[i] for i in trec.train.labels] == ["LOC", "HUM"]
    where = f"{files['TREC/train_5500.label'].label}:2"
    assert report.rows_in == 4 and report.rows_out == 3 and sum(report.dropped.values()) == 1
    (reason,) = report.dropped
    assert "':'" in reason and report.examples[reason] == [where]
    with pytest.raises(BadInputError, match=r"train_5500\.label:2"):
        transfer.read_transfer_tasks(partitions(files), StepReport("t"), tasks=("TREC",), on_bad_input="error")


def test_trec_unknown_coarse_class_is_bad(write_file, partitions):
    files = _trec_files(write_file, b"NUM:date When ?\nFOO:bar What ?\n")
    report = StepReport("transfer")
    trec = transfer.read_transfer_tasks(partitions(files), report, tasks=("TREC",))["TREC"]
    assert len(trec.train) == 1
    assert report.dropped == {"unknown TREC coarse class 'FOO'": 1}


def test_mrpc_wrong_column_count_is_bad_and_header_is_not_a_row(write_file, partitions):
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    files = {
        "MRPC/msr_paraphrase_train.txt": write_file(
            "MRPC/msr_paraphrase_train.txt",
            header + "1\t1\t2\tA cat sat .\tThe cat sat .\n0\t3\t4\tonly one sentence\n0\t5\t6\tYes .\tNo .\n",
        ),
        "MRPC/msr_paraphrase_test.txt": write_file("MRPC/msr_paraphrase_test.txt", header + "1\t7\t8\tx\ty\n"),
    }
    report = StepReport("transfer")
    mrpc = transfer.read_transfer_tasks(partitions(files), report, tasks=("MRPC",))["MRPC"]
    assert mrpc.train.sentences == ["A cat sat .", "Yes ."]
    assert mrpc.train.second == ["The cat sat .", "No ."]
    assert mrpc.train.labels.tolist() == [1, 0]
    assert report.dropped == {"expected 5 tab-separated columns, found 4": 1}
    assert report.examples["expected 5 tab-separated columns, found 4"] == [
        f"{files['MRPC/msr_paraphrase_train.txt'].label}:3"
    ]
    # Rows in = rows kept + rows dropped: the two header lines are not rows.
    assert report.rows_in == 4 == report.rows_out + report.rows_dropped
    with pytest.raises(BadInputError, match=r"msr_paraphrase_train\.txt:3: expected 5"):
        transfer.read_transfer_tasks(partitions(files), StepReport("t"), tasks=("MRPC",), on_bad_input="error")


def test_sst_label_must_be_0_or_1(write_file, partitions):
    files = {
        f"SST/binary/sentiment-{s}": write_file(f"SST/binary/sentiment-{s}", "fine \t1\nawful \t0\n")
        for s in ("dev", "test")
    }
    files["SST/binary/sentiment-train"] = write_file("SST/binary/sentiment-train", "ok \t1\nmeh \t2\nno label\n")
    report = StepReport("transfer")
    sst = transfer.read_transfer_tasks(partitions(files), report, tasks=("SST2",))["SST2"]
    assert sst.train.sentences == ["ok"] and sst.train.labels.tolist() == [1]
    assert report.dropped == {"SST label '2' is not 0 or 1": 1, "no tab-separated label": 1}


def test_missing_file_names_the_task_and_partition(write_file, partitions):
    files = {"MRPC/msr_paraphrase_train.txt": write_file("MRPC/msr_paraphrase_train.txt", "1\t1\t2\ta\tb\n")}
    with pytest.raises(FileNotFoundError, match=r"MRPC.*MRPC/msr_paraphrase_test\.txt"):
        transfer.read_transfer_tasks(partitions(files), StepReport("t"), tasks=("MRPC",))


def test_unknown_task_name_is_an_error(partitions):
    with pytest.raises(ValueError, match="SST5"):
        transfer.read_transfer_tasks(partitions({}), StepReport("t"), tasks=("SST5",))


# ------------------------------------------------------------- classifier protocol


def _blobs(rng, n_per_class: int, n_classes: int = 2, dim: int = 8, distance: float = 6.0):
    """Well separated Gaussian blobs: class k centred at distance * e_k."""
    centres = distance * np.eye(n_classes, dim)
    x = np.concatenate([centres[k] + rng.standard_normal((n_per_class, dim)) for k in range(n_classes)])
    y = np.repeat(np.arange(n_classes), n_per_class)
    return x, y


class DictEncoder:
    """Maps sentences to fixed vectors; records every call."""

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors
        self.calls: list[list[str]] = []

    def __call__(self, sentences: list[str]) -> np.ndarray:
        self.calls.append(list(sentences))
        return np.stack([self.vectors[s] for s in sentences])


def _split(x, y, prefix: str, vectors: dict) -> TransferSplit:
    names = [f"{prefix}{i}" for i in range(len(y))]
    vectors.update(zip(names, x))
    return TransferSplit(names, y)


@pytest.mark.parametrize("shuffle_labels", [False, True])
def test_cv_protocol_separable_vs_shuffled(shuffle_labels):
    rng = np.random.default_rng(0)
    x, y = _blobs(rng, 100)
    if shuffle_labels:
        y = rng.permutation(y)
    vectors: dict[str, np.ndarray] = {}
    task = TransferTask("blobs", "cv", ("a", "b"), data=_split(x, y, "s", vectors))
    scores = transfer.evaluate_transfer({"blobs": task}, DictEncoder(vectors), k_folds=5, n_jobs=1)["blobs"]
    assert scores["n"] == 200
    assert scores["C"] in transfer.L2_GRID
    if shuffle_labels:
        assert scores["acc"] < 65
    else:
        assert scores["acc"] >= 95 and scores["dev_acc"] >= 95


@pytest.mark.parametrize("shuffle_labels", [False, True])
def test_split_protocol_with_dev(shuffle_labels):
    rng = np.random.default_rng(1)
    vectors: dict[str, np.ndarray] = {}
    parts = {}
    for name, n in (("train", 150), ("dev", 50), ("test", 100)):
        x, y = _blobs(rng, n)
        parts[name] = _split(x, rng.permutation(y) if shuffle_labels else y, f"{name}-", vectors)
    task = TransferTask("sst-like", "split", ("neg", "pos"), **parts)
    scores = transfer.evaluate_transfer({"t": task}, DictEncoder(vectors), n_jobs=1)["t"]
    assert scores["n"] == 200
    assert "f1" not in scores
    assert (scores["acc"] < 65) if shuffle_labels else (scores["acc"] >= 95)


def test_split_protocol_without_dev_multiclass():
    """TREC's shape: no dev set (C by inner CV on train), more than two classes."""
    rng = np.random.default_rng(2)
    vectors: dict[str, np.ndarray] = {}
    x, y = _blobs(rng, 60, n_classes=4)
    train = _split(x, y, "train-", vectors)
    x, y = _blobs(rng, 25, n_classes=4)
    test = _split(x, y, "test-", vectors)
    task = TransferTask("trec-like", "split", ("a", "b", "c", "d"), train=train, test=test)
    scores = transfer.evaluate_transfer({"t": task}, DictEncoder(vectors), k_folds=5, n_jobs=1)["t"]
    assert scores["acc"] >= 95 and scores["n"] == 100
    assert scores["dev_acc"] >= 95  # the mean inner-CV accuracy at the chosen C


def _pairs(rng, n: int, prefix: str, vectors: dict, shuffle_labels: bool = False) -> TransferSplit:
    """Label 1: v is u plus a little noise (a paraphrase); label 0: v is unrelated."""
    dim = 8
    u = rng.standard_normal((n, dim))
    y = rng.integers(0, 2, n)
    v = np.where(y[:, None] == 1, u + 0.05 * rng.standard_normal((n, dim)), rng.standard_normal((n, dim)))
    first = [f"{prefix}u{i}" for i in range(n)]
    second = [f"{prefix}v{i}" for i in range(n)]
    vectors.update(zip(first, u))
    vectors.update(zip(second, v))
    return TransferSplit(first, rng.permutation(y) if shuffle_labels else y, second)


@pytest.mark.parametrize("shuffle_labels", [False, True])
def test_pair_protocol(shuffle_labels):
    rng = np.random.default_rng(3)
    vectors: dict[str, np.ndarray] = {}
    task = TransferTask(
        "mrpc-like",
        "split",
        ("not paraphrase", "paraphrase"),
        train=_pairs(rng, 300, "train-", vectors, shuffle_labels),
        test=_pairs(rng, 200, "test-", vectors, shuffle_labels),
    )
    scores = transfer.evaluate_transfer({"t": task}, DictEncoder(vectors), k_folds=5, n_jobs=1)["t"]
    assert scores["n"] == 200 and "f1" in scores
    if shuffle_labels:
        assert scores["acc"] < 65
    else:
        assert scores["acc"] >= 95 and scores["f1"] >= 95


def test_pair_features_by_hand():
    u = np.array([[1.0, -2.0], [0.5, 0.0]])
    v = np.array([[3.0, 1.0], [0.5, 4.0]])
    expected = np.array(
        [
            # u          v          |u - v|     u * v
            [1.0, -2.0, 3.0, 1.0, 2.0, 3.0, 3.0, -2.0],
            [0.5, 0.0, 0.5, 4.0, 0.0, 4.0, 0.25, 0.0],
        ]
    )
    np.testing.assert_array_equal(transfer.pair_features(u, v), expected)
    np.testing.assert_array_equal(transfer.senteval_pair_features(u, v), expected[:, 4:])


def test_f1_is_of_the_positive_class_by_hand():
    # A 1-d problem the model gets right except where the test labels say otherwise:
    # predictions on the test points are [1, 1, 0, 0], gold is [1, 0, 0, 0].
    train_x = np.array([[-2.0], [-1.0], [1.0], [2.0]] * 5)
    train_y = np.array([0, 0, 1, 1] * 5)
    test_x = np.array([[1.5], [0.8], [-0.8], [-1.5]])
    scores = transfer.fit_and_score(train_x, train_y, test_x, np.array([1, 0, 0, 0]), c=100.0, positive_label=1)
    assert scores["acc"] == pytest.approx(75.0)
    assert scores["f1"] == pytest.approx(100 * 2 * 1 / (2 * 1 + 1 + 0))  # tp=1, fp=1, fn=0


def test_c_chosen_on_dev_is_the_most_accurate_by_hand():
    # Training data: 30 positives at x=+1, 10 negatives at x=-1. With C tiny the weight
    # is ~0 and the (unpenalised) intercept predicts the majority class 1 everywhere;
    # with C large the model follows x and predicts 0 at x=-1.
    train_x = np.array([[1.0]] * 30 + [[-1.0]] * 10)
    train_y = np.array([1] * 30 + [0] * 10)
    grid = (1e-4, 100.0)
    dev_x = np.array([[-1.0]] * 4 + [[1.0]] * 6)
    follows_x = np.array([0] * 4 + [1] * 6)  # C=100: 10/10 right, C=1e-4: 6/10
    all_positive = np.array([1] * 10)  # C=1e-4: 10/10 right, C=100: 6/10

    accuracies, _ = transfer.grid_accuracies(train_x, train_y, dev_x, follows_x, grid)
    assert accuracies.tolist() == [0.6, 1.0]
    c, dev_acc, unconverged = transfer.choose_l2_on_dev(train_x, train_y, dev_x, follows_x, grid)
    assert (c, dev_acc, unconverged) == (100.0, 1.0, 0)
    c, dev_acc, _ = transfer.choose_l2_on_dev(train_x, train_y, dev_x, all_positive, grid)
    assert (c, dev_acc) == (1e-4, 1.0)
    # A tie (both right on every x=+1 point) goes to the stronger regularisation.
    c, dev_acc, _ = transfer.choose_l2_on_dev(train_x, train_y, dev_x[4:], follows_x[4:], grid[::-1])
    assert (c, dev_acc) == (1e-4, 1.0)


def test_best_c_ties_go_to_the_smallest_c():
    assert transfer.best_c([4.0, 0.5, 1.0], [0.8, 0.8, 0.7]) == 0.5
    assert transfer.best_c([0.25, 0.5], [0.7, 0.9]) == 0.5


def test_each_distinct_sentence_is_encoded_once():
    rng = np.random.default_rng(4)
    vectors = {f"s{i}": v for i, v in enumerate(rng.standard_normal((6, 4)))}
    train = TransferSplit(["s0", "s1", "s0", "s2"] * 10, np.array([0, 1, 0, 1] * 10))
    test = TransferSplit(["s2", "s3", "s4", "s5"], np.array([1, 0, 1, 0]))
    task = TransferTask("dup", "split", ("a", "b"), train=train, test=test)
    encoder = DictEncoder(vectors)
    transfer.evaluate_transfer({"dup": task}, encoder, k_folds=2, n_jobs=1)
    assert len(encoder.calls) == 1
    (call,) = encoder.calls
    assert sorted(call) == sorted(vectors) and len(call) == len(set(call))


def test_results_do_not_depend_on_n_jobs_and_standardising_also_learns():
    rng = np.random.default_rng(5)
    x, y = _blobs(rng, 40, distance=3.0)
    vectors: dict[str, np.ndarray] = {}
    tasks = {"b": TransferTask("b", "cv", ("a", "b"), data=_split(x, y, "s", vectors))}
    serial = transfer.evaluate_transfer(tasks, DictEncoder(vectors), k_folds=3, n_jobs=1)
    parallel = transfer.evaluate_transfer(tasks, DictEncoder(vectors), k_folds=3, n_jobs=2)
    assert serial == parallel
    scaled = transfer.evaluate_transfer(tasks, DictEncoder(vectors), k_folds=3, n_jobs=1, standardize=True)
    assert scaled["b"]["acc"] >= 90


def test_encoder_output_is_checked():
    task = TransferTask("t", "cv", ("a", "b"), data=TransferSplit(["x", "y"], np.array([0, 1])))
    with pytest.raises(ValueError, match=r"t: encode returned shape \(1, 3\) for 2 sentences"):
        transfer.evaluate_transfer({"t": task}, lambda s: np.zeros((1, 3)), n_jobs=1)
    with pytest.raises(ValueError, match="NaN or infinite values for 1 sentences"):
        transfer.evaluate_transfer({"t": task}, lambda s: np.array([[0.0, 1.0], [np.nan, 1.0]]), n_jobs=1)


def test_task_shape_is_validated():
    part = TransferSplit(["x"], np.array([0]))
    with pytest.raises(ValueError, match="'split' task needs `train` and `test`"):
        TransferTask("t", "split", ("a", "b"), train=part)
    with pytest.raises(ValueError, match="'cv' task"):
        TransferTask("t", "cv", ("a", "b"), data=part, test=part)
    with pytest.raises(ValueError, match="same length"):
        TransferSplit(["x", "y"], np.array([0]))


# --------------------------------------------------------------------------- cache


class CountingEncoder:
    def __init__(self, seed: int = 0):
        self.calls = 0
        self.seed = seed

    def __call__(self, sentences: list[str]) -> np.ndarray:
        self.calls += 1
        return np.random.default_rng(self.seed + self.calls).standard_normal((len(sentences), 5)).astype(np.float32)


def test_cache_hits_on_same_key_and_sentences(tmp_path):
    encoder = CountingEncoder()
    cache = EmbeddingCache(encoder, tmp_path / "cache", "model-a")
    sentences = ["a first sentence", "a second one", "third"]
    first = cache(sentences)
    assert encoder.calls == 1 and cache.misses == 1 and cache.hits == 0
    stored = list((tmp_path / "cache").iterdir())
    assert len(stored) == 1 and stored[0].suffix == ".npy" and len(stored[0].stem) == 64
    # A new cache object (a re-run) with the same key and data does not encode again.
    again = EmbeddingCache(encoder, tmp_path / "cache", "model-a")
    second = again(list(sentences))
    assert encoder.calls == 1 and again.hits == 1
    assert second.dtype == first.dtype and np.array_equal(first, second)


def test_cache_misses_on_other_model_or_other_sentences(tmp_path):
    encoder = CountingEncoder()
    sentences = ["a", "b"]
    EmbeddingCache(encoder, tmp_path, "model-a")(sentences)
    other_model = EmbeddingCache(encoder, tmp_path, "model-b")
    other_model(sentences)
    assert encoder.calls == 2 and other_model.misses == 1
    EmbeddingCache(encoder, tmp_path, "model-a")(["a", "c"])
    assert encoder.calls == 3
    # Length-prefixed hashing: joining sentences differently is a different key.
    cache = EmbeddingCache(encoder, tmp_path, "model-a")
    assert cache.key(["a b"]) != cache.key(["a", "b"]) != cache.key(["ab"])
    assert len(list(tmp_path.glob("*.npy"))) == 3


def test_cache_recomputes_a_damaged_file(tmp_path):
    encoder = CountingEncoder()
    cache = EmbeddingCache(encoder, tmp_path, "m")
    cache(["x"])
    cache.path(["x"]).write_bytes(b"not an npy file")
    result = cache(["x"])
    assert encoder.calls == 2 and result.shape == (1, 5)
    assert cache(["x"]).shape == (1, 5) and encoder.calls == 2


def test_cache_store_puts_embeddings_computed_elsewhere(tmp_path):
    encoder = CountingEncoder()
    cache = EmbeddingCache(encoder, tmp_path, "m")
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    cache.store(["p", "q"], values)
    assert np.array_equal(cache(["p", "q"]), values) and encoder.calls == 0 and cache.hits == 1
