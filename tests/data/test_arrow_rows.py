"""Rows streamed into Arrow: a batch at a time, and de-duplication by hashed keys."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pyarrow as pa

from contrastive_sentence_embeddings.data.arrow_rows import first_occurrences, rows_to_dataset, text_key

SCHEMA = pa.schema([("sentence", pa.string()), ("source", pa.string())])


def test_rows_are_written_a_batch_at_a_time_not_held_whole(tmp_path):
    rows_written = 300_000
    sentence = "x" * 200

    def rows():
        for i in range(rows_written):
            yield sentence, f"big.txt:{i + 1}"

    rows_to_dataset(iter([("warm", "up")]), SCHEMA, tmp_path / "warm.arrow")  # one-off import-time allocations
    tracemalloc.start()
    try:
        table = rows_to_dataset(rows(), SCHEMA, tmp_path / "rows.arrow")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(table) == rows_written and table[rows_written - 1] == {"sentence": sentence, "source": "big.txt:300000"}
    size = (tmp_path / "rows.arrow").stat().st_size
    assert size > 60_000_000
    # the data set is memory-mapped from the file; Python held about one batch of rows at a time
    assert peak < size / 8, f"{peak / 1e6:.1f} MB allocated to write {size / 1e6:.0f} MB"


def test_an_empty_stream_gives_an_empty_table(tmp_path):
    table = rows_to_dataset(iter(()), SCHEMA, tmp_path / "empty.arrow")
    assert len(table) == 0 and table.column_names == ["sentence", "source"]


def test_keys_tell_texts_apart_and_the_first_of_equal_keys_is_kept():
    assert text_key("ab", "c") != text_key("a", "bc")  # length-prefixed: no ambiguous concatenation
    assert text_key("same") == text_key("same") and text_key("same") != text_key("Same")
    keys = np.array([text_key(t) for t in ["a", "b", "a", "c", "b"]], dtype=np.int64)
    assert first_occurrences(keys).tolist() == [True, True, False, True, False]
    assert first_occurrences(np.zeros((0, 2), dtype=np.int64)).tolist() == []
