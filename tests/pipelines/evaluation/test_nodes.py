import json

from contrastive_sentence_embeddings.encoding import METADATA_FILE
from contrastive_sentence_embeddings.evaluation.evaluator import ModelSpec
from contrastive_sentence_embeddings.pipelines.evaluation.nodes import baseline_specs, trained_model_specs


def test_trained_models_are_found_by_their_metadata(tmp_path, caplog):
    (tmp_path / "simcse").mkdir()
    (tmp_path / "simcse" / METADATA_FILE).write_text(json.dumps(
        {"name": "simcse", "method": "simcse", "base_encoder": "bert", "pooling": "cls_before_pooler", "seed": 3}))
    (tmp_path / "stray").mkdir()
    specs = trained_model_specs(tmp_path)
    assert specs == [ModelSpec("simcse", str(tmp_path / "simcse"), "cls_before_pooler", "simcse", "bert", 3)]
    assert "1 folder(s) without cse_metadata.json were not evaluated: stray" in caplog.text
    assert trained_model_specs(tmp_path / "missing") == []


def test_baseline_rows_are_named_by_pooling():
    specs = baseline_specs("enc", ["mean", "cls"])
    assert [(s.name, s.path, s.pooling, s.method) for s in specs] == [
        ("baseline-mean", "enc", "mean", "baseline"), ("baseline-cls", "enc", "cls", "baseline")]
