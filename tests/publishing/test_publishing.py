"""``contrastive-sentence-embeddings publish``: a trained model folder and its card pushed
to the Hub, with Hugging Face's client replaced at its boundary (``HfApi``'s two calls)
by one that computes what the real client would upload from the same arguments and
copies it into a folder standing for the Hub repo."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from contrastive_sentence_embeddings.publishing import hub as publishing
from contrastive_sentence_embeddings.pipelines.datasets import ModelCardDataset
from contrastive_sentence_embeddings.encoders.embedding_cache import model_fingerprint
from contrastive_sentence_embeddings.pipelines.evaluation.nodes import write_model_card
from tests.test_console_script import ENVIRONMENT, ROOT, SCRIPT
from tests.publishing.test_model_card import NO_BASE, fake_metrics, project_blocks, saved_model  # noqa: F401 - a fixture


@pytest.fixture
def carded_model(saved_model):  # noqa: F811 - the fixture imported above
    """A saved SimCSE run with the card the model_card node writes."""
    metrics = fake_metrics("simcse", fingerprint=model_fingerprint(str(saved_model)))
    card = write_model_card(str(saved_model), metrics, *NO_BASE, *project_blocks())
    ModelCardDataset(filepath=str(saved_model / publishing.CARD_FILE)).save(card)
    return saved_model


class FakeHub:
    """``HfApi`` at its boundary: ``create_repo`` notes the repo, ``upload_folder`` picks
    the files with huggingface_hub's own pattern filter (what the real client uploads
    for these arguments) and copies them into ``remote/<repo id>``."""

    def __init__(self, remote: Path, refuse: Exception | None = None):
        self.remote, self.refuse, self.calls = remote, refuse, []

    def create_repo(self, **kwargs):
        self.calls.append(("create_repo", kwargs))
        if self.refuse is not None:
            raise self.refuse
        return f"https://huggingface.co/{kwargs['repo_id']}"

    def upload_folder(self, **kwargs):
        from huggingface_hub.utils import filter_repo_objects

        self.calls.append(("upload_folder", kwargs))
        folder = Path(kwargs["folder_path"])
        every = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
        chosen = list(filter_repo_objects(every, allow_patterns=kwargs["allow_patterns"],
                                          ignore_patterns=kwargs.get("ignore_patterns")))
        target = self.remote / kwargs["repo_id"]
        for name in chosen:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folder / name, target / name)
        return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{kwargs['repo_id']}/commit/abc"})()


def test_publishing_uploads_the_saved_files_and_card_and_the_hub_copy_loads_the_same(
        carded_model, tmp_path, monkeypatch, capsys):
    from sentence_transformers import SentenceTransformer

    saved_fingerprint = model_fingerprint(str(carded_model))
    (carded_model / "notes.txt").write_text("a user's own notes\n")
    hub = FakeHub(tmp_path / "hub")
    monkeypatch.setattr("huggingface_hub.HfApi", lambda *args, **kwargs: hub)
    assert publishing.main([str(carded_model), "--repo-id", "someone/simcse-tiny", "--private"]) == 0
    out = capsys.readouterr().out
    assert "left out (not written by the saver): notes.txt" in out
    assert out.strip().endswith("published: https://huggingface.co/someone/simcse-tiny/commit/abc")
    assert [name for name, _ in hub.calls] == ["create_repo", "upload_folder"]
    assert hub.calls[0][1] == {"repo_id": "someone/simcse-tiny", "repo_type": "model", "private": True,
                               "exist_ok": True}

    copy = tmp_path / "hub" / "someone" / "simcse-tiny"
    uploaded = sorted(path.relative_to(copy).as_posix() for path in copy.rglob("*") if path.is_file())
    local = sorted(path.relative_to(carded_model).as_posix() for path in carded_model.rglob("*") if path.is_file())
    assert uploaded == [name for name in local if name != "notes.txt"]
    assert "README.md" in uploaded and "cse_metadata.json" in uploaded and "model.safetensors" in uploaded
    sentences = ["A man is playing a guitar.", "Two dogs run on the beach."]
    np.testing.assert_array_equal(SentenceTransformer(str(copy), device="cpu").encode(sentences),
                                  SentenceTransformer(str(carded_model), device="cpu").encode(sentences))
    assert model_fingerprint(str(copy)) == saved_fingerprint  # the saver's weights, as recorded


def test_a_dry_run_checks_and_lists_without_the_hub(carded_model, monkeypatch, capsys):
    def no_hub(*args, **kwargs):
        raise AssertionError("a dry run contacted the Hub")

    monkeypatch.setattr("huggingface_hub.HfApi", no_hub)
    assert publishing.main([str(carded_model), "--repo-id", "someone/simcse-tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "  model.safetensors  (" in out and "  README.md  (" in out and "dry run: nothing was uploaded" in out


@pytest.mark.parametrize("damage, message", [
    (lambda folder: (folder / "tokenizer.json").unlink(), r"tokenizer\.json is missing"),
    (lambda folder: (folder / "README.md").unlink(), r"no model card \(README\.md\)"),
    (lambda folder: (folder / "README.md").write_text("---\nlicense: [apache\n---\nbody\n"),
     r"front matter cannot be read"),
    (lambda folder: (folder / "cse_metadata.json").write_text('{"name": "simcse", "fing'),
     r"cse_metadata\.json is not valid JSON"),
    (lambda folder: (folder / "model.safetensors").write_bytes(b"\0" * 16), r"model\.safetensors has 16 bytes"),
], ids=["no-tokenizer", "no-card", "broken-card", "cut-metadata", "resized-weights"])
def test_a_folder_that_fails_its_checks_is_never_uploaded(carded_model, tmp_path, monkeypatch, capsys, damage,
                                                          message):
    hub = FakeHub(tmp_path / "hub")
    monkeypatch.setattr("huggingface_hub.HfApi", lambda *args, **kwargs: hub)
    damage(carded_model)
    assert publishing.main([str(carded_model), "--repo-id", "someone/simcse-tiny"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert hub.calls == []


def test_a_folder_this_project_did_not_save_is_refused(tmp_path, tiny_bert, tokenizer, capsys):
    folder = tmp_path / "downloaded"
    tiny_bert.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert publishing.main([str(folder), "--repo-id", "someone/x"]) == 1
    assert "not a model folder this project saved" in capsys.readouterr().err


def test_a_seeded_methods_folder_names_its_seed_folders(carded_model, capsys):
    runs = carded_model.parent / "declutr"
    shutil.copytree(carded_model, runs / "seed42")
    assert publishing.main([str(runs), "--repo-id", "someone/x", "--dry-run"]) == 1
    assert f"holds the models of several seeds; publish one of them: {runs / 'seed42'}" in capsys.readouterr().err


def test_the_hubs_refusal_is_one_line(carded_model, tmp_path, monkeypatch, capsys):
    hub = FakeHub(tmp_path / "hub", refuse=OSError("401 Client Error: Unauthorized for url\nmore detail"))
    monkeypatch.setattr("huggingface_hub.HfApi", lambda *args, **kwargs: hub)
    assert publishing.main([str(carded_model), "--repo-id", "someone/simcse-tiny"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "OSError: 401 Client Error: Unauthorized for url" in err
    assert "hf auth login" in err and not (tmp_path / "hub").exists()


def test_a_bad_repo_id_is_refused_before_anything(capsys, tmp_path):
    assert publishing.main([str(tmp_path), "--repo-id", "no-owner"]) == 2
    assert "expected <user or organisation>/<name>" in capsys.readouterr().err


def test_the_console_script_has_the_publish_command():
    done = subprocess.run([SCRIPT, "publish", "--help"], cwd=ROOT, env=ENVIRONMENT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: contrastive-sentence-embeddings publish") and "--repo-id" in done.stdout
