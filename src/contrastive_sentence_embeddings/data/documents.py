"""Long documents for DeCLUTR: WikiText articles and OpenWebText documents,
tokenised once with the encoder's tokenizer and filtered by length.

The documents are streamed, never held whole: a reader yields one document at a
time, :func:`write_documents` writes them into an Arrow file in record batches, and
:func:`tokenized_long_documents` tokenises that file with ``datasets.Dataset.map``
(batched, on ``num_proc`` worker processes), deciding in the workers which documents
are kept, so token ids (Arrow ``int32`` lists) are only stored for those. The result
is a ``datasets.Dataset`` memory-mapped from files in a working folder this module
creates (and removes once the data set is released); the catalog's ``ArrowDataset``
saves it as shards. The raw text is not kept: DeCLUTR reads only ``doc_id``,
``input_ids`` and ``n_tokens`` (``title`` and ``source`` say where a document came
from)."""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import StepReport, require_rows
from contrastive_sentence_embeddings.data.wikipedia import (
    WIKITEXT_UNK,
    Article,
    detokenize_wikitext,
    normalize_text,
)

logger = logging.getLogger(__name__)

DOCUMENT_COLUMNS = ["doc_id", "source", "title", "text"]
DOCUMENT_INPUTS = ("wikitext", "openwebtext")
# The columns of a prepared long-documents data set (built-in or own), in this order.
TOKENIZED_COLUMNS = ["doc_id", "source", "title", "input_ids", "n_tokens"]
# Documents per Arrow record batch while the raw documents are written out: the
# reading side holds at most this many texts.
WRITE_BATCH_DOCUMENTS = 256
# The fewest documents worth a tokenising worker process of their own.
DOCUMENTS_PER_WORKER = 256
# Characters of text tokenised per chunk (one ``datasets`` map, one set of worker
# processes): large enough that starting the workers (about a second) is a few % of a
# chunk's work (64M characters of English are about 13M word pieces, 30-40 s of one
# core), small enough that the text pages a process holds mapped (at most a chunk's)
# are a small part of its memory, the same for a corpus of 2,000 documents as of 8M.
CHUNK_CHARACTERS = 64 * 2**20
TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"

Document = tuple[str, str, str, str]  # doc_id, source (file:line), title, text


def iter_wikitext_documents(
    articles: Iterable[Article], source_file: str, unk_token: str
) -> Iterator[Document]:
    """One document per article: detokenised paragraphs joined by newlines, WikiText's
    ``<unk>`` replaced by the tokenizer's own unknown token (so it stays one token)."""
    for index, article in enumerate(articles):
        text = "\n".join(detokenize_wikitext(p) for _, p in article.paragraphs)
        yield (
            f"{source_file}#{index}",
            article.location,
            detokenize_wikitext(article.title).replace(WIKITEXT_UNK, unk_token),
            text.replace(WIKITEXT_UNK, unk_token),
        )


def wikitext_documents(
    articles: Iterable[Article], source_file: str, unk_token: str
) -> pd.DataFrame:
    """:func:`iter_wikitext_documents` as a ``DOCUMENT_COLUMNS`` table."""
    return pd.DataFrame(list(iter_wikitext_documents(articles, source_file, unk_token)), columns=DOCUMENT_COLUMNS)


def iter_line_documents(
    raw: RawFile, source_file: str, report: StepReport, on_bad_input: str = "skip", normalize: bool = True
) -> Iterator[Document]:
    """One document per line (the OpenWebText layout), read lazily; empty lines are
    dropped, counted. A file with no document is an error naming it (raised once the
    file has been read to its end). With ``normalize=False`` the text is passed on as
    read, for a consumer that normalises it itself (:func:`tokenized_long_documents`
    does, in its workers): a line is empty exactly when its normalised form is."""
    label = raw.label  # resolved once per file, not once per line
    yielded = 0
    for number, line in raw.iter_lines(report, on_bad_input):
        text = normalize_text(line) if normalize else (line if not line.isspace() else "")
        if not text:
            report.drop("empty document", where=f"{label}:{number}")
            continue
        yielded += 1
        yield f"{source_file}:{number}", f"{label}:{number}", "", text
    require_rows(yielded, f"{label} (one-document-per-line file)")


