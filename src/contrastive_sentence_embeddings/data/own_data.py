"""The user's own training data: sentences, documents and sentence pairs read from a
text file, a CSV/TSV/Parquet/JSONL table, a folder of ``.txt`` documents or a Hugging
Face Hub data set.

Every reader yields records one at a time (files are streamed line by line or batch
by batch, Hub data sets with ``streaming=True``), each with its location (``file:line``,
``file:row n`` or ``hub:<id>:<split>:row n``), and counts what it looked at in a
:class:`~.report.StepReport`. What happens next is the built-in sources' own code:
sentences go through :func:`.wikipedia.clean_and_filter_sentences`, documents through
:func:`.documents.tokenized_long_documents` and :func:`.spans.sample_spans`, pairs
through :func:`.pairs.drop_duplicate_pairs`.

Problems that concern one record (undecodable bytes, a line over the length limit, a
missing or non-text value, a non-numeric score, a malformed CSV row or JSON line) are
bad input: skipped and counted with their location, or an error naming it under
``on_bad_input: error``. Problems that concern the whole source always stop the run
with an error naming the file: it does not exist, its format is unknown, a column is
missing (the columns found are listed), it has no rows.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from contrastive_sentence_embeddings.data.arrow_rows import rows_to_table
from contrastive_sentence_embeddings.data.pairs import PAIR_SCHEMA, drop_duplicate_pairs
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import StepReport, handle_bad_input, require_rows
from contrastive_sentence_embeddings.data.wikipedia import normalize_text

logger = logging.getLogger(__name__)

SENTENCE_SCHEMA = pa.schema([("sentence", pa.string()), ("source", pa.string())])

# File extensions -> format. Anything else needs an explicit `format:`.
EXTENSIONS = {
    "txt": "txt", "text": "txt",
    "csv": "csv",
    "tsv": "tsv", "tab": "tsv",
    "parquet": "parquet", "pq": "parquet",
    "jsonl": "jsonl", "ndjson": "jsonl",
}
DELIMITERS = {"csv": ",", "tsv": "\t"}
PARQUET_BATCH_ROWS = 1024

Record = tuple[str, tuple]  # (location, the requested columns' values)


class SourceError(ValueError):
    """A source that cannot be read at all: unknown format, missing column, not the
    format it claims. Raised whatever ``on_bad_input`` says."""


class MissingColumnError(SourceError):
    """A requested column is not in the source; the message lists those found."""


def missing_columns_error(label: str, wanted: Sequence[str], found: Iterable[str]) -> MissingColumnError:
    found = [str(name) for name in found]
    missing = [name for name in wanted if name not in found]
    return MissingColumnError(f"{label}: no column {', '.join(repr(m) for m in missing)}; "
                              f"the columns found are: {', '.join(repr(f) for f in found) or 'none'}")


# --- which file, which format ------------------------------------------------------------
def source_path(path: str | Path) -> Path:
    """``path`` (relative paths are taken from the working directory, the project root
    under ``kedro run``), which must exist."""
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"own data {path}: no such file or folder (looked for {resolved.resolve()}; "
                                "relative paths are taken from the project root)")
    return resolved


def source_format(path: Path, declared: str | None, allowed: Sequence[str]) -> str:
    """The format of the source at ``path``: ``declared`` when given, ``folder`` for a
    folder, else from the file's extension. An unknown extension, a format this input
    cannot take, or a folder / file mismatch is a :class:`SourceError` naming the path."""
    if declared is not None:
        fmt = declared
    elif path.is_dir():
        fmt = "folder"
    else:
        extension = path.suffix.lower().lstrip(".")
        fmt = EXTENSIONS.get(extension)
        if fmt is None:
            raise SourceError(f"own data {path}: unknown format (extension {path.suffix or 'none'!r}); "
                              f"name files .{', .'.join(sorted(EXTENSIONS))} or give format: one of {', '.join(allowed)}")
    if fmt not in allowed:
        raise SourceError(f"own data {path}: format {fmt!r} cannot feed this input; it reads {', '.join(allowed)}")
    if (fmt == "folder") != path.is_dir():
        raise SourceError(f"own data {path}: format {fmt!r} but it is {'a folder' if path.is_dir() else 'a file'}")
    return fmt


# --- one value -----------------------------------------------------------------------------
def text_value(value: Any, column: str, where: str, report: StepReport, on_bad_input: str,
               max_chars: int | None = None) -> str | None:
    """``value`` as normalised text (NFC, single spaces), or None when it is bad input
    (missing, not text, not UTF-8, longer than ``max_chars``), counted or raised.
    Blank text is returned as ``""``: whether that is a loss is the caller's business."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as error:
            handle_bad_input(report, f"{column}: not utf-8 (byte {error.start})", where, on_bad_input)
            return None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        handle_bad_input(report, f"{column}: missing text", where, on_bad_input)
        return None
    if not isinstance(value, str):
        handle_bad_input(report, f"{column}: not text ({type(value).__name__})", where, on_bad_input)
        return None
    if max_chars is not None and len(value) > max_chars:
        handle_bad_input(report, f"{column}: longer than {max_chars} characters", where, on_bad_input)
        return None
    return normalize_text(value)


