"""SentEval's transfer tasks: a logistic regression trained on frozen sentence embeddings.

Tasks, files (SentEval's originals, partitions of ``data/01_raw/transfer``) and how
each is scored:

======  =====================================  ===========================================
task    files                                  protocol
======  =====================================  ===========================================
MR      ``MR/rt-polarity.{pos,neg}``           "cv": stratified 10-fold CV, L2 chosen by
CR      ``CR/custrev.{pos,neg}``               inner 10-fold CV on each training fold;
SUBJ    ``SUBJ/subj.{objective,subjective}``   the score is the mean test accuracy of the
MPQA    ``MPQA/mpqa.{pos,neg}``                outer folds
SST2    ``SST/binary/sentiment-{train,dev,     "split": L2 chosen on dev, accuracy on test
        test}`` (``sentence<TAB>0|1``)
TREC    ``TREC/train_5500.label``,             "split" without dev: L2 chosen by 10-fold CV
        ``TREC/TREC_10.label``                 on train, accuracy on test (6 coarse
        (``COARSE:fine question``)             classes, the text before ':')
MRPC    ``MRPC/msr_paraphrase_{train,test}     as TREC, on pair features [u, v, |u-v|,
        .txt`` (TSV with a header row)         u*v]; accuracy and F1 of "paraphrase"
======  =====================================  ===========================================

The classifier follows SentEval's scikit-learn path (its ``usepytorch=False``):

* ``sklearn.linear_model.LogisticRegression`` with L2 penalty, its inverse strength
  ``C`` taken from :data:`L2_GRID` = 2^-2 .. 2^3 (SentEval's grid). The best ``C`` is
  the one with the highest (mean) validation accuracy; ties go to the smaller ``C``
  (the stronger regularisation), as ``argmax`` over SentEval's ascending grid does.
  The model is then refitted with that ``C`` on the whole training part (train
  only, never train + dev, as SentEval).
* Solver ``newton-cholesky`` (:data:`SOLVER`), not lbfgs: measured on these tasks,
  lbfgs at its default tolerance stops well before the optimum (and, warm-started
  along the C grid, often does not move at all, so every C gives the same model),
  while a tighter tolerance costs minutes per task (thousands of iterations on MRPC
  and TREC). Newton reaches the optimum in 2-10 steps, so the result does not depend
  on tolerances, thread counts or warm starts. ``max_iter`` (:data:`MAX_ITER`) is a
  safety net; a fit that still does not converge is counted (``unconverged``) and
  logged, never hidden.
* TREC's six classes are fitted one-vs-rest, as scikit-learn's ``LogisticRegression``
  did by default when SentEval was written (liblinear, ``multi_class="ovr"``); it is
  also the form Newton solves cheaply (a multinomial Hessian is 6x larger per side),
  and each of the six models can be warm-started (:class:`LogisticClassifier`).
* The features are NOT standardised by default: SentEval's published numbers (and
  the papers this project reproduces) use the raw embeddings, and the meaning of the
  C grid depends on the feature scale. With Newton's method the raw scale costs no
  convergence speed either. ``standardize=True`` fits a ``StandardScaler`` on each
  training part only (never on validation or test rows) for those who want it.
* Cross-validation folds are ``StratifiedKFold(shuffle=True, random_state=seed)``,
  seed 1111 as SentEval, for the outer and the inner CV alike (``k_folds`` each).
  Exact folds differ from SentEval's (other scikit-learn version, other row order),
  so numbers agree within fold noise, not digit by digit.
* Within one validation fold the grid is walked from small to large ``C`` with warm
  starts (binary tasks): the same optima in fewer Newton steps.
* The CV folds run in parallel processes (``n_jobs``); results do not depend on it.

Text is whitespace-normalised (``" ".join(text.split())``): SentEval tokenises on
whitespace and its batchers join tokens with one space, so this is the exact string
an encoder sees there. CR and MPQA contain blank lines (4 and 3, some at file ends);
SentEval keeps them as empty sentences, so they are kept here too, which gives the
published row counts (3,775 and 10,606) and is reported in the data report
(``extra["blank sentences kept"]``), not silently.

TREC's training file is ISO-8859-1 (one non-ASCII byte, 0xF0 in "sister\u00f0city"
at line 66); read as UTF-8 that line would be lost, so the encoding is set per file
in :data:`FILE_ENCODINGS`.

MRPC features: this platform uses InferSent's [u, v, |u-v|, u*v]. SentEval's own
``mrpc.py`` uses only [|u-v|, u*v]; pass ``pair_features=senteval_pair_features`` to
:func:`evaluate_transfer` to reproduce that.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import EmptyInputError, StepReport, handle_bad_input

logger = logging.getLogger(__name__)

TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
PROTOCOLS = ("cv", "split")

# SentEval's grid for scikit-learn's C (inverse L2 strength): 2^-2 .. 2^3.
L2_GRID = tuple(2.0**t for t in range(-2, 4))
# Newton's method with a Cholesky solve of the (dim x dim) Hessian: on these sizes
# (thousands of rows, 384-1536 dims) it reaches the optimum in 2-10 steps, where
# lbfgs needs hundreds to thousands, or stops early at its default tolerance (and
# then, warm-started, barely moves along the C grid: the grid search is void).
SOLVER = "newton-cholesky"
MAX_ITER = 1000  # a safety net; Newton converges in far fewer steps

# Single-sentence tasks: one file per class; the label is the class's index here.
# Class order follows SentEval (positive / objective = 1).
_CV_FILES: dict[str, tuple[tuple[str, str], ...]] = {
    "MR": (("MR/rt-polarity.neg", "negative"), ("MR/rt-polarity.pos", "positive")),
    "CR": (("CR/custrev.neg", "negative"), ("CR/custrev.pos", "positive")),
    "SUBJ": (("SUBJ/subj.subjective", "subjective"), ("SUBJ/subj.objective", "objective")),
    "MPQA": (("MPQA/mpqa.neg", "negative"), ("MPQA/mpqa.pos", "positive")),
}
_SPLIT_FILES: dict[str, dict[str, str]] = {
    "SST2": {
        "train": "SST/binary/sentiment-train",
        "dev": "SST/binary/sentiment-dev",
        "test": "SST/binary/sentiment-test",
    },
    "TREC": {"train": "TREC/train_5500.label", "test": "TREC/TREC_10.label"},
    "MRPC": {"train": "MRPC/msr_paraphrase_train.txt", "test": "MRPC/msr_paraphrase_test.txt"},
}
# The tasks scored on a training split (a classifier fitted on train, tested on test).
SPLIT_TASKS = tuple(_SPLIT_FILES)
# Files that are not UTF-8 (the catalog hands every raw file out as UTF-8).
FILE_ENCODINGS = {"TREC/train_5500.label": "iso-8859-1"}

SST_CLASSES = ("negative", "positive")
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")  # SentEval's label ids
MRPC_CLASSES = ("not paraphrase", "paraphrase")
MRPC_COLUMNS = 5  # Quality, #1 ID, #2 ID, #1 String, #2 String
MRPC_HEADER_FIRST_FIELD = "Quality"


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class TransferSplit:
    """Labelled rows of one part of a task. ``second`` holds the second sentence of
    each pair for pair tasks (MRPC), and is ``None`` otherwise."""

    sentences: list[str]
    labels: np.ndarray
    second: list[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", np.asarray(self.labels, dtype=np.int64))
        if len(self.labels) != len(self.sentences) or (
            self.second is not None and len(self.second) != len(self.sentences)
        ):
            raise ValueError("sentences, second sentences and labels must have the same length")

    def __len__(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class TransferTask:
    """One transfer task, ready for :func:`evaluate_transfer`.

    ``protocol`` "cv": all rows in ``data``, scored by stratified k-fold CV.
    ``protocol`` "split": ``train`` and ``test`` (and ``dev`` if the task has one;
    without it the L2 strength is chosen by k-fold CV on ``train``). ``classes`` names
    the label ids (``classes[label]``).
    """

    name: str
    protocol: str
    classes: tuple[str, ...]
    data: TransferSplit | None = None
    train: TransferSplit | None = None
    dev: TransferSplit | None = None
    test: TransferSplit | None = None

    def __post_init__(self) -> None:
        if self.protocol == "cv":
            if self.data is None or any(p is not None for p in (self.train, self.dev, self.test)):
                raise ValueError(f"{self.name}: a 'cv' task has all its rows in `data` and no splits")
        elif self.protocol == "split":
            if self.train is None or self.test is None or self.data is not None:
                raise ValueError(f"{self.name}: a 'split' task needs `train` and `test` (and no `data`)")
        else:
            raise ValueError(f"{self.name}: protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if len({part.second is None for part in self.parts.values()}) != 1:
            raise ValueError(f"{self.name}: either every part is a pair part or none is")

    @property
    def parts(self) -> dict[str, TransferSplit]:
        """The parts present, by name ("all", or "train" / "dev" / "test")."""
        if self.protocol == "cv":
            return {"all": self.data}
        named = {"train": self.train, "dev": self.dev, "test": self.test}
        return {name: part for name, part in named.items() if part is not None}

    @property
    def is_pair_task(self) -> bool:
        return next(iter(self.parts.values())).second is not None

    def distinct_sentences(self) -> list[str]:
        """Every sentence of every part once, in first-seen order: what gets encoded."""
        seen: dict[str, None] = {}
        for part in self.parts.values():
            seen.update(dict.fromkeys(part.sentences))
            if part.second is not None:
                seen.update(dict.fromkeys(part.second))
        return list(seen)

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts.values())


# ------------------------------------------------------------------------ readers


def normalize_whitespace(text: str) -> str:
    """What SentEval's whitespace tokenisation and its batchers' ``" ".join`` produce."""
    return " ".join(text.split())


def read_sentence_file(
    raw: RawFile, label: int, report: StepReport, on_bad_input: str = "skip"
) -> tuple[list[str], list[int], int]:
    """Every line of a one-sentence-per-line file (MR, CR, SUBJ, MPQA), all with
    ``label``. Blank lines are kept as empty sentences (SentEval does), and their
    number is returned so that the caller can report them."""
    sentences: list[str] = []
    blank = 0
    for _, line in raw.iter_lines(report, on_bad_input, unterminated="drop"):
        text = normalize_whitespace(line)
        blank += not text
        sentences.append(text)
    report.rows_out += len(sentences)
    return sentences, [label] * len(sentences), blank


def read_sst(raw: RawFile, report: StepReport, on_bad_input: str = "skip") -> TransferSplit:
    """``sentence<TAB>label`` lines of SentEval's binary SST files, label 0 or 1."""
    sentences, labels = [], []
    for _, where, line in raw.iter_located_lines(report, on_bad_input, unterminated="drop"):
        if not line.strip():
            report.drop("empty line", where=where)
            continue
        text, tab, label_text = line.rpartition("\t")
        if not tab:
            handle_bad_input(report, "no tab-separated label", where, on_bad_input)
            continue
        if label_text.strip() not in ("0", "1"):
            handle_bad_input(report, f"SST label {label_text.strip()!r} is not 0 or 1", where, on_bad_input)
            continue
        text = normalize_whitespace(text)
        if not text:
            handle_bad_input(report, "blank sentence", where, on_bad_input)
            continue
        sentences.append(text)
        labels.append(int(label_text))
    report.rows_out += len(labels)
    return TransferSplit(sentences, np.asarray(labels))