def line_documents(
    raw: RawFile, source_file: str, report: StepReport, on_bad_input: str = "skip"
) -> pd.DataFrame:
    """:func:`iter_line_documents` as a ``DOCUMENT_COLUMNS`` table."""
    return pd.DataFrame(list(iter_line_documents(raw, source_file, report, on_bad_input)), columns=DOCUMENT_COLUMNS)


def tokenize_documents(
    texts: list[str], tokenizer, batch_size: int = 64, desc: str = "tokenising"
) -> list[list[int]]:
    """Token ids of each text, without special tokens and without truncation, in
    batches through the (fast, Rust) tokenizer; logs documents/s."""
    ids: list[list[int]] = []
    start = time.perf_counter()
    for begin in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch", leave=False):
        ids.extend(encode_texts(texts[begin : begin + batch_size], tokenizer))
    elapsed = time.perf_counter() - start
    logger.info(
        "tokenised %d documents (%d tokens) in %.1f s (%.0f documents/s)",
        len(texts),
        sum(map(len, ids)),
        elapsed,
        len(texts) / elapsed if elapsed else float("inf"),
    )
    return ids


def encode_texts(texts: list[str], tokenizer) -> list[list[int]]:
    """The token ids of ``texts`` as one tokenizer call: no special tokens, no
    truncation (the ids of a text do not depend on the others in the call)."""
    return tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False,
                     return_attention_mask=False, return_token_type_ids=False)["input_ids"]


def unknown_token_fraction(token_ids: Sequence[int], unk_token_id: int) -> float:
    """The share of ``token_ids`` that are the unknown token (0 for no tokens)."""
    if not len(token_ids):
        return 0.0
    if isinstance(token_ids, (list, tuple)):  # counted in C: this runs on every token of OpenWebText
        return token_ids.count(unk_token_id) / len(token_ids)
    return sum(1 for token in token_ids if token == unk_token_id) / len(token_ids)


def unknown_reason(max_unk_fraction: float) -> str:
    return f"more than {max_unk_fraction:g} of its tokens unknown"


def short_reason(min_tokens: int) -> str:
    return f"fewer than {min_tokens} tokens"


def drop_reason(
    n_tokens: int, unknown_fraction: float, min_tokens: int, max_unk_fraction: float | None
) -> str | None:
    """Why a document of ``n_tokens`` tokens, ``unknown_fraction`` of them unknown, is
    dropped (too many unknown tokens is checked first), or None when it is kept."""
    if max_unk_fraction is not None and unknown_fraction > max_unk_fraction:
        return unknown_reason(max_unk_fraction)
    if n_tokens < min_tokens:
        return short_reason(min_tokens)
    return None


def keep_long_documents(
    documents: pd.DataFrame,
    min_tokens: int,
    report: StepReport,
    unk_token_id: int | None = None,
    max_unk_fraction: float | None = None,
    what: str = "long_documents",
) -> pd.DataFrame:
    """Documents with at least ``min_tokens`` tokens (column ``n_tokens``); the others
    are counted under one reason, with examples. With ``unk_token_id`` and
    ``max_unk_fraction``, documents whose share of unknown tokens (column
    ``input_ids``) is above ``max_unk_fraction`` are dropped and counted first:
    text the tokenizer cannot represent is no training signal. An empty result is
    an error naming ``what``. (The in-memory form of the rule
    :func:`tokenized_long_documents` applies in its workers.)"""
    if unk_token_id is not None and max_unk_fraction is not None:
        fractions = documents["input_ids"].map(lambda ids: unknown_token_fraction(ids, unk_token_id))
        mostly_unknown = fractions > max_unk_fraction
        for source in documents.loc[mostly_unknown, "source"]:
            report.drop(unknown_reason(max_unk_fraction), where=source)
        documents = documents.loc[~mostly_unknown]
    long_enough = documents["n_tokens"] >= min_tokens
    for source in documents.loc[~long_enough, "source"]:
        report.drop(short_reason(min_tokens), where=source)
    require_rows(int(long_enough.sum()), f"{what} (no document of at least {min_tokens} tokens)")
    return documents.loc[long_enough].reset_index(drop=True)