def score_value(value: Any, column: str, where: str, report: StepReport, on_bad_input: str) -> float | None:
    """``value`` as a finite number, or None when it is bad input (missing, blank, not a
    number, NaN), counted or raised."""
    if isinstance(value, str):
        value = value.strip()
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        handle_bad_input(report, f"{column}: missing score", where, on_bad_input)
        return None
    try:
        score = float(value)
    except (TypeError, ValueError):
        handle_bad_input(report, f"{column}: score is not a number", where, on_bad_input)
        return None
    if not math.isfinite(score) or isinstance(value, bool):
        handle_bad_input(report, f"{column}: score is not a number", where, on_bad_input)
        return None
    return score


# --- readers: records of the requested columns, one at a time ---------------------------------
def _limited(records: Iterator[Record], max_rows: int | None) -> Iterator[Record]:
    """The first ``max_rows`` records; the one after them is never read (nor counted)."""
    try:
        if max_rows is None:
            yield from records
            return
        for index, record in enumerate(records, start=1):
            yield record
            if index >= max_rows:
                return
    finally:
        # A reader stopped early settles its counts now (its `finally`), not at garbage collection.
        close = getattr(records, "close", None)
        if close is not None:
            close()


def read_text_lines(raw: RawFile, report: StepReport, on_bad_input: str) -> Iterator[Record]:
    """One record per line of a text file (undecodable lines counted by ``RawFile``)."""
    for _, where, text in raw.iter_located_lines(report, on_bad_input):
        yield where, (text,)


def read_delimited(raw: RawFile, delimiter: str, columns: Sequence[str], report: StepReport,
                   on_bad_input: str) -> Iterator[Record]:
    """Records of a CSV or TSV file with a header line (quoted fields may span lines).
    A blank line is dropped and counted; a row with another number of fields than the
    header, or one the CSV parser rejects (e.g. a field over its size limit), is bad
    input. Undecodable lines are skipped and counted as rows."""
    scratch = StepReport(report.step)  # undecodable lines, counted as rows of the report
    current = {"line": 0}

    def lines() -> Iterator[str]:
        for number, text in raw.iter_lines(scratch, on_bad_input):
            current["line"] = number
            yield text + "\n"  # the line break back: a quoted field may span lines

    label = raw.label
    reader = csv.reader(lines(), delimiter=delimiter)
    try:
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            require_rows(0, f"{label} (empty file: no header line)")
        if any(name not in header for name in columns):
            raise missing_columns_error(label, columns, header)
        positions = [header.index(name) for name in columns]
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                report.rows_in += 1
                handle_bad_input(report, f"unreadable {'TSV' if delimiter == chr(9) else 'CSV'} row ({error})",
                                 f"{label}:{current['line']}", on_bad_input)
                continue
            report.rows_in += 1
            where = f"{label}:{current['line']}"
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                report.drop("blank line", where=where)
                continue
            if len(fields) != len(header):
                handle_bad_input(report, f"expected {len(header)} fields (as the header), found {len(fields)}",
                                 where, on_bad_input)
                continue
            yield where, tuple(fields[position] for position in positions)
    finally:
        report.rows_in += scratch.rows_dropped
        report.absorb(scratch)


