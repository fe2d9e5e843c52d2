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

import click
from kedro.framework.cli.project import run as kedro_run

from contrastive_sentence_embeddings.config import ParameterError, parse_params_text

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


def _with_params_splitting(command: click.Command) -> click.Command:
    """A shallow copy of ``command`` whose ``--params`` option splits with
    :func:`split_params`; every other option, and the command's callback, are Kedro's."""
    ours = copy.copy(command)
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
    "The console script also ranks DVC's experiments: "
    "contrastive-sentence-embeddings experiments --help."
)
cli.add_command(run, name="run")
