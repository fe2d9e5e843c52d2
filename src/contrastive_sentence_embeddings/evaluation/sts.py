"""STS test sets in SentEval's layout, and the two ways papers aggregate them.

* STS12-STS16: per year a folder of ``STS.input.<subset>.txt`` (``s1<TAB>s2``) and
  ``STS.gs.<subset>.txt`` (one gold score per line; an empty line is an unscored
  pair, dropped and counted). STS13 comes without SMT (licensing).
* STS-B: ``sts-test.csv``, SentEval's 7-column TSV.
* SICK-R: ``SICK_test_annotated.txt`` with a header row (4,927 pairs).

Scores are Spearman correlations x 100 of the cosine similarities with the gold
scores. SimCSE, SCD and ImSimCSE report the SentEval "all" setting (one Spearman
over all subsets of a year concatenated); DeCLUTR and CLSR report "wmean" (the
subsets' Spearman values averaged, weighted by their numbers of pairs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import BadInputError, StepReport, handle_bad_input

STS_YEARS = ("STS12", "STS13", "STS14", "STS15", "STS16")
_INPUT_FILE = re.compile(r"^(STS1[2-6])-en-test/STS\.input\.(.+)\.txt$")


@dataclass(frozen=True)
class StsSubset:
    """Scored sentence pairs of one subset (e.g. STS12 MSRpar)."""

    task: str
    subset: str
    sentence1: list[str]
    sentence2: list[str]
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)


def read_sts_subset(
    inputs: RawFile, gold: RawFile, task: str, subset: str, report: StepReport, on_bad_input: str = "skip"
) -> StsSubset:
    """Pairs of ``STS.input.<subset>.txt`` with a score on the same line of
    ``STS.gs.<subset>.txt``; unscored pairs are dropped and counted. Files of
    different lengths cannot be aligned and raise, naming both."""
    pairs, input_lines = inputs.read_numbered_lines(report, on_bad_input)
    score_by_line, gold_lines = gold.read_numbered_lines(report, on_bad_input)
    if input_lines != gold_lines:
        raise BadInputError(
            f"{inputs.label} has {input_lines} lines but {gold.label} has {gold_lines}: "
            "the pairs and gold scores are not aligned"
        )
    report.rows_in += input_lines
    sentence1, sentence2, values = [], [], []
    for number, line in pairs.items():
        where = f"{inputs.label}:{number}"
        fields = line.split("\t")
        if len(fields) != 2:
            handle_bad_input(report, f"expected 2 tab-separated sentences, found {len(fields)} fields", where, on_bad_input)
            continue
        if number not in score_by_line:
            continue  # its gold line is undecodable: already counted
        score_text = score_by_line[number].strip()
        if not score_text:
            report.drop("unscored pair", where=f"{gold.label}:{number}")
            continue
        try:
            score = float(score_text)
        except ValueError:
            handle_bad_input(report, "gold score is not a number", f"{gold.label}:{number}", on_bad_input)
            continue
        sentence1.append(fields[0])
        sentence2.append(fields[1])
        values.append(score)
    report.rows_out += len(values)
    return StsSubset(task, subset, sentence1, sentence2, np.asarray(values, dtype=float))


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
        years.setdefault(task, []).append(
            read_sts_subset(raw_sts[pid](), raw_sts[gold_id](), task, subset, report, on_bad_input)
        )
    return years


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
