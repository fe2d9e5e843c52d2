"""The project's ``kedro`` commands (Kedro loads ``<package>.cli`` and lets its ``cli``
group override the built-in commands).

``run`` is Kedro's own ``kedro run`` (the same command object, options and callback)
except for how ``--params`` is split into items: Kedro cuts the text at every comma,
so ``--params "declutr.seeds=[42,43,44]"`` failed with "Item 43 must contain a key and
a value". Here commas inside ``[...]`` and ``{...}`` belong to the value::

    kedro run --pipelines=declutr --params "declutr.seeds=[42,43,44],seed=7"
    kedro run --params "simcse.training={learning_rate: 1.0e-4, max_steps: 20}"

Values are typed as YAML types them (``7`` an integer, ``1e-5`` a float, ``[42,43]`` a
list, ``{a: 1}`` a mapping); a nested key is written with dots. Quote the whole
``--params`` value in the shell.
"""

from __future__ import annotations

import copy
import functools
import logging

import click
from kedro.framework.cli.project import run as kedro_run

from contrastive_sentence_embeddings.configuration.layering import parse_params_text
from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.runs.log_handlers import RUN_LOG


@functools.cache
def known_failures() -> tuple[type[BaseException], ...]:
    """Failures whose message already names the file or parameter and the fix: the user
    gets that message alone, the traceback goes to the run log (logs/kedro.log).
    Imported when an error is met, not at start: the trainer's brings torch, over a
    second before any command (``--help`` included) could begin."""
    from contrastive_sentence_embeddings.data.own_data import SourceError
    from contrastive_sentence_embeddings.data.raw_sources import RawDataUnavailable, RawSourceChanged
    from contrastive_sentence_embeddings.data.report import BadInputError
    from contrastive_sentence_embeddings.data.sts_hub import HubLayoutError
    from contrastive_sentence_embeddings.encoders.loading import EncoderUnavailable
    from contrastive_sentence_embeddings.runs.launch_guard import LauncherRunRefused
    from contrastive_sentence_embeddings.encoders.integrity import BrokenModelFolder
    from contrastive_sentence_embeddings.runs.run_locks import LockFolderNotWritable, LockHeld
    from contrastive_sentence_embeddings.runs.scratch import NoSpaceLeftError
    from contrastive_sentence_embeddings.training.trainer import CorruptCheckpointError

    return (EncoderUnavailable, BrokenModelFolder, RawDataUnavailable, RawSourceChanged, ParameterError,
            BadInputError, SourceError, HubLayoutError, LockHeld, LockFolderNotWritable, LauncherRunRefused,
            NoSpaceLeftError, CorruptCheckpointError)


PARAMS_HELP = (
    "Parameters for this run, over conf/ and params.yaml: comma-separated key=value items, "
    "nested keys with dots, values typed as YAML; commas inside [...] and {...} stay in the value: "
    '--params "seed=43,declutr.seeds=[42,43,44],simcse.training={max_steps: 20}".'
)


def split_params(ctx: click.Context, param: click.Parameter, value):
    """``--params`` callback: the text as nested runtime parameters
    (``config.parse_params_text``); a mapping (from ``--config``'s ``params:``) as it is."""
    if isinstance(value, dict):
        return value
    try:
        return parse_params_text(value)
    except ParameterError as error:
        raise click.BadParameter(str(error).removeprefix("--params: "), ctx=ctx, param=param) from None


def known_failure(error: BaseException) -> BaseException | None:
    """``error`` or the first exception it was raised from (or during) that is one of
    :func:`known_failures` (Kedro wraps a data set's error in its own); None when
    there is none, or when a click exception (a message made for the user already, such
    as a misspelt parameter's) comes first."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, click.ClickException):  # already a message for the user: click says it as it is
            return None
        if isinstance(error, known_failures()):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _traceback_to_run_log(error: BaseException) -> str | None:
    """Write ``error``'s traceback to the run log alone (not the console); its path,
    or None where no run log is set up."""
    handler = next((h for h in logging.getLogger().handlers if h.get_name() == RUN_LOG), None)
    if handler is None:
        return None
    record = logging.getLogger(__name__).makeRecord(
        __name__, logging.ERROR, __file__, 0, "the run stopped: %s", (error,),
        (type(error), error, error.__traceback__))
    handler.handle(record)
    return handler.baseFilename


def explaining_known_failures(callback):
    """The run command's callback, a known failure said in one message (click's
    ``Error: ...``, exit code 1) instead of a traceback."""
    @functools.wraps(callback)
    def run(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except Exception as error:
            known = known_failure(error)
            if known is None:
                raise
            log = _traceback_to_run_log(error)
            raise click.ClickException(str(known) + (f"\n(the traceback is in {log})" if log else "")) from None

    return run


def _with_params_splitting(command: click.Command) -> click.Command:
    """A shallow copy of ``command`` whose ``--params`` option splits with
    :func:`split_params` and whose callback says a known failure in one message
    (:func:`explaining_known_failures`); every other option is Kedro's."""
    ours = copy.copy(command)
    ours.callback = explaining_known_failures(command.callback)
    ours.params = []
    for option in command.params:
        if option.name == "params":
            option = copy.copy(option)
            option.callback = split_params
            option.help = PARAMS_HELP
        ours.params.append(option)
    return ours


@click.group(name="contrastive_sentence_embeddings")
def cli() -> None:
    """The project's commands (they override Kedro's of the same name)."""


# Kedro's ``find_run_command`` (what ``contrastive-sentence-embeddings`` and ``python -m
# contrastive_sentence_embeddings`` call) reads the module's ``run``; ``kedro run`` reads
# the group's: one command object serves both.
run = _with_params_splitting(kedro_run)
run.epilog = (
    "The console script also ranks DVC's experiments (contrastive-sentence-embeddings experiments --help) "
    "and publishes a trained model with its card to the Hub (contrastive-sentence-embeddings publish --help)."
)
cli.add_command(run, name="run")
