"""Wikipedia sentences for SimCSE, SCD and ImSimCSE, and Wikipedia articles as long
documents for DeCLUTR.

Two inputs are understood:

* WikiText articles (``wikitext-2.*.txt``): an article starts at a `` = Title = ``
  line, `` = = Section = = `` lines are headings inside it, text is tokenised with
  artefacts such as `` @-@ `` and rare words replaced by ``<unk>``;
* one sentence per line (SimCSE's ``wiki1m_for_simcse.txt`` and its head sample).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

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
_WHITESPACE = re.compile(r"\s+")
_LETTER = re.compile(r"[^\W\d_]")


@dataclass
class Article:
    """One WikiText article: title, where it starts, and its paragraphs with line numbers."""

    title: str
    location: str
    paragraphs: list[tuple[int, str]] = field(default_factory=list)


def parse_wikitext(
    raw: RawFile, report: StepReport, on_bad_input: str = "skip"
) -> list[Article]:
    """Split a WikiText file into articles, dropping headings and blank lines (counted)."""
    articles: list[Article] = []
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
            articles.append(Article(heading.group(2), f"{raw.label}:{number}"))
            report.drop("article title line")
        elif heading:
            report.drop("section heading")
        elif not articles:
            report.drop("text before the first article title", where=f"{raw.label}:{number}")
        else:
            articles[-1].paragraphs.append((number, text))
    require_rows(len(articles), f"{raw.label} (WikiText: no article)")
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
    """NFC unicode, one space between words, no outer whitespace."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


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


def wikitext_sentence_candidates(
    articles: Iterable[Article], source_file: str, nlp
) -> pd.DataFrame:
    """Detokenised sentences of every paragraph, with ``file:line`` of their paragraph."""
    paragraphs = [(number, text) for article in articles for number, text in article.paragraphs]
    rows = []
    for (number, _), sentences in zip(
        paragraphs,
        split_sentences((detokenize_wikitext(text) for _, text in paragraphs), nlp),
    ):
        rows.extend((sentence, f"{source_file}:{number}") for sentence in sentences)
    return pd.DataFrame(rows, columns=["sentence", "source"])


def line_sentence_candidates(
    raw: RawFile, report: StepReport, on_bad_input: str = "skip"
) -> pd.DataFrame:
    """Sentences from a one-sentence-per-line file, with their ``file:line``."""
    label = raw.label
    rows = [(text, f"{label}:{number}") for number, text in raw.iter_lines(report, on_bad_input)]
    require_rows(len(rows), f"{label} (sentences file)")
    return pd.DataFrame(rows, columns=["sentence", "source"])


def clean_and_filter_sentences(
    candidates: pd.DataFrame,
    report: StepReport,
    min_words: int,
    max_words: int,
    drop_unk: bool = True,
    what: str = "wiki_sentences",
) -> pd.DataFrame:
    """Normalise whitespace and unicode, then drop (counted) blank sentences, those
    with WikiText's ``<unk>`` placeholder, those with no letters, those outside
    ``[min_words, max_words]`` whitespace words, and case-insensitive duplicates
    (the first occurrence is kept). No sentence left is an error naming ``what``."""
    kept_rows = []
    seen: set[str] = set()
    for sentence, source in zip(candidates["sentence"], candidates["source"]):
        text = normalize_text(sentence)
        n_words = len(text.split())
        if not text:
            report.drop("blank sentence", where=source)
        elif drop_unk and WIKITEXT_UNK in text:
            report.drop("contains <unk> (a WikiText rare-word placeholder)", where=source)
        elif not _LETTER.search(text):
            report.drop("no letters", where=source)
        elif n_words < min_words:
            report.drop(f"fewer than {min_words} words", where=source)
        elif n_words > max_words:
            report.drop(f"more than {max_words} words", where=source)
        elif text.casefold() in seen:
            report.drop("duplicate", where=source)
        else:
            seen.add(text.casefold())
            kept_rows.append((text, source, n_words))
    require_rows(len(kept_rows), f"{what} (no sentence left after cleaning and filtering)")
    return pd.DataFrame(kept_rows, columns=["sentence", "source", "n_words"])


def sample_rows(
    frame: pd.DataFrame, n: int | None, seed: int, report: StepReport
) -> pd.DataFrame:
    """A seeded random sample of ``n`` rows without replacement, in random order
    (all rows, shuffled, when ``n`` is None or larger than the table; the shortfall
    is recorded in the report)."""
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
    return frame.iloc[order].reset_index(drop=True)
