"""Rows streamed into memory-mapped Arrow tables, for steps whose input is too large to
hold as Python objects (a million sentences, every line of a raw file).

A reader yields rows one at a time; :func:`rows_to_dataset` writes them in batches to
an Arrow file in a scratch folder and hands back a ``datasets.Dataset`` mapped from
that file, on which ``map(num_proc=...)`` and ``filter`` run in worker processes
writing their results beside it. The scratch folder is one this process created
(``tempfile.mkdtemp``); it is deleted when the last data set reading from it is
garbage-collected (after Kedro has saved the node's output) or at exit, never before.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa

# Rows per Arrow record batch: large enough to amortise the writes, small enough that
# one batch of Python objects is a few MB at most.
BATCH_ROWS = 8192


@contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new, empty temporary folder owned by this run. If the block fails it is
    deleted at once; if it succeeds it is left to the data set the block hands to
    :func:`release_with`."""
    folder = Path(tempfile.mkdtemp(prefix=f"cse-{prefix}-"))
    try:
        yield folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def release_with(dataset, folder: Path):
    """Delete ``folder`` (a :func:`scratch_folder`) once ``dataset`` is gone: its rows are
    memory-mapped from files in it until then. Returns ``dataset``."""
    weakref.finalize(dataset, shutil.rmtree, str(folder), True)
    return dataset


def rows_to_dataset(rows: Iterable[Sequence], schema: pa.Schema, path: Path):
    """Write ``rows`` (tuples in ``schema``'s column order) to the Arrow stream file
    ``path`` a batch at a time and return it as a memory-mapped ``datasets.Dataset``."""
    import datasets

    names = schema.names

    def batch(chunk: list[Sequence]) -> pa.RecordBatch:
        return pa.record_batch([pa.array([row[i] for row in chunk], type=schema.field(i).type)
                                for i in range(len(names))], schema=schema)

    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        chunk: list[Sequence] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) == BATCH_ROWS:
                writer.write_batch(batch(chunk))
                chunk = []
        writer.write_batch(batch(chunk))
    return datasets.Dataset.from_file(str(path))
