"""Batched, length-sorted, dynamically padded encoding gives what encoding each
sentence alone gives, in the input order, and leaves the model as it found it."""

import json

import numpy as np
import pytest
import torch

from contrastive_sentence_embeddings.encoders.encoding import (
    METADATA_FILE,
    SentenceEncoder,
    default_pooling,
    max_sequence_length,
    pad_batch,
)
from contrastive_sentence_embeddings.encoders.pooling import POOLING_METHODS

SENTENCES = [
    "a short one",
    "this sentence is quite a lot longer than the first one and the third",
    "mid length sentence here",
    "x",
    "a short one",
]


def test_pad_batch():
    batch = pad_batch([[5, 6, 7], [8]], pad_token_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_batched_encoding_equals_one_sentence_at_a_time(tiny_bert, tokenizer, batch_size):
    encoder = SentenceEncoder(tiny_bert, tokenizer, "mean", batch_size=batch_size, device=torch.device("cpu"))
    batched = encoder.encode_poolings(SENTENCES, POOLING_METHODS)
    with torch.no_grad():
        tiny_bert.eval()
        for i, sentence in enumerate(SENTENCES):
            inputs = tokenizer(sentence, return_tensors="pt")
            outputs = tiny_bert(**inputs, output_hidden_states=True)
            last = outputs.last_hidden_state[0]
            expected = {
                "mean": last.mean(0),
                "last_avg": last.mean(0),
                "cls_before_pooler": last[0],
                "cls": outputs.pooler_output[0],
                "first_last_avg": ((outputs.hidden_states[1][0] + last) / 2).mean(0),
            }
            for method, vector in expected.items():
                np.testing.assert_allclose(batched[method][i], vector.numpy(), atol=1e-5, err_msg=method)
    np.testing.assert_allclose(batched["mean"][0], batched["mean"][4], atol=1e-5)  # duplicates agree


def test_encoding_restores_train_mode_and_needs_no_grad(tiny_bert, tokenizer):
    tiny_bert.train()
    encoder = SentenceEncoder(tiny_bert, tokenizer, "cls_before_pooler", device=torch.device("cpu"))
    first = encoder.encode(SENTENCES)
    second = encoder.encode(SENTENCES)
    assert tiny_bert.training and all(module.training for module in tiny_bert.modules())
    assert np.array_equal(first, second), "dropout must be off while encoding"
    assert first.dtype == np.float32 and first.shape == (len(SENTENCES), 32)
    tiny_bert.eval()


def test_no_truncation_below_the_model_maximum(tiny_bert, tokenizer, caplog):
    encoder = SentenceEncoder(tiny_bert, tokenizer, "mean", device=torch.device("cpu"))
    # the tokenizer allows 512 but the tiny model has only 128 positions
    assert encoder.max_length == max_sequence_length(tokenizer, tiny_bert.config) == 128
    long_sentence = " ".join(["word"] * 300)
    ids = encoder.tokenize(["short", " ".join(["word"] * 100), long_sentence])
    assert [len(i) for i in ids] == [3, 102, 128]
    assert "1 of 3 sentences reach the model maximum of 128 tokens" in caplog.text


def test_pooling_declared_by_a_saved_model(tmp_path):
    assert default_pooling(tmp_path) is None
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    assert default_pooling(tmp_path) == "mean"
    (tmp_path / METADATA_FILE).write_text(json.dumps({"pooling": "first_last_avg"}))
    assert default_pooling(tmp_path) == "first_last_avg"  # the project's own record wins


def test_the_packaged_default_encoder_declares_mean_pooling():
    encoder = SentenceEncoder.load("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    assert encoder.pooling == "mean" and encoder.model.config.hidden_size == 384


@pytest.mark.parametrize("case", ["missing folder", "not a model", "hub unreachable"])
def test_an_encoder_that_cannot_be_loaded_is_one_message_naming_the_parameter(case, tmp_path, monkeypatch):
    """Each way an `encoder` value fails to load (a folder that is not there, a folder
    without a model, a Hub id neither cached nor reachable) is EncoderUnavailable with
    what went wrong and what to set; the library's error is chained, not shown."""
    import huggingface_hub.constants

    from contrastive_sentence_embeddings.encoders.loading import EncoderUnavailable
    from contrastive_sentence_embeddings.training.run import load_pretrained

    name = {"missing folder": str(tmp_path / "nothing_here"), "not a model": str(tmp_path),
            "hub unreachable": "some-owner/a-model-never-cached"}[case]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # as on a machine without network
    expected = {"missing folder": "no such folder", "not a model": f"the folder {tmp_path} is not a loadable model",
                "hub unreachable": "not in this machine's Hugging Face cache and the Hub cannot be reached"}[case]
    for load in (lambda: SentenceEncoder.load(name, "mean"), lambda: load_pretrained(name)):
        with pytest.raises(EncoderUnavailable) as caught:
            load()
        message = str(caught.value)
        assert message.startswith(f"encoder {name!r}: {expected}"), message
        assert "set the `encoder` parameter" in message and "\n" not in message
        assert isinstance(caught.value.__cause__, (OSError, ValueError))
