"""Paths as outputs and messages show them: relative to the project, so that nothing
written (metrics, reports, errors) depends on where the project is checked out."""

from __future__ import annotations

from pathlib import Path


def project_relative(path: str | Path, root: str | Path | None = None) -> str:
    """``path`` relative to ``root`` (default: the working directory, which is the
    project root under ``kedro run``) when it lies inside it, both resolved; anything
    else (a path outside, a Hub model id) as given."""
    try:
        return Path(path).resolve().relative_to(Path(root or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return str(path)
