"""The readers of the user's own data (``data/own_data.py``) and the nodes that clean and
count it (``pipelines/own_data``), on small files written here: every format, and every
bad input either skipped and counted with its location or stopped with an error naming
the file."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from contrastive_sentence_embeddings.configuration.blocks import parse_source
from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.data import own_data
from contrastive_sentence_embeddings.data.report import BadInputError, EmptyInputError
from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER
from contrastive_sentence_embeddings.pipelines.own_data import nodes

SENTENCES = ["A man is playing a guitar on the street.", "The weather is nice today in the park.",
             "Two dogs run across the snowy field.", "She reads a long book about old ships."]


def prepare_sentences(source, on_bad_input="skip"):
    table, report = nodes.make_prepare_sentences("mine")(source, on_bad_input)
    return table.to_pandas(), report["mine.sentences"]  # a datasets.Dataset, read as a table here


def prepare_pairs(source, on_bad_input="skip"):
    table, report = nodes.make_prepare_pairs("mine")(source, on_bad_input)
    return table.to_pandas(), report["mine.pairs"]  # a pyarrow.Table, read as a table here


def balanced(report: dict) -> bool:
    """Every row read is either kept or dropped under a reason."""
    return report["rows_in"] == report["rows_out"] + report["rows_dropped"]


@pytest.fixture
def here(tmp_path, monkeypatch):
    """Relative paths are taken from the working directory (the project root in a run)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- sentences, every format ----------------------------------------------------------------
def test_a_text_file_gives_one_sentence_per_line_cleaned_and_counted(here):
    lines = [SENTENCES[0], "", "   ", SENTENCES[1], SENTENCES[0].upper(), "x" * 30, SENTENCES[2]]
    (here / "mine.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    table, report = prepare_sentences("mine.txt")
    assert table["sentence"].tolist() == [SENTENCES[0], SENTENCES[1], "x" * 30, SENTENCES[2]]
    assert table["source"].tolist() == ["mine.txt:1", "mine.txt:4", "mine.txt:6", "mine.txt:7"]
    assert report["rows_in"] == 7 and report["rows_out"] == 4
    assert report["dropped"] == {"blank sentence": 2, "duplicate": 1}
    assert report["examples"]["duplicate"] == ["mine.txt:5"] and report["source"] == "mine.txt"
    assert balanced(report)


def test_undecodable_and_over_long_lines_are_skipped_and_counted_or_stop_the_run(here):
    content = (SENTENCES[0] + "\n").encode() + b"caf\xe9 au lait is served hot\n" + \
        ("word " * 30).encode() + b"\n" + (SENTENCES[1] + "\n").encode()
    (here / "mine.txt").write_bytes(content)
    source = {"path": "mine.txt", "max_chars": 100, "encoding": "utf-8"}  # utf-8: no fallback
    table, report = prepare_sentences(source)
    assert table["sentence"].tolist() == [SENTENCES[0], SENTENCES[1]]
    assert report["dropped"] == {"not utf-8": 1, "text: longer than 100 characters": 1}
    assert report["examples"]["not utf-8"] == ["mine.txt:2 (byte 3)"]
    assert report["examples"]["text: longer than 100 characters"] == ["mine.txt:3"]
    assert balanced(report)
    with pytest.raises(BadInputError, match="mine.txt:2: not utf-8"):
        prepare_sentences(source, on_bad_input="error")


def test_the_word_limits_filter_and_are_counted(here):
    (here / "mine.txt").write_text("one two\none two three four\n" + " ".join(["w"] * 9) + "\n")
    table, report = prepare_sentences({"path": "mine.txt", "min_words": 3, "max_words": 8})
    assert table["sentence"].tolist() == ["one two three four"]
    assert report["dropped"] == {"fewer than 3 words": 1, "more than 8 words": 1} and balanced(report)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl", "parquet"])
def test_a_table_gives_the_sentences_of_its_named_column(here, fmt):
    frame = pd.DataFrame({"id": [1, 2, 3], "utterance": [SENTENCES[0], SENTENCES[1], SENTENCES[2]]})
    path = here / f"mine.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "tsv":
        frame.to_csv(path, index=False, sep="\t")
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path, index=False)
    table, report = prepare_sentences({"path": path.name, "column": "utterance"})
    assert table["sentence"].tolist() == SENTENCES[:3]
    assert report["rows_in"] == 3 and report["rows_out"] == 3 and balanced(report)
    first = {"csv": "mine.csv:2", "tsv": "mine.tsv:2", "jsonl": "mine.jsonl:1", "parquet": "mine.parquet:row 0"}
    assert table["source"].iloc[0] == first[fmt]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_a_missing_column_is_an_error_naming_the_file_and_the_columns_found(here, fmt):
    frame = pd.DataFrame({"id": [1], "sentence": [SENTENCES[0]]})
    path = here / f"mine.{fmt}"
    {"csv": lambda: frame.to_csv(path, index=False),
     "jsonl": lambda: frame.to_json(path, orient="records", lines=True),
     "parquet": lambda: frame.to_parquet(path, index=False)}[fmt]()
    with pytest.raises(own_data.MissingColumnError) as error:
        prepare_sentences({"path": path.name, "column": "text"})
    message = str(error.value)
    assert f"mine.{fmt}" in message and "'text'" in message and "'id', 'sentence'" in message


