"""A saved encoder loads the same way through AutoModel, SentenceEncoder and
SentenceTransformer, for every pooling method, and saves are all-or-nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, BertConfig, BertForMaskedLM, BertModel

from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE, SentenceEncoder
from contrastive_sentence_embeddings.encoders.pooling import POOLING_METHODS
from contrastive_sentence_embeddings.training import saving
from contrastive_sentence_embeddings.training.saving import save_sentence_encoder

SENTENCES = [
    "x",
    "A man is playing a guitar on the street.",
    "this sentence is quite a lot longer than the others, with a comma and several more words in it",
    "Two dogs run.",
]
METADATA = {"name": "tiny-simcse", "method": "simcse", "base_encoder": "tiny", "seed": 7,
            "training": {"lr": 3e-5, "batch_size": 4}}
# A pooling whose embeddings must differ from each method's: shows that sentence-transformers
# really applies the saved method, not some default.
OTHER_POOLING = {"cls": "cls_before_pooler", "cls_before_pooler": "mean", "mean": "cls_before_pooler",
                 "last_avg": "first_last_avg", "first_last_avg": "mean"}


def tiny_config(tokenizer, layers: int = 2) -> BertConfig:
    return BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=layers,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)


def sentence_transformer(path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device="cpu")


def encode(encoder_or_path, sentences=SENTENCES, **kwargs) -> np.ndarray:
    encoder = encoder_or_path
    if not isinstance(encoder, SentenceEncoder):
        encoder = SentenceEncoder.load(str(encoder_or_path), device="cpu", **kwargs)
    return encoder.encode(sentences)


@pytest.fixture(scope="module", params=POOLING_METHODS)
def saved(request, tmp_path_factory, tiny_bert, tokenizer):
    pooling = request.param
    path = save_sentence_encoder(tmp_path_factory.mktemp(pooling) / "model", tiny_bert, tokenizer, pooling,
                                 METADATA)
    return path, pooling


def test_automodel_loads_the_encoder_exactly(saved, tiny_bert, tokenizer):
    path, _ = saved
    loaded, info = AutoModel.from_pretrained(path, output_loading_info=True)
    assert type(loaded) is BertModel
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    tiny_bert.eval()
    loaded.eval()
    with torch.no_grad():
        expected, got = tiny_bert(**batch), loaded(**batch)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, rtol=0, atol=1e-6)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, rtol=0, atol=1e-6)


def test_sentence_transformers_gives_the_sentence_encoder_embeddings(saved, tiny_bert, tokenizer):
    path, pooling = saved
    reference = encode(path)  # pooling read from cse_metadata.json
    embeddings = sentence_transformer(path).encode(SENTENCES, convert_to_numpy=True)
    assert embeddings.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(embeddings, reference, rtol=0, atol=1e-5)
    in_memory = SentenceEncoder(tiny_bert, tokenizer, pooling, device=torch.device("cpu"))
    np.testing.assert_allclose(reference, encode(in_memory), rtol=0, atol=1e-6)
    other = encode(SentenceEncoder(tiny_bert, tokenizer, OTHER_POOLING[pooling], device=torch.device("cpu")))
    assert np.abs(embeddings - other).max() > 1e-3


def test_metadata_records_pooling_the_callers_fields_and_versions(saved):
    path, pooling = saved
    written = json.loads((path / METADATA_FILE).read_text(encoding="utf-8"))
    assert written["pooling"] == pooling
    assert {k: written[k] for k in METADATA} == METADATA
    versions = written["versions"]
    for library in ("torch", "transformers", "sentence_transformers", "contrastive_sentence_embeddings"):
        assert versions[library], library
    assert versions["torch"] == torch.__version__
    assert written["saved_at"].endswith("+00:00")
    assert not list(path.parent.glob(".*")), "no staging folder left behind"


def test_first_last_avg_skips_the_middle_layers(tmp_path, tokenizer):
    torch.manual_seed(1)
    model = BertModel(tiny_config(tokenizer, layers=3))
    path = save_sentence_encoder(tmp_path / "model", model, tokenizer, "first_last_avg", {})
    embeddings = sentence_transformer(path).encode(SENTENCES, convert_to_numpy=True)
    np.testing.assert_allclose(embeddings, encode(path), rtol=0, atol=1e-5)


def test_normalize_and_max_seq_length_apply_to_sentence_transformers_only(tmp_path, tiny_bert, tokenizer):
    path = save_sentence_encoder(tmp_path / "model", tiny_bert, tokenizer, "mean", {}, max_seq_length=16,
                                 normalize=True)
    model = sentence_transformer(path)
    assert model.max_seq_length == 16
    short = SENTENCES[:2] + SENTENCES[3:]  # all under 16 tokens
    embeddings = model.encode(short, convert_to_numpy=True)
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)
    reference = encode(path, short)
    np.testing.assert_allclose(embeddings, reference / np.linalg.norm(reference, axis=1, keepdims=True),
                               rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="max_seq_length"):
        save_sentence_encoder(tmp_path / "too-long", tiny_bert, tokenizer, "mean", {}, max_seq_length=129)


def test_a_failed_save_leaves_nothing_behind(tmp_path, tiny_bert, tokenizer, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(saving, "_write_sentence_transformers_files", fail)  # after model and tokenizer
    with pytest.raises(RuntimeError, match="disk full"):
        save_sentence_encoder(tmp_path / "model", tiny_bert, tokenizer, "mean", {})
    assert list(tmp_path.iterdir()) == []


def test_a_failed_save_keeps_the_previous_model(tmp_path, tiny_bert, tokenizer, monkeypatch):
    path = save_sentence_encoder(tmp_path / "model", tiny_bert, tokenizer, "mean", {"seed": 1})
    before = sorted(p.relative_to(path) for p in path.rglob("*"))
    monkeypatch.setattr(saving, "_move_into_place", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        save_sentence_encoder(path, tiny_bert, tokenizer, "cls", {"seed": 2})
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == before
    assert json.loads((path / METADATA_FILE).read_text())["seed"] == 1
    assert list(tmp_path.iterdir()) == [path]


def test_saving_over_an_existing_model_replaces_it(tmp_path, tiny_bert, tokenizer):
    path = save_sentence_encoder(tmp_path / "model", tiny_bert, tokenizer, "first_last_avg", {"seed": 1})
    (path / "stale.txt").write_text("from the first save")
    save_sentence_encoder(path, tiny_bert, tokenizer, "cls_before_pooler", {"seed": 2})
    assert not (path / "stale.txt").exists()
    assert not (path / "1_WeightedLayerPooling").exists()
    assert json.loads((path / METADATA_FILE).read_text())["seed"] == 2
    assert list(tmp_path.iterdir()) == [path]
    np.testing.assert_allclose(sentence_transformer(path).encode(SENTENCES, convert_to_numpy=True), encode(path),
                               rtol=0, atol=1e-5)


def test_a_folder_that_is_not_a_model_is_never_replaced(tmp_path, tiny_bert, tokenizer):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="does not look like a saved model"):
        save_sentence_encoder(tmp_path / "models", tiny_bert, tokenizer, "mean", {})
    assert (tmp_path / "models" / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]


def test_training_heads_and_wrappers_are_refused(tmp_path, tokenizer):
    config = tiny_config(tokenizer)
    with pytest.raises(ValueError, match="bare encoder"):
        save_sentence_encoder(tmp_path / "mlm", BertForMaskedLM(config), tokenizer, "mean", {})

    class WithMlp(BertModel):  # an encoder carrying a SimCSE-style head
        def __init__(self, config):
            super().__init__(config)
            self.mlp = torch.nn.Linear(config.hidden_size, config.hidden_size)

    with pytest.raises(ValueError, match="mlp.bias"):
        save_sentence_encoder(tmp_path / "mlp", WithMlp(config), tokenizer, "mean", {})
    wrapper = torch.nn.Module()
    wrapper.encoder = BertModel(config)
    with pytest.raises(TypeError, match="bare Hugging Face encoder"):
        save_sentence_encoder(tmp_path / "wrapped", wrapper, tokenizer, "mean", {})
    with pytest.raises(ValueError, match="no pooler"):
        save_sentence_encoder(tmp_path / "nopooler", BertModel(config, add_pooling_layer=False), tokenizer, "cls", {})
    assert list(tmp_path.iterdir()) == []


def test_metadata_must_agree_on_the_pooling(tmp_path, tiny_bert, tokenizer):
    with pytest.raises(ValueError, match="pooling"):
        save_sentence_encoder(tmp_path / "model", tiny_bert, tokenizer, "mean", {"pooling": "cls"})
    with pytest.raises(ValueError, match="pooling"):
        save_sentence_encoder(tmp_path / "model", tiny_bert, tokenizer, "avg", {})
    assert list(tmp_path.iterdir()) == []


def test_every_file_of_the_folder_has_the_mode_a_new_file_gets(saved):
    """The weights came out 0600 beside 0644 files: a folder shared with a group had
    everything readable but the model."""
    import os
    import stat

    folder, _ = saved
    mask = os.umask(0)
    os.umask(mask)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.rglob("*") if path.is_file()}
    assert "model.safetensors" in modes
    assert set(modes.values()) == {0o666 & ~mask}, modes
