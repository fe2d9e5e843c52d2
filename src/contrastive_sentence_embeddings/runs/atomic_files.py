"""Publishing a file or a folder all at once: it is written beside its target under a
hidden name (same folder, so the same file system, and the rename is atomic), then
renamed over the target. A crash or a full disk midway leaves the previous version
intact (and at worst a ``.<name>.writing-*`` sibling), never a half-written one; an
error removes what was written, and a full disk is reported naming the folder. A
sibling's name ends in its owner's pid and host (:func:`.scratch.sibling_token`): the
next run removes those a killed process left (:func:`.scratch.remove_left_behind`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contrastive_sentence_embeddings.runs.crash_points import crash_point
from contrastive_sentence_embeddings.runs.scratch import explained_no_space, sibling_in_use, sibling_token


def _hidden_sibling(target: Path, role: str, token: str) -> Path:
    return target.with_name(f".{target.name}.{role}-{token}")


def _remedy() -> str:
    return "Free space on the disk that holds it, or move the project to a larger one."


@contextmanager
def replaced_atomically(target: Path, before_replace: str | None = None) -> Iterator[Path]:
    """The path the body writes ``target``'s new content to; when the body succeeds the
    file is flushed to disk (``fsync``) and renamed over ``target``, when it fails the
    file is removed. ``before_replace`` names the crash point (:mod:`.crash_points`)
    reached between the two."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = _hidden_sibling(target, "writing", sibling_token())
    try:
        with sibling_in_use(temporary), explained_no_space(target, _remedy()):
            yield temporary
            with open(temporary, "rb") as handle:
                os.fsync(handle.fileno())
            if before_replace:
                crash_point(before_replace)
            os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_text_atomically(target: Path, text: str) -> None:
    """``text`` as UTF-8 at ``target``, published as :func:`replaced_atomically` does."""
    with replaced_atomically(target) as temporary:
        temporary.write_text(text, encoding="utf-8")


@contextmanager
def folder_replaced_atomically(target: Path, before_replace: str | None = None) -> Iterator[Path]:
    """The folder (not yet created) the body fills with ``target``'s new content; when
    the body succeeds it takes ``target``'s place, the previous folder moved aside
    first and deleted once the new one is in; when anything fails the new folder is
    removed and the previous one put back. ``before_replace`` names the crash point
    reached before the swap. Whether ``target`` may be replaced at all is the
    caller's to check first."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    token = sibling_token()
    staging = _hidden_sibling(target, "writing", token)
    previous = _hidden_sibling(target, "old", token)
    try:
        with sibling_in_use(staging), sibling_in_use(previous), explained_no_space(target, _remedy()):
            yield staging
            if before_replace:
                crash_point(before_replace)
            if target.exists():
                os.replace(target, previous)
            os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if previous.exists() and not target.exists():
            os.replace(previous, target)
        raise
    with sibling_in_use(previous):
        shutil.rmtree(previous, ignore_errors=True)
