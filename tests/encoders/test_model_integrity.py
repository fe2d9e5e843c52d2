"""A model folder with a missing or broken file is never scored: every load of an encoder
checks the folder against what its saver recorded and its tokenizer against the model
(encoders/integrity.py), and says which file is wrong in one line.

The case that published a wrong number: without ``tokenizer.json`` transformers builds a
five-token tokenizer from ``tokenizer_config.json``, every word becomes [UNK], and the
folder scored 13.49 where it had scored 75.06."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.encoders.integrity import (
    BrokenModelFolder,
    recorded_file_problems,
    unknown_share,
    vocabulary_problem,
)
from contrastive_sentence_embeddings.encoders.fingerprint import read_metadata
from contrastive_sentence_embeddings.training.saving import save_sentence_encoder
from tests.helpers import copy_project_configuration


@pytest.fixture
def saved(tmp_path, tiny_bert, tokenizer) -> Path:
    return save_sentence_encoder(tmp_path / "simcse", tiny_bert, tokenizer, "cls_before_pooler", {"method": "simcse"})


def test_an_intact_saved_folder_loads_and_encodes(saved):
    encoder = SentenceEncoder.load(str(saved))
    assert encoder.encode(["A man is playing a guitar."]).shape == (1, 32)


def test_a_removed_tokenizer_file_is_named_before_anything_loads(saved):
    (saved / "tokenizer.json").unlink()
    with pytest.raises(BrokenModelFolder, match=r"simcse: tokenizer\.json is missing .*cse_metadata\.json") as error:
        SentenceEncoder.load(str(saved))
    assert "\n" not in str(error.value)


def test_a_truncated_weights_file_is_named_with_both_sizes(saved):
    weights = saved / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as handle:
        handle.truncate(size // 2)
    with pytest.raises(BrokenModelFolder, match=rf"model\.safetensors has {size // 2:,} bytes where the saver wrote "
                                                rf"{size:,}"):
        SentenceEncoder.load(str(saved))


def test_an_added_file_or_a_rewritten_card_is_not_a_fault(saved):
    (saved / "notes.txt").write_text("my notes")
    (saved / "README.md").write_text("# my card")
    assert recorded_file_problems(saved, read_metadata(saved)) == []
    SentenceEncoder.load(str(saved))


def test_a_folder_saved_elsewhere_is_checked_by_its_tokenizer(tmp_path, tiny_bert, tokenizer):
    """No saver's record (a plain save_pretrained): a lost vocabulary is still caught.
    Without tokenizer.json the tokenizer has its five special tokens; with a vocab.txt
    of the right size but other words, every word is unknown."""
    folder = tmp_path / "plain"
    tiny_bert.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    SentenceEncoder.load(str(folder), pooling="mean")
    words = [word for word, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    (folder / "tokenizer.json").unlink()
    with pytest.raises(BrokenModelFolder, match=r"the tokenizer has \d tokens for the model's 30,522 token embeddings"):
        SentenceEncoder.load(str(folder), pooling="mean")

    specials = [word for word in words if word.startswith("[") and word.endswith("]")]
    other = [f"zz{index}" for index in range(len(words) - len(specials))]
    (folder / "vocab.txt").write_text("\n".join(specials + other) + "\n", encoding="utf-8")
    with pytest.raises(BrokenModelFolder, match=r"turns 100% of the words of 'A man is playing a guitar\.' into its "
                                                r"unknown token '\[UNK\]'"):
        SentenceEncoder.load(str(folder), pooling="mean")


def test_the_rules_by_hand():
    assert vocabulary_problem(30522, 30522) is None
    assert vocabulary_problem(30522, 30528) is None  # rows padded to a multiple of 64
    assert "only 100 token embeddings" in vocabulary_problem(101, 100)
    assert "5 tokens for the model's 30,522" in vocabulary_problem(5, 30522)
    assert unknown_share([101, 100, 100, 7, 102], unknown_id=100, special_ids={101, 102}) == pytest.approx(2 / 3)
    assert unknown_share([1, 2, 3], unknown_id=None, special_ids=set()) == 0.0


@pytest.mark.integration
def test_kedro_run_on_a_folder_without_its_tokenizer_stops_in_one_line(tmp_path, saved, mirror_dir):
    """As a user would: the baseline's evaluation pointed at the broken folder."""
    (saved / "tokenizer.json").unlink()
    project = tmp_path / "project"
    project.mkdir()
    copy_project_configuration(project)
    environment = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "CSE_DATA_MIRROR": str(mirror_dir),
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    kedro = shutil.which("kedro", path=environment["PATH"])
    ingested = subprocess.run([kedro, "run", "--nodes=ingest_sts,ingest_transfer"], cwd=project, env=environment,
                              capture_output=True, text=True, timeout=600)
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    done = subprocess.run([kedro, "run", "--nodes=baseline.evaluate", f"--params=encoder={saved}"], cwd=project,
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode != 0
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "tokenizer.json is missing" in errors[0], done.stdout + done.stderr
    assert not (project / "data" / "08_reporting" / "metrics" / "baseline-cls.json").exists()
