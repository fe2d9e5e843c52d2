import gc
import tempfile
import tracemalloc

import pandas as pd
import pyarrow as pa
import pytest

from contrastive_sentence_embeddings.data import documents as docs
from contrastive_sentence_embeddings.data.report import EmptyInputError, StepReport
from contrastive_sentence_embeddings.data.wikipedia import parse_wikitext


def test_wikitext_articles_become_detokenised_documents_with_the_tokenizers_unk(write_file, tokenizer):
    raw = write_file(
        "w.txt",
        " = The <unk> Article = \n First line , here . \n = = Part = = \n A <unk> word . \n",
    )
    articles = parse_wikitext(raw, StepReport("t"))
    table = docs.wikitext_documents(articles, "w.txt", tokenizer.unk_token)
    assert table.to_dict("records") == [
        {
            "doc_id": "w.txt#0",
            "source": f"{raw.label}:1",
            "title": "The [UNK] Article",
            "text": "First line, here.\nA [UNK] word.",
        }
    ]
    ids = docs.tokenize_documents(table["text"].tolist(), tokenizer)
    assert ids[0].count(tokenizer.unk_token_id) == 1


def test_one_document_per_line_and_empty_documents_are_counted(write_file):
    raw = write_file("owt.txt", "first  document\n\n   \nsecond one\n")
    report = StepReport("t")
    table = docs.line_documents(raw, "owt.txt", report)
    assert table[["doc_id", "text"]].values.tolist() == [["owt.txt:1", "first document"], ["owt.txt:4", "second one"]]
    assert report.dropped == {"empty document": 2}
    assert report.examples["empty document"] == [f"{raw.label}:2", f"{raw.label}:3"]


def test_tokenisation_has_no_special_tokens_and_no_truncation(tokenizer):
    long_text = "word " * 2000
    ids = docs.tokenize_documents(["hello world", long_text], tokenizer, batch_size=1)
    assert ids[0] == tokenizer.convert_tokens_to_ids(["hello", "world"])
    assert len(ids[1]) == 2000 > tokenizer.model_max_length


def test_keep_long_documents_counts_the_short_ones():
    table = pd.DataFrame({"doc_id": ["a", "b", "c"], "source": ["f:1", "f:2", "f:3"], "n_tokens": [10, 2048, 2047]})
    report = StepReport("t")
    kept = docs.keep_long_documents(table, 2048, report)
    assert kept["doc_id"].tolist() == ["b"]
    assert report.dropped == {"fewer than 2048 tokens": 2}
    assert report.examples["fewer than 2048 tokens"] == ["f:1", "f:3"]


# --- streamed, parallel tokenising ------------------------------------------------------------
def _corpus(n: int) -> list[tuple[str, str, str, str]]:
    """Documents of varied length, some too short and some mostly unknown tokens."""
    words = ["river", "market", "stone", "winter", "garden", "letter", "engine", "harbour"]
    documents = []
    for i in range(n):
        if i % 7 == 3:
            text = "😀 🎉 🚀 🌈 " * 20  # unknown tokens only
        else:
            text = " ".join(words[(i * j) % len(words)] for j in range(5 + (i * 13) % 90))
        documents.append((f"owt.txt:{i + 1}", f"owt.txt:{i + 1}", "", text))
    return documents


def _tokenized(documents, tokenizer, num_proc, chunk_chars=docs.CHUNK_CHARACTERS):
    report = StepReport("long_documents")
    table = docs.tokenized_long_documents(iter(documents), tokenizer, 40, report, batch_size=8,
                                          max_unk_fraction=0.5, num_proc=num_proc, documents_per_worker=1,
                                          chunk_chars=chunk_chars)
    return table, report


