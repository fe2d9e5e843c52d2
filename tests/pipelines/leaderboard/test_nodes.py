from contrastive_sentence_embeddings.pipelines.datasets import MetricsFolderDataset


def test_an_empty_or_missing_metrics_folder_loads_as_nothing(tmp_path):
    folder = MetricsFolderDataset(path=str(tmp_path / "missing"), dataset="json.JSONDataset", filename_suffix=".json")
    assert folder.load() == {}
    folder.save({"m": {"sts_avg": 1.0}})
    assert {name: load() for name, load in folder.load().items()} == {"m": {"sts_avg": 1.0}}
