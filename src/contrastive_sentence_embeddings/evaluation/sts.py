"""STS test sets in SentEval's layout, and the two ways papers aggregate them.

* STS12-STS16: per year a folder of ``STS.input.<subset>.txt`` (``s1<TAB>s2``) and
  ``STS.gs.<subset>.txt`` (one gold score per line; an empty line is an unscored
  pair, dropped and counted). STS13 comes without SMT (licensing).
* STS-B: ``sts-test.csv``, SentEval's 7-column TSV.
* SICK-R: ``SICK_test_annotated.txt`` with a header row (4,927 pairs).

The same layout converted from the Hub copies (:mod:`..data.sts_hub`) holds each of
STS12-16 as one subset, ``hub-pooled``, since the Hub rows do not say which subset a
pair belongs to: such a year is marked ``pooled`` and scored with the "all" setting
only. ``hub_source.json`` beside the files says where they came from
(:func:`read_sts_provenance`).

Scores are Spearman correlations x 100 of the cosine similarities with the gold
scores. SimCSE, SCD and ImSimCSE report the SentEval "all" setting (one Spearman
over all subsets of a year concatenated); DeCLUTR and CLSR report "wmean" (the
subsets' Spearman values averaged, weighted by their numbers of pairs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import BadInputError, StepReport, handle_bad_input
from contrastive_sentence_embeddings.data.sts_hub import POOLED_SUBSET, PROVENANCE_FILE
from contrastive_sentence_embeddings.encoders.embedding_cache import hash_texts

logger = logging.getLogger(__name__)

STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
_INPUT_FILE = re.compile(r"^(STS1[2-6])-en-test/STS\.input\.(.+)\.txt$")
# Gold-score ranges: SemEval STS and STS-B annotate 0-5, SICK relatedness 1-5.
STS_SCORE_RANGE = (0.0, 5.0)
SICK_SCORE_RANGE = (1.0, 5.0)
# The number of scored pairs of each benchmark as published (SentEval's files); a
# score computed on another number of pairs is flagged in the evaluation report.
BENCHMARK_PAIRS = {"sts12": 3108, "sts13": 1500, "sts14": 3750, "sts15": 3000, "sts16": 1186,
                   "stsb": 1379, "sickr": 4927, "stsb_dev": 1500, "sickr_dev": 500}
# SentEval's subsets of each year (the mirror's files): the per-subset scores a pooled
# year cannot give.
SENTEVAL_SUBSETS = {
    "sts12": ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews"),
    "sts13": ("FNWN", "OnWN", "headlines"),
    "sts14": ("OnWN", "deft-forum", "deft-news", "headlines", "images", "tweet-news"),
    "sts15": ("answers-forums", "answers-students", "belief", "headlines", "images"),
    "sts16": ("answer-answer", "headlines", "plagiarism", "postediting", "question-question"),
}


def check_gold_score(score: float, score_range: tuple[float, float]) -> str | None:
    """Why ``score`` cannot be a gold score (NaN, infinite, out of range), or None."""
    if not math.isfinite(score):
        return f"gold score is {score}"
    low, high = score_range
    if not low <= score <= high:
        return f"gold score outside {low:g}-{high:g}"
    return None


@dataclass(frozen=True)
class StsSubset:
    """Scored sentence pairs of one subset (e.g. STS12 MSRpar). ``pooled``: the pairs of
    several subsets whose labels are unknown (a Hub copy), so no per-subset score."""

    task: str
    subset: str
    sentence1: list[str]
    sentence2: list[str]
    scores: np.ndarray
    pooled: bool = False

    def __len__(self) -> int:
        return len(self.scores)


def read_sts_subset(
    inputs: RawFile, gold: RawFile, task: str, subset: str, report: StepReport, on_bad_input: str = "skip"
) -> StsSubset:
    """Pairs of ``STS.input.<subset>.txt`` with a score on the same line of
    ``STS.gs.<subset>.txt``; unscored pairs are dropped and counted. Files of
    different lengths cannot be aligned and raise, naming both."""
    # A benchmark file cut short loses its cut line, counted: a fragment is not a pair.
    pairs, input_lines = inputs.read_numbered_lines(report, on_bad_input, unterminated="drop")
    score_by_line, gold_lines = gold.read_numbered_lines(report, on_bad_input, unterminated="drop")
    # Once per file: a label resolves the path against the working directory, which per
    # line was most of the time of reading STS12-16 (tens of thousands of resolves).
    inputs_label, gold_label = inputs.label, gold.label
    if input_lines != gold_lines:
        raise BadInputError(
            f"{inputs_label} has {input_lines} lines but {gold_label} has {gold_lines}: "
            "the pairs and gold scores are not aligned"
        )
    report.rows_in += input_lines
    sentence1, sentence2, values = [], [], []
    for number, line in pairs.items():
        where = f"{inputs_label}:{number}"
        fields = line.split("\t")
        if len(fields) != 2:
            handle_bad_input(report, f"expected 2 tab-separated sentences, found {len(fields)} fields", where, on_bad_input)
            continue
        if number not in score_by_line:
            continue  # its gold line is undecodable: already counted
        score_text = score_by_line[number].strip()
        if not score_text:
            report.drop("unscored pair", where=f"{gold_label}:{number}")
            continue
        try:
            score = float(score_text)
        except ValueError:
            handle_bad_input(report, "gold score is not a number", f"{gold_label}:{number}", on_bad_input)
            continue
        if problem := check_gold_score(score, STS_SCORE_RANGE):
            handle_bad_input(report, problem, f"{gold_label}:{number}", on_bad_input)
            continue
        sentence1.append(fields[0])
        sentence2.append(fields[1])
        values.append(score)
    report.rows_out += len(values)
    return StsSubset(task, subset, sentence1, sentence2, np.asarray(values, dtype=float),
                     pooled=subset == POOLED_SUBSET)


def read_sts_years(
    raw_sts: Mapping[str, Callable[[], RawFile]], report: StepReport, on_bad_input: str = "skip"
) -> dict[str, list[StsSubset]]:
    """Every subset of STS12-STS16 found in the ``raw_sts`` partitions, by year."""
    years: dict[str, list[StsSubset]] = {}
    for pid in sorted(raw_sts):
        match = _INPUT_FILE.match(pid)
        if not match:
            continue
        task, subset = match.groups()
        gold_id = f"{task}-en-test/STS.gs.{subset}.txt"
        if gold_id not in raw_sts:
            raise FileNotFoundError(f"{raw_sts[pid]().label}: no gold scores {gold_id} beside it")
        read, own = _read_apart(report, lambda own: read_sts_subset(raw_sts[pid](), raw_sts[gold_id](), task,
                                                                      subset, own, on_bad_input))
        if len(read):
            years.setdefault(task, []).append(read)
            continue
        # Named now, before any encoding: an empty subset would stop the scoring after it.
        message = f"{task}/{subset}: no pair left of {own.rows_in} lines ({drop_reasons(own)})"
        logger.warning("%s; left out of %s", message, task.lower())
        report.extra.setdefault("empty_subsets", []).append(message)
        years.setdefault(task, [])
    return years


def read_sts_provenance(raw_sts: Mapping[str, Callable[[], RawFile]]) -> dict:
    """Where the raw STS files came from: the Hub converter's ``hub_source.json`` when it
    is there (``{"source": "hub", "tasks": {...}}``), else ``{"source": "mirror"}``."""
    if PROVENANCE_FILE not in raw_sts:
        return {"source": "mirror"}
    raw = raw_sts[PROVENANCE_FILE]()
    try:
        provenance = json.loads(raw.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadInputError(f"{raw.label}: not a JSON provenance record ({error})") from None
    if not isinstance(provenance, dict) or "source" not in provenance:
        raise BadInputError(f"{raw.label}: expected a JSON object with a 'source' key")
    return provenance


def unavailable_scores(suite: Mapping[str, Sequence[StsSubset]]) -> list[str]:
    """The metric keys a pooled year cannot give: its ``_wmean``, SentEval's per-subset
    scores (``sts12/MSRpar``, ...) and, if any year is pooled, ``sts_avg_wmean``."""
    missing = []
    for task, subsets in suite.items():
        if any(subset.pooled for subset in subsets):
            missing += [f"{task}_wmean", *(f"{task}/{name}" for name in SENTEVAL_SUBSETS.get(task, ()))]
    if missing:
        missing.append("sts_avg_wmean")
    return missing


def spearman_x100(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """Spearman's rank correlation x 100."""
    return float(spearmanr(predicted, gold).statistic * 100)