def test_a_quoted_csv_field_may_span_lines_and_bad_rows_are_counted(here):
    # \x81 is neither utf-8 nor cp1252 (the fallback)
    (here / "mine.csv").write_bytes(
        b'text,label\n"A sentence that goes on,\nover two lines.",a\nonly one field\n'
        b'\x81\x8d broken bytes,b\n' + b'"' + b"x" * 140_000 + b'",c\n' + SENTENCES[3].encode() + b",d\n")
    table, report = prepare_sentences({"path": "mine.csv"})
    assert table["sentence"].tolist() == ["A sentence that goes on, over two lines.", SENTENCES[3]]
    assert table["source"].tolist() == ["mine.csv:2", "mine.csv:7"]  # a row is where it starts
    assert report["variant_examples"] == {own_data.MULTI_LINE_ROW: ["mine.csv:2 (lines 2-3)"]}
    assert report["dropped"]["expected 2 fields (as the header), found 1"] == 1
    assert report["examples"]["expected 2 fields (as the header), found 1"] == ["mine.csv:4"]
    assert report["dropped"]["neither utf-8 nor cp1252"] == 1
    assert any(reason.startswith("unreadable CSV row (field larger than field limit") for reason in report["dropped"])
    assert report["rows_in"] == 5 and balanced(report)
    assert report["lines_read"] == 7 and report["quoting"] == "rfc4180"


def test_jsonl_lines_that_are_not_json_or_lack_the_field_are_counted(here):
    lines = [json.dumps({"text": SENTENCES[0]}), "{not json", "", json.dumps(["a list"]), json.dumps({"other": 1}),
             json.dumps({"text": None}), json.dumps({"text": 42}), json.dumps({"text": SENTENCES[1]})]
    (here / "mine.jsonl").write_text("\n".join(lines) + "\n")
    table, report = prepare_sentences("mine.jsonl")
    assert table["sentence"].tolist() == [SENTENCES[0], SENTENCES[1]]
    assert report["dropped"] == {"blank line": 1, "no field 'text'": 1, "not a JSON object (list)": 1,
                                 "not valid JSON (Expecting property name enclosed in double quotes)": 1,
                                 "text: missing text": 1, "text: not text (int)": 1}
    assert report["examples"]["no field 'text'"] == ["mine.jsonl:5"] and balanced(report)
    with pytest.raises(BadInputError, match="mine.jsonl:2: not valid JSON"):
        prepare_sentences("mine.jsonl", on_bad_input="error")


