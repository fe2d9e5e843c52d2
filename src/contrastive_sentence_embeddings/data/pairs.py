"""Positive sentence pairs for CLSR: STS-B pairs scored above a threshold and NLI
entailment pairs, from SentEval's file layout or the Hugging Face Hub layout."""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import (
    BadInputError,
    StepReport,
    handle_bad_input,
)
from contrastive_sentence_embeddings.data.wikipedia import normalize_text

STSB_COLUMNS = 7  # genre, file, year, id, score, sentence1, sentence2
STSB_MAX_SCORE = 5.0
PAIR_COLUMNS = ["sentence1", "sentence2", "score", "split", "source"]
NLI_COLUMNS = ["premise", "hypothesis", "split", "source"]

# The Hub's SNLI / MultiNLI label ids; -1 marks pairs without a gold label.
HUB_NLI_LABELS = {0: "entailment", 1: "neutral", 2: "contradiction", -1: "-"}
NLI_LABELS = {"entailment", "neutral", "contradiction"}


def read_stsb(
    raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip"
) -> pd.DataFrame:
    """Rows of a SentEval STS-B file (7 tab-separated columns, score 0-5).

    Wrong column counts, blank or non-numeric scores, scores outside 0-5 and blank
    sentences are bad input: skipped and counted with ``file:line``, or an error in
    strict mode.
    """
    rows = []
    for _, where, line in raw.iter_located_lines(report, on_bad_input):
        if not line.strip():
            report.drop("empty line", where=where)
            continue
        fields = line.split("\t")
        if len(fields) != STSB_COLUMNS:
            handle_bad_input(
                report, f"expected {STSB_COLUMNS} tab-separated columns, found {len(fields)}", where, on_bad_input
            )
            continue
        score_text, sentence1, sentence2 = fields[4].strip(), normalize_text(fields[5]), normalize_text(fields[6])
        if not score_text:
            handle_bad_input(report, "missing score", where, on_bad_input)
            continue
        try:
            score = float(score_text)
        except ValueError:
            handle_bad_input(report, "score is not a number", where, on_bad_input)
            continue
        if not (0.0 <= score <= STSB_MAX_SCORE) or math.isnan(score):
            handle_bad_input(report, "score outside 0-5", where, on_bad_input)
            continue
        if not sentence1 or not sentence2:
            handle_bad_input(report, "blank sentence", where, on_bad_input)
            continue
        rows.append((sentence1, sentence2, score, split, where))
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def _pair_key(a: str, b: str, symmetric: bool) -> tuple[str, str]:
    a, b = a.casefold(), b.casefold()
    return (min(a, b), max(a, b)) if symmetric else (a, b)


def drop_duplicate_pairs(
    pairs: pd.DataFrame, first: str, second: str, report: StepReport, symmetric: bool
) -> pd.DataFrame:
    """Case-insensitive de-duplication, keeping the first occurrence. ``symmetric``
    treats (a, b) and (b, a) as the same pair (a similarity is symmetric, an
    entailment is not)."""
    keys = [_pair_key(a, b, symmetric) for a, b in zip(pairs[first], pairs[second])]
    duplicated = pd.Series(keys, index=pairs.index).duplicated()
    for source in pairs.loc[duplicated, "source"]:
        report.drop("duplicate pair", where=source)
    return pairs.loc[~duplicated].reset_index(drop=True)


def stsb_positive_pairs(
    pairs: pd.DataFrame, threshold: float, report: StepReport
) -> pd.DataFrame:
    """Pairs with a gold score strictly above ``threshold``, de-duplicated."""
    above = pairs["score"] > threshold
    report.drop(f"score <= {threshold:g}", int((~above).sum()))
    return drop_duplicate_pairs(pairs.loc[above], "sentence1", "sentence2", report, symmetric=True)


def read_nli_senteval(
    premises: RawFile,
    hypotheses: RawFile,
    labels: RawFile,
    split: str,
    report: StepReport,
    on_bad_input: str = "skip",
) -> pd.DataFrame:
    """(premise, hypothesis, label) from SentEval's line-aligned ``s1.<split>``,
    ``s2.<split>`` and ``labels.<split>``. Files of different lengths cannot be
    aligned and always raise, naming the files; a bad line drops its pair."""
    files = (premises, hypotheses, labels)
    columns = [raw.read_numbered_lines(report, on_bad_input) for raw in files]
    lengths = {raw.path.name: n for raw, (_, n) in zip(files, columns)}
    if len(set(lengths.values())) != 1:
        raise BadInputError(
            f"NLI files of split '{split}' in {premises.path.parent} are not aligned: "
            + ", ".join(f"{name} has {n} lines" for name, n in lengths.items())
        )
    report.rows_in += columns[0][1]
    rows = []
    for number in range(1, columns[0][1] + 1):
        where = f"{labels.label}:{number}"
        values = [decoded.get(number) for decoded, _ in columns]
        if any(v is None for v in values):
            continue  # undecodable in one of the files: already counted
        premise, hypothesis, label = normalize_text(values[0]), normalize_text(values[1]), values[2].strip()
        if label == "-":
            report.drop("no gold label", where=where)
            continue
        if label not in NLI_LABELS:
            handle_bad_input(report, f"unknown label {label!r}", where, on_bad_input)
            continue
        if not premise or not hypothesis:
            handle_bad_input(report, "blank sentence", f"{premises.label}:{number}", on_bad_input)
            continue
        rows.append((premise, hypothesis, label, split, where))
    return pd.DataFrame(rows, columns=["premise", "hypothesis", "label", "split", "source"])


def read_nli_hub(raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip") -> pd.DataFrame:
    """(premise, hypothesis, label) from a Parquet file in the Hub layout of SNLI and
    MultiNLI: integer labels, 0 entailment, 1 neutral, 2 contradiction, -1 none."""
    table = pd.read_parquet(raw.path)
    missing = {"premise", "hypothesis", "label"} - set(table.columns)
    if missing:
        raise BadInputError(f"{raw.label}: missing NLI columns {sorted(missing)}")
    report.rows_in += len(table)
    rows = []
    for index, (premise, hypothesis, label) in enumerate(
        zip(table["premise"], table["hypothesis"], table["label"])
    ):
        where = f"{raw.label}:row {index}"
        name = HUB_NLI_LABELS.get(int(label)) if pd.notna(label) else None
        if name is None:
            handle_bad_input(report, f"unknown label {label!r}", where, on_bad_input)
            continue
        if name == "-":
            report.drop("no gold label", where=where)
            continue
        premise, hypothesis = normalize_text(premise or ""), normalize_text(hypothesis or "")
        if not premise or not hypothesis:
            handle_bad_input(report, "blank sentence", where, on_bad_input)
            continue
        rows.append((premise, hypothesis, name, split, where))
    return pd.DataFrame(rows, columns=["premise", "hypothesis", "label", "split", "source"])


def entailment_pairs(labelled: Iterable[pd.DataFrame], report: StepReport) -> pd.DataFrame:
    """The entailment pairs of all labelled tables, de-duplicated (ordered pairs)."""
    frames = [f for f in labelled if len(f)]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["premise", "hypothesis", "label", "split", "source"]
    )
    entails = table["label"] == "entailment"
    for label, count in table.loc[~entails, "label"].value_counts().items():
        report.drop(f"label {label} (not entailment)", int(count))
    pairs = drop_duplicate_pairs(
        table.loc[entails, NLI_COLUMNS], "premise", "hypothesis", report, symmetric=False
    )
    report.rows_out = len(pairs)
    return pairs