def _read_mappings(rows: Iterable[tuple[str, Any]], columns: Sequence[str], label: str, report: StepReport,
                   on_bad_input: str) -> Iterator[Record]:
    """Records from JSON-like rows (dicts): the first row must have every column (else
    the source is the wrong one, an error listing the fields it has); a later row
    without one is bad input."""
    checked = False
    for where, row in rows:
        if not isinstance(row, dict):
            handle_bad_input(report, f"not a JSON object ({type(row).__name__})", where, on_bad_input)
            continue
        missing = [name for name in columns if name not in row]
        if missing and not checked:
            raise missing_columns_error(label, columns, row)
        checked = True
        if missing:
            handle_bad_input(report, f"no field {missing[0]!r}", where, on_bad_input)
            continue
        yield where, tuple(row[name] for name in columns)


def read_jsonl(raw: RawFile, columns: Sequence[str], report: StepReport, on_bad_input: str) -> Iterator[Record]:
    """Records of a JSON Lines file (one object per line); blank lines are dropped and
    counted, lines that are not JSON are bad input."""
    def objects() -> Iterator[tuple[str, Any]]:
        for _, where, text in raw.iter_located_lines(report, on_bad_input):
            if not text.strip():
                report.drop("blank line", where=where)
                continue
            try:
                yield where, json.loads(text)
            except json.JSONDecodeError as error:
                handle_bad_input(report, f"not valid JSON ({error.msg})", where, on_bad_input)

    yield from _read_mappings(objects(), columns, raw.label, report, on_bad_input)


def read_parquet(path: Path, columns: Sequence[str], report: StepReport) -> Iterator[Record]:
    """Records of a Parquet file, read a batch of rows at a time."""
    import pyarrow.parquet as pq

    label = RawFile(path).label
    try:
        table = pq.ParquetFile(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise SourceError(f"{label}: not a readable Parquet file ({type(error).__name__}: {error})") from None
    names = table.schema_arrow.names
    if any(name not in names for name in columns):
        raise missing_columns_error(label, columns, names)
    index = 0
    for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(columns)):
        values = [batch.column(name).to_pylist() for name in columns]
        for row in zip(*values):
            report.rows_in += 1
            yield f"{label}:row {index}", row
            index += 1


def load_hub_rows(hub: str, subset: str | None, split: str) -> Iterable[dict]:
    """The rows of a Hub data set, streamed (nothing is downloaded beyond what is read).
    A local folder in the Hub layout works the same way."""
    from datasets import load_dataset

    return load_dataset(hub, subset, split=split, streaming=True)


def read_hub(hub: str, subset: str | None, split: str, columns: Sequence[str], report: StepReport,
             on_bad_input: str) -> Iterator[Record]:
    """Records of a Hugging Face Hub data set (or a local folder in the Hub layout)."""
    label = f"hub:{hub}" + (f"/{subset}" if subset else "") + f":{split}"
    try:
        rows = load_hub_rows(hub, subset, split)
    except Exception as error:  # noqa: BLE001 - any failure means the source cannot be read
        raise SourceError(f"{label}: cannot load the Hub data set ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}); without internet, use a local file "
                          "or a folder in the Hub layout") from None
    names = getattr(rows, "column_names", None)
    if names and any(name not in names for name in columns):
        raise missing_columns_error(label, columns, names)

    def counted() -> Iterator[tuple[str, Any]]:
        for index, row in enumerate(rows):
            report.rows_in += 1
            yield f"{label}:row {index}", row

    yield from _read_mappings(counted(), columns, label, report, on_bad_input)