def test_max_rows_reads_the_first_rows_only(here):
    (here / "mine.txt").write_text("\n".join(SENTENCES) + "\n")
    table, report = prepare_sentences({"path": "mine.txt", "max_rows": 2})
    assert table["sentence"].tolist() == SENTENCES[:2] and report["rows_in"] == 2


# --- whole-source errors ------------------------------------------------------------------------
def test_a_missing_file_is_an_error_naming_it(here):
    with pytest.raises(FileNotFoundError, match="own data nothing/here.txt: no such file or folder"):
        prepare_sentences("nothing/here.txt")


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_an_empty_file_or_one_without_a_sentence_is_a_clear_error(here, content):
    (here / "mine.txt").write_bytes(content)
    with pytest.raises(EmptyInputError, match="mine.txt"):
        prepare_sentences("mine.txt")


def test_an_empty_csv_is_an_error_naming_it(here):
    (here / "mine.csv").write_bytes(b"")
    with pytest.raises(EmptyInputError, match=r"mine.csv \(empty file: no header line\)"):
        prepare_sentences("mine.csv")
    (here / "header.csv").write_text("text\n")
    with pytest.raises(EmptyInputError, match="header.csv"):
        prepare_sentences("header.csv")


def test_an_unknown_extension_is_an_error_naming_the_file_and_the_way_out(here):
    (here / "mine.xlsx").write_bytes(b"PK")
    with pytest.raises(own_data.SourceError, match=r"mine.xlsx: unknown format \(extension '.xlsx'\).*give format"):
        prepare_sentences("mine.xlsx")
    (here / "mine.data").write_text(SENTENCES[0] + "\n")
    table, _ = prepare_sentences({"path": "mine.data", "format": "txt"})  # the way out
    assert table["sentence"].tolist() == [SENTENCES[0]]


def test_a_format_the_input_cannot_take_is_an_error(here):
    (here / "pairs.txt").write_text("a\tb\n")
    with pytest.raises(own_data.SourceError, match="format 'txt' cannot feed this input; it reads csv, tsv"):
        prepare_pairs("pairs.txt")


def test_a_corrupt_parquet_file_is_an_error_naming_it(here):
    (here / "mine.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(own_data.SourceError, match="mine.parquet: not a readable Parquet file"):
        prepare_sentences("mine.parquet")


# --- a Hub data set (a local folder in the Hub layout; nothing reaches the network) --------------
def test_a_hub_data_set_is_streamed_by_split_and_column(here):
    folder = here / "hub_dataset"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps({"body": s}) for s in SENTENCES[:3]) + "\n")
    (folder / "test.jsonl").write_text(json.dumps({"body": SENTENCES[3]}) + "\n")
    table, report = prepare_sentences({"hub": str(folder), "split": "test", "column": "body"})
    assert table["sentence"].tolist() == [SENTENCES[3]]
    assert table["source"].tolist() == [f"hub:{folder}:test:row 0"] and report["source"] == f"hub:{folder}:test"
    with pytest.raises(own_data.MissingColumnError, match=r"hub:.*:train: no column 'text'; the columns found are: 'body'"):
        prepare_sentences({"hub": str(folder)})