def test_tokenised_documents_do_not_depend_on_the_number_of_workers(tokenizer):
    documents = _corpus(60)
    one, one_report = _tokenized(documents, tokenizer, 1)
    two, two_report = _tokenized(documents, tokenizer, 2)
    assert one.to_pandas().equals(two.to_pandas())
    assert one_report.to_dict() == two_report.to_dict()
    # and both are what the in-memory rule keeps, in input order, with the same counts
    frame = pd.DataFrame(documents, columns=docs.DOCUMENT_COLUMNS)
    frame["input_ids"] = docs.tokenize_documents(frame["text"].tolist(), tokenizer)
    frame["n_tokens"] = frame["input_ids"].map(len)
    expected_report = StepReport("long_documents")
    expected = docs.keep_long_documents(frame, 40, expected_report, tokenizer.unk_token_id, 0.5)
    got = one.to_pandas()
    assert got["doc_id"].tolist() == expected["doc_id"].tolist()
    assert [list(ids) for ids in got["input_ids"]] == expected["input_ids"].tolist()
    assert one_report.dropped == expected_report.dropped and one_report.examples == expected_report.examples
    assert one_report.rows_out == len(expected) and one_report.extra["tokens_kept"] == int(expected["n_tokens"].sum())
    assert set(one_report.dropped) == {"more than 0.5 of its tokens unknown", "fewer than 40 tokens"}


def test_tokenised_documents_do_not_depend_on_how_the_corpus_is_cut_into_chunks(tokenizer):
    documents = _corpus(60)
    whole, whole_report = _tokenized(documents, tokenizer, 1)
    # a chunk closes once it holds 2,000 characters: about 6 documents here, some of
    # them all dropped, each tokenised by 2 workers
    cut, cut_report = _tokenized(documents, tokenizer, 2, chunk_chars=2_000)
    assert len(cut.cache_files) > 2 and len(whole.cache_files) == 1
    assert whole.to_pandas().equals(cut.to_pandas())
    assert whole_report.to_dict() == cut_report.to_dict()


def test_only_one_chunk_of_raw_text_is_on_disk_at_a_time(tmp_path):
    documents = [(f"d{i}", f"f:{i}", "", "word " * 100) for i in range(50)]
    seen = []
    for path, count in docs.write_document_chunks(iter(documents), tmp_path, batch_documents=4, chunk_chars=1_800):
        seen.append(count)
        assert [p.name for p in tmp_path.iterdir()] == [path.name]  # the one being handed out
        assert docs.pa.ipc.open_stream(docs.pa.OSFile(str(path))).read_all().num_rows == count
        path.unlink()  # as the tokenising step does before asking for the next
    # documents of 500 characters: the fourth closes a chunk of 2,000 (one batch)
    assert seen == [4] * 12 + [2] and sum(seen) == len(documents)


def test_the_tokenizer_threads_setting_is_restored(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    with docs.tokenizer_threads(False):
        assert docs.os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert docs.os.environ["TOKENIZERS_PARALLELISM"] == "true"
    monkeypatch.delenv("TOKENIZERS_PARALLELISM")
    with docs.tokenizer_threads(True):
        assert docs.os.environ["TOKENIZERS_PARALLELISM"] == "true"
    assert "TOKENIZERS_PARALLELISM" not in docs.os.environ


def test_token_ids_are_int32_lists_and_the_text_is_not_kept(tokenizer):
    table, _ = _tokenized(_corpus(10), tokenizer, 1)
    assert table.column_names == docs.TOKENIZED_COLUMNS
    assert table.data.schema.field("input_ids").type == pa.list_(pa.int32())


def test_the_working_folder_is_removed_once_the_documents_are_released_or_on_error(tokenizer, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # let tempfile read TMPDIR again
    neighbour = tmp_path / "cse-someone-else"  # a folder of the same kind that this run did not create
    neighbour.mkdir()
    table, _ = _tokenized(_corpus(10), tokenizer, 1)
    created = [p for p in tmp_path.iterdir() if p != neighbour]
    assert len(created) == 1 and any(created[0].glob("*.arrow"))
    del table
    gc.collect()
    assert sorted(tmp_path.iterdir()) == [neighbour]
    with pytest.raises(EmptyInputError, match="no document of at least 40 tokens"):
        _tokenized([("a", "f:1", "", "too short")], tokenizer, 1)
    assert sorted(tmp_path.iterdir()) == [neighbour]


def test_a_large_file_is_streamed_into_arrow_not_held(write_file, tmp_path):
    line = ("word " * 200).strip() + "\n"
    raw = write_file("owt.txt", line * 20_000)  # about 20 MB
    report = StepReport("t")
    tracemalloc.start()
    try:
        written = docs.write_documents(docs.iter_line_documents(raw, "owt.txt", report), tmp_path / "d.arrow")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == 20_000 and report.rows_in == 20_000
    assert peak < 4 * 2**20  # a few record batches of text, not the 20 MB file
