"""ArrowDataset: prepared data sets as memory-mapped Arrow shards, published atomically."""

from pathlib import Path

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


def _resident_file_pages() -> int:
    """This process's resident memory backed by files (memory-mapped pages), in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's /proc")
def test_a_large_memory_mapped_data_set_is_written_without_mapping_its_pages_here(tmp_path):
    import datasets
    import numpy as np

    rows = 3_000
    ids = np.random.default_rng(0).integers(0, 30_000, size=(rows, 8_000), dtype=np.int32)  # 96 MB
    datasets.Dataset.from_dict({"doc": np.arange(rows), "input_ids": list(ids)}).save_to_disk(str(tmp_path / "src"))

    def save(target: str, child_process_bytes: int) -> int:
        mapped = datasets.load_from_disk(str(tmp_path / "src"))  # memory-mapped, nothing read yet
        before = _resident_file_pages()
        ArrowDataset(str(tmp_path / target), child_process_bytes=child_process_bytes).save(mapped)
        grown = _resident_file_pages() - before
        del mapped
        return grown

    in_this_process = save("here", child_process_bytes=2**40)
    in_a_child = save("child", child_process_bytes=0)
    assert in_this_process > 60 * 2**20  # the rows were read through the map, here
    assert in_a_child < 16 * 2**20
    here, child = ArrowDataset(str(tmp_path / "here")).load(), ArrowDataset(str(tmp_path / "child")).load()
    assert here["doc"] == child["doc"] == list(range(rows))
    assert here.data.equals(child.data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child", "here", "src"]
