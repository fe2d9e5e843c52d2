"""Wikipedia sentences for SimCSE, SCD and ImSimCSE, and Wikipedia articles as long
documents for DeCLUTR.

Two inputs are understood:

* WikiText articles (``wikitext-2.*.txt``): an article starts at a `` = Title = ``
  line, `` = = Section = = `` lines are headings inside it, text is tokenised with
  artefacts such as `` @-@ `` and rare words replaced by ``<unk>``;
* one sentence per line (SimCSE's ``wiki1m_for_simcse.txt`` and its head sample).

Sentences never exist as one list of Python strings: the files are streamed into an
Arrow file, split and filtered by ``datasets.map`` on worker processes, and the
result is a memory-mapped ``datasets.Dataset`` (see :mod:`.arrow_rows`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from contrastive_sentence_embeddings.data.arrow_rows import (
    drop_rows,
    first_occurrences,
    release_with,
    rows_to_dataset,
    scratch_folder,
    text_key,
)
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import StepReport, require_rows

WIKITEXT_UNK = "<unk>"
# " = Title = " is level 1, " = = Section = = " level 2, and so on.
_HEADING = re.compile(r"^((?:= )+)(.*?\S)((?: =)+)$")

# WikiText's tokeniser split numbers and hyphenated words with @-markers.
_AT_MARKERS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_SPACE_BEFORE = re.compile(r" (?=[.,;:!?%)\]}]|'s\b|'re\b|'ve\b|'ll\b|'d\b|'m\b|n't\b)")
_SPACE_AFTER = re.compile(r"(?<=[(\[{$]) ")
_QUOTED = re.compile(r'" ([^"]*?) "')
_LETTER = re.compile(r"[^\W\d_]")


@dataclass
class Article:
    """One WikiText article: title, where it starts, and its paragraphs with line numbers."""

    title: str
    location: str
    paragraphs: list[tuple[int, str]] = field(default_factory=list)


def wikitext_lines(
    raw: RawFile, report: StepReport, on_bad_input: str = "skip"
) -> Iterator[tuple[str, int, str]]:
    """Stream a WikiText file as ``("title", line, title)`` and ``("paragraph", line,
    text)`` items, dropping headings and blank lines (counted). A file without a
    single article title is an error naming it (raised once the file is read)."""
    titles = 0
    for number, line in raw.iter_lines(report, on_bad_input):
        text = line.strip()
        if not text:
            report.drop("blank line")
            continue
        heading = _HEADING.match(text)
        level = heading.group(1).count("=") if heading else 0
        if heading and heading.group(3).count("=") != level:
            heading, level = None, 0  # unbalanced markers: ordinary text
        if level == 1:
            titles += 1
            report.drop("article title line")
            yield "title", number, heading.group(2)
        elif heading:
            report.drop("section heading")
        elif not titles:
            report.drop("text before the first article title", where=f"{raw.label}:{number}")
        else:
            yield "paragraph", number, text
    require_rows(titles, f"{raw.label} (WikiText: no article)")


def parse_wikitext(
    raw: RawFile, report: StepReport, on_bad_input: str = "skip"
) -> list[Article]:
    """Split a WikiText file into articles, dropping headings and blank lines (counted)."""
    articles: list[Article] = []
    for kind, number, text in wikitext_lines(raw, report, on_bad_input):
        if kind == "title":
            articles.append(Article(text, f"{raw.label}:{number}"))
        else:
            articles[-1].paragraphs.append((number, text))
    return articles


def detokenize_wikitext(text: str) -> str:
    """Undo WikiText's tokenisation as far as it is unambiguous:
    ``"high @-@ speed"`` -> ``"high-speed"``, ``"1 @,@ 000"`` -> ``"1,000"``,
    ``"word , word ."`` -> ``"word, word."``, ``"( a )"`` -> ``"(a)"``,
    ``'" quoted "'`` -> ``'"quoted"'``. ``<unk>`` is left for the caller."""
    for marker, replacement in _AT_MARKERS:
        text = text.replace(marker, replacement)
    text = _QUOTED.sub(r'"\1"', text)
    text = _SPACE_BEFORE.sub("", text)
    text = _SPACE_AFTER.sub("", text)
    return text.strip()


def normalize_text(text: str) -> str:
    """NFC unicode, one space between words, no outer whitespace. (``str.split``
    splits at exactly the characters ``re``'s ``\\s`` matches, and is about three
    times faster than a substitution: this runs on every line of OpenWebText.)"""
    return " ".join(unicodedata.normalize("NFC", text).split())


def sentence_splitter(batch_size: int = 256):
    """A spaCy pipeline that only splits sentences (``spacy.blank('en')`` plus the
    rule-based sentencizer): no model download, tens of thousands of sentences/s."""
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.batch_size = batch_size
    return nlp


def split_sentences(texts: Iterable[str], nlp) -> Iterator[list[str]]:
    """For each text, its sentences (spaCy's sentencizer)."""
    for doc in nlp.pipe(texts, batch_size=nlp.batch_size):
        yield [sent.text for sent in doc.sents]


# --- sentence candidates: streamed into Arrow, split in worker processes -----------------
# A unit is a line of a one-sentence-per-line file (a candidate as it is) or a WikiText
# paragraph (split into sentences), with its file:line.
SENTENCE_UNITS = pa.schema([("text", pa.string()), ("source", pa.string()), ("split", pa.bool_())])
CANDIDATE_FEATURES = {"sentence": "string", "source": "string"}
SPLIT_BATCH_ROWS = 512  # paragraphs per map() batch (each worker pipes them through spaCy)


def line_sentence_candidates(
    raw: RawFile, report: StepReport, on_bad_input: str = "skip"
) -> Iterator[tuple[str, str, bool]]:
    """The lines of a one-sentence-per-line file as sentence units, streamed; a file
    without a line is an error naming it (raised once it is read)."""
    label = raw.label
    lines = 0
    for number, text in raw.iter_lines(report, on_bad_input):
        lines += 1
        yield text, f"{label}:{number}", False
    require_rows(lines, f"{label} (sentences file)")


def wikitext_paragraph_units(
    raw: RawFile, report: StepReport, on_bad_input: str = "skip"
) -> Iterator[tuple[str, str, bool]]:
    """The paragraphs of a WikiText file as units to split into sentences, streamed."""
    label = raw.label
    for kind, number, text in wikitext_lines(raw, report, on_bad_input):
        if kind == "paragraph":
            yield text, f"{label}:{number}", True


_SPLITTER = None  # one spaCy pipeline per (worker) process, built on first use


def split_unit_batch(batch: dict[str, list]) -> dict[str, list]:
    """``datasets.map`` function: every unit of the batch as its candidate sentences, in
    order (a paragraph detokenised and spaCy-split, a line as it is), each with its
    unit's ``file:line``. The sentencizer splits each text on its own, so the output
    does not depend on how the units are batched or shared out among workers."""
    global _SPLITTER
    paragraphs = [detokenize_wikitext(text) for text, split in zip(batch["text"], batch["split"]) if split]
    # Built (and spaCy imported) only for paragraphs: one-sentence-per-line input, as
    # conf/paper reads wiki1m, runs where spaCy is not installed (the GPU machine).
    if paragraphs and _SPLITTER is None:
        _SPLITTER = sentence_splitter()
    split_paragraphs = split_sentences(paragraphs, _SPLITTER)
    sentences, sources = [], []
    for text, source, split in zip(batch["text"], batch["source"], batch["split"]):
        pieces = next(split_paragraphs) if split else [text]
        sentences.extend(pieces)
        sources.extend([source] * len(pieces))
    return {"sentence": sentences, "source": sources}


def sentence_candidates(units: Iterable[tuple[str, str, bool]], workers: int):
    """The candidate sentences (``sentence``, ``source``) of the ``units``, in unit
    order, as a memory-mapped ``datasets.Dataset``: the units are streamed into an
    Arrow file in a scratch folder, then split on ``workers`` processes
    (``datasets.map``: contiguous shards, concatenated in order), so the result is the
    same whatever ``workers`` is."""
    with scratch_folder("sentence-candidates") as scratch:
        table = rows_to_dataset(units, SENTENCE_UNITS, scratch / "sentence_units.arrow")
        candidates = table.map(
            split_unit_batch, batched=True, batch_size=SPLIT_BATCH_ROWS, num_proc=_workers(workers, len(table)),
            remove_columns=table.column_names, features=_features(CANDIDATE_FEATURES),
            cache_file_name=str(scratch / "sentence_candidates.arrow"), load_from_cache_file=False,
            desc="splitting sentences",
        )
        return release_with(candidates, scratch)


# --- cleaning, filtering, de-duplication ---------------------------------------------------
VERDICT_FEATURES = {"sentence": "string", "source": "string", "n_words": "int64", "reason": "string",
                    "key_high": "int64", "key_low": "int64"}
FILTER_BATCH_ROWS = 2048


def sentence_verdict(sentence: str, min_words: int, max_words: int, drop_unk: bool) -> tuple[str, int, str | None]:
    """A candidate normalised (NFC, one space between words), its word count, and why
    it is dropped (``None``: kept, unless it duplicates an earlier kept sentence)."""
    text = normalize_text(sentence)
    n_words = len(text.split())
    if not text:
        reason = "blank sentence"
    elif drop_unk and WIKITEXT_UNK in text:
        reason = "contains <unk> (a WikiText rare-word placeholder)"
    elif not _LETTER.search(text):
        reason = "no letters"
    elif n_words < min_words:
        reason = f"fewer than {min_words} words"
    elif n_words > max_words:
        reason = f"more than {max_words} words"
    else:
        reason = None
    return text, n_words, reason


def sentence_verdict_batch(batch: dict[str, list], min_words: int, max_words: int,
                           drop_unk: bool) -> dict[str, list]:
    """``datasets.map`` function: :func:`sentence_verdict` of every candidate of the
    batch and the de-duplication key of the kept ones (:func:`.arrow_rows.text_key` of
    the case-folded text; 0 for dropped ones)."""
    out: dict[str, list] = {name: [] for name in VERDICT_FEATURES}
    for sentence, source in zip(batch["sentence"], batch["source"]):
        text, n_words, reason = sentence_verdict(sentence, min_words, max_words, drop_unk)
        high, low = text_key(text.casefold()) if reason is None else (0, 0)
        for name, value in zip(VERDICT_FEATURES, (text, source, n_words, reason, high, low)):
            out[name].append(value)
    return out


def clean_and_filter_sentences(
    candidates,
    report: StepReport,
    min_words: int,
    max_words: int,
    drop_unk: bool = True,
    what: str = "wiki_sentences",
    workers: int = 1,
):
    """Normalise whitespace and unicode, then drop (counted) blank sentences, those
    with WikiText's ``<unk>`` placeholder, those with no letters, those outside
    ``[min_words, max_words]`` whitespace words, and case-insensitive duplicates
    (the first occurrence is kept). No sentence left is an error naming ``what``.

    ``candidates`` is a ``datasets.Dataset`` (or a pandas DataFrame) with ``sentence``
    and ``source`` columns; the verdicts are computed on ``workers`` processes into a
    scratch folder, and the kept rows are returned as a memory-mapped
    ``datasets.Dataset`` (``sentence``, ``source``, ``n_words``) in candidate order.
    """
    import datasets

    if isinstance(candidates, pd.DataFrame):
        candidates = datasets.Dataset.from_pandas(candidates[["sentence", "source"]], preserve_index=False)
    with scratch_folder("sentences") as scratch:
        verdicts = candidates.map(
            sentence_verdict_batch, batched=True, batch_size=FILTER_BATCH_ROWS,
            fn_kwargs={"min_words": min_words, "max_words": max_words, "drop_unk": drop_unk},
            num_proc=_workers(workers, len(candidates)), remove_columns=candidates.column_names,
            features=_features(VERDICT_FEATURES), cache_file_name=str(scratch / "sentence_verdicts.arrow"),
            load_from_cache_file=False, desc="filtering sentences",
        )
        table = verdicts.with_format("arrow")[:]
        reasons = table.column("reason")
        sources = table.column("source")
        for reason in sorted(r for r in pc.unique(reasons).to_pylist() if r is not None):
            rows = pc.fill_null(pc.equal(reasons, reason), False).to_numpy(zero_copy_only=False)
            drop_rows(report, reason, np.flatnonzero(rows), sources)
        passing = np.flatnonzero(pc.is_null(reasons).to_numpy(zero_copy_only=False))
        keys = np.stack([table.column(name).to_numpy()[passing] for name in ("key_high", "key_low")], axis=1)
        first = first_occurrences(keys)
        drop_rows(report, "duplicate", passing[~first], sources)
        kept = passing[first]
        require_rows(len(kept), f"{what} (no sentence left after cleaning and filtering)")
        return release_with(verdicts.select(kept).select_columns(["sentence", "source", "n_words"]), scratch)


def sample_rows(frame, n: int | None, seed: int, report: StepReport):
    """A seeded random sample of ``n`` rows without replacement, in random order
    (all rows, shuffled, when ``n`` is None or larger than the table; the shortfall
    is recorded in the report). ``frame`` is a pandas DataFrame or a
    ``datasets.Dataset``; the sample is of the same kind."""
    rng = np.random.default_rng(seed)
    available = len(frame)
    size = available if n is None else min(n, available)
    report.extra["requested"] = n
    report.extra["available"] = available
    if n is not None and n > available:
        report.extra["shortfall"] = n - available
    elif size < available:
        report.drop("not drawn in the random sample", available - size)
    order = rng.permutation(available)[:size]
    if isinstance(frame, pd.DataFrame):
        return frame.iloc[order].reset_index(drop=True)
    return frame.select(order)


def _workers(workers: int, rows: int) -> int | None:
    """``num_proc`` for ``datasets.map``: None (this process) for one worker."""
    workers = max(1, min(workers, rows))
    return workers if workers > 1 else None


def _features(columns: dict[str, str]):
    import datasets

    return datasets.Features({name: datasets.Value(kind) for name, kind in columns.items()})