# --- streamed, parallel, out of core ---------------------------------------------------------
def document_schema() -> pa.Schema:
    return pa.schema([(name, pa.string()) for name in DOCUMENT_COLUMNS])


def tokenized_features():
    """The ``datasets`` features of a prepared long-documents data set (token ids as
    Arrow ``int32`` lists), plus the ``drop_reason`` the workers decide."""
    import datasets

    return datasets.Features({
        "doc_id": datasets.Value("string"),
        "source": datasets.Value("string"),
        "title": datasets.Value("string"),
        "input_ids": datasets.List(datasets.Value("int32")),
        "n_tokens": datasets.Value("int64"),
        "drop_reason": datasets.Value("string"),
    })


def _record_batch(batch: list[Document], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(column, pa.string()) for column in zip(*batch)], schema=schema)


def write_documents(documents: Iterable[Document], path: Path, batch_documents: int = WRITE_BATCH_DOCUMENTS) -> int:
    """Write ``documents`` to an Arrow stream file at ``path`` (the format
    ``datasets.Dataset.from_file`` memory-maps), ``batch_documents`` per record batch,
    so that no more than one batch is held; returns how many were written."""
    return sum(count for _, count in write_document_chunks(documents, path.parent, batch_documents,
                                                            chunk_chars=None, name=path.name))


def write_document_chunks(
    documents: Iterable[Document],
    folder: Path,
    batch_documents: int = WRITE_BATCH_DOCUMENTS,
    chunk_chars: int | None = None,
    name: str = "documents-{index:05d}.arrow",
) -> Iterator[tuple[Path, int]]:
    """Write ``documents`` into Arrow stream files in ``folder`` (``name`` formatted with
    the chunk's index), ``batch_documents`` per record batch, starting a new file as
    soon as one holds ``chunk_chars`` characters of text (``None``: one file). Each
    file is yielded, with its document count, as soon as it is complete, so its
    consumer can process and delete it before the next is written: at no time does
    more than one batch of documents sit in memory, nor more than a chunk of text on
    disk."""
    schema = document_schema()
    index, batch, written, text_chars = 0, [], 0, 0
    path = folder / name.format(index=index)
    sink = pa.OSFile(str(path), "wb")
    writer = pa.ipc.new_stream(sink, schema)
    try:
        for document in documents:
            batch.append(document)
            text_chars += len(document[3])
            chunk_full = chunk_chars is not None and text_chars >= chunk_chars
            if len(batch) >= batch_documents or chunk_full:
                writer.write_batch(_record_batch(batch, schema))
                written += len(batch)
                batch = []
            if chunk_full:
                writer.close()
                sink.close()
                yield path, written
                index, written, text_chars = index + 1, 0, 0
                path = folder / name.format(index=index)
                sink = pa.OSFile(str(path), "wb")
                writer = pa.ipc.new_stream(sink, schema)
        if batch:
            writer.write_batch(_record_batch(batch, schema))
            written += len(batch)
        writer.close()
        sink.close()
    finally:
        if not sink.closed:
            sink.close()
    if written or index == 0:
        yield path, written
    else:
        path.unlink()


class _TokenizeAndDecide:
    """The workers' function (picklable): a batch of documents in, their token ids,
    counts and drop reason out; a dropped document's ids are not kept. Each text is
    normalised first (NFC, single spaces: ``normalize_text``, which leaves text that is
    already normalised unchanged), here rather than in the reader, because on
    OpenWebText it costs a third as much as tokenising and the reader is one process."""

    def __init__(self, tokenizer, min_tokens: int, max_unk_fraction: float | None):
        self.tokenizer = tokenizer
        self.min_tokens = min_tokens
        self.max_unk_fraction = max_unk_fraction

    def __reduce__(self):
        # handed to the workers of every chunk: the tokenizer goes as plain pickle bytes,
        # which dill (what datasets' workers use) copies in a millisecond, where it takes
        # a quarter of a second to walk the tokenizer object itself, in this process
        return _tokenize_and_decide, (pickle.dumps(self.tokenizer), self.min_tokens, self.max_unk_fraction)

    def __call__(self, batch: dict) -> dict:
        ids = encode_texts([normalize_text(text) for text in batch["text"]], self.tokenizer)
        unk = self.tokenizer.unk_token_id
        kept_ids, lengths, reasons = [], [], []
        for tokens in ids:
            fraction = unknown_token_fraction(tokens, unk) if self.max_unk_fraction is not None else 0.0
            reason = drop_reason(len(tokens), fraction, self.min_tokens, self.max_unk_fraction)
            kept_ids.append(tokens if reason is None else [])
            lengths.append(len(tokens))
            reasons.append(reason or "")
        return {"input_ids": kept_ids, "n_tokens": lengths, "drop_reason": reasons}


