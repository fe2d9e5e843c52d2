import json
from pathlib import Path

from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE
from contrastive_sentence_embeddings.evaluation.evaluator import ModelSpec
from contrastive_sentence_embeddings.pipelines.evaluation.nodes import (
    baseline_specs,
    project_relative,
    trained_model_spec,
)


def test_a_trained_model_is_described_by_its_metadata_with_a_project_relative_path(tmp_path, monkeypatch):
    model = tmp_path / "data" / "06_models" / "simcse"
    model.mkdir(parents=True)
    (model / METADATA_FILE).write_text(json.dumps(
        {"name": "simcse", "method": "simcse", "base_encoder": "bert", "pooling": "cls_before_pooler", "seed": 3}))
    monkeypatch.chdir(tmp_path)
    spec = trained_model_spec(str(model.resolve()))
    assert spec == ModelSpec("simcse", "data/06_models/simcse", "cls_before_pooler", "simcse", "bert", 3)


def test_paths_outside_the_project_and_hub_ids_are_kept_as_they_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert project_relative("bert-base-uncased") == "bert-base-uncased"
    outside = Path("/") / "elsewhere" / "model"
    assert project_relative(outside) == str(outside)


def test_baseline_rows_are_named_by_pooling():
    specs = baseline_specs("enc", ["mean", "cls"])
    assert [(s.name, s.path, s.pooling, s.method) for s in specs] == [
        ("baseline-mean", "enc", "mean", "baseline"), ("baseline-cls", "enc", "cls", "baseline")]
