"""Long documents for DeCLUTR: WikiText articles and OpenWebText documents,
tokenised once with the encoder's tokenizer and filtered by length."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

import pandas as pd
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


def wikitext_documents(
    articles: Iterable[Article], source_file: str, unk_token: str
) -> pd.DataFrame:
    """One document per article: detokenised paragraphs joined by newlines, WikiText's
    ``<unk>`` replaced by the tokenizer's own unknown token (so it stays one token)."""
    rows = []
    for index, article in enumerate(articles):
        text = "\n".join(detokenize_wikitext(p) for _, p in article.paragraphs)
        rows.append(
            (
                f"{source_file}#{index}",
                article.location,
                detokenize_wikitext(article.title).replace(WIKITEXT_UNK, unk_token),
                text.replace(WIKITEXT_UNK, unk_token),
            )
        )
    return pd.DataFrame(rows, columns=DOCUMENT_COLUMNS)


def line_documents(
    raw: RawFile, source_file: str, report: StepReport, on_bad_input: str = "skip"
) -> pd.DataFrame:
    """One document per line (the OpenWebText layout); empty lines are dropped, counted."""
    rows = []
    for number, line in raw.iter_lines(report, on_bad_input):
        text = normalize_text(line)
        if not text:
            report.drop("empty document", where=f"{raw.label}:{number}")
            continue
        rows.append((f"{source_file}:{number}", f"{raw.label}:{number}", "", text))
    require_rows(len(rows), f"{raw.label} (one-document-per-line file)")
    return pd.DataFrame(rows, columns=DOCUMENT_COLUMNS)


def tokenize_documents(
    texts: list[str], tokenizer, batch_size: int = 64, desc: str = "tokenising"
) -> list[list[int]]:
    """Token ids of each text, without special tokens and without truncation, in
    batches through the (fast, Rust) tokenizer; logs documents/s."""
    ids: list[list[int]] = []
    start = time.perf_counter()
    for begin in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch", leave=False):
        batch = texts[begin : begin + batch_size]
        encoded = tokenizer(
            batch, add_special_tokens=False, truncation=False, verbose=False
        )
        ids.extend(encoded["input_ids"])
    elapsed = time.perf_counter() - start
    logger.info(
        "tokenised %d documents (%d tokens) in %.1f s (%.0f documents/s)",
        len(texts),
        sum(map(len, ids)),
        elapsed,
        len(texts) / elapsed if elapsed else float("inf"),
    )
    return ids


def unknown_token_fraction(token_ids: Sequence[int], unk_token_id: int) -> float:
    """The share of ``token_ids`` that are the unknown token (0 for no tokens)."""
    if not len(token_ids):
        return 0.0
    return sum(1 for token in token_ids if token == unk_token_id) / len(token_ids)


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
    an error naming ``what``."""
    if unk_token_id is not None and max_unk_fraction is not None:
        fractions = documents["input_ids"].map(lambda ids: unknown_token_fraction(ids, unk_token_id))
        mostly_unknown = fractions > max_unk_fraction
        for source in documents.loc[mostly_unknown, "source"]:
            report.drop(f"more than {max_unk_fraction:g} of its tokens unknown", where=source)
        documents = documents.loc[~mostly_unknown]
    long_enough = documents["n_tokens"] >= min_tokens
    for source in documents.loc[~long_enough, "source"]:
        report.drop(f"fewer than {min_tokens} tokens", where=source)
    require_rows(int(long_enough.sum()), f"{what} (no document of at least {min_tokens} tokens)")
    return documents.loc[long_enough].reset_index(drop=True)


def tokenized_long_documents(
    documents: pd.DataFrame,
    tokenizer,
    min_tokens: int,
    report: StepReport,
    batch_size: int = 64,
    max_unk_fraction: float | None = None,
    what: str = "long_documents",
) -> pd.DataFrame:
    """``documents`` (``DOCUMENT_COLUMNS``) tokenised once with ``tokenizer`` (columns
    ``input_ids`` and ``n_tokens`` added) and filtered by :func:`keep_long_documents`;
    ``report.rows_out`` and the tokens kept are recorded. The built-in documents and
    the user's own go through this same step."""
    documents = documents.copy()
    documents["input_ids"] = tokenize_documents(documents["text"].tolist(), tokenizer, batch_size)
    documents["n_tokens"] = documents["input_ids"].map(len)
    kept = keep_long_documents(documents, min_tokens, report, tokenizer.unk_token_id, max_unk_fraction, what)
    report.rows_out = len(kept)
    report.extra["tokens_kept"] = int(kept["n_tokens"].sum())
    return kept
