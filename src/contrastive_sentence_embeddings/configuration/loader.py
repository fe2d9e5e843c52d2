"""How this project's parameters are loaded (``settings.CONFIG_LOADER_CLASS``).

Kedro's ``OmegaConfigLoader`` merges ``conf/base`` with the run's environment
(``conf/local``, ``conf/paper``) key by key and puts ``--params`` on top. This loader
adds two things to the parameters it returns, in one place, so that every consumer
(the nodes' ``params:`` inputs, the hooks, the graph, the strict check, the model
cards) sees the same values:

* ``params.yaml`` beside ``conf/`` (DVC's default parameters file, the one
  ``dvc exp run -S key=value`` edits) is an experiment overlay: its non-null values are
  merged above the environment and below ``--params``; null means "as configured", so
  the shipped file, all nulls, changes nothing and never undoes ``conf/paper``.
* The shared values (``encoder``, ``seed``, ``on_bad_input``) are plain top-level
  parameters; a block's key left null takes them (``config.with_shared_values``).

No parameter file uses an interpolation: DVC resolves the parameter files it tracks
with OmegaConf and cannot read Kedro's ``${globals:...}`` / ``${runtime_params:...}``.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any

import click
import yaml
from kedro.config import OmegaConfigLoader

from contrastive_sentence_embeddings.configuration.layering import compose_parameters
from contrastive_sentence_embeddings.configuration.strict import ParameterError

# DVC's default parameters file (``dvc exp run -S key=value`` without a file name edits
# it), at the project root.
OVERLAY_FILE = "params.yaml"

# Keyword arguments to pass to the loader's constructor: Kedro's (``settings`` exports
# them) and :func:`project_parameters`'s, defined here so that reading the parameters
# outside a session does not import ``settings`` (whose hooks import the graph, which
# reads the parameters through this module).
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # An environment (conf/paper, conf/local) holds only what differs from conf/base:
    # its parameter blocks are merged into the base blocks key by key.
    "merge_strategy": {"parameters": "soft"},
    # "config_patterns": {
    #     "spark" : ["spark*/"],
    #     "parameters": ["parameters*", "parameters*/**", "**/parameters*"],
    # }
}


class ParameterCommandError(ParameterError, click.ClickException):
    """A parameter error as a command line shows it: the ``kedro`` command prints
    ``Error: <message>`` and exits with status 1, no traceback. Python callers catch it
    as the :class:`ParameterError` it also is."""

    def __init__(self, message: str, key: str | None = None):
        click.ClickException.__init__(self, message)
        self.key = key
        self.accepted = None


def read_overlay(path: Path) -> dict[str, Any]:
    """The overlay file's parameters ({} when there is none), read as Kedro reads the
    conf files (OmegaConf's YAML: ``1e-05``, as DVC writes a float, is a float, not the
    string PyYAML makes of it). A file that is not a YAML mapping is an error naming it."""
    from omegaconf import DictConfig, OmegaConf

    if not path.is_file():
        return {}
    try:
        overlay = OmegaConf.load(path)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ParameterCommandError(f"{path}{line}: not valid YAML ({getattr(error, 'problem', error)})") from None
    if not isinstance(overlay, DictConfig):
        raise ParameterCommandError(f"{path}: expected a mapping of parameters, got a list")
    return OmegaConf.to_container(overlay, resolve=False)


class ProjectConfigLoader(OmegaConfigLoader):
    """``OmegaConfigLoader`` whose ``parameters`` are conf (base + environment), then
    ``params.yaml``'s non-null values, then ``--params``, with the shared values filled
    in (``config.compose_parameters``)."""

    def __getitem__(self, key: str) -> dict[str, Any]:
        config = super().__getitem__(key)
        if key != "parameters":
            return config
        return compose_parameters(config, self.overlay, self.runtime_params or {})

    @property
    def overlay_path(self) -> Path:
        """``params.yaml`` in the folder that holds the configuration folder (the
        project root, where DVC keeps it)."""
        return Path(str(self.conf_source)).parent / OVERLAY_FILE

    @cached_property
    def overlay(self) -> dict[str, Any]:
        """``params.yaml`` as written (nulls included: the strict check reads its keys)."""
        return read_overlay(self.overlay_path)


def project_parameters(root: Path, env: str | None = None, runtime_params: dict | None = None) -> dict:
    """The parameters a ``kedro run [--env env] [--params ...]`` in project ``root``
    gets, read outside a session (tests, the graph for kedro-viz and DVC's checks)."""
    from kedro.framework.project import settings

    conf_source = Path(root) / getattr(settings, "CONF_SOURCE", "conf")
    loader = ProjectConfigLoader(conf_source=str(conf_source), env=env, runtime_params=runtime_params,
                                 **CONFIG_LOADER_ARGS)
    return dict(loader["parameters"])