def read_trec(raw: RawFile, report: StepReport, on_bad_input: str = "skip") -> TransferSplit:
    """``COARSE:fine question`` lines of TREC; the label is the coarse class."""
    sentences, labels = [], []
    for _, where, line in raw.iter_located_lines(report, on_bad_input, unterminated="drop"):
        if not line.strip():
            report.drop("empty line", where=where)
            continue
        head, _, question = line.partition(" ")
        coarse, colon, _fine = head.partition(":")
        if not colon:
            handle_bad_input(report, "no ':' in the TREC label (expected COARSE:fine question)", where, on_bad_input)
            continue
        if coarse not in TREC_CLASSES:
            handle_bad_input(report, f"unknown TREC coarse class {coarse!r}", where, on_bad_input)
            continue
        question = normalize_whitespace(question)
        if not question:
            handle_bad_input(report, "no question after the TREC label", where, on_bad_input)
            continue
        sentences.append(question)
        labels.append(TREC_CLASSES.index(coarse))
    report.rows_out += len(labels)
    return TransferSplit(sentences, np.asarray(labels))


def read_mrpc(raw: RawFile, report: StepReport, on_bad_input: str = "skip") -> TransferSplit:
    """Rows of an MRPC file: ``Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1 String<TAB>#2 String``
    after a header row (recognised by its first field, not counted as a row)."""
    first, second, labels = [], [], []
    for number, where, line in raw.iter_located_lines(report, on_bad_input, unterminated="drop"):
        fields = line.split("\t")
        if number == 1 and fields[0].strip() == MRPC_HEADER_FIRST_FIELD:
            report.rows_in -= 1  # the header names the columns; it is not a row
            continue
        if not line.strip():
            report.drop("empty line", where=where)
            continue
        if len(fields) != MRPC_COLUMNS:
            handle_bad_input(
                report, f"expected {MRPC_COLUMNS} tab-separated columns, found {len(fields)}", where, on_bad_input
            )
            continue
        quality, sentence1, sentence2 = fields[0].strip(), normalize_whitespace(fields[3]), normalize_whitespace(fields[4])
        if quality not in ("0", "1"):
            handle_bad_input(report, f"MRPC quality {quality!r} is not 0 or 1", where, on_bad_input)
            continue
        if not sentence1 or not sentence2:
            handle_bad_input(report, "blank sentence", where, on_bad_input)
            continue
        first.append(sentence1)
        second.append(sentence2)
        labels.append(int(quality))
    report.rows_out += len(labels)
    return TransferSplit(first, np.asarray(labels), second)