def aggregate_all(predicted: Sequence[np.ndarray], gold: Sequence[np.ndarray]) -> float:
    """SentEval's "all": one Spearman over the subsets concatenated."""
    return spearman_x100(np.concatenate(predicted), np.concatenate(gold))


def aggregate_wmean(predicted: Sequence[np.ndarray], gold: Sequence[np.ndarray]) -> float:
    """"wmean": each subset's Spearman, averaged with weights = number of pairs."""
    sizes = np.array([len(g) for g in gold], dtype=float)
    values = np.array([spearman_x100(p, g) for p, g in zip(predicted, gold)])
    return float((values * sizes).sum() / sizes.sum())


# --- STS-B and SICK-R -----------------------------------------------------------------
STSB_FILES = {"train": "STSBenchmark/sts-train.csv", "dev": "STSBenchmark/sts-dev.csv",
              "test": "STSBenchmark/sts-test.csv"}
SICK_FILES = {"train": "SICK/SICK_train.txt", "trial": "SICK/SICK_trial.txt",
              "test": "SICK/SICK_test_annotated.txt"}
SICK_HEADER = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment"]


def header_difference(found: Sequence[str], expected: Sequence[str]) -> str:
    """What differs between a header's fields and the expected ones, in words."""
    for index, name in enumerate(expected):
        if index >= len(found):
            return f"the line has {len(found)} tab-separated field(s), the header {len(expected)}"
        if found[index].strip() != name:
            return f"column {index + 1} is {found[index]!r} where the header has {name!r}"
    return "the header matches"


