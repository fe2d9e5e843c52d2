"""Real-world variants of the inputs and injected faults: nothing is lost without a
count, and nothing empty passes as data. Every input is a small file the test writes."""

from __future__ import annotations

import pandas as pd
import pytest

from contrastive_sentence_embeddings.data import documents as docs
from contrastive_sentence_embeddings.data import pairs, wikipedia
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import BadInputError, EmptyInputError, StepReport
from contrastive_sentence_embeddings.data.spans import SpanConfig, sample_spans


def stsb_row(score, s1, s2, *extra):
    """A row of STS-B as its authors distribute it: 7 fields, some rows with source columns after."""
    return "\t".join(["main-forums", "deft-forum", "2014", "0001", str(score), s1, s2, *extra])


def test_stsb_rows_with_extra_source_columns_are_read_and_counted_as_a_variant(write_file):
    raw = write_file("sts-train.csv", "\n".join([
        stsb_row(4.8, "A man plays a guitar.", "A man is playing a guitar."),
        stsb_row(4.6, "Kids run in a park.", "Children are running in a park.", "2014 deft-forum", "forum.1234"),
        stsb_row(1.0, "A cat sleeps.", "The stock market fell.", "2014 deft-forum", "forum.99"),
    ]) + "\n")
    report = StepReport("stsb_pairs")
    rows = pairs.read_stsb(raw, "train", report)
    assert rows["sentence2"].tolist() == ["A man is playing a guitar.", "Children are running in a park.",
                                          "The stock market fell."]
    assert rows["score"].tolist() == [4.8, 4.6, 1.0]
    assert report.rows_dropped == 0
    assert report.variants == {"extra source columns (9 fields, first 7 read)": 2}
    assert report.to_dict()["variant_examples"] == {
        "extra source columns (9 fields, first 7 read)": [f"{raw.label}:2", f"{raw.label}:3"]}
    # STS-B > 4 pairs keep the 9-field row.
    positive = pairs.stsb_positive_pairs(rows, 4.0, report)
    assert positive["sentence1"].tolist() == ["A man plays a guitar.", "Kids run in a park."]


def test_an_empty_stsb_file_or_no_pair_above_the_threshold_stops_the_run(write_file):
    with pytest.raises(EmptyInputError, match=r"sts-train\.csv \(STS-B train\): no rows"):
        pairs.read_stsb(write_file("sts-train.csv", ""), "train", StepReport("t"))
    rows = pairs.read_stsb(write_file("sts-dev.csv", stsb_row(2.0, "a b c", "d e f") + "\n"), "dev", StepReport("t"))
    with pytest.raises(EmptyInputError, match=r"stsb_pairs \(STS-B pairs scoring above 4\): no rows"):
        pairs.stsb_positive_pairs(rows, 4.0, StepReport("t"))


def nli_files(write_file, partitions, files: dict[str, str]):
    return partitions({pid: write_file(f"nli/{pid}", text) for pid, text in files.items()})


@pytest.mark.parametrize("missing", ["s1", "s2", "labels"])
def test_an_nli_split_missing_any_member_file_is_an_error_naming_it(write_file, partitions, missing):
    files = {f"snli/{m}.dev": text for m, text in
             (("s1", "A man sleeps .\n"), ("s2", "A person rests .\n"), ("labels", "entailment\n"))}
    del files[f"snli/{missing}.dev"]
    with pytest.raises(FileNotFoundError, match=rf"snli/{missing}\.dev missing"):
        pairs.read_nli_partitions(nli_files(write_file, partitions, files), None, StepReport("nli"))


@pytest.mark.parametrize("empty", [("s1",), ("s2",), ("labels",), ("s1", "s2", "labels")])
def test_an_empty_nli_member_file_is_an_error_naming_it(write_file, partitions, empty):
    files = {f"snli/{m}.test": ("" if m in empty else text) for m, text in
             (("s1", "A man sleeps .\n"), ("s2", "A person rests .\n"), ("labels", "entailment\n"))}
    with pytest.raises(EmptyInputError, match=rf"{empty[0]}\.test: empty NLI file"):
        pairs.read_nli_partitions(nli_files(write_file, partitions, files), None, StepReport("nli"))


def test_complete_nli_splits_are_read(write_file, partitions):
    files = {"snli/s1.dev": "A man sleeps .\nA dog barks .\n", "snli/s2.dev": "A person rests .\nA cat meows .\n",
             "snli/labels.dev": "entailment\ncontradiction\n"}
    tables = pairs.read_nli_partitions(nli_files(write_file, partitions, files), ["dev"], StepReport("nli"))
    assert [t["label"].tolist() for t in tables] == [["entailment", "contradiction"]]


def test_empty_sentence_document_and_wikitext_files_stop_the_run(write_file):
    empty = write_file("wiki1m.txt", "")
    with pytest.raises(EmptyInputError, match=r"wiki1m\.txt \(sentences file\): no rows"):
        list(wikipedia.line_sentence_candidates(empty, StepReport("t")))  # read lazily: raised once read
    with pytest.raises(EmptyInputError, match=r"owt\.txt \(one-document-per-line file\): no rows"):
        docs.line_documents(write_file("owt.txt", "\n\n"), "owt.txt", StepReport("t"))
    with pytest.raises(EmptyInputError, match=r"wiki\.train\.tokens \(WikiText: no article\): no rows"):
        wikipedia.parse_wikitext(write_file("wiki.train.tokens", ""), StepReport("t"))


