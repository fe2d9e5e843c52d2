"""Positive sentence pairs for CLSR: STS-B pairs scored above a threshold and NLI
entailment pairs, from SentEval's file layout or the Hugging Face Hub layout."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

import pandas as pd

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import (
    BadInputError,
    EmptyInputError,
    StepReport,
    handle_bad_input,
    require_rows,
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

    The files as the benchmark's authors distribute them carry one or two extra
    source columns after the second sentence on some rows; like SentEval's reader,
    such rows are read from their first 7 fields and counted as a variant ("extra
    source columns"), not dropped. Fewer than 7 columns, blank, non-numeric, NaN or
    out-of-range (outside 0-5) scores and blank sentences are bad input: skipped
    and counted with ``file:line``, or an error in strict mode. A file without a
    single line is an error naming it.
    """
    rows = []
    lines_before = report.rows_in
    for _, where, line in raw.iter_located_lines(report, on_bad_input):
        if not line.strip():
            report.drop("empty line", where=where)
            continue
        fields = line.split("\t")
        if len(fields) > STSB_COLUMNS:
            report.variant(f"extra source columns ({len(fields)} fields, first {STSB_COLUMNS} read)", where=where)
            fields = fields[:STSB_COLUMNS]
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
    require_rows(report.rows_in - lines_before, f"{raw.label} (STS-B {split})")
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
    positive = drop_duplicate_pairs(pairs.loc[above], "sentence1", "sentence2", report, symmetric=True)
    require_rows(len(positive), f"stsb_pairs (STS-B pairs scoring above {threshold:g})")
    return positive


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
    aligned and always raise, naming the files, and so does an empty file (a split
    must never vanish silently); a bad line drops its pair."""
    files = (premises, hypotheses, labels)
    columns = [raw.read_numbered_lines(report, on_bad_input) for raw in files]
    for raw, (_, n_lines) in zip(files, columns):
        if n_lines == 0:
            raise EmptyInputError(f"{raw.label}: empty NLI file (split '{split}')")
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


NLI_MEMBERS = ("s1", "s2", "labels")
_SENTEVAL_NLI_FILE = re.compile(r"^(?:(?P<corpus>.*)/)?(?P<member>s1|s2|labels)\.(?P<split>\w+)$")
_HUB_NLI_FILE = re.compile(r"^(?:(?P<corpus>.*)/)?(?P<split>\w+)\.parquet$")


def read_nli_partitions(
    raw_nli: Mapping[str, Callable[[], RawFile]],
    splits: Iterable[str] | None,
    report: StepReport,
    on_bad_input: str = "skip",
) -> list[pd.DataFrame]:
    """Every labelled NLI table of ``raw_nli`` (``PartitionedDataset`` partitions):
    SentEval-layout splits (``<corpus>/s1.<split>``, ``s2.<split>``,
    ``labels.<split>``) and Hub-layout Parquet files (``<corpus>/<split>.parquet``);
    ``splits`` None takes every split. A SentEval split with any of its three
    files missing (whichever one) or empty is an error naming it; so is finding no
    split at all."""
    wanted = None if splits is None else set(splits)
    senteval: dict[tuple[str, str], dict[str, str]] = {}
    tables = []
    for pid in sorted(raw_nli):
        if match := _SENTEVAL_NLI_FILE.match(pid):
            if wanted is None or match["split"] in wanted:
                key = (match["corpus"] or "", match["split"])
                senteval.setdefault(key, {})[match["member"]] = pid
        elif (match := _HUB_NLI_FILE.match(pid)) and (wanted is None or match["split"] in wanted):
            tables.append(read_nli_hub(raw_nli[pid](), f"{match['corpus']}/{match['split']}", report, on_bad_input))
    for (corpus, split), members in sorted(senteval.items()):
        missing = [member for member in NLI_MEMBERS if member not in members]
        if missing:
            prefix = f"{corpus}/" if corpus else ""
            present = raw_nli[next(iter(members.values()))]().path.parent
            raise FileNotFoundError(
                f"NLI split '{prefix}{split}' in {present}: "
                + ", ".join(f"{prefix}{member}.{split}" for member in missing)
                + " missing (a SentEval split needs s1, s2 and labels)"
            )
        premises, hypotheses, labels = (raw_nli[members[member]]() for member in NLI_MEMBERS)
        tables.append(read_nli_senteval(premises, hypotheses, labels, f"{corpus}/{split}" if corpus else split,
                                        report, on_bad_input))
    if not tables:
        raise FileNotFoundError(f"no NLI files of splits {splits} in raw_nli (found {sorted(raw_nli)})")
    return tables


def read_nli_hub(raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip") -> pd.DataFrame:
    """(premise, hypothesis, label) from a Parquet file in the Hub layout of SNLI and
    MultiNLI: integer labels, 0 entailment, 1 neutral, 2 contradiction, -1 none."""
    table = pd.read_parquet(raw.path)
    missing = {"premise", "hypothesis", "label"} - set(table.columns)
    if missing:
        raise BadInputError(f"{raw.label}: missing NLI columns {sorted(missing)}")
    require_rows(len(table), f"{raw.label} (NLI split '{split}')")
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
    require_rows(len(pairs), "nli_pairs (entailment pairs)")
    report.rows_out = len(pairs)
    return pairs