def _read_apart(report: StepReport, read: Callable[[StepReport], StsSubset]) -> tuple[StsSubset, StepReport]:
    """``read(own)`` with a report of its own (so one file's drops can be named when it
    leaves nothing), then added to ``report``."""
    own = StepReport(report.step)
    subset = read(own)
    report.absorb(own)
    report.rows_in += own.rows_in
    report.rows_out += own.rows_out
    return subset, own


def drop_reasons(report: StepReport) -> str:
    """Why a file gave no pair: each drop reason with its count and first example."""
    return "; ".join(f"{reason}: {count}" + (f" (e.g. {report.examples[reason][0]})" if report.examples.get(reason)
                                             else "")
                     for reason, count in report.dropped.most_common()) or "the file has no lines"


def _partition(raw_sts: Mapping[str, Callable[[], RawFile]], pid: str, what: str) -> RawFile:
    if pid not in raw_sts:
        raise FileNotFoundError(f"{what}: expected the raw STS file {pid} in data/01_raw/sts (run the raw_data pipeline)")
    return raw_sts[pid]()


def read_stsb_split(raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip") -> StsSubset:
    """One STS-B split (SentEval's 7-column file) as scored pairs."""
    from contrastive_sentence_embeddings.data.pairs import read_stsb

    before = report.rows_in
    rows = read_stsb(raw, split, report, on_bad_input)
    report.rows_out += len(rows)
    if report.rows_in == before:
        raise BadInputError(f"{raw.label}: empty STS-B file")
    return StsSubset("STSB", split, rows["sentence1"].tolist(), rows["sentence2"].tolist(),
                     rows["score"].to_numpy(dtype=float))


def read_sick(raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip") -> StsSubset:
    """One SICK split (header row, then ``pair_ID, sentence_A, sentence_B,
    relatedness_score, entailment_judgment``) as scored pairs; SICK-R is the
    relatedness score of the test split."""
    sentence1, sentence2, values = [], [], []
    header_seen = False
    for _, where, line in raw.iter_located_lines(report, on_bad_input, unterminated="drop"):
        fields = line.split("\t")
        if not header_seen:
            # Whitespace around a column name (a re-saved file's trailing space) is not a
            # different header; anything else is named, column by column.
            if [field.strip() for field in fields[: len(SICK_HEADER)]] != SICK_HEADER:
                raise BadInputError(f"{where}: expected the SICK header {' '.join(SICK_HEADER)} (tab-separated); "
                                    f"{header_difference(fields, SICK_HEADER)}")
            header_seen = True
            report.rows_in -= 1  # the header is not a row
            continue
        if not line.strip():
            report.drop("empty line", where=where)
            continue
        if len(fields) != len(SICK_HEADER):
            handle_bad_input(report, f"expected {len(SICK_HEADER)} tab-separated columns, found {len(fields)}",
                             where, on_bad_input)
            continue
        try:
            score = float(fields[3])
        except ValueError:
            handle_bad_input(report, "relatedness score is not a number", where, on_bad_input)
            continue
        if problem := check_gold_score(score, SICK_SCORE_RANGE):
            handle_bad_input(report, problem.replace("gold score", "relatedness score"), where, on_bad_input)
            continue
        if not fields[1].strip() or not fields[2].strip():
            handle_bad_input(report, "blank sentence", where, on_bad_input)
            continue
        sentence1.append(fields[1].strip())
        sentence2.append(fields[2].strip())
        values.append(score)
    if not header_seen:
        raise BadInputError(f"{raw.label}: empty SICK file")
    report.rows_out += len(values)
    return StsSubset("SICKR", split, sentence1, sentence2, np.asarray(values, dtype=float))


# --- the 7-task benchmark ---------------------------------------------------------------
STS_TASKS = ("sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr")


def read_sts_benchmark(
    raw_sts: Mapping[str, Callable[[], RawFile]], report: StepReport, on_bad_input: str = "skip"
) -> dict[str, list[StsSubset]]:
    """The 7 STS test sets by metric key (``sts12`` .. ``sts16``, ``stsb``, ``sickr``).
    A task left with no pair (every line of its files dropped as bad input) is named
    with the reasons before any encoding, left out of the suite and listed in
    ``report.extra["missing_tasks"]``; with no task left at all, an error."""
    years = read_sts_years(raw_sts, report, on_bad_input)
    missing = [year for year in STS_YEARS if year not in years]
    if missing:
        raise FileNotFoundError(f"data/01_raw/sts has no STS.input files for {', '.join(missing)}")
    suite = {year.lower(): years[year] for year in STS_YEARS}
    missing = {year.lower(): "; ".join(line for line in report.extra.get("empty_subsets", [])
                                             if line.split("/", 1)[0] == year)
                     for year in STS_YEARS if not years[year]}
    for task, (pid, what, read) in {"stsb": (STSB_FILES["test"], "STS-B test", read_stsb_split),
                                    "sickr": (SICK_FILES["test"], "SICK-R test", read_sick)}.items():
        raw = _partition(raw_sts, pid, what)
        subset, own = _read_apart(report, lambda own: read(raw, "test", own, on_bad_input))
        suite[task] = [subset]
        if not len(subset):
            missing[task] = f"{raw.label}: no pair left of {own.rows_in} lines ({drop_reasons(own)})"
    if len(missing) == len(suite):
        raise BadInputError("no STS task has a pair left to score: " + "; ".join(missing.values()))
    for task, why in missing.items():
        # Named before any encoding; the other tasks are scored, this one is marked
        # missing in every table (the record's evaluation_report.missing_tasks), and
        # sts_avg is not computed.
        del suite[task]
        logger.warning("%s is not scored (no pair left): %s; sts_avg is not computed", task, why)
    if missing:
        report.extra["missing_tasks"] = missing
    return suite


def read_dev_sets(
    raw_sts: Mapping[str, Callable[[], RawFile]], report: StepReport, on_bad_input: str = "skip"
) -> dict[str, list[StsSubset]]:
    """The model-selection sets: STS-B dev and SICK-R trial. STS data from the Hub has
    no SICK trial set (``mteb/sickr-sts`` is one split): then STS-B dev only, said in
    the log; a mirror without the file is an error as before."""
    files = {"stsb_dev": (STSB_FILES["dev"], "STS-B dev", read_stsb_split, "dev"),
             "sickr_dev": (SICK_FILES["trial"], "SICK-R trial", read_sick, "trial")}
    if SICK_FILES["trial"] not in raw_sts and PROVENANCE_FILE in raw_sts:
        logger.warning("dev sets: the STS data is from the Hub, which has no SICK-R trial set; model selection "
                       "has STS-B dev only (no sickr_dev, no dev_avg)")
        del files["sickr_dev"]
    sets = {}
    for name, (pid, what, read, split) in files.items():
        raw = _partition(raw_sts, pid, what)
        subset, own = _read_apart(report, lambda own: read(raw, split, own, on_bad_input))
        if not len(subset):
            # Model selection cannot go on without it: stop before any training step.
            raise BadInputError(f"{raw.label}: no pair left of {own.rows_in} lines ({drop_reasons(own)}); "
                                f"{name} is a model-selection set")
        sets[name] = [subset]
    return sets


def pair_counts(suite: Mapping[str, Sequence[StsSubset]]) -> dict[str, int]:
    """The number of scored pairs each task of ``suite`` is evaluated on."""
    return {task: int(sum(len(subset) for subset in subsets)) for task, subsets in suite.items()}


def check_pair_counts(counts: Mapping[str, int], expected: Mapping[str, int] = BENCHMARK_PAIRS) -> list[str]:
    """A warning (also logged) for every task whose number of evaluated pairs differs
    from its benchmark's published size: a score on fewer pairs is not the
    benchmark's score."""
    warnings = []
    for task, count in counts.items():
        if task in expected and count != expected[task]:
            warnings.append(f"{task}: evaluated on {count} pairs, the benchmark has {expected[task]}; "
                            "its score is not comparable with published ones")
            logger.warning(warnings[-1])
    return warnings


def distinct_sentences(suite: Mapping[str, Sequence[StsSubset]]) -> list[str]:
    """Every sentence of the suite once, in first-seen order (each is encoded once)."""
    seen: dict[str, None] = {}
    for subsets in suite.values():
        for subset in subsets:
            seen.update(dict.fromkeys(subset.sentence1))
            seen.update(dict.fromkeys(subset.sentence2))
    return list(seen)


def cosine_scores(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity (float64, so ranks do not depend on float noise)."""
    left = np.asarray(left, dtype=np.float64)
    right = np.asarray(right, dtype=np.float64)
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return (left * right).sum(axis=1) / np.maximum(norms, 1e-12)


def score_sts(
    suite: Mapping[str, Sequence[StsSubset]], embedding_of: Mapping[str, np.ndarray]
) -> dict[str, float]:
    """Spearman x 100 of every task in the suite, from precomputed embeddings.

    Keys: ``<task>`` ("all" setting), ``<task>_wmean``, ``<task>/<subset>`` per
    subset, ``sts_avg`` and ``sts_avg_wmean`` (mean over the tasks present) when the
    suite is the 7-task benchmark. A task with a pooled subset (a Hub copy without
    subset labels) gets its "all" score only: its ``_wmean`` would be the "all" score
    under another name and its subset scores would be computed on the wrong rows, so
    neither is reported, nor ``sts_avg_wmean`` (see :func:`unavailable_scores`).
    """
    metrics: dict[str, float] = {}
    for task, subsets in suite.items():
        pooled = any(subset.pooled for subset in subsets)
        predicted, gold = [], []
        for subset in subsets:
            left = np.stack([embedding_of[s] for s in subset.sentence1])
            right = np.stack([embedding_of[s] for s in subset.sentence2])
            predicted.append(cosine_scores(left, right))
            gold.append(subset.scores)
            if len(subsets) > 1 and not pooled:
                metrics[f"{task}/{subset.subset}"] = spearman_x100(predicted[-1], gold[-1])
        metrics[task] = aggregate_all(predicted, gold)
        if not pooled:
            metrics[f"{task}_wmean"] = aggregate_wmean(predicted, gold)
    undefined = sorted(key for key, value in metrics.items() if not math.isfinite(value))
    if undefined:
        # A Spearman correlation is undefined when either side is constant (e.g. an
        # encoder that collapsed to one embedding); a NaN would pass through the
        # averages and the model selection unseen.
        raise FloatingPointError(f"STS score undefined (NaN) for {', '.join(undefined)}: the predicted or gold "
                                 "similarities of that set are constant")
    if all(task in suite for task in STS_TASKS):
        metrics["sts_avg"] = float(np.mean([metrics[task] for task in STS_TASKS]))
        if all(f"{task}_wmean" in metrics for task in STS_TASKS):
            metrics["sts_avg_wmean"] = float(np.mean([metrics[f"{task}_wmean"] for task in STS_TASKS]))
    return metrics


def evaluate_sts(suite: Mapping[str, Sequence[StsSubset]], encode: Callable[[list[str]], np.ndarray]) -> dict[str, float]:
    """Encode the suite's distinct sentences once with ``encode`` and score it."""
    sentences = distinct_sentences(suite)
    embeddings = encode(sentences)
    return score_sts(suite, dict(zip(sentences, embeddings)))


# Where the trainers keep the dev scores of their starting weights (DevScorer.starting_scores),
# beside the embedding caches: relative to the project root, where Kedro and DVC run.
STARTING_SCORES_DIR = "data/07_model_output/embedding_cache/starting_dev_scores"


class DevScorer:
    """Fast model-selection scores for the trainer: STS-B dev and SICK-R trial
    Spearman x 100, and their mean (``dev_avg``), read once and scored on call (STS-B
    dev alone on Hub data, see :func:`read_dev_sets`).

    ``memo_dir``: where :meth:`starting_scores` keeps the scores of starting weights
    (None: scored every time)."""

    def __init__(self, raw_sts: Mapping[str, Callable[[], RawFile]], on_bad_input: str = "skip",
                 memo_dir: str | os.PathLike | None = None):
        self.report = StepReport("dev_sets")
        self.suite = read_dev_sets(raw_sts, self.report, on_bad_input)
        self.warnings = check_pair_counts(pair_counts(self.suite))
        self.report.log(logger)
        self.sentences = distinct_sentences(self.suite)
        self.memo_dir = Path(memo_dir) if memo_dir is not None else None

    def fingerprint(self) -> str:
        """sha256 over every dev pair and its gold score, per task and subset: two scorers
        with the same fingerprint give the same score to the same embeddings."""
        digest = hashlib.sha256()
        for task, subsets in sorted(self.suite.items()):
            for subset in subsets:
                head = json.dumps([task, subset.subset, subset.pooled, len(subset.sentence1)])
                digest.update(head.encode())
                hash_texts(digest, (*subset.sentence1, *subset.sentence2))
                digest.update(np.ascontiguousarray(subset.scores, dtype=np.float64).tobytes())
        return digest.hexdigest()

    def starting_scores(self, weights_key: str | None, encode: Callable[[list[str]], np.ndarray]) -> dict[str, float]:
        """The scores of a run's starting weights (step 0), computed once per starting
        point: every seed of a method, and every method that starts from the same encoder
        with the same pooling, begins from the same weights, so their step-0 scores are
        equal and are read back instead of encoded again. ``weights_key`` must identify
        everything the encoding depends on (weights, pooling, precision; the trainer's
        :func:`..training.trainer.starting_point_key`); None scores without the memo."""
        if weights_key is None or self.memo_dir is None:
            return self(encode)
        path = self.memo_dir / f"{hashlib.sha256((weights_key + self.fingerprint()).encode()).hexdigest()}.json"
        try:
            remembered = json.loads(path.read_text())
        except FileNotFoundError:
            remembered = None
        except (OSError, ValueError) as err:  # a truncated or foreign file: score again
            logger.warning("starting dev scores: unreadable %s (%s); scoring again", path, err)
            remembered = None
        if isinstance(remembered, dict) and remembered.get("scores"):
            logger.info("step-0 dev scores of these starting weights read from %s (scored before)", path)
            return {task: float(value) for task, value in remembered["scores"].items()}
        scores = self(encode)
        self.memo_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomically(path, json.dumps({"weights_key": weights_key, "scores": scores}))
        return scores

    def __call__(self, encode: Callable[[list[str]], np.ndarray]) -> dict[str, float]:
        embeddings = encode(self.sentences)
        scores = score_sts(self.suite, dict(zip(self.sentences, embeddings)))
        result = {task: scores[task] for task in self.suite}
        if "sickr_dev" in result:  # dev_avg is the mean of both sets, never of STS-B dev alone
            result["dev_avg"] = float(np.mean(list(result.values())))
        return result
