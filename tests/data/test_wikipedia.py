import sys

import pandas as pd
import pytest

from contrastive_sentence_embeddings.data import wikipedia as wiki
from contrastive_sentence_embeddings.data.report import StepReport

WIKITEXT = (
    " stray line before any title \n"
    " \n"
    " = First Article = \n"
    " \n"
    " The first paragraph , with a comma . It has two sentences . \n"
    " = = History = = \n"
    " Built in 1 @,@ 000 days by a <unk> . \n"
    " = = = Deep heading = = = \n"
    " = Second = Article = \n"
    " Text of the second article . \n"
)


def test_parse_wikitext_splits_articles_and_drops_headings(write_file):
    raw = write_file("wikitext.txt", WIKITEXT)
    report = StepReport("t")
    articles = wiki.parse_wikitext(raw, report)
    # " = Second = Article = " is one marker on each side: a title containing "=".
    assert [a.title for a in articles] == ["First Article", "Second = Article"]
    assert articles[0].paragraphs == [
        (5, "The first paragraph , with a comma . It has two sentences ."),
        (7, "Built in 1 @,@ 000 days by a <unk> ."),
    ]
    assert articles[0].location == f"{raw.label}:3"
    assert report.rows_in == 10
    assert report.dropped == {
        "text before the first article title": 1,
        "blank line": 2,
        "article title line": 2,
        "section heading": 2,
    }
    assert report.examples["text before the first article title"] == [f"{raw.label}:1"]


@pytest.mark.parametrize(
    ("tokenised", "expected"),
    [
        ("a high @-@ speed train", "a high-speed train"),
        ("1 @,@ 000 and 3 @.@ 5 %", "1,000 and 3.5%"),
        ("word , word ; end .", "word, word; end."),
        ("( in brackets ) and [ these ]", "(in brackets) and [these]"),
        ('he said " hello there " twice', 'he said "hello there" twice'),
        ("it was n't John 's", "it wasn't John's"),
        ("costs $ 5", "costs $5"),
    ],
)
def test_detokenize_wikitext(tokenised, expected):
    assert wiki.detokenize_wikitext(tokenised) == expected


def test_sentence_candidates_are_split_by_spacy_and_keep_their_paragraph_line(write_file):
    raw = write_file("w.txt", WIKITEXT)
    candidates = wiki.sentence_candidates(wiki.wikitext_paragraph_units(raw, StepReport("t")), workers=1).to_pandas()
    assert candidates["sentence"].tolist() == [
        "The first paragraph, with a comma.",
        "It has two sentences.",
        "Built in 1,000 days by a <unk>.",
        "Text of the second article.",
    ]
    assert candidates["source"].tolist() == [f"{raw.label}:{n}" for n in (5, 5, 7, 10)]


def test_clean_and_filter_counts_every_reason():
    candidates = pd.DataFrame(
        {
            "sentence": [
                "A perfectly  ordinary\tsentence here.",
                "   ",
                "It mentions a <unk> word today.",
                "12 34 56 78 90",
                "Too short.",
                " ".join(["word"] * 11),
                "a perfectly ordinary sentence HERE.",
            ],
            "source": [f"f:{i}" for i in range(1, 8)],
        }
    )
    report = StepReport("t")
    kept = wiki.clean_and_filter_sentences(candidates, report, min_words=3, max_words=10).to_pandas()
    assert kept["sentence"].tolist() == ["A perfectly ordinary sentence here."]
    assert kept["n_words"].tolist() == [5]
    assert report.dropped == {
        "blank sentence": 1,
        "contains <unk> (a WikiText rare-word placeholder)": 1,
        "no letters": 1,
        "fewer than 3 words": 1,
        "more than 10 words": 1,
        "duplicate": 1,
    }
    assert report.examples["duplicate"] == ["f:7"]


def test_sample_rows_is_seeded_and_records_what_was_not_drawn():
    frame = pd.DataFrame({"sentence": [f"s{i}" for i in range(100)]})
    first, second = StepReport("a"), StepReport("b")
    sample = wiki.sample_rows(frame, 30, seed=7, report=first)
    assert sample.equals(wiki.sample_rows(frame, 30, seed=7, report=second))
    assert not sample.equals(wiki.sample_rows(frame, 30, seed=8, report=StepReport("c")))
    assert len(sample) == 30 and sample["sentence"].is_unique
    assert first.dropped == {"not drawn in the random sample": 70}


def test_sample_rows_takes_everything_when_asked_for_more_and_says_so():
    frame = pd.DataFrame({"sentence": ["a", "b", "c"]})
    report = StepReport("t")
    sample = wiki.sample_rows(frame, 10, seed=0, report=report)
    assert sorted(sample["sentence"]) == ["a", "b", "c"]
    assert report.extra == {"requested": 10, "available": 3, "shortfall": 7}
    assert not report.dropped


def test_normalize_text_collapses_every_kind_of_whitespace_as_a_regex_would():
    import re

    text = "\ufeffA\u00a0b\t\tc\u2028d\x1ce\u3000 f\r\n g\u200bh  "
    assert wiki.normalize_text(text) == re.sub(r"\s+", " ", text).strip()
    assert wiki.normalize_text("  cafe\u0301 \n") == "caf\u00e9"  # NFC


def test_one_sentence_per_line_input_is_split_without_spacy(monkeypatch):
    """conf/paper's wiki1m (one sentence a line) needs no sentence splitter, so the
    pipeline runs where spaCy is not installed (the GPU machine); paragraphs still
    need it."""
    monkeypatch.setitem(sys.modules, "spacy", None)  # `import spacy` raises ImportError
    monkeypatch.setattr(wiki, "_SPLITTER", None)
    lines = {"text": ["A first sentence.", "A second one."], "source": ["wiki.txt:1", "wiki.txt:2"],
             "split": [False, False]}
    assert wiki.split_unit_batch(lines) == {"sentence": lines["text"], "source": lines["source"]}
    with pytest.raises(ImportError):
        wiki.split_unit_batch({"text": ["One . Two ."], "source": ["w.txt:3"], "split": [True]})
