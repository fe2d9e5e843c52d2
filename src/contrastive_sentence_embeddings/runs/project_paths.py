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


def recorded_command(script: str | Path, arguments: list[str], root: str | Path) -> str:
    """The command line a results file records for ``script`` run with ``arguments``:
    ``python`` and the script relative to ``root`` (the project), every argument that
    is an absolute path (alone or as ``--option=path``) relative to ``root`` when inside
    it, else as ``<elsewhere>/<its name>`` (a scratch folder of the machine that ran it,
    meaningless anywhere else), so that no file records where this checkout lives."""
    def shown(argument: str) -> str:
        option, equals, value = argument.partition("=") if argument.startswith("--") else ("", "", argument)
        if not Path(value).is_absolute():
            return argument
        inside = project_relative(value, root)
        return option + equals + (inside if not Path(inside).is_absolute() else f"<elsewhere>/{Path(value).name}")

    return " ".join(["python", shown(str(Path(script).resolve())), *map(shown, arguments)])