def test_a_hub_data_set_that_cannot_be_loaded_is_an_error_naming_it(here, monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setattr(own_data, "load_hub_rows", offline)
    with pytest.raises(own_data.SourceError, match="hub:someone/corpus:train: cannot load the Hub data set"):
        prepare_sentences({"hub": "someone/corpus"})


# --- documents ----------------------------------------------------------------------------------
def long_text(n_words: int, seed: int) -> str:
    import random

    words = ["river", "market", "stone", "winter", "garden", "letter", "engine", "harbour", "silver", "forest"]
    rng = random.Random(seed)
    return " ".join(rng.choice(words) for _ in range(n_words))


def prepare_documents(source, min_doc_tokens=20, on_bad_input="skip", num_proc=1):
    """The node's documents (an Arrow data set, read back as pandas) and its report."""
    table, report = nodes.make_prepare_documents("mine")(
        source, {"min_doc_tokens": min_doc_tokens, "max_unk_fraction": 0.5}, DEFAULT_ENCODER, on_bad_input, num_proc)
    assert table.features["input_ids"].feature.dtype == "int32"
    return table.to_pandas(), report["mine.documents"]


def test_a_folder_of_text_files_gives_one_document_each_filtered_by_length(here, tokenizer):
    docs = here / "docs"
    (docs / "part").mkdir(parents=True)
    (docs / "a.txt").write_text(long_text(40, 1) + "\n\n" + long_text(40, 2) + "\n")
    (docs / "part" / "b.txt").write_bytes(long_text(40, 3).encode() + b"\n\x81 bad line\n" + long_text(5, 4).encode())
    (docs / "short.txt").write_text("too short\n")
    (docs / "empty.txt").write_text("\n\n")
    (docs / "notes.md").write_text("not a document")
    table, report = prepare_documents("docs/")
    assert sorted(table["doc_id"]) == ["a.txt", "part/b.txt"]
    assert (table["n_tokens"] >= 20).all() and table["input_ids"].map(len).equals(table["n_tokens"])
    assert table.set_index("doc_id").loc["a.txt", "title"] == "a"
    # the undecodable line is left out of the document, the lines around it kept
    kept_text = long_text(40, 3) + "\n" + long_text(5, 4)
    assert list(table.set_index("doc_id").loc["part/b.txt", "input_ids"]) == tokenizer(
        kept_text, add_special_tokens=False)["input_ids"]
    assert report["rows_in"] == 4 and report["rows_out"] == 2
    assert report["dropped"] == {"empty document": 1, "fewer than 20 tokens": 1} and balanced(report)
    assert report["variant_examples"] == {
        "document kept without a line that is neither utf-8 nor cp1252": ["docs/part/b.txt:2 (byte 0)"]}
    with pytest.raises(BadInputError, match="docs/part/b.txt:2: neither utf-8 nor cp1252 \\(byte 0\\)"):
        prepare_documents("docs/", on_bad_input="error")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_table_of_documents_gives_one_document_per_row(here, fmt):
    frame = pd.DataFrame({"body": [long_text(50, 1), long_text(3, 2), long_text(60, 3)]})
    path = here / f"docs.{fmt}"
    frame.to_json(path, orient="records", lines=True) if fmt == "jsonl" else frame.to_parquet(path, index=False)
    table, report = prepare_documents({"path": path.name, "column": "body", "min_tokens": 30}, min_doc_tokens=2048)
    assert len(table) == 2 and report["dropped"] == {"fewer than 30 tokens": 1} and balanced(report)


def test_no_long_enough_document_is_an_error_naming_the_source(here):
    (here / "docs").mkdir()
    (here / "docs" / "a.txt").write_text("short\n")
    with pytest.raises(EmptyInputError, match=r"docs \(mine.documents\) \(no document of at least 20 tokens\)"):
        prepare_documents("docs")


def test_own_documents_get_spans_sampled_and_counted_like_the_built_in_ones(here):
    (here / "docs").mkdir()
    for i in range(3):
        (here / "docs" / f"{i}.txt").write_text(long_text(150, i))
    documents, _ = prepare_documents("docs")
    spans, report = nodes.make_sample_spans("mine")(documents, {
        "num_anchors": 1, "num_positives": 2, "min_length": 8, "max_length": 16, "anchor_gap": 0, "epochs": 2,
        "seed": 1})
    spans, report = spans.to_pandas(), report["mine.spans"]
    assert report["rows_in"] == 6 and report["rows_out"] == 6 and report["anchor_rows"] == 6
    assert set(spans["doc_id"]) == set(documents["doc_id"]) and set(spans["epoch"]) == {0, 1}
    assert ((spans["anchor_end"] - spans["anchor_start"]).between(8, 16)).all()


# --- pairs ---------------------------------------------------------------------------------------
PAIRS_CSV = """question,answer,score,kind
How do I bake bread?,Mix flour and water then bake it.,4.5,good
How do I bake bread?,Mix flour and water then bake it.,4.8,good
Mix flour and water then bake it.,How do I bake bread?,4.9,good
Where is the station?,Turn left at the bank.,not a number,good
,An answer without a question.,4.0,good
What time is it?,It is noon.,,good
Is it raining?,No it is sunny.,2.0,good
Who wrote this?,A friend of mine.,4.2,bad
Why is the sky blue?,Light scatters in the air.,3.1,good
"""


def test_pairs_with_a_score_threshold_and_a_label_keep_what_passes_and_count_the_rest(here):
    (here / "pairs.csv").write_text(PAIRS_CSV)
    source = {"path": "pairs.csv", "column1": "question", "column2": "answer", "score": "score", "min_score": 3.0,
              "label": "kind", "keep_label": "good"}
    table, report = prepare_pairs(source)
    assert list(table.columns) == ["sentence1", "sentence2", "score", "split", "source"]
    assert table[["sentence1", "sentence2", "score"]].values.tolist() == [
        ["How do I bake bread?", "Mix flour and water then bake it.", 4.5],
        ["Why is the sky blue?", "Light scatters in the air.", 3.1]]
    assert report["dropped"] == {"duplicate pair": 2, "label 'bad' not kept": 1, "question: missing text": 1,
                                 "score: missing score": 1, "score: score is not a number": 1, "score <= 3": 1}
    assert report["examples"]["score: score is not a number"] == ["pairs.csv:5"]
    assert report["examples"]["duplicate pair"] == ["pairs.csv:3", "pairs.csv:4"]
    assert report["rows_in"] == 9 and report["rows_out"] == 2 and balanced(report)
    with pytest.raises(BadInputError, match="pairs.csv:5: score: score is not a number"):
        prepare_pairs(source, on_bad_input="error")


def test_pairs_default_columns_and_a_missing_one_names_the_columns_found(here):
    (here / "pairs.tsv").write_text("sentence1\tsentence2\nA cat sits.\tA cat is sitting.\n")
    table, report = prepare_pairs("pairs.tsv")
    assert table[["sentence1", "sentence2"]].values.tolist() == [["A cat sits.", "A cat is sitting."]]
    assert report["rows_out"] == 1 and pd.isna(table["score"].iloc[0])
    (here / "qa.csv").write_text("q,a\nx,y\n")
    with pytest.raises(own_data.MissingColumnError, match=r"qa.csv: no column 'sentence1', 'sentence2'; "
                                                          r"the columns found are: 'q', 'a'"):
        prepare_pairs("qa.csv")


def test_pairs_that_all_fail_the_filters_are_a_clear_error(here):
    (here / "pairs.jsonl").write_text(json.dumps({"sentence1": "a b", "sentence2": "c d", "s": 1.0}) + "\n")
    with pytest.raises(EmptyInputError, match=r"pairs.jsonl \(own pairs\): nothing is left of the 1 rows read: "
                                              r"1 score <= 4 \(e.g. pairs.jsonl:1\)"):
        prepare_pairs({"path": "pairs.jsonl", "score": "s", "min_score": 4})


def test_numeric_labels_match_whether_written_as_numbers_or_text(here):
    frame = pd.DataFrame({"sentence1": ["a b", "c d", "e f"], "sentence2": ["g h", "i j", "k l"], "label": [0, 1, 0]})
    frame.to_parquet(here / "nli.parquet", index=False)
    for kept in (0, "0", [0, 2]):
        table, report = prepare_pairs({"path": "nli.parquet", "label": "label", "keep_label": kept})
        assert table["sentence1"].tolist() == ["a b", "e f"] and report["dropped"] == {"label '1' not kept": 1}


# --- the source mappings are parsed strictly -------------------------------------------------------
@pytest.mark.parametrize(("input_name", "value", "message"), [
    ("sentences", {"path": "a.txt", "colum": "x"}, "unknown parameter(s) m.data.sentences.colum"),
    ("sentences", {"path": "a.txt", "hub": "x/y"}, "exactly one of path"),
    ("sentences", {}, "exactly one of path"),
    ("sentences", {"path": "a.txt", "format": "xlsx"}, "format must be one of txt, csv, tsv, parquet, jsonl"),
    ("documents", {"path": "a.csv", "format": "csv"}, "format must be one of folder, jsonl, parquet"),
    ("pairs", {"path": "a.csv", "score": "s"}, "score (the column) and min_score"),
    ("pairs", {"path": "a.csv", "column1": "a", "column2": "a"}, "two different text columns"),
    ("pairs", {"path": "a.csv", "label": "l", "keep_label": []}, "keep_label must be"),
    ("spans", "my_spans.parquet", "'spans' cannot be read from your own data"),
    ("sentences", 42, "expected a data set name, a path or a mapping"),
])
def test_a_bad_source_is_a_parameter_error_naming_the_key(input_name, value, message):
    with pytest.raises(ParameterError) as error:
        parse_source(input_name, value, f"m.data.{input_name}")
    assert message in str(error.value) and f"m.data.{input_name}" in str(error.value)


# --- files users bring (issue 22): every line accounted for, nothing empty or binary passes -----
def sentence_rows(n: int) -> list[str]:
    """``n`` distinct sentences of several words (none a duplicate of another)."""
    topics = ["river", "market", "stone"]
    return [f"Row {i} is a plain sentence about the {topics[i % 3]} number {i}." for i in range(n)]


def test_a_tsv_is_read_without_quoting_so_every_line_is_one_row(here):
    texts = sentence_rows(299)
    texts[4] = '"An opening quote that is never closed, as in a quotation.'
    texts[8] = '"Balanced" quotes at the start stay part of the text.'
    (here / "mine.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{i % 2}\n" for i, t in enumerate(texts)))
    table, report = prepare_sentences({"path": "mine.tsv"})
    assert report["rows_in"] == 299 == len(table) and report["lines_read"] == 300 and report["quoting"] == "none"
    assert table["sentence"].tolist() == texts  # no line merged into another, no quote removed
    assert table["source"].tolist() == [f"mine.tsv:{line}" for line in range(2, 301)]
    assert report["variants"] == {own_data.LEADING_QUOTE: 2}
    assert report["variant_examples"][own_data.LEADING_QUOTE] == ["mine.tsv:6", "mine.tsv:10"]