def test_steps_with_an_empty_output_stop_the_run():
    candidates = pd.DataFrame({"sentence": ["too short", "   "], "source": ["f:1", "f:2"]})
    with pytest.raises(EmptyInputError, match="wiki_sentences"):
        wikipedia.clean_and_filter_sentences(candidates, StepReport("t"), min_words=5, max_words=64)
    documents = pd.DataFrame({"source": ["f:1"], "n_tokens": [10], "input_ids": [[1] * 10]})
    with pytest.raises(EmptyInputError, match="long_documents"):
        docs.keep_long_documents(documents, 100, StepReport("t"))
    with pytest.raises(EmptyInputError, match="declutr_spans"):
        sample_spans(["doc"], [10], SpanConfig(2, 2, 32, 64), seed=1, epochs=1, report=StepReport("t"))


def test_documents_of_mostly_unknown_tokens_are_dropped_and_counted(tokenizer):
    texts = ["The river runs past the old mill and the bridge. " * 4, "😀 🎉 🚀 🌈 🍕 🐱 " * 6,
             "The mill 😀 stands by the river, the bridge 🎉 over it. " * 3]
    ids = docs.tokenize_documents(texts, tokenizer)
    documents = pd.DataFrame({"source": ["owt:1", "owt:2", "owt:3"], "input_ids": ids, "n_tokens": map(len, ids)})
    fractions = [docs.unknown_token_fraction(i, tokenizer.unk_token_id) for i in ids]
    assert fractions[0] == 0 and fractions[1] == 1.0 and 0 < fractions[2] <= 0.2
    report = StepReport("long_documents")
    kept = docs.keep_long_documents(documents, 10, report, tokenizer.unk_token_id, max_unk_fraction=0.2)
    assert kept["source"].tolist() == ["owt:1", "owt:3"]
    assert report.dropped == {"more than 0.2 of its tokens unknown": 1}
    assert report.examples["more than 0.2 of its tokens unknown"] == ["owt:2"]
    # Without a threshold every document stays (today's behaviour for callers that do not pass one).
    assert len(docs.keep_long_documents(documents, 10, StepReport("t"))) == 3


def test_the_long_documents_block_is_parsed_strictly():
    from contrastive_sentence_embeddings.configuration.blocks import LongDocumentsConfig
    from contrastive_sentence_embeddings.configuration.strict import parse_strict

    def parse(params):
        return parse_strict(LongDocumentsConfig, params, "data_processing.long_documents")

    config = parse({"inputs": ["wikitext"], "min_doc_tokens": 1024, "tokenize_batch_size": 64})
    assert config.max_unk_fraction == 0.5 and config.inputs == ["wikitext"]
    with pytest.raises(ValueError, match="data_processing.long_documents.max_unk_fractoin"):
        parse({"max_unk_fractoin": 0.2})
    with pytest.raises(ValueError, match=r"max_unk_fraction = 2: must be a number in \[0, 1\] or null"):
        parse({"max_unk_fraction": 2})


def test_nul_bytes_are_removed_and_counted(write_file):
    raw = write_file("wiki1m.txt", b"A clean sentence here.\nA sen\x00tence with a NUL\x00 byte.\n")
    report = StepReport("t")
    assert [text for _, text in raw.iter_lines(report)] == ["A clean sentence here.", "A sentence with a NUL byte."]
    assert report.variants == {"NUL bytes removed": 1}
    assert report.variant_examples["NUL bytes removed"] == [f"{raw.label}:2"]


@pytest.mark.parametrize("stored_as, fallbacks", [("iso-8859-1", 1), ("utf-8", 0), ("utf-8-sig", 0)])
def test_a_legacy_file_is_decoded_by_detection_with_the_fallback_counted(write_file, stored_as, fallbacks):
    text = "DESC:def What is a caf\u00e9 ?\nHUM:ind Who wrote Faust ?\n"
    raw = write_file("train_5500.label", text.encode(stored_as))
    report = StepReport("t")
    lines = [line for _, line in RawFile(raw.path, encoding="iso-8859-1").iter_lines(report)]
    assert lines == ["DESC:def What is a caf\u00e9 ?", "HUM:ind Who wrote Faust ?"]
    assert sum(report.variants.values()) == fallbacks
    assert report.rows_dropped == 0


def test_a_utf8_file_with_a_bad_byte_still_drops_that_line_only(write_file):
    raw = write_file("s.txt", b"good line\nbad \xff line\n")
    report = StepReport("t")
    assert [line for _, line in raw.iter_lines(report)] == ["good line"]
    assert report.dropped == {"not utf-8": 1} and report.examples["not utf-8"] == [f"{raw.label}:2 (byte 4)"]
    with pytest.raises(BadInputError, match=r"s\.txt:2: not utf-8"):
        list(raw.iter_lines(StepReport("t"), on_bad_input="error"))
