"""Rows streamed into memory-mapped Arrow tables, for steps whose input is too large to
hold as Python objects (a million sentences, every line of a raw file).

A reader yields rows one at a time; :func:`rows_to_dataset` writes them in batches to
an Arrow file in a scratch folder and hands back a ``datasets.Dataset`` mapped from
that file, on which ``map(num_proc=...)`` and ``filter`` run in worker processes
writing their results beside it. The scratch folder is one this process created
(``tempfile.mkdtemp``, marked as this process's: :mod:`.scratch`); it is deleted when
the last data set reading from it is garbage-collected (after Kedro has saved the
node's output) or at exit, never before; after a kill, by the next run.
"""

from __future__ import annotations

import hashlib
import shutil
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa

from contrastive_sentence_embeddings.data.report import MAX_EXAMPLES_PER_REASON, StepReport
from contrastive_sentence_embeddings.runs.scratch import explained_no_space, marked_folder, remedy_for_temporary_files

# Rows per Arrow record batch: large enough to amortise the writes, small enough that
# one batch of Python objects is a few MB at most.
BATCH_ROWS = 8192


@contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new temporary folder owned by this run, holding only its owner's marker
    (:func:`.scratch.marked_folder`: a run that is killed leaves it to the next run to
    remove). If the block fails it is deleted at once (a full disk inside it is
    reported as such, naming the folder: :func:`.scratch.explained_no_space`); if it
    succeeds it is left to the data set the block hands to :func:`release_with`."""
    folder = marked_folder(prefix, purpose="data preparation's working files")
    try:
        with explained_no_space(folder, remedy_for_temporary_files()):
            yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def release_with(dataset, folder: Path):
    """Delete ``folder`` (a :func:`scratch_folder`) once ``dataset`` is gone: its rows are
    memory-mapped from files in it until then. Returns ``dataset``."""
    weakref.finalize(dataset, shutil.rmtree, str(folder), True)
    return dataset


def row_batches(rows: Iterable[Sequence], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``rows`` (tuples in ``schema``'s column order) as record batches of
    :data:`BATCH_ROWS` rows; only one batch is ever held as Python objects. At least
    one batch (possibly empty) is yielded."""
    def batch(chunk: list[Sequence]) -> pa.RecordBatch:
        return pa.record_batch([pa.array([row[i] for row in chunk], type=schema.field(i).type)
                                for i in range(len(schema.names))], schema=schema)

    chunk: list[Sequence] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == BATCH_ROWS:
            yield batch(chunk)
            chunk = []
    yield batch(chunk)


def rows_to_table(rows: Iterable[Sequence], schema: pa.Schema) -> pa.Table:
    """``rows`` streamed into an in-memory Arrow table (for data small enough to hold
    as Arrow, not as Python objects: sentence pairs)."""
    return pa.Table.from_batches(list(row_batches(rows, schema)), schema=schema)


def rows_to_dataset(rows: Iterable[Sequence], schema: pa.Schema, path: Path):
    """Write ``rows`` (tuples in ``schema``'s column order) to the Arrow stream file
    ``path`` a batch at a time and return it as a memory-mapped ``datasets.Dataset``."""
    import datasets

    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in row_batches(rows, schema):
            writer.write_batch(batch)
    return datasets.Dataset.from_file(str(path))


# --- de-duplication and drop counts over Arrow columns -------------------------------------
def text_key(*texts: str) -> tuple[int, int]:
    """128 bits of a hash of ``texts`` (each length-prefixed, so ("ab", "c") and
    ("a", "bc") differ) as two signed 64-bit integers: what de-duplication compares,
    so that a million rows are compared as two integer columns, not as Python strings
    (a collision between different texts is ~1e-26 likely at that size)."""
    digest = hashlib.blake2b(digest_size=16)
    for text in texts:
        encoded = text.encode("utf-8")
        digest.update(len(encoded).to_bytes(8, "little") + encoded)
    value = digest.digest()
    return int.from_bytes(value[:8], "little", signed=True), int.from_bytes(value[8:], "little", signed=True)


def first_occurrences(keys: np.ndarray) -> np.ndarray:
    """For ``(n, 2)`` integer keys, a mask that is True at the first row of every
    distinct key (``np.unique`` sorts stably when asked for indices)."""
    first = np.zeros(len(keys), dtype=bool)
    if len(keys):
        first[np.unique(keys, axis=0, return_index=True)[1]] = True
    return first


def drop_rows(report: StepReport, reason: str, rows: np.ndarray, sources: pa.ChunkedArray | pa.Array) -> None:
    """Count ``rows`` (positions, ascending) as dropped for ``reason`` with the first
    ones' ``sources`` as examples: the report a row-by-row loop would have written."""
    examples = sources.take(pa.array(np.asarray(rows[:MAX_EXAMPLES_PER_REASON], dtype=np.int64))).to_pylist()
    report.drop(reason, len(rows) - len(examples))
    for where in examples:
        report.drop(reason, where=where)
