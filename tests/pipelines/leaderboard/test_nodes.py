from contrastive_sentence_embeddings.datasets import MetricsFolderDataset
from contrastive_sentence_embeddings.pipelines.leaderboard.nodes import merge_metrics


def test_full_metrics_complete_the_sts_only_entry():
    merged = merge_metrics({"a": {"sts_avg": 70.0, "MR": None}, "b": {"sts_avg": 60.0}},
                           {"a": {"sts_avg": 70.0, "MR": 80.0}, "c": {"MR": 75.0}})
    assert merged == {"a": {"sts_avg": 70.0, "MR": 80.0}, "b": {"sts_avg": 60.0}, "c": {"MR": 75.0}}


def test_an_empty_or_missing_metrics_folder_loads_as_nothing(tmp_path):
    folder = MetricsFolderDataset(path=str(tmp_path / "missing"), dataset="json.JSONDataset", filename_suffix=".json")
    assert folder.load() == {}
    folder.save({"m": {"sts_avg": 1.0}})
    assert {name: load() for name, load in folder.load().items()} == {"m": {"sts_avg": 1.0}}
