"""Positive sentence pairs for CLSR: STS-B pairs scored above a threshold and NLI
entailment pairs, from SentEval's file layout or the Hugging Face Hub layout."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from contrastive_sentence_embeddings.data.arrow_rows import BATCH_ROWS, drop_rows, first_occurrences, text_key

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
    raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip", unterminated: str = "drop"
) -> pd.DataFrame:
    """:func:`stsb_rows` as a table (``PAIR_COLUMNS``), for the evaluation's small files
    (benchmark files: a last line cut short is dropped and counted)."""
    return pd.DataFrame(list(stsb_rows(raw, split, report, on_bad_input, unterminated)), columns=PAIR_COLUMNS)


def stsb_rows(
    raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip", unterminated: str = "keep"
) -> Iterator[tuple[str, str, float, str, str]]:
    """Rows of a SentEval STS-B file (7 tab-separated columns, score 0-5), streamed as
    ``PAIR_COLUMNS`` tuples.

    The files as the benchmark's authors distribute them carry one or two extra
    source columns after the second sentence on some rows; like SentEval's reader,
    such rows are read from their first 7 fields and counted as a variant ("extra
    source columns"), not dropped. Fewer than 7 columns, blank, non-numeric, NaN or
    out-of-range (outside 0-5) scores and blank sentences are bad input: skipped
    and counted with ``file:line``, or an error in strict mode. A file without a
    single line is an error naming it (raised once the file is read).
    """
    lines_before = report.rows_in
    for _, where, line in raw.iter_located_lines(report, on_bad_input, unterminated):
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
        yield sentence1, sentence2, score, split, where
    require_rows(report.rows_in - lines_before, f"{raw.label} (STS-B {split})")


def pair_key(a: str, b: str, symmetric: bool) -> tuple[int, int]:
    """The de-duplication key of a pair (case-insensitive; ``symmetric``: (a, b) and
    (b, a) are one pair), hashed (:func:`.arrow_rows.text_key`)."""
    a, b = a.casefold(), b.casefold()
    return text_key(min(a, b), max(a, b)) if symmetric else text_key(a, b)


def drop_duplicate_pairs(pairs, first: str, second: str, report: StepReport, symmetric: bool):
    """Case-insensitive de-duplication, keeping the first occurrence. ``symmetric``
    treats (a, b) and (b, a) as the same pair (a similarity is symmetric, an
    entailment is not). ``pairs`` is a ``pyarrow.Table`` (or a pandas DataFrame, and
    then so is the result); the pairs are compared by hashed keys, a batch at a time."""
    table, as_pandas = _as_table(pairs)
    keys = np.array([pair_key(a, b, symmetric)
                     for batch in table.select([first, second]).to_batches(max_chunksize=BATCH_ROWS)
                     for a, b in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist())],
                    dtype=np.int64).reshape(-1, 2)
    keep = first_occurrences(keys)
    drop_rows(report, "duplicate pair", np.flatnonzero(~keep), table.column("source"))
    return _like(table.filter(pa.array(keep)), as_pandas)


def stsb_positive_pairs(pairs, threshold: float, report: StepReport):
    """Pairs with a gold score strictly above ``threshold``, de-duplicated (a
    ``pyarrow.Table``, or a DataFrame for a DataFrame)."""
    table, as_pandas = _as_table(pairs)
    above = pc.fill_null(pc.greater(table.column("score"), threshold), False)
    report.drop(f"score <= {threshold:g}", len(table) - pc.sum(above).as_py() if len(table) else 0)
    positive = drop_duplicate_pairs(table.filter(above), "sentence1", "sentence2", report, symmetric=True)
    require_rows(len(positive), f"stsb_pairs (STS-B pairs scoring above {threshold:g})")
    return _like(positive, as_pandas)


def _as_table(pairs) -> tuple[pa.Table, bool]:
    if isinstance(pairs, pd.DataFrame):
        return pa.Table.from_pandas(pairs.reset_index(drop=True), preserve_index=False), True
    return pairs, False


def _like(table: pa.Table, as_pandas: bool):
    return table.to_pandas() if as_pandas else table


NLI_ROW_COLUMNS = ["premise", "hypothesis", "label", "split", "source"]
NLI_SCHEMA = pa.schema([(name, pa.string()) for name in NLI_ROW_COLUMNS])
PAIR_SCHEMA = pa.schema([("sentence1", pa.string()), ("sentence2", pa.string()), ("score", pa.float64()),
                         ("split", pa.string()), ("source", pa.string())])

NliRow = tuple[str, str, str, str, str]


def read_nli_senteval(
    premises: RawFile,
    hypotheses: RawFile,
    labels: RawFile,
    split: str,
    report: StepReport,
    on_bad_input: str = "skip",
) -> pd.DataFrame:
    """:func:`nli_senteval_rows` as a table."""
    rows = nli_senteval_rows(premises, hypotheses, labels, split, report, on_bad_input)
    return pd.DataFrame(list(rows), columns=NLI_ROW_COLUMNS)


def _every_line(raw: RawFile, report: StepReport, on_bad_input: str, counted: StepReport) -> Iterator[str | None]:
    """Every line of ``raw`` in order, ``None`` for an undecodable one (counted in
    ``report``); ``counted.rows_in`` ends as the file's number of lines."""
    scratch = StepReport(report.step)
    expected = 1
    for number, text in raw.iter_lines(scratch, on_bad_input):
        for _ in range(expected, number):
            yield None
        expected = number + 1
        yield text
    for _ in range(expected, scratch.rows_in + 1):  # undecodable lines at the end
        yield None
    report.absorb(scratch)
    counted.rows_in = scratch.rows_in


def nli_senteval_rows(
    premises: RawFile,
    hypotheses: RawFile,
    labels: RawFile,
    split: str,
    report: StepReport,
    on_bad_input: str = "skip",
) -> Iterator[NliRow]:
    """(premise, hypothesis, label, split, source) from SentEval's line-aligned
    ``s1.<split>``, ``s2.<split>`` and ``labels.<split>``, read in lockstep (a line of
    each at a time). Files of different lengths cannot be aligned and always raise,
    naming the files, and so does an empty file (a split must never vanish silently);
    a bad line drops its pair. Both are found once the files are read."""
    files = (premises, hypotheses, labels)
    lengths = [StepReport(report.step) for _ in files]
    lines = [_every_line(raw, report, on_bad_input, counted) for raw, counted in zip(files, lengths)]
    missing = object()
    for number, values in enumerate(itertools.zip_longest(*lines, fillvalue=missing), start=1):
        if any(value is missing for value in values):
            for rest in lines:
                for _ in rest:  # count the longer files to the end, for the message
                    pass
            break
        report.rows_in += 1
        where = f"{labels.label}:{number}"
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
        yield premise, hypothesis, label, split, where
    for raw, counted in zip(files, lengths):
        if counted.rows_in == 0:
            raise EmptyInputError(f"{raw.label}: empty NLI file (split '{split}')")
    if len({counted.rows_in for counted in lengths}) != 1:
        raise BadInputError(
            f"NLI files of split '{split}' in {premises.path.parent} are not aligned: "
            + ", ".join(f"{raw.path.name} has {counted.rows_in} lines" for raw, counted in zip(files, lengths))
        )


NLI_MEMBERS = ("s1", "s2", "labels")
_SENTEVAL_NLI_FILE = re.compile(r"^(?:(?P<corpus>.*)/)?(?P<member>s1|s2|labels)\.(?P<split>\w+)$")
_HUB_NLI_FILE = re.compile(r"^(?:(?P<corpus>.*)/)?(?P<split>\w+)\.parquet$")


def read_nli_partitions(
    raw_nli: Mapping[str, Callable[[], RawFile]],
    splits: Iterable[str] | None,
    report: StepReport,
    on_bad_input: str = "skip",
) -> list[pd.DataFrame]:
    """:func:`nli_partition_rows` as one table per split."""
    return [pd.DataFrame(list(rows), columns=NLI_ROW_COLUMNS)
            for rows in nli_partition_rows(raw_nli, splits, report, on_bad_input)]


def nli_partition_rows(
    raw_nli: Mapping[str, Callable[[], RawFile]],
    splits: Iterable[str] | None,
    report: StepReport,
    on_bad_input: str = "skip",
) -> list[Iterator[NliRow]]:
    """The rows of every labelled NLI split of ``raw_nli`` (``PartitionedDataset``
    partitions), one lazy row iterator per split: Hub-layout Parquet files
    (``<corpus>/<split>.parquet``) first, then SentEval-layout splits
    (``<corpus>/s1.<split>``, ``s2.<split>``, ``labels.<split>``); ``splits`` None
    takes every split. A SentEval split with any of its three files missing (whichever
    one) is an error naming it, and so is finding no split at all (both raised before
    anything is read); an empty member file is one once it is read."""
    wanted = None if splits is None else set(splits)
    senteval: dict[tuple[str, str], dict[str, str]] = {}
    tables = []
    for pid in sorted(raw_nli):
        if match := _SENTEVAL_NLI_FILE.match(pid):
            if wanted is None or match["split"] in wanted:
                key = (match["corpus"] or "", match["split"])
                senteval.setdefault(key, {})[match["member"]] = pid
        elif (match := _HUB_NLI_FILE.match(pid)) and (wanted is None or match["split"] in wanted):
            tables.append(nli_hub_rows(raw_nli[pid](), f"{match['corpus']}/{match['split']}", report, on_bad_input))
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
        tables.append(nli_senteval_rows(premises, hypotheses, labels, f"{corpus}/{split}" if corpus else split,
                                        report, on_bad_input))
    if not tables:
        raise FileNotFoundError(f"no NLI files of splits {splits} in raw_nli (found {sorted(raw_nli)})")
    return tables


def read_nli_hub(raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip") -> pd.DataFrame:
    """:func:`nli_hub_rows` as a table."""
    return pd.DataFrame(list(nli_hub_rows(raw, split, report, on_bad_input)), columns=NLI_ROW_COLUMNS)


def nli_hub_rows(raw: RawFile, split: str, report: StepReport, on_bad_input: str = "skip") -> Iterator[NliRow]:
    """(premise, hypothesis, label, split, source) from a Parquet file in the Hub layout
    of SNLI and MultiNLI (integer labels, 0 entailment, 1 neutral, 2 contradiction, -1
    none), read a batch of rows at a time. Missing columns and an empty file are
    errors naming it."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(raw.path)
    missing = {"premise", "hypothesis", "label"} - set(parquet.schema_arrow.names)
    if missing:
        raise BadInputError(f"{raw.label}: missing NLI columns {sorted(missing)}")
    require_rows(parquet.metadata.num_rows, f"{raw.label} (NLI split '{split}')")
    label_text = raw.label
    index = 0
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=["premise", "hypothesis", "label"]):
        report.rows_in += batch.num_rows
        for premise, hypothesis, label in zip(*(batch.column(i).to_pylist() for i in range(3))):
            where = f"{label_text}:row {index}"
            index += 1
            name = HUB_NLI_LABELS.get(int(label)) if label is not None and not _is_nan(label) else None
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
            yield premise, hypothesis, name, split, where


def _is_nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


def entailment_pairs(labelled, report: StepReport):
    """The entailment pairs of the labelled tables (``pyarrow.Table``s, or DataFrames
    and then a DataFrame), de-duplicated (ordered pairs)."""
    labelled = list(labelled)
    as_pandas = bool(labelled) and all(isinstance(t, pd.DataFrame) for t in labelled)
    tables = [_as_table(t)[0].select(NLI_ROW_COLUMNS).cast(NLI_SCHEMA) for t in labelled]
    table = pa.concat_tables(tables) if tables else NLI_SCHEMA.empty_table()
    entails = pc.fill_null(pc.equal(table.column("label"), "entailment"), False)
    others = table.filter(pc.invert(entails)).column("label")
    for item in pc.value_counts(others).to_pylist():
        report.drop(f"label {item['values']} (not entailment)", int(item["counts"]))
    pairs = drop_duplicate_pairs(table.filter(entails).select(NLI_COLUMNS), "premise", "hypothesis", report,
                                 symmetric=False)
    require_rows(len(pairs), "nli_pairs (entailment pairs)")
    report.rows_out = len(pairs)
    return _like(pairs, as_pandas)