def test_a_tsv_written_with_quotes_is_read_by_quoting_rfc4180(here):
    texts = ['He said "hello" and left.', "A tab\tinside a quoted field.", "A plain sentence of words."]
    pd.DataFrame({"text": texts}).to_csv(here / "quoted.tsv", sep="\t", index=False)  # pandas quotes these
    table, report = prepare_sentences({"path": "quoted.tsv", "quoting": "rfc4180"})
    assert table["sentence"].tolist() == ['He said "hello" and left.', "A tab inside a quoted field.", texts[2]]
    unquoted, _ = prepare_sentences({"path": "quoted.tsv"})  # the default reads the quotes as text
    assert unquoted["sentence"].iloc[0] == '"He said ""hello"" and left."'


def test_a_stray_quote_in_a_csv_costs_every_line_it_swallows_each_counted(here):
    texts = sentence_rows(299)
    texts[4] = '"An opening quote that is never closed'
    texts[8] = '"Balanced" and then more text'
    (here / "mine.csv").write_text("text,label\n" + "".join(f"{t},{i % 2}\n" for i, t in enumerate(texts)))
    table, report = prepare_sentences({"path": "mine.csv"})
    # The quote opened on line 6 runs to the next quote (line 10), after which the parser
    # meets text where RFC 4180 wants a comma: lines 6-10 are one unreadable row.
    reason = "unreadable CSV row (',' expected after '\"')"
    assert report["dropped"] == {reason: 5} and report["examples"][reason] == ["mine.csv:6 (lines 6-10)"]
    assert report["rows_in"] == 299 and report["lines_read"] == 300 and balanced(report)
    assert table["sentence"].tolist() == texts[:4] + texts[9:]