def _tokenize_and_decide(tokenizer_bytes: bytes, min_tokens: int, max_unk_fraction: float | None):
    return _TokenizeAndDecide(pickle.loads(tokenizer_bytes), min_tokens, max_unk_fraction)


def tokenized_long_documents(
    documents: Iterable[Document],
    tokenizer,
    min_tokens: int,
    report: StepReport,
    batch_size: int = 64,
    max_unk_fraction: float | None = None,
    what: str = "long_documents",
    num_proc: int | None = 1,
    documents_per_worker: int = DOCUMENTS_PER_WORKER,
    chunk_chars: int = CHUNK_CHARACTERS,
):
    """``documents`` (``(doc_id, source, title, text)``, read lazily) tokenised once
    with ``tokenizer`` on ``num_proc`` worker processes (``data.parallel.worker_count``,
    at most one per ``documents_per_worker`` documents)
    and filtered by the rule of :func:`keep_long_documents` (too many unknown tokens,
    then fewer than ``min_tokens``; counted with examples in document order). Returns
    a ``datasets.Dataset`` with ``TOKENIZED_COLUMNS``, in input order whatever
    ``num_proc`` and ``chunk_chars`` are; ``report.rows_out`` and ``tokens_kept`` are
    recorded. An empty result is an error naming ``what``. The built-in documents and
    the user's own go through this same step. Texts are tokenised normalised (NFC, one
    space between words), so a reader may hand them on as read.

    The documents are written and tokenised a chunk at a time (``chunk_chars``
    characters of text): each chunk is one ``datasets.Dataset.map`` over its own Arrow
    file, which is deleted as soon as its token ids are written. ``map`` reads its
    input memory-mapped and every page read stays resident in the reading process
    until the file is unmapped, so one map over the whole corpus would make the
    memory of this process (or of each worker) grow with the corpus; per chunk it is
    bounded by the chunk, and so is the raw text on disk. Each worker process runs
    the tokenizer single-threaded (``num_proc`` is the number of cores used); when
    there are too few documents for more than one worker, this process tokenises
    with the tokenizer's own threads on up to ``num_proc`` cores.

    Intermediate files live in a new folder of this run in the system's temporary area
    (``$TMPDIR``; :func:`.arrow_rows.scratch_folder`), removed on error or once the
    returned data set is released."""
    import datasets
    import pyarrow.compute as pc

    from contrastive_sentence_embeddings.data.arrow_rows import release_with, scratch_folder
    from contrastive_sentence_embeddings.data.parallel import worker_count

    cores = worker_count(num_proc)
    with scratch_folder(re.sub(r"[^\w.-]+", "_", what)) as folder:
        parts, count, tokens, busiest, start = [], 0, 0, 1, time.perf_counter()
        chunks = write_document_chunks(documents, folder, chunk_chars=chunk_chars, name="documents-{index:05d}.arrow")
        for index, (raw_path, chunk_count) in enumerate(chunks):
            if not chunk_count:
                break
            count += chunk_count
            # a worker for every documents_per_worker documents at most: starting the workers
            # costs a few tenths of a second, so a small corpus is tokenised in this process
            workers = min(cores, math.ceil(chunk_count / documents_per_worker))
            busiest = max(busiest, workers)
            raw = datasets.Dataset.from_file(str(raw_path), in_memory=False)
            with tokenizer_threads(workers == 1 and cores > 1):
                parts.append(raw.map(
                    _TokenizeAndDecide(tokenizer, min_tokens, max_unk_fraction),
                    batched=True,
                    batch_size=batch_size,
                    num_proc=workers if workers > 1 else None,
                    remove_columns=["text"],
                    features=tokenized_features(),
                    load_from_cache_file=False,
                    cache_file_name=str(folder / f"tokenized-{index:05d}.arrow"),
                    new_fingerprint=f"tokenized-{index}-{time.time_ns()}",
                    desc=f"tokenising chunk {index + 1} ({workers} worker{'s' if workers > 1 else ''})",
                ))
            del raw  # unmapped: the chunk's text pages leave this process
            raw_path.unlink()
            tokens += pc.sum(parts[-1].data.column("n_tokens")).as_py() or 0
            seconds = time.perf_counter() - start
            logger.info("%s: chunk %d (%d documents, %d worker(s)); %d documents, %d tokens so far, %.0f tokens/s",
                        what, index + 1, chunk_count, workers, count, tokens,
                        tokens / seconds if seconds else float("inf"))
        require_rows(count, f"{what} (no document to tokenise)")
        decided = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        elapsed = time.perf_counter() - start
        logger.info("%s: tokenised %d documents (%d tokens) in %.1f s with up to %d worker(s) (%.0f tokens/s)",
                    what, count, tokens, elapsed, busiest, tokens / elapsed if elapsed else float("inf"))
        kept = _count_drops(decided, report)
        require_rows(len(kept), f"{what} (no document of at least {min_tokens} tokens)")
        result = decided.select(kept).select_columns(TOKENIZED_COLUMNS)
        report.rows_out = len(kept)
        report.extra["tokens_kept"] = int(pc.sum(pc.take(decided.data.column("n_tokens"), pa.array(kept))).as_py() or 0)
        return release_with(result, folder)