def _open(raw_transfer: Mapping[str, Callable[[], RawFile]], task: str, pid: str) -> RawFile:
    """The partition ``pid`` of ``task``, decoded with the encoding its file needs."""
    if pid not in raw_transfer:
        raise FileNotFoundError(
            f"transfer task {task}: partition '{pid}' is missing from the raw transfer data "
            f"({len(raw_transfer)} partitions present); expected SentEval's file at transfer/{pid}"
        )
    raw = raw_transfer[pid]()
    encoding = FILE_ENCODINGS.get(pid)
    return RawFile(raw.path, encoding=encoding) if encoding and raw.encoding != encoding else raw


_SPLIT_READERS: dict[str, Callable[[RawFile, StepReport, str], TransferSplit]] = {
    "SST2": read_sst,
    "TREC": read_trec,
    "MRPC": read_mrpc,
}
_SPLIT_CLASSES = {"SST2": SST_CLASSES, "TREC": TREC_CLASSES, "MRPC": MRPC_CLASSES}


def read_transfer_tasks(
    raw_transfer: Mapping[str, Callable[[], RawFile]],
    report: StepReport,
    tasks: Sequence[str] = TRANSFER_TASKS,
    on_bad_input: str = "skip",
) -> dict[str, TransferTask]:
    """The requested transfer tasks from the ``raw_transfer`` partitions (partition id
    = path below the transfer folder, value = a loader giving a :class:`RawFile`).

    A missing file raises ``FileNotFoundError`` naming the task and the partition;
    bad lines are skipped and counted with ``file:line`` (or raise ``BadInputError``
    with ``on_bad_input="error"``). Row counts per task and part go to
    ``report.extra["rows per task"]``.
    """
    unknown = [task for task in tasks if task not in TRANSFER_TASKS]
    if unknown:
        raise ValueError(f"unknown transfer tasks {unknown}; known: {TRANSFER_TASKS}")
    rows_per_task = report.extra.setdefault("rows per task", {})
    blank_kept = report.extra.setdefault("blank sentences kept", {})
    loaded: dict[str, TransferTask] = {}
    for task in tasks:
        if task in _CV_FILES:
            sentences: list[str] = []
            labels: list[int] = []
            classes = tuple(name for _, name in _CV_FILES[task])
            for label, (pid, _) in enumerate(_CV_FILES[task]):
                raw = _open(raw_transfer, task, pid)
                more, more_labels, blank = read_sentence_file(raw, label, report, on_bad_input)
                if not more:
                    raise EmptyInputError(f"transfer task {task}: {raw.label} has no sentences (empty file); "
                                          "the task cannot be scored")
                sentences += more
                labels += more_labels
                if blank:
                    blank_kept[raw.label] = blank
                    logger.warning("%s: %d blank lines kept as empty sentences (as SentEval)", raw.label, blank)
            loaded[task] = TransferTask(task, "cv", classes, data=TransferSplit(sentences, np.asarray(labels)))
            rows_per_task[task] = len(sentences)
        else:
            reader = _SPLIT_READERS[task]
            parts = {}
            for split, pid in _SPLIT_FILES[task].items():
                raw = _open(raw_transfer, task, pid)
                parts[split] = reader(raw, report, on_bad_input)
                if not len(parts[split]):
                    raise EmptyInputError(f"transfer task {task}: {raw.label} ({split} split) has no rows "
                                          "(empty file, or every line was bad); the task cannot be scored")
            loaded[task] = TransferTask(task, "split", _SPLIT_CLASSES[task], **parts)
            rows_per_task[task] = {split: len(part) for split, part in parts.items()}
        logger.info("transfer task %s: %s rows", task, rows_per_task[task])
    return loaded