def table_records(path: str | None, hub: str | None, subset: str | None, split: str, fmt: str | None,
                  columns: Sequence[str], allowed: Sequence[str], report: StepReport, on_bad_input: str,
                  max_rows: int | None = None) -> Iterator[Record]:
    """The records of ``columns`` from a local file (``path``, format ``fmt`` or its
    extension's) or a Hub data set (``hub``), at most ``max_rows`` of them. A text file
    has one column, its lines."""
    if hub is not None:
        records = read_hub(hub, subset, split, columns, report, on_bad_input)
    else:
        resolved = source_path(path)
        fmt = source_format(resolved, fmt, allowed)
        raw = RawFile(resolved)
        if fmt == "txt":
            records = read_text_lines(raw, report, on_bad_input)
        elif fmt in DELIMITERS:
            records = read_delimited(raw, DELIMITERS[fmt], columns, report, on_bad_input)
        elif fmt == "jsonl":
            records = read_jsonl(raw, columns, report, on_bad_input)
        elif fmt == "parquet":
            records = read_parquet(resolved, columns, report)
        else:
            raise SourceError(f"own data {path}: format {fmt!r} has no table reader")
    return _limited(records, max_rows)


# --- sentences -------------------------------------------------------------------------------
def sentence_candidates(records: Iterable[Record], column: str, report: StepReport, on_bad_input: str,
                        max_chars: int, label: str):
    """``(sentence, source)`` candidates, one per record, streamed into a ``datasets.Dataset``
    (Arrow in memory, never a list of Python rows); bad values counted (or raised). A
    source without a single record is an error naming it."""
    import datasets

    def candidates() -> Iterator[tuple[str, str]]:
        for where, (value,) in records:
            text = text_value(value, column, where, report, on_bad_input, max_chars)
            if text is not None:
                yield text, where

    table = rows_to_table(candidates(), SENTENCE_SCHEMA)
    require_rows(report.rows_in, f"{label} (own sentences)")
    return datasets.Dataset(table)