def test_a_gzip_file_named_txt_is_not_text_and_says_so_with_its_report(here):
    import gzip

    (here / "mine.txt").write_bytes(gzip.compress("\n".join(sentence_rows(2000)).encode()))
    with pytest.raises(own_data.NotTextError, match=r"mine.txt: not a text file: \d+ of the \d+ lines read") as error:
        prepare_sentences("mine.txt")
    carried = error.value.data_reports["mine.sentences"]  # for the hook to write as the step's report
    assert carried["rows_in"] > 0 and carried["stopped"] == str(error.value) and carried["rows_out"] == 0


def test_a_random_binary_file_is_not_text_by_a_stated_threshold(here):
    import random

    rng = random.Random(0)
    (here / "noise.txt").write_bytes(bytes(rng.getrandbits(8) for _ in range(300_000)))
    with pytest.raises(own_data.NotTextError, match=r"noise.txt: not a text file: .* more than 50%"):
        prepare_sentences("noise.txt")
    good = [s.encode() for s in SENTENCES]
    # Half the lines undecodable is still (damaged) text: read, the bad ones counted ...
    (here / "half.txt").write_bytes(b"\n".join(good[:2] + [b"\x81\x8d\x8f", b"a\x00b"]) + b"\n")
    table, report = prepare_sentences("half.txt")
    assert table["sentence"].tolist() == SENTENCES[:2] + ["ab"] and report["rows_in"] == 4
    # ... more than half is not.
    (here / "most.txt").write_bytes(b"\n".join(good[:1] + [b"\x81\x8d\x8f", b"a\x01b"]) + b"\n")
    with pytest.raises(own_data.NotTextError, match=r"most.txt: not a text file: 2 of the 3 lines read"):
        prepare_sentences("most.txt")