def subsample_train(task: TransferTask, max_rows: int, seed: int) -> TransferTask:
    """``task`` with its training split cut to ``max_rows`` rows drawn at random without
    replacement (``numpy.random.default_rng(seed)``), kept in file order; dev and test
    untouched, so the score is on the benchmark's whole test set. A task with no more
    rows than that comes back as it is. What a CPU default pays for it is measured in
    docs/record/results.md ("What the CPU defaults cost")."""
    if task.protocol != "split":
        raise ValueError(f"{task.name}: only a task with a training split can be subsampled")
    if max_rows < 2:
        raise ValueError(f"{task.name}: at least 2 training rows, not {max_rows}")
    train = task.train
    if len(train) <= max_rows:
        return task
    kept = np.sort(np.random.default_rng(seed).choice(len(train), size=max_rows, replace=False))
    cut = TransferSplit([train.sentences[i] for i in kept], train.labels[kept],
                        None if train.second is None else [train.second[i] for i in kept])
    return replace(task, train=cut)


# -------------------------------------------------------------------- classifier


def pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """InferSent's pair representation [u, v, |u - v|, u * v] (row-wise)."""
    return np.hstack([u, v, np.abs(u - v), u * v])


def senteval_pair_features(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """SentEval's MRPC representation [|u - v|, u * v] (row-wise)."""
    return np.hstack([np.abs(u - v), u * v])


class LogisticClassifier:
    """L2-regularised logistic regression: one scikit-learn model for two classes,
    one binary model per class (one-vs-rest, the largest decision value wins) for
    more. Refitting with another ``C`` starts from the previous solution (warm start),
    also for every one-vs-rest model, which scikit-learn's ``OneVsRestClassifier``
    cannot do (it clones its models at every fit)."""

    def __init__(self, c: float, seed: int = 1111, max_iter: int = MAX_ITER):
        self.c, self.seed, self.max_iter = c, seed, max_iter
        self.classes_: np.ndarray | None = None
        self._models: list[LogisticRegression] = []

    def _model(self) -> LogisticRegression:
        return LogisticRegression(
            C=self.c, solver=SOLVER, max_iter=self.max_iter, random_state=self.seed, warm_start=True
        )

    def fit(self, x: np.ndarray, y: np.ndarray, c: float | None = None) -> int:
        """Fit (with inverse L2 strength ``c`` if given); return the number of binary
        fits that reported no convergence. A refit must see the same classes."""
        if c is not None:
            self.c = c
        classes = np.unique(y)
        if len(classes) < 2:
            raise ValueError(f"a classifier needs at least two classes, got {classes.tolist()}")
        if self.classes_ is None or not np.array_equal(classes, self.classes_):
            self.classes_ = classes
            self._models = [self._model() for _ in (classes[:1] if len(classes) == 2 else classes)]
        targets = [y] if len(classes) == 2 else [y == k for k in classes]
        unconverged = 0
        for model, target in zip(self._models, targets):
            model.set_params(C=self.c)
            unconverged += _fit(model, x, target)
        return unconverged

    def predict(self, x: np.ndarray) -> np.ndarray:
        if len(self._models) == 1:
            return self._models[0].predict(x)
        scores = np.column_stack([model.decision_function(x) for model in self._models])
        return self.classes_[np.argmax(scores, axis=1)]


def _scaled(train_x: np.ndarray, others: Iterable[np.ndarray], standardize: bool) -> list[np.ndarray]:
    """``[train_x, *others]``, standardised with statistics of ``train_x`` alone."""
    others = list(others)
    if not standardize:
        return [train_x, *others]
    scaler = StandardScaler().fit(train_x)
    return [scaler.transform(x) for x in (train_x, *others)]


def _fit(model: LogisticRegression, x: np.ndarray, y: np.ndarray) -> int:
    """Fit; return 1 if the solver reported that it did not converge, else 0. Other
    warnings (e.g. Newton falling back to lbfgs on an ill-conditioned Hessian) are
    passed on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(x, y)
    unconverged = 0
    for warning in caught:
        if issubclass(warning.category, ConvergenceWarning):
            unconverged = 1
        else:
            warnings.warn(warning.message, warning.category, stacklevel=2)
    return unconverged


def grid_accuracies(
    train_x: np.ndarray,
    train_y: np.ndarray,
    valid_x: np.ndarray,
    valid_y: np.ndarray,
    c_grid: Sequence[float],
    seed: int = 1111,
    max_iter: int = MAX_ITER,
    standardize: bool = False,
) -> tuple[np.ndarray, int]:
    """Validation accuracy (fraction) of a model trained on ``train`` for every ``C`` of
    ``c_grid``, and the number of fits that did not converge. The grid is walked in
    ascending order with warm starts; the result is in ``c_grid``'s order."""
    train_x, valid_x = _scaled(train_x, [valid_x], standardize)
    order = np.argsort(c_grid, kind="stable")
    accuracies = np.empty(len(c_grid))
    model = LogisticClassifier(float(c_grid[order[0]]), seed, max_iter)
    unconverged = 0
    for index in order:
        unconverged += model.fit(train_x, train_y, c=float(c_grid[index]))
        accuracies[index] = np.mean(model.predict(valid_x) == valid_y)
    return accuracies, unconverged


def best_c(c_grid: Sequence[float], accuracies: Sequence[float]) -> float:
    """The ``C`` with the highest accuracy; among ties the smallest ``C`` (strongest
    regularisation)."""
    accuracies = np.asarray(accuracies, dtype=float)
    tied = [c for c, acc in zip(c_grid, accuracies) if acc == accuracies.max()]
    return float(min(tied))


def choose_l2_on_dev(
    train_x: np.ndarray,
    train_y: np.ndarray,
    dev_x: np.ndarray,
    dev_y: np.ndarray,
    c_grid: Sequence[float] = L2_GRID,
    seed: int = 1111,
    max_iter: int = MAX_ITER,
    standardize: bool = False,
) -> tuple[float, float, int]:
    """``(C, dev accuracy at C as a fraction, non-converged fits)``: the ``C`` whose
    model trained on ``train`` is most accurate on ``dev``."""
    accuracies, unconverged = grid_accuracies(train_x, train_y, dev_x, dev_y, c_grid, seed, max_iter, standardize)
    chosen = best_c(c_grid, accuracies)
    return chosen, float(accuracies[list(c_grid).index(chosen)]), unconverged


def choose_l2_by_cv(
    x: np.ndarray,
    y: np.ndarray,
    c_grid: Sequence[float] = L2_GRID,
    k_folds: int = 10,
    seed: int = 1111,
    max_iter: int = MAX_ITER,
    standardize: bool = False,
    n_jobs: int | None = None,
) -> tuple[float, float, int]:
    """``(C, mean validation accuracy at C as a fraction, non-converged fits)``, from a
    stratified, shuffled ``k_folds``-fold CV of ``(x, y)`` over ``c_grid``; the folds
    run on ``n_jobs`` processes (joblib's convention: None is 1, -1 all cores)."""
    folds = StratifiedKFold(n_splits=k_folds, shuffle=True, random_state=seed)
    per_fold = Parallel(n_jobs=n_jobs)(
        delayed(grid_accuracies)(
            x[train_index], y[train_index], x[valid_index], y[valid_index], c_grid, seed, max_iter, standardize
        )
        for train_index, valid_index in folds.split(x, y)
    )
    unconverged = sum(failed for _, failed in per_fold)
    mean = np.mean([accuracies for accuracies, _ in per_fold], axis=0)
    chosen = best_c(c_grid, mean)
    return chosen, float(mean[list(c_grid).index(chosen)]), unconverged


def fit_and_score(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    c: float,
    seed: int = 1111,
    max_iter: int = MAX_ITER,
    standardize: bool = False,
    positive_label: int | None = None,
) -> dict[str, float]:
    """Train with inverse L2 strength ``c`` on ``train``, score on ``test``: ``acc``
    (percent), ``f1`` (percent, of ``positive_label``) when one is given, and
    ``unconverged`` (binary fits that reported no convergence)."""
    train_x, test_x = _scaled(train_x, [test_x], standardize)
    model = LogisticClassifier(c, seed, max_iter)
    unconverged = model.fit(train_x, train_y)
    predicted = model.predict(test_x)
    scores = {"acc": 100.0 * float(np.mean(predicted == test_y)), "unconverged": unconverged}
    if positive_label is not None:
        scores["f1"] = 100.0 * float(f1_score(test_y, predicted, pos_label=positive_label))
    return scores


def _outer_fold(
    x: np.ndarray,
    y: np.ndarray,
    train_index: np.ndarray,
    test_index: np.ndarray,
    c_grid: Sequence[float],
    k_folds: int,
    seed: int,
    max_iter: int,
    standardize: bool,
) -> dict[str, float]:
    """One outer fold of the "cv" protocol: choose C inside the training rows, test.
    The inner CV runs serially: the outer folds already occupy the workers."""
    c, valid_acc, unconverged = choose_l2_by_cv(
        x[train_index], y[train_index], c_grid, k_folds, seed, max_iter, standardize, n_jobs=1
    )
    scores = fit_and_score(
        x[train_index], y[train_index], x[test_index], y[test_index], c, seed, max_iter, standardize
    )
    return {**scores, "dev_acc": 100.0 * valid_acc, "C": c, "unconverged": scores["unconverged"] + unconverged}


def cross_validate(
    x: np.ndarray,
    y: np.ndarray,
    c_grid: Sequence[float] = L2_GRID,
    k_folds: int = 10,
    seed: int = 1111,
    max_iter: int = MAX_ITER,
    standardize: bool = False,
    n_jobs: int | None = None,
) -> dict[str, float]:
    """SentEval's "cv" protocol (its InnerKFoldClassifier): stratified shuffled
    ``k_folds``-fold CV; in each training fold C is chosen by an inner ``k_folds``-fold
    CV. ``acc`` is the mean test accuracy over the outer folds (percent), ``dev_acc``
    the mean inner validation accuracy at the chosen C. The outer folds are independent
    and run on ``n_jobs`` processes."""
    folds = StratifiedKFold(n_splits=k_folds, shuffle=True, random_state=seed)
    results = Parallel(n_jobs=n_jobs)(
        delayed(_outer_fold)(x, y, train_index, test_index, c_grid, k_folds, seed, max_iter, standardize)
        for train_index, test_index in folds.split(x, y)
    )
    chosen = Counter(r["C"] for r in results)
    return {
        "acc": float(np.mean([r["acc"] for r in results])),
        "dev_acc": float(np.mean([r["dev_acc"] for r in results])),
        "n": len(y),
        "C": float(chosen.most_common(1)[0][0]),  # the C chosen most often, for the record
        "unconverged": int(sum(r["unconverged"] for r in results)),
    }


# -------------------------------------------------------------------- evaluation


def _embed(task: TransferTask, encode: Callable[[list[str]], np.ndarray]) -> tuple[dict[str, int], np.ndarray]:
    """Encode the task's distinct sentences once; return row-by-sentence and the rows."""
    sentences = task.distinct_sentences()
    embeddings = np.asarray(encode(sentences), dtype=np.float64)
    if embeddings.ndim != 2 or embeddings.shape[0] != len(sentences):
        raise ValueError(
            f"{task.name}: encode returned shape {embeddings.shape} for {len(sentences)} sentences; "
            "expected one row per sentence"
        )
    bad = int((~np.isfinite(embeddings).all(axis=1)).sum())
    if bad:
        raise ValueError(f"{task.name}: encode returned NaN or infinite values for {bad} sentences")
    return {sentence: row for row, sentence in enumerate(sentences)}, embeddings


def evaluate_transfer(
    tasks: Mapping[str, TransferTask],
    encode: Callable[[list[str]], np.ndarray],
    seed: int = 1111,
    k_folds: int = 10,
    l2_grid: Sequence[float] = L2_GRID,
    *,
    standardize: bool = False,
    max_iter: int = MAX_ITER,
    pair_features: Callable[[np.ndarray, np.ndarray], np.ndarray] = pair_features,
    n_jobs: int | None = -1,
) -> dict[str, dict[str, float]]:
    """Score ``encode`` on each task, SentEval's way (see the module docstring).

    ``encode`` maps a list of sentences to an ``(n, dim)`` array; it is called once
    per task with the task's distinct sentences. Returns per task ``acc`` (percent),
    ``dev_acc`` (percent: dev accuracy, or mean validation accuracy of the CV that
    chose C), ``C`` (the chosen inverse L2 strength; for "cv" tasks the most frequent
    choice over folds), ``n`` (rows scored: all rows for "cv", test rows for "split"),
    ``train_n`` (the classifier's training rows, "split" tasks), ``unconverged`` (fits
    that hit ``max_iter``) and, for binary pair tasks (MRPC),
    ``f1`` (percent, of label 1: "paraphrase"). ``n_jobs`` processes (joblib's
    convention; default all cores) run the CV folds in parallel; the results do not
    depend on it.
    """
    results: dict[str, dict[str, float]] = {}
    for name, task in tasks.items():
        started = time.perf_counter()
        index, embeddings = _embed(task, encode)
        encoded = time.perf_counter()

        def features(part: TransferSplit) -> np.ndarray:
            u = embeddings[[index[s] for s in part.sentences]]
            if part.second is None:
                return u
            return pair_features(u, embeddings[[index[s] for s in part.second]])

        options = dict(seed=seed, max_iter=max_iter, standardize=standardize)
        if task.protocol == "cv":
            scores = cross_validate(
                features(task.data), task.data.labels, l2_grid, k_folds, n_jobs=n_jobs, **options
            )
        else:
            train_x, test_x = features(task.train), features(task.test)
            if task.dev is not None:
                c, dev_acc, unconverged = choose_l2_on_dev(
                    train_x, task.train.labels, features(task.dev), task.dev.labels, l2_grid, **options
                )
            else:
                c, dev_acc, unconverged = choose_l2_by_cv(
                    train_x, task.train.labels, l2_grid, k_folds, n_jobs=n_jobs, **options
                )
            # F1 for binary pair tasks, of label 1 (MRPC: "paraphrase"), as papers report it.
            positive = 1 if task.is_pair_task and len(task.classes) == 2 else None
            tested = fit_and_score(
                train_x, task.train.labels, test_x, task.test.labels, c, positive_label=positive, **options
            )
            scores = {
                **tested,
                "dev_acc": 100.0 * dev_acc,
                "C": c,
                "n": len(task.test),
                "train_n": len(task.train),  # the classifier's training rows (subsample_train may cut them)
                "unconverged": tested["unconverged"] + unconverged,
            }
        results[name] = scores
        finished = time.perf_counter()
        if scores["unconverged"]:
            logger.warning(
                "%s: %d logistic-regression fits stopped at max_iter=%d without converging",
                name, scores["unconverged"], max_iter,
            )
        logger.info(
            "%s: acc %.2f%s (dev %.2f, C=%g, n=%d); encoding %.1fs, classifier %.1fs",
            name,
            scores["acc"],
            f", F1 {scores['f1']:.2f}" if "f1" in scores else "",
            scores["dev_acc"],
            scores["C"],
            scores["n"],
            encoded - started,
            finished - encoded,
        )
    return results


# ------------------------------------------------------------------------- cache


