"""A metrics record is published only if it is whole and agrees with itself
(evaluation/records.py): a file cut short, or an average edited by hand, stops the
leaderboard with the file named instead of reaching the page and summary.json."""

from __future__ import annotations

import json

import pytest
from kedro_datasets.json import JSONDataset
from kedro_datasets.partitions import PartitionedDataset

from contrastive_sentence_embeddings.evaluation.records import BrokenRecord, read_records, record_problems
from contrastive_sentence_embeddings.evaluation.sts import STS_TASKS
from tests.helpers import PROJECT_ROOT

COMMITTED = sorted((PROJECT_ROOT / "data/08_reporting").glob("metrics*/*.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_committed_record_agrees_with_itself(path):
    assert record_problems(json.loads(path.read_text())) == []


def test_averages_and_intervals_by_hand():
    record = {task: 70.0 + index for index, task in enumerate(STS_TASKS)}  # mean 73
    assert record_problems({**record, "sts_avg": 73.0, "sts_avg_ci": [72.0, 74.0]}) == []
    assert record_problems({**record, "sts_avg": 80.0}) == ["sts_avg is 80.0000 but the mean of its 7 scores is 73.0000"]
    assert record_problems({**record, "sts_avg": 73.0, "sts_avg_ci": [74.0, 75.0]}) == [
        "sts_avg 73.0000 lies outside its own interval sts_avg_ci [74.0000, 75.0000]"]
    assert record_problems({**record, "sts_avg": "73"}) == ["sts_avg is '73', not a number"]
    del record["sickr"]
    assert record_problems({**record, "sts_avg": 73.0}) == ["sts_avg is given but sickr is missing or not a number"]
    assert record_problems([1, 2]) == ["holds a JSON list, not a metrics record (an object)"]


def partitions(folder):
    return PartitionedDataset(path=str(folder), dataset=JSONDataset, filename_suffix=".json").load()


def test_a_cut_or_edited_record_among_real_ones_is_named(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    for name in ("simcse", "declutr"):
        (folder / f"{name}.json").write_text((PROJECT_ROOT / f"data/08_reporting/metrics/{name}.json").read_text())
    assert set(read_records(partitions(folder), "data/08_reporting/metrics")) == {"simcse", "declutr"}

    text = (folder / "simcse.json").read_text()
    (folder / "simcse.json").write_text(text[: len(text) // 3])
    with pytest.raises(BrokenRecord, match=r"^data/08_reporting/metrics/simcse\.json: not a readable metrics record "
                                           r"\(JSONDecodeError: "):
        read_records(partitions(folder), "data/08_reporting/metrics")

    edited = json.loads(text)
    edited["sts_avg"] += 5.0
    (folder / "simcse.json").write_text(json.dumps(edited))
    with pytest.raises(BrokenRecord, match=r"^data/08_reporting/metrics/simcse\.json: sts_avg is [\d.]+ but the mean "
                                           r"of its 7 scores is [\d.]+: the record was edited or damaged"):
        read_records(partitions(folder), "data/08_reporting/metrics")
