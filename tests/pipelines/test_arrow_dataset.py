"""ArrowDataset: prepared data sets as memory-mapped Arrow shards, published atomically."""

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from kedro.io import DatasetError

from contrastive_sentence_embeddings.pipelines.datasets import ArrowDataset


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


def _resident_file_pages() -> int:
    """This process's resident memory backed by files (memory-mapped pages), in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_a_memory_mapped_data_set_is_saved_holding_one_shards_pages_at_a_time(tmp_path):
    import datasets
    import numpy as np

    rows = 3_000
    ids = np.random.default_rng(0).integers(0, 30_000, size=(rows, 8_000), dtype=np.int32)  # 96 MB
    datasets.Dataset.from_dict({"doc": np.arange(rows), "input_ids": list(ids)}).save_to_disk(str(tmp_path / "src"))
    kept = [i for i in range(rows) if i % 3]  # an indices mapping, as a node's select/filter leaves

    def grown_while(save) -> int:
        mapped = datasets.load_from_disk(str(tmp_path / "src")).select(kept)  # nothing read yet
        before = _resident_file_pages()
        save(mapped)
        grown = _resident_file_pages() - before
        del mapped
        return grown

    whole = grown_while(lambda data: data.save_to_disk(str(tmp_path / "whole")))
    sharded = grown_while(ArrowDataset(str(tmp_path / "sharded"), max_shard_size="8MB").save)
    assert whole > 50 * 2**20  # datasets' own save: every row read through the one map stays resident
    assert sharded < 24 * 2**20  # about one 8 MB shard at a time
    saved = ArrowDataset(str(tmp_path / "sharded")).load()
    assert len(list((tmp_path / "sharded").glob("data-*.arrow"))) > 5
    assert saved["doc"] == kept
    assert saved.data.table.equals(datasets.load_from_disk(str(tmp_path / "whole")).flatten_indices().data.table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sharded", "src", "whole"]
    assert not list((tmp_path / "sharded").glob(".*"))  # no scratch shard folder left


def test_a_data_set_mapped_from_a_file_already_unlinked_is_still_saved(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"doc": list(range(100))}).save_to_disk(str(tmp_path / "src"))
    mapped = datasets.load_from_disk(str(tmp_path / "src"))
    for shard in (tmp_path / "src").glob("*.arrow"):
        shard.unlink()  # the producer's scratch file goes; the open map still reads it
    ArrowDataset(str(tmp_path / "out")).save(mapped.select(range(0, 100, 2)))
    assert ArrowDataset(str(tmp_path / "out")).load()["doc"] == list(range(0, 100, 2))
