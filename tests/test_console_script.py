"""The console script and ``python -m``: ``--help`` prints the run command's options
(Kedro's ``find_run_command`` reads ``cli.run``; without it both crashed with an
AttributeError), names the ``experiments`` subcommand, and ``experiments --help`` works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENT = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "DVC_NO_ANALYTICS": "1"}
SCRIPT = shutil.which("contrastive-sentence-embeddings", path=str(Path(sys.executable).parent))


@pytest.mark.parametrize("command", [[SCRIPT], [sys.executable, "-m", "contrastive_sentence_embeddings"]],
                         ids=["console-script", "python-m"])
def test_help_lists_the_run_options_and_the_experiments_command(command):
    assert command[0], "the console script is not installed beside this Python"
    done = subprocess.run([*command, "--help"], cwd=ROOT, env=ENVIRONMENT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    for option in ("--pipelines", "--params", "--env"):
        assert option in done.stdout
    assert "experiments --help" in done.stdout.replace("-\n  ", "-").replace("\n  ", " ")


def test_experiments_help():
    done = subprocess.run([SCRIPT, "experiments", "--help"], cwd=ROOT, env=ENVIRONMENT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: contrastive-sentence-embeddings experiments")


def test_kedro_run_and_the_console_script_are_one_command():
    from contrastive_sentence_embeddings import cli

    assert cli.cli.commands["run"] is cli.run


def test_a_known_failure_is_found_behind_kedro_s_wrapping_and_others_are_not():
    from kedro.io import DatasetError

    from contrastive_sentence_embeddings.cli import known_failure
    from contrastive_sentence_embeddings.data.raw_sources import RawDataUnavailable

    cause = RawDataUnavailable("Raw source 'sts': the Hub could not be reached; add --params raw_data.mode=mirror")
    try:
        try:
            raise cause
        except RawDataUnavailable as error:
            raise DatasetError("Failed while loading data from dataset raw_sts") from error
    except DatasetError as wrapped:
        assert known_failure(wrapped) is cause
    assert known_failure(KeyError("a bug")) is None
    from contrastive_sentence_embeddings.configuration.loader import ParameterCommandError

    try:
        try:
            raise ValueError("simcse.training: unknown training parameter(s): lerning_rate")
        except ValueError as error:
            raise ParameterCommandError("unknown parameter simcse.training.lerning_rate: did you mean "
                                        "learning_rate?") from error
    except ParameterCommandError as said:
        assert known_failure(said) is None  # click says it as it is
    assert known_failure(ZeroDivisionError()) is None


def test_the_command_starts_without_torch():
    """``--help`` and ``experiments`` need no model code: the known failures the command
    turns into one line are imported when an error is met, so torch (over a second) is
    not loaded at start."""
    done = subprocess.run([sys.executable, "-c", "import sys, contrastive_sentence_embeddings.cli as cli; "
                           "print('torch' in sys.modules); cli.known_failures(); print('torch' in sys.modules)"],
                          cwd=ROOT, env=ENVIRONMENT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == ["False", "True"]  # after kedro's line about its logging file
