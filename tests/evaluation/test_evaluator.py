"""The evaluator on real data with a tiny model: every part scored, the one-pass
multi-pooling path equal to scoring each pooling alone, and the transfer cache used."""

import numpy as np
import pytest

from contrastive_sentence_embeddings.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation import evaluator
from contrastive_sentence_embeddings.evaluation.sts import evaluate_sts


def test_every_part_for_two_poolings_in_one_pass(tiny_bert_dir, sts_partitions, transfer_partitions, tmp_path,
                                                 monkeypatch):
    settings = evaluator.EvaluationSettings(transfer=True, transfer_tasks=["TREC", "MRPC"], k_folds=3,
                                            cache_dir=str(tmp_path / "cache"), device="cpu")
    data = evaluator.EvaluationData.read(sts_partitions, transfer_partitions, settings)
    specs = [evaluator.ModelSpec(f"tiny-{p}", str(tiny_bert_dir), p, "test", "tiny") for p in ("mean", "cls")]

    calls = []
    original = SentenceEncoder.encode_poolings

    def counting(self, sentences, poolings, show_progress=None):
        calls.append((len(sentences), tuple(poolings)))
        return original(self, sentences, poolings, show_progress)

    monkeypatch.setattr(SentenceEncoder, "encode_poolings", counting)
    metrics = evaluator.evaluate_models(specs, data, settings)
    # one encoding of the STS sentences and one per transfer task, each for both poolings
    assert len(calls) == 3 and all(p == ("mean", "cls") for _, p in calls)
    for spec in specs:
        result = metrics[spec.name]
        assert result["model"]["pooling"] == spec.pooling
        for key in ("sts12", "sts16_wmean", "stsb", "sickr", "sts_avg", "sts_avg_wmean", "TREC", "MRPC", "MRPC_f1",
                    "alignment", "uniformity"):
            assert np.isfinite(result[key]), key
        assert "transfer_avg" not in result  # only defined over all 7 tasks

    # the shared pass gives what scoring one pooling alone gives
    alone = evaluate_sts(data.sts, SentenceEncoder.load(str(tiny_bert_dir), "cls", device="cpu").encode)
    assert metrics["tiny-cls"]["sts_avg"] == pytest.approx(alone["sts_avg"], abs=1e-6)

    # a second run reads the transfer embeddings from the cache: only STS is encoded
    calls.clear()
    again = evaluator.evaluate_models(specs, data, settings)
    assert len(calls) == 1
    assert again["tiny-mean"]["TREC"] == metrics["tiny-mean"]["TREC"]
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 4  # 2 tasks x 2 poolings


def test_settings_reject_unknown_parameters():
    with pytest.raises(ValueError, match="unknown evaluation parameter\\(s\\): trasnfer"):
        evaluator.EvaluationSettings.from_params({"trasnfer": True})


def test_duplicate_metric_names_are_refused(tiny_bert_dir):
    spec = evaluator.ModelSpec("same", str(tiny_bert_dir), "mean")
    with pytest.raises(ValueError, match="same metrics file: same"):
        evaluator.evaluate_models([spec, spec], evaluator.EvaluationData(), evaluator.EvaluationSettings())


def test_model_fingerprint_changes_with_the_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"one")
    first = evaluator.model_fingerprint(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"three")
    assert evaluator.model_fingerprint(str(tmp_path)) != first
    assert evaluator.model_fingerprint("bert-base-uncased") == "bert-base-uncased"