@contextmanager
def tokenizer_threads(enabled: bool) -> Iterator[None]:
    """Let the fast tokenizer use its own thread pool inside the block, or not
    (``TOKENIZERS_PARALLELISM``, which it reads at every call and which worker
    processes forked inside the block inherit); the previous setting is restored.
    Worker processes must run it single-threaded: one thread per core is what
    ``num_proc`` asks for, and a forked process cannot use a pool its parent started."""
    previous = os.environ.get(TOKENIZERS_PARALLELISM)
    os.environ[TOKENIZERS_PARALLELISM] = "true" if enabled else "false"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(TOKENIZERS_PARALLELISM, None)
        else:
            os.environ[TOKENIZERS_PARALLELISM] = previous


def _count_drops(decided, report: StepReport):
    """Count the workers' drop decisions in ``report``, with the first examples of each
    reason in document order; return the row numbers of the documents kept (a numpy
    array). Reads the ``drop_reason`` column, and ``source`` only at the examples."""
    import numpy as np
    import pyarrow.compute as pc

    from contrastive_sentence_embeddings.data.report import MAX_EXAMPLES_PER_REASON

    reasons = decided.data.column("drop_reason")
    sources = decided.data.column("source")
    for entry in pc.value_counts(reasons).to_pylist():
        reason, count = entry["values"], entry["counts"]
        if not reason:
            continue
        examples: list[str] = []
        for chunk, source_chunk in zip(reasons.chunks, _aligned_chunks(sources, reasons)):
            if len(examples) < MAX_EXAMPLES_PER_REASON:
                rows = pc.indices_nonzero(pc.equal(chunk, reason))[: MAX_EXAMPLES_PER_REASON - len(examples)]
                examples.extend(pc.take(source_chunk, rows).to_pylist())
        report.drop(reason, count - len(examples))
        for where in examples:
            report.drop(reason, where=where)
    kept = pc.equal(reasons, "")
    return np.flatnonzero(kept.to_numpy(zero_copy_only=False))


def _aligned_chunks(column: pa.ChunkedArray, like: pa.ChunkedArray) -> list[pa.Array]:
    """``column`` cut into the chunk lengths of ``like`` (zero-copy slices)."""
    pieces, start = [], 0
    for chunk in like.chunks:
        pieces.append(column.slice(start, len(chunk)))
        start += len(chunk)
    return pieces
