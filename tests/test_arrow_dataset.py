"""ArrowDataset: prepared data sets as memory-mapped Arrow shards, published atomically."""

import pandas as pd
import pyarrow as pa
import pytest
from kedro.io import DatasetError

from contrastive_sentence_embeddings.datasets import ArrowDataset


def _frame(rows: int) -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(rows)], "token_ids": [[i, i + 1] * 50 for i in range(rows)]})


def test_a_saved_table_loads_back_row_for_row_from_several_shards(tmp_path):
    data = ArrowDataset(str(tmp_path / "docs"), max_shard_size=20_000)
    data.save(_frame(300))
    loaded = data.load()
    assert len(loaded) == 300
    assert len(list((tmp_path / "docs").glob("*.arrow"))) > 1
    assert loaded[7]["doc_id"] == "d7" and loaded[7]["token_ids"][:3] == [7, 8, 7]


def test_a_new_save_replaces_the_folder_and_leaves_no_temporary_behind(tmp_path):
    data = ArrowDataset(str(tmp_path / "docs"))
    data.save(_frame(30))
    data.save(pa.table({"doc_id": ["only"], "token_ids": [[1, 2, 3]]}))
    assert data.load()["doc_id"] == ["only"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


def test_a_folder_it_did_not_write_is_refused_not_replaced(tmp_path):
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep me")
    with pytest.raises(DatasetError, match="not a data set this project wrote"):
        ArrowDataset(str(foreign)).save(_frame(3))
    assert (foreign / "mine.txt").read_text() == "keep me"


def test_loading_before_any_save_says_what_to_run(tmp_path):
    with pytest.raises(DatasetError, match="run the pipeline"):
        ArrowDataset(str(tmp_path / "missing")).load()
