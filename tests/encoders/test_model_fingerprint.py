"""Which weights a score was computed on: the fingerprint of a model folder depends on
its files' contents, not on where the folder is or when its files were written; the
saver records it, and the models a folder held before; a record of other weights is
found by comparing fingerprints."""

import json
import os
import shutil

import pytest
import torch

from contrastive_sentence_embeddings.encoders.fingerprint import (
    EARLIER_KEY,
    FINGERPRINT_KEY,
    content_fingerprint,
    earlier_models,
    model_fingerprint,
    scored_fingerprint,
    scores_of_other_models,
)
from contrastive_sentence_embeddings.training.saving import save_sentence_encoder


def model_folder(folder, weights: bytes, metadata=None):
    """A model folder by hand: a weights file, a config, and the project's metadata."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_text('{"hidden_size": 4}')
    (folder / "cse_metadata.json").write_text(json.dumps(metadata or {}))
    return folder


def test_a_copy_keeps_the_fingerprint_and_other_weights_change_it(tmp_path):
    original = model_folder(tmp_path / "a", b"\x00\x01" * 500)
    fingerprint = model_fingerprint(str(original))
    assert fingerprint.startswith("sha256-")
    # Copied elsewhere with fresh modification times (a clone, `cp -r`, `dvc pull`): the same weights.
    copy = tmp_path / "clone" / "a"
    shutil.copytree(original, copy)
    os.utime(copy / "model.safetensors", ns=(1, 1))
    assert model_fingerprint(str(copy)) == fingerprint
    # The model card and the metadata describe the model; they do not change what it computes.
    (copy / "README.md").write_text("# card")
    (copy / "cse_metadata.json").write_text('{"name": "renamed"}')
    assert model_fingerprint(str(copy)) == fingerprint
    # Retrained: weights of the same size but other values.
    (copy / "model.safetensors").write_bytes(b"\x00\x02" * 500)
    assert model_fingerprint(str(copy)) != fingerprint
    # A Hub id is its own fingerprint.
    assert model_fingerprint("no-such-org/no-such-model") == "no-such-org/no-such-model"


def test_the_recorded_fingerprint_is_used_while_the_files_keep_their_sizes(tmp_path):
    folder = model_folder(tmp_path / "m", b"w" * 64)
    computed = content_fingerprint(folder)
    assert computed["sizes"] == {"config.json": 18, "model.safetensors": 64}
    # What the saver records is trusted without reading the weights ...
    (folder / "cse_metadata.json").write_text(json.dumps({FINGERPRINT_KEY: {**computed, "digest": "sha256-recorded"}}))
    assert model_fingerprint(str(folder)) == "sha256-recorded"
    # ... until the files no longer are the ones it describes: then the contents are hashed.
    (folder / "model.safetensors").write_bytes(b"w" * 65)
    assert model_fingerprint(str(folder)) == content_fingerprint(folder)["digest"] != "sha256-recorded"


def test_the_saver_records_the_fingerprint_and_the_model_it_replaced(tmp_path, tiny_bert, tokenizer):
    folder = tmp_path / "simcse"
    save_sentence_encoder(folder, tiny_bert, tokenizer, "cls", {"name": "simcse"})
    first = json.loads((folder / "cse_metadata.json").read_text())
    assert first[FINGERPRINT_KEY] == content_fingerprint(folder) and first[EARLIER_KEY] == []
    first_fingerprint = model_fingerprint(str(folder))
    assert first_fingerprint == first[FINGERPRINT_KEY]["digest"]
    # Retrained (other weights) into the same folder: a new fingerprint, the old one remembered.
    retrained = type(tiny_bert)(tiny_bert.config)
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(0.01)
    save_sentence_encoder(folder, retrained, tokenizer, "cls", {"name": "simcse"})
    second = json.loads((folder / "cse_metadata.json").read_text())
    assert model_fingerprint(str(folder)) == second[FINGERPRINT_KEY]["digest"] != first_fingerprint
    assert earlier_models(folder) == {first_fingerprint: first["saved_at"]}
    # A copy of the saved model is the same model.
    shutil.copytree(folder, tmp_path / "elsewhere")
    assert model_fingerprint(str(tmp_path / "elsewhere")) == model_fingerprint(str(folder))


@pytest.mark.parametrize("record, expected", [
    ({"model": {"name": "simcse"}, "model_fingerprint": "sha256-a"}, "sha256-a"),
    ({"model": {"name": "declutr"}, "model_fingerprint": "sha256-a"}, None),
    ({"model": {"name": "simcse"}, "provenance": {"runs": {"simcse.seed1": {"model": {"fingerprint": "sha256-b"}}}}},
     None),
    ({"run": "simcse", "revision": "sha256-c", "written": {}}, "sha256-c"),
])
def test_the_fingerprint_a_record_scored_for_a_run(record, expected):
    assert scored_fingerprint(record, "simcse") == expected


def test_scores_of_other_weights_are_found_by_fingerprint():
    records = {
        "metrics/simcse.seed1.json": {"model": {"name": "simcse.seed1"}, "model_fingerprint": "sha256-old"},
        "metrics/simcse.json": {"model": {"name": "simcse"}, "provenance": {"runs": {
            "simcse.seed1": {"model": {"fingerprint": "sha256-old"}},
            "simcse.seed2": {"model": {"fingerprint": "sha256-other-seed"}}}}},
        "metrics_full/simcse.json": {"model": {"name": "simcse.seed1"}, "model_fingerprint": "sha256-new"},
        "mteb/simcse/seed2": {"run": "simcse.seed2", "revision": "sha256-other-seed"},
    }
    assert scores_of_other_models(records, "simcse.seed1", "sha256-new") == [
        "metrics/simcse.seed1.json", "metrics/simcse.json"]
    assert scores_of_other_models(records, "simcse.seed1", "sha256-old") == ["metrics_full/simcse.json"]
    assert scores_of_other_models(records, "simcse.seed2", "sha256-other-seed") == []