def test_a_single_line_of_50_mb_stops_saying_why_nothing_is_left(here):
    with (here / "one_line.txt").open("w") as handle:
        for _ in range(50):
            handle.write("word " * 200_000)  # 1 MB at a time, no line break
    with pytest.raises(EmptyInputError, match=r"one_line.txt \(own sentences\): nothing is left of the 1 rows read: "
                                              r"1 text: longer than 10000 characters \(e.g. one_line.txt:1\)") as error:
        prepare_sentences("one_line.txt")
    assert error.value.data_reports["mine.sentences"]["dropped"] == {"text: longer than 10000 characters": 1}


@pytest.mark.parametrize(("values", "kind"), [([1, 2, 3], "int"), ([["a b c"], ["d e f"]], "list")])
def test_a_parquet_column_that_is_not_text_stops_naming_the_file_and_the_type(here, values, kind):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": values}), here / "mine.parquet")
    with pytest.raises(EmptyInputError, match=rf"mine.parquet \(own sentences\): nothing is left of the {len(values)} "
                                              rf"rows read: {len(values)} text: not text \({kind}\)") as error:
        prepare_sentences("mine.parquet")
    assert error.value.data_reports["mine.sentences"]["dropped"] == {f"text: not text ({kind})": len(values)}


def cp1252_lines() -> list[str]:
    return [f"Line {i}: a caf\u00e9 na\u00efve \u2018quote\u2019 \u20ac{i}" if i % 3 == 0
            else f"Line {i} is plain ASCII text." for i in range(300)]