# --- documents -------------------------------------------------------------------------------
def read_folder_documents(folder: Path, report: StepReport, on_bad_input: str,
                          max_rows: int | None = None) -> Iterator[tuple[str, str, str, str]]:
    """``(doc_id, source, title, text)`` for every ``.txt`` file under ``folder`` (sorted;
    the relative path is the id, the file name's stem the title): its decodable lines,
    normalised, blank ones left out, joined by newlines. Other files are logged and
    left alone. An undecodable line is skipped and the document kept (counted as a
    variant, with its ``file:line``), or an error under ``on_bad_input: error``."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    texts = [p for p in files if p.suffix.lower() == ".txt"]
    others = [p.relative_to(folder).as_posix() for p in files if p.suffix.lower() != ".txt"]
    if others:
        logger.info("own documents in %s: not .txt, left alone: %s", folder, ", ".join(others[:10]))
    for count, path in enumerate(texts):
        if max_rows is not None and count >= max_rows:
            return
        raw = RawFile(path)
        lines = StepReport(report.step)
        text = "\n".join(line for line in (normalize_text(t) for _, t in raw.iter_lines(lines, on_bad_input)) if line)
        for reason, n in lines.dropped.items():
            examples = lines.examples.get(reason, [])
            report.variant(f"document kept without a line that is {reason}", n - len(examples))
            for where in examples:
                report.variant(f"document kept without a line that is {reason}", where=where)
        report.rows_in += 1
        yield path.relative_to(folder).as_posix(), raw.label, path.stem, text


def document_records(path: str | None, hub: str | None, subset: str | None, split: str, fmt: str | None,
                     column: str, allowed: Sequence[str], report: StepReport, on_bad_input: str,
                     max_rows: int | None = None) -> Iterator[tuple[str, str, str, str]]:
    """``(doc_id, source, title, text)`` of every document of a folder of ``.txt`` files,
    a JSONL/Parquet file or a Hub data set (text ``column``), at most ``max_rows``."""
    if hub is None:
        folder = source_path(path)
        if source_format(folder, fmt, allowed) == "folder":
            return read_folder_documents(folder, report, on_bad_input, max_rows)
    records = table_records(path, hub, subset, split, fmt, [column], allowed, report, on_bad_input, max_rows)
    return table_documents(records, column, report, on_bad_input)


def own_documents(documents: Iterable[tuple[str, str, str, str]], report: StepReport,
                  label: str) -> Iterator[tuple[str, str, str, str]]:
    """The documents (``DOCUMENT_COLUMNS`` tuples), passed on one at a time; empty ones
    dropped and counted. No document at all is an error naming the source (raised
    once the source has been read to its end)."""
    yielded = 0
    for doc_id, where, title, text in documents:
        if not text:
            report.drop("empty document", where=where)
            continue
        yielded += 1
        yield doc_id, where, title, text
    require_rows(report.rows_in, f"{label} (own documents)")
    require_rows(yielded, f"{label} (own documents: every document is empty)")


def table_documents(records: Iterable[Record], column: str, report: StepReport,
                    on_bad_input: str) -> Iterator[tuple[str, str, str, str]]:
    """Documents from table records (one per row; the location is the id)."""
    for where, (value,) in records:
        text = text_value(value, column, where, report, on_bad_input)
        if text is not None:
            yield where, where, "", text


# --- pairs ------------------------------------------------------------------------------------
def own_pairs(records: Iterable[Record], columns: Sequence[str], report: StepReport, on_bad_input: str,
              max_chars: int, label: str, min_score: float | None = None,
              kept_labels: set[str] | None = None) -> pa.Table:
    """Positive pairs from records of ``columns``: the two text columns, then the score
    column when ``min_score`` is set, then the label column when ``kept_labels`` is.
    Missing or blank text and missing or non-numeric scores are bad input; pairs scored
    ``<= min_score`` or labelled otherwise are dropped and counted, and so are
    duplicates ((a, b) and (b, a) are one pair). The records are streamed into a
    ``pyarrow.Table`` with ``PAIR_COLUMNS`` (``score`` NaN without a score column;
    ``split`` is ``own``)."""
    first, second = columns[0], columns[1]

    def checked() -> Iterator[tuple[str, str, float, str, str]]:
        for where, values in records:
            texts = []
            for column, value in zip((first, second), values[:2]):
                text = text_value(value, column, where, report, on_bad_input, max_chars)
                if text == "":
                    # an empty CSV field and a null are the same loss: say so once
                    handle_bad_input(report, f"{column}: missing text", where, on_bad_input)
                    text = None
                if text is None:
                    break
                texts.append(text)
            if len(texts) < 2:
                continue
            rest = list(values[2:])
            score = math.nan
            if min_score is not None:
                score = score_value(rest.pop(0), columns[2], where, report, on_bad_input)
                if score is None:
                    continue
                if score <= min_score:
                    report.drop(f"score <= {min_score:g}", where=where)
                    continue
            if kept_labels is not None:
                value = rest.pop(0)
                name = "" if value is None else str(value).strip()
                if name not in kept_labels:
                    report.drop(f"label {name!r} not kept", where=where)
                    continue
            yield texts[0], texts[1], score, "own", where

    table = rows_to_table(checked(), PAIR_SCHEMA)
    require_rows(report.rows_in, f"{label} (own pairs)")
    kept = drop_duplicate_pairs(table, "sentence1", "sentence2", report, symmetric=True)
    require_rows(len(kept), f"{label} (own pairs: none left after the checks and filters; see the data report)")
    return kept

