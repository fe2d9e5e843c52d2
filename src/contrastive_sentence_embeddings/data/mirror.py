"""Where the offline data mirror is. Kept apart from :mod:`.raw_sources` (which
needs Kedro for its errors) so that code running where Kedro is not installed (the
CUDA tests and benchmarks on the device machine) finds the mirror the same way."""

from __future__ import annotations

import os
from pathlib import Path

MIRROR_ENV_VAR = "CSE_DATA_MIRROR"
DEFAULT_MIRROR_DIR = "../shared/datasets"
# The repository DVC runs a stage for (set by DVC for every stage command, and to the
# original repository for a queued experiment's copy).
DVC_ROOT_ENV_VAR = "DVC_ROOT"


def resolve_mirror_dir(configured: str | None = None) -> Path:
    """The offline mirror: the ``mirror_dir`` parameter if set, else ``$CSE_DATA_MIRROR``,
    else ``../shared/datasets``; relative paths are taken from the working directory
    (the project root under ``kedro run``), or under DVC from the repository's root
    (``$DVC_ROOT``): a queued experiment runs in a copy under ``.dvc/tmp/exps``, where
    ``../shared/datasets`` would not be the project's sibling."""
    chosen = Path(configured or os.environ.get(MIRROR_ENV_VAR) or DEFAULT_MIRROR_DIR).expanduser()
    if not chosen.is_absolute() and os.environ.get(DVC_ROOT_ENV_VAR):
        chosen = Path(os.environ[DVC_ROOT_ENV_VAR]) / chosen
    return chosen.resolve()