def test_a_windows_1252_file_is_read_by_detection_with_the_fallback_counted(here):
    (here / "windows.txt").write_bytes(("\r\n".join(cp1252_lines()) + "\r\n").encode("cp1252"))
    table, report = prepare_sentences("windows.txt")
    assert table["sentence"].tolist() == cp1252_lines() and report["rows_in"] == 300 and report["rows_dropped"] == 0
    assert report["variants"] == {"decoded as cp1252 (not utf-8)": 100}
    # encoding: utf-8 turns the fallback off: the lines are bad input, under one reason,
    # with the first bad byte's offset in each example
    table, report = prepare_sentences({"path": "windows.txt", "encoding": "utf-8"})
    assert len(table) == 200 and report["dropped"] == {"not utf-8": 100}
    assert report["examples"]["not utf-8"][:2] == ["windows.txt:1 (byte 13)", "windows.txt:4 (byte 13)"]
    # another fallback named: UTF-8 lines stay UTF-8, the others are read in it
    cyrillic = "Привет мир, как дела?\n".encode("cp1251") + "Ещё одна строка.\n".encode()  # line 2 is UTF-8
    (here / "cyrillic.txt").write_bytes(cyrillic)
    table, report = prepare_sentences({"path": "cyrillic.txt", "encoding": "cp1251"})
    assert table["sentence"].tolist() == ["Привет мир, как дела?", "Ещё одна строка."]
    assert report["variants"] == {"decoded as cp1251 (not utf-8)": 1}


@pytest.mark.parametrize("encoding", ["utf-16", "no-such-codec"])
def test_an_encoding_that_cannot_be_read_line_by_line_is_a_parameter_error(encoding):
    with pytest.raises(ParameterError, match=r"m.data.sentences.*encoding must name a Python codec"):
        parse_source("sentences", {"path": "a.txt", "encoding": encoding}, "m.data.sentences")


@pytest.mark.parametrize("label", [0.0, 0, "0", " 0.0 "])
def test_labels_are_compared_by_value(label):
    assert own_data.label_key(label) == own_data.label_key(0) == "0"
    assert own_data.label_key("entailment") == "entailment" and own_data.label_key(0.5) == "0.5"


def test_a_float_label_column_matches_an_integer_keep_label(here):
    frame = pd.DataFrame({"sentence1": ["a b", "c d", "e f"], "sentence2": ["g h", "i j", "k l"],
                          "label": [0.0, 1.0, 0.0]})
    frame.to_parquet(here / "float.parquet", index=False)
    frame.to_csv(here / "float.csv", index=False)  # labels written as 0.0 and 1.0
    for path in ("float.parquet", "float.csv"):
        table, report = prepare_pairs({"path": path, "label": "label", "keep_label": 0})
        assert table["sentence1"].tolist() == ["a b", "e f"] and report["dropped"] == {"label '1' not kept": 1}


def test_pairs_filtered_to_nothing_carry_their_report(here):
    (here / "pairs.csv").write_text("sentence1,sentence2,label\na b,c d,1\ne f,g h,2\n")
    expected = r"pairs.csv \(own pairs\): nothing is left of the 2 rows read: 1 label '1' not kept \(e.g. pairs.csv:2\)"
    with pytest.raises(EmptyInputError, match=expected + r"; 1 label '2' not kept") as error:
        prepare_pairs({"path": "pairs.csv", "label": "label", "keep_label": 0})
    carried = error.value.data_reports["mine.pairs"]
    assert carried["rows_in"] == 2 and carried["rows_dropped"] == 2 and "nothing is left" in carried["stopped"]


def test_documents_of_which_nothing_is_usable_stop_naming_the_file(here):
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    (here / "docs").mkdir()
    (here / "docs" / "packed.txt").write_bytes(gzip.compress(long_text(3000, 1).encode()))
    with pytest.raises(own_data.NotTextError, match=r"docs/packed.txt: not a text file"):
        prepare_documents("docs")
    pq.write_table(pa.table({"text": [1, 2]}), here / "docs.parquet")
    with pytest.raises(EmptyInputError, match=r"docs.parquet \(own documents\): nothing is left of the 2 rows read: "
                                              r"2 text: not text \(int\)") as error:
        prepare_documents({"path": "docs.parquet"})
    assert error.value.data_reports["mine.documents"]["source"] == "docs.parquet"
