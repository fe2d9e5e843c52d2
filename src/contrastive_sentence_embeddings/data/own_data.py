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

Every physical line of a text, TSV, CSV or JSONL file is accounted for: read into a
record, or dropped and counted with its ``file:line``.

* Encoding: each line is tried as UTF-8, then, if it is not, decoded in the source's
  ``encoding`` (default :data:`FALLBACK_ENCODING`, Windows-1252) and counted as a
  variant ("decoded as cp1252 (not utf-8)"): the detection :class:`.raw_file.RawFile`
  does for the transfer tasks' legacy files. ``encoding: utf-8`` turns the fallback off.
* Quoting (:data:`QUOTING`): a TSV file is read without quoting, like the SentEval
  and STS files (one line, one row; a ``"`` is a character of the text, and a field
  starting with one is counted as a variant); a CSV file with RFC 4180 quoting, where
  a quoted field may hold line breaks, so a row may span lines (each such row is
  counted as a variant, and the report's ``lines_read`` counts the physical lines).
  The source's ``quoting`` (``none`` or ``rfc4180``) overrides either.
* Text or not: a file more than half of whose lines (:data:`NOT_TEXT_SHARE`) are
  undecodable or hold control characters (a compressed or binary file, whatever its
  name) is not text: :class:`NotTextError`, naming the file and the counts.

Problems that concern one record (undecodable bytes, a line over the length limit, a
missing or non-text value, a non-numeric score, a malformed CSV row or JSON line) are
bad input: skipped and counted with their location, or an error naming it under
``on_bad_input: error``. Problems that concern the whole source always stop the run
with an error naming the file: it does not exist, its format is unknown, a column is
missing (the columns found are listed), it is not text, it has no rows, or no record
is left after the checks (the error gives the counts of why; the data report is
carried by the error, for the node's hook to write).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa

from contrastive_sentence_embeddings.data.arrow_rows import rows_to_table
from contrastive_sentence_embeddings.data.pairs import PAIR_SCHEMA, drop_duplicate_pairs
from contrastive_sentence_embeddings.data.raw_file import NUL_REMOVED, RawFile
from contrastive_sentence_embeddings.data.report import (
    EmptyInputError,
    StepReport,
    handle_bad_input,
    require_rows,
)
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
# How a delimited file's quotes are read, by format: "none" (a quote is text; one line,
# one row) or "rfc4180" (a field in quotes may hold delimiters, doubled quotes and line
# breaks). A source's `quoting` overrides it.
QUOTING = {"csv": "rfc4180", "tsv": "none"}
# The encoding a line that is not UTF-8 is decoded in when the source names none: the
# usual encoding of text saved on Windows (every byte but five decodes, so a line that
# fails is not text in it either).
FALLBACK_ENCODING = "cp1252"
# A file more than this share of whose lines are not text is not a text file.
NOT_TEXT_SHARE = 0.5
# Characters that text does not hold but binary data decoded as text does: C0 controls
# other than tab, line feed, vertical tab, form feed and carriage return; DEL; C1 controls.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
PARQUET_BATCH_ROWS = 1024

Record = tuple[str, tuple]  # (location, the requested columns' values)


class SourceError(ValueError):
    """A source that cannot be read at all: unknown format, missing column, not the
    format it claims. Raised whatever ``on_bad_input`` says."""


class NotTextError(SourceError):
    """A file given as text (or CSV, TSV, JSONL) that is mostly not text: compressed,
    binary, or in an encoding other than the one it is read in."""


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
            handle_bad_input(report, f"{column}: not utf-8", where, on_bad_input, detail=f"byte {error.start}")
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


def raw_text_file(path: Path, encoding: str | None) -> RawFile:
    """A handle on the text file ``path``: each line UTF-8 or else ``encoding`` (None:
    :data:`FALLBACK_ENCODING`; ``utf-8``: no fallback), the fallback counted."""
    return RawFile(path, encoding=encoding or FALLBACK_ENCODING)


def require_text(raw: RawFile, lines: int, decoded: int, not_text: int) -> None:
    """Stop with :class:`NotTextError` when more than :data:`NOT_TEXT_SHARE` of the
    ``lines`` read are not text: undecodable (``lines - decoded``) or decoded but
    holding control characters or NUL bytes (``not_text``)."""
    bad = lines - decoded + not_text
    if lines and bad > NOT_TEXT_SHARE * lines:
        fallback = "" if raw.encoding.lower().replace("_", "-") in ("utf-8", "utf8") else f" nor {raw.encoding}"
        raise NotTextError(
            f"{raw.label}: not a text file: {bad:,} of the {lines:,} lines read are not text (not utf-8{fallback}, "
            f"or holding control characters or NUL bytes), more than {NOT_TEXT_SHARE:.0%}; a compressed or binary "
            "file? Decompress it or convert it to UTF-8 text, or give the source's `encoding`")


def text_lines(raw: RawFile, report: StepReport, on_bad_input: str) -> Iterator[tuple[int, str]]:
    """:meth:`RawFile.iter_lines` (every line counted in ``report.rows_in``, undecodable
    ones dropped and counted), the file judged once read to its end, or once its reader
    is closed after ``max_rows``: :func:`require_text` over the lines read."""
    lines_before, decoded, not_text = report.rows_in, 0, 0
    nul_lines = report.variants[NUL_REMOVED]
    try:
        for number, text in raw.iter_lines(report, on_bad_input):
            decoded += 1
            if report.variants[NUL_REMOVED] != nul_lines or CONTROL_CHARACTERS.search(text):
                not_text += 1
            nul_lines = report.variants[NUL_REMOVED]
            yield number, text
    except GeneratorExit:
        require_text(raw, report.rows_in - lines_before, decoded, not_text)
        raise
    require_text(raw, report.rows_in - lines_before, decoded, not_text)


def read_text_lines(raw: RawFile, report: StepReport, on_bad_input: str) -> Iterator[Record]:
    """One record per line of a text file (undecodable lines counted by ``RawFile``)."""
    label = raw.label
    with closing(text_lines(raw, report, on_bad_input)) as lines:  # judged when closed early, too
        for number, text in lines:
            yield f"{label}:{number}", (text,)


MULTI_LINE_ROW = "row over several lines (a quoted field holds a line break)"
LEADING_QUOTE = "field starting with a quote, read as text (quoting: none)"


def read_delimited(raw: RawFile, delimiter: str, columns: Sequence[str], report: StepReport,
                   on_bad_input: str, quoting: str = "rfc4180") -> Iterator[Record]:
    """Records of a CSV or TSV file with a header line, its quotes read by ``quoting``:
    ``none``, every line is one row and a quote is text (a field starting with one is
    counted as a variant); ``rfc4180``, a quoted field may hold delimiters, doubled
    quotes and line breaks, so a row may span lines (counted as a variant, located at
    its first line), and a stray quote makes the row unreadable.

    Every physical line is accounted for: ``report.extra["lines_read"]`` counts them
    (the header included); ``report.rows_in`` counts the rows read, each line of a row
    that could not be read, and the undecodable lines, so that with no row over several
    lines it is the lines after the header. A blank line is dropped and counted; a row
    with another number of fields than the header, or one the parser rejects (a stray or
    unclosed quote, a field over its size limit), is bad input: every line it took is
    dropped and counted, located at its first line with the lines it took."""
    if quoting not in ("none", "rfc4180"):
        raise ValueError(f"quoting must be 'none' or 'rfc4180', got {quoting!r}")
    scratch = StepReport(report.step)  # every physical line, and the undecodable ones
    consumed: list[int] = []  # the line numbers of the row being parsed

    def lines() -> Iterator[str]:
        with closing(text_lines(raw, scratch, on_bad_input)) as numbered:
            for number, text in numbered:
                consumed.append(number)
                yield text + "\n"  # the line break back: a quoted field may span lines

    source = lines()
    if quoting == "none":
        reader = csv.reader(source, delimiter=delimiter, quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(source, delimiter=delimiter, quotechar='"', doublequote=True, strict=True)
    label, kind = raw.label, "TSV" if delimiter == "\t" else "CSV"

    def span() -> tuple[str, str | None, int]:
        """The row just parsed: its first line's location, its lines when several, and
        how many lines it took."""
        first, last = (consumed[0], consumed[-1]) if consumed else (scratch.rows_in, scratch.rows_in)
        taken = max(len(consumed), 1)
        consumed.clear()
        return f"{label}:{first}", (f"lines {first}-{last}" if last > first else None), taken

    def bad_row(reason: str, where: str, lines_taken: str | None, taken: int) -> None:
        """A row that cannot be read counts every line it took as read and dropped: a
        stray quote that swallowed the next lines loses each of them visibly."""
        report.rows_in += taken
        handle_bad_input(report, reason, where, on_bad_input, lines_taken)
        report.drop(reason, taken - 1)

    try:
        try:
            header = [name.strip() for name in next(reader)]
        except StopIteration:
            require_rows(0, f"{label} (empty file: no header line)")
        consumed.clear()
        if any(name not in header for name in columns):
            raise missing_columns_error(label, columns, header)
        positions = [header.index(name) for name in columns]
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                bad_row(f"unreadable {kind} row ({error})", *span())
                continue
            where, lines_taken, taken = span()
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                report.rows_in += 1
                report.drop("blank line", where=where)
                continue
            if len(fields) != len(header):
                bad_row(f"expected {len(header)} fields (as the header), found {len(fields)}", where, lines_taken,
                        taken)
                continue
            report.rows_in += 1
            if lines_taken is not None:
                report.variant(MULTI_LINE_ROW, where=f"{where} ({lines_taken})")
            if quoting == "none" and any(fields[p].startswith('"') for p in positions):
                report.variant(LEADING_QUOTE, where=where)
            yield where, tuple(fields[position] for position in positions)
    finally:
        try:
            source.close()  # the file is judged (text or not) even when its rows are not all read
        finally:
            report.rows_in += scratch.rows_dropped
            report.absorb(scratch)
            report.extra["lines_read"] = scratch.rows_in
            report.extra["quoting"] = quoting


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
    label = raw.label

    def objects() -> Iterator[tuple[str, Any]]:
        with closing(text_lines(raw, report, on_bad_input)) as lines:
            for number, text in lines:
                where = f"{label}:{number}"
                if not text.strip():
                    report.drop("blank line", where=where)
                    continue
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as error:
                    handle_bad_input(report, f"not valid JSON ({error.msg})", where, on_bad_input)
                    continue
                yield where, value

    with closing(objects()) as rows:
        yield from _read_mappings(rows, columns, label, report, on_bad_input)


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
                  max_rows: int | None = None, encoding: str | None = None,
                  quoting: str | None = None) -> Iterator[Record]:
    """The records of ``columns`` from a local file (``path``, format ``fmt`` or its
    extension's) or a Hub data set (``hub``), at most ``max_rows`` of them. A text file
    has one column, its lines. A text, CSV, TSV or JSONL file is read in ``encoding``
    (see :func:`raw_text_file`); a CSV or TSV file's quotes by ``quoting`` (None: the
    format's, :data:`QUOTING`)."""
    if hub is not None:
        records = read_hub(hub, subset, split, columns, report, on_bad_input)
    else:
        resolved = source_path(path)
        fmt = source_format(resolved, fmt, allowed)
        raw = raw_text_file(resolved, encoding)
        if fmt == "txt":
            records = read_text_lines(raw, report, on_bad_input)
        elif fmt in DELIMITERS:
            records = read_delimited(raw, DELIMITERS[fmt], columns, report, on_bad_input, quoting or QUOTING[fmt])
        elif fmt == "jsonl":
            records = read_jsonl(raw, columns, report, on_bad_input)
        elif fmt == "parquet":
            records = read_parquet(resolved, columns, report)
        else:
            raise SourceError(f"own data {path}: format {fmt!r} has no table reader")
    return _limited(records, max_rows)


def require_records_left(count: int, what: str, report: StepReport) -> None:
    """Stop with :class:`EmptyInputError` when no record is left (``count`` is 0) of a
    source that had some, saying why: the commonest reasons in ``report``, with their
    counts and first example."""
    if count:
        return
    common = report.dropped.most_common(3)
    reasons = "; ".join(f"{n:,} {reason}" + (f" (e.g. {report.examples[reason][0]})" if report.examples.get(reason)
                                             else "") for reason, n in common)
    others = len(report.dropped) - len(common)
    raise EmptyInputError(f"{what}: nothing is left of the {report.rows_in:,} rows read: {reasons or 'none kept'}"
                          + (f"; {others} more reason(s) in the data report" if others > 0 else "")
                          + "; refusing to go on with an empty data set")


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
    require_records_left(len(table), f"{label} (own sentences)", report)
    return datasets.Dataset(table)


# --- documents -------------------------------------------------------------------------------
def read_folder_documents(folder: Path, report: StepReport, on_bad_input: str, max_rows: int | None = None,
                          encoding: str | None = None) -> Iterator[tuple[str, str, str, str]]:
    """``(doc_id, source, title, text)`` for every ``.txt`` file under ``folder`` (sorted;
    the relative path is the id, the file name's stem the title): its decodable lines,
    normalised, blank ones left out, joined by newlines. Other files are logged and
    left alone. A line is decoded as :func:`raw_text_file` says; an undecodable line is
    skipped and the document kept (counted as a variant, with its ``file:line``), or an
    error under ``on_bad_input: error``; a file that is not text stops the run
    (:class:`NotTextError`)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    texts = [p for p in files if p.suffix.lower() == ".txt"]
    others = [p.relative_to(folder).as_posix() for p in files if p.suffix.lower() != ".txt"]
    if others:
        logger.info("own documents in %s: not .txt, left alone: %s", folder, ", ".join(others[:10]))
    for count, path in enumerate(texts):
        if max_rows is not None and count >= max_rows:
            return
        raw = raw_text_file(path, encoding)
        lines = StepReport(report.step)
        text = "\n".join(line for line in (normalize_text(t) for _, t in text_lines(raw, lines, on_bad_input)) if line)
        for reason, n in lines.dropped.items():
            examples = lines.examples.get(reason, [])
            report.variant(f"document kept without a line that is {reason}", n - len(examples))
            for where in examples:
                report.variant(f"document kept without a line that is {reason}", where=where)
        report.absorb(StepReport(report.step, variants=lines.variants, variant_examples=lines.variant_examples))
        report.rows_in += 1
        yield path.relative_to(folder).as_posix(), raw.label, path.stem, text


def document_records(path: str | None, hub: str | None, subset: str | None, split: str, fmt: str | None,
                     column: str, allowed: Sequence[str], report: StepReport, on_bad_input: str,
                     max_rows: int | None = None, encoding: str | None = None) -> Iterator[tuple[str, str, str, str]]:
    """``(doc_id, source, title, text)`` of every document of a folder of ``.txt`` files,
    a JSONL/Parquet file or a Hub data set (text ``column``), at most ``max_rows``."""
    if hub is None:
        folder = source_path(path)
        if source_format(folder, fmt, allowed) == "folder":
            return read_folder_documents(folder, report, on_bad_input, max_rows, encoding)
    records = table_records(path, hub, subset, split, fmt, [column], allowed, report, on_bad_input, max_rows,
                            encoding)
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
    require_records_left(yielded, f"{label} (own documents)", report)


def table_documents(records: Iterable[Record], column: str, report: StepReport,
                    on_bad_input: str) -> Iterator[tuple[str, str, str, str]]:
    """Documents from table records (one per row; the location is the id)."""
    for where, (value,) in records:
        text = text_value(value, column, where, report, on_bad_input)
        if text is not None:
            yield where, where, "", text


# --- pairs ------------------------------------------------------------------------------------
def label_key(value: Any) -> str:
    """A label as compared with ``keep_label``: by value, so that ``0``, ``0.0``, ``"0"``
    and ``" 0.0 "`` are one label (a column of integer labels often comes back as
    floats, from pandas or a CSV written by one), and any other text as it is, stripped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    if not math.isfinite(number):
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def own_pairs(records: Iterable[Record], columns: Sequence[str], report: StepReport, on_bad_input: str,
              max_chars: int, label: str, min_score: float | None = None,
              kept_labels: set[str] | None = None) -> pa.Table:
    """Positive pairs from records of ``columns``: the two text columns, then the score
    column when ``min_score`` is set, then the label column when ``kept_labels`` is.
    Missing or blank text and missing or non-numeric scores are bad input; pairs scored
    ``<= min_score`` or labelled otherwise (labels compared by value:
    :func:`label_key`) are dropped and counted, and so are duplicates ((a, b) and
    (b, a) are one pair). The records are streamed into a
    ``pyarrow.Table`` with ``PAIR_COLUMNS`` (``score`` NaN without a score column;
    ``split`` is ``own``)."""
    first, second = columns[0], columns[1]
    kept_keys = None if kept_labels is None else {label_key(label) for label in kept_labels}

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
            if kept_keys is not None:
                name = label_key(rest.pop(0))
                if name not in kept_keys:
                    report.drop(f"label {name!r} not kept", where=where)
                    continue
            yield texts[0], texts[1], score, "own", where

    table = rows_to_table(checked(), PAIR_SCHEMA)
    require_rows(report.rows_in, f"{label} (own pairs)")
    require_records_left(len(table), f"{label} (own pairs)", report)
    return drop_duplicate_pairs(table, "sentence1", "sentence2", report, symmetric=True)

