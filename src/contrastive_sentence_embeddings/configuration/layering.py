"""The whole parameter set, layered: the values several blocks share (``encoder``,
``seed``, ``on_bad_input``) filled into the keys a block leaves null, the experiment
overlay ``params.yaml`` and ``--params`` merged above the configuration, and, when a key
is wrong, which file or option set it (so the error names the place to fix)."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from contrastive_sentence_embeddings.configuration.strict import SEED_MAX, Allowed, ParameterError, ParameterValueError, shown_value


# --- the whole parameter set ------------------------------------------------------------
# The top-level values the nodes share: read directly (``params:seed``) or through a key
# left null (:data:`INHERITED_KEYS`).
SHARED_VALUES = ("encoder", "seed", "on_bad_input")
TOP_LEVEL_VALUES = (*SHARED_VALUES, "methods")
# The values the shared numbers take. Checked before the blocks: a block's null key
# holds the shared value, and a bad one must be named where it was given (``seed``),
# not in the first block that took it.
SHARED_RANGES = {"seed": Allowed(int, 0, SEED_MAX)}


def check_shared_values(params: Mapping) -> None:
    """The shared numbers (:data:`SHARED_RANGES`) are of their type and range."""
    for key, allowed in SHARED_RANGES.items():
        if key in params:
            problem = allowed.problem(params[key])
            if problem:
                raise ParameterValueError(key, params[key], problem)


# --- shared values, the experiment overlay and --params ------------------------------------
# The keys that take a shared value when a block leaves them null (or out); every
# method's ``training.seed`` too (:func:`inheriting_keys`).
INHERITED_KEYS = {
    "data_processing.on_bad_input": "on_bad_input",
    "data_processing.wiki_sentences.seed": "seed",
    "data_processing.declutr_spans.seed": "seed",
    "evaluation.on_bad_input": "on_bad_input",
}


def inheriting_keys(params: Mapping) -> dict[str, str]:
    """Dotted key -> the shared value it takes when null: :data:`INHERITED_KEYS` and
    ``<method>.training.seed`` for every block listed in ``methods``."""
    keys = dict(INHERITED_KEYS)
    names = params.get("methods")
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and isinstance(params.get(name), Mapping):
            keys[f"{name}.training.seed"] = "seed"
    return keys


def with_shared_values(params: Mapping) -> dict:
    """A copy of ``params`` in which every key of :func:`inheriting_keys` that is null
    or absent holds its shared value. A block that is absent stays absent; a method
    block without ``training`` gets one holding the seed. Idempotent."""
    resolved = copy.deepcopy(dict(params))
    for path, shared in inheriting_keys(resolved).items():
        if resolved.get(shared) is None:
            continue
        *parents, leaf = path.split(".")
        node = resolved
        for depth, part in enumerate(parents):
            if node.get(part) is None and depth > 0:  # a method's missing `training`
                node[part] = {}
            node = node.get(part)
            if not isinstance(node, dict):
                break
        else:
            if node.get(leaf) is None:
                node[leaf] = resolved[shared]
    return resolved


def merge_parameters(base: Mapping, *layers: Mapping) -> dict:
    """``base`` with each layer merged over it key by key (mappings recursively; a list
    or scalar replaces), as Kedro's soft merge of environments."""
    merged = copy.deepcopy(dict(base))
    for layer in layers:
        for key, value in (layer or {}).items():
            if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
                merged[key] = merge_parameters(merged[key], value)
            else:
                merged[key] = copy.deepcopy(value)
    return merged


def without_nulls(tree: Mapping) -> dict:
    """``tree`` without its null leaves (and the mappings left empty): what an overlay
    whose null means "as configured" actually sets."""
    kept = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            value = without_nulls(value)
            if value:
                kept[key] = value
        elif value is not None:
            kept[key] = value
    return kept


def compose_parameters(configured: Mapping, overlay: Mapping, runtime: Mapping) -> dict:
    """The parameters a run gets: ``configured`` (conf/base with the environment merged
    in), the overlay's non-null values over it (params.yaml), ``runtime`` (``--params``)
    over both, then the shared values filled in (:func:`with_shared_values`)."""
    return with_shared_values(merge_parameters(configured, without_nulls(overlay or {}), runtime or {}))


def flatten(tree: Mapping, prefix: str = "") -> dict[str, Any]:
    """``tree``'s leaves by dotted path: ``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (a leaf is
    anything but a non-empty mapping, so lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{path}."))
        else:
            flat[path] = value
    return flat


_ABSENT = object()


def has_key(tree, path: str) -> bool:
    """Whether the dotted ``path`` exists in ``tree`` (its value may be null)."""
    return _value_at(tree, path, absent=_ABSENT) is not _ABSENT


def check_overlay_keys(overlay: Mapping, params: Mapping, name: str = "params.yaml") -> None:
    """Every key the overlay lists must be a parameter of ``params`` (the composed
    parameters): a null overlay value changes nothing, so a misspelt null key would
    otherwise go unnoticed until someone sets it."""
    for path in flatten(overlay):
        if not has_key(params, path):
            parent, _, _ = path.rpartition(".")
            siblings = _value_at(params, parent) if parent else params
            raise ParameterError(f"{name} names {path}, which is not a parameter", key=path,
                                 accepted=list(siblings) if isinstance(siblings, Mapping) else None)


def _value_at(tree, path: str, absent=None):
    """The value at the dotted ``path`` in ``tree``; ``absent`` where there is none."""
    for part in path.split("."):
        if not isinstance(tree, Mapping) or part not in tree:
            return absent
        tree = tree[part]
    return tree


class ParameterYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader typing scalars the way Kedro's configuration loader
    (OmegaConf's) does, for code that reads parameter files without Kedro (the
    benchmarks, which run where OmegaConf is not installed). Plain YAML 1.1 reads
    ``1e-5`` as a string (its floats need a dot) and ``2024-01-01`` as a date; OmegaConf
    reads the first as a float and keeps the second a string. Booleans stay YAML 1.1's in
    both (an unquoted ``no`` is false)."""


ParameterYamlLoader.yaml_implicit_resolvers = {  # a copy: SafeLoader's own table stays as it is
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ParameterYamlLoader.add_implicit_resolver(  # an exponent without a dot: 1e-5, -2E+3, 1_000e3
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789"))


def read_parameters_yaml(text: str):
    """YAML text (a parameter file, a ``--set`` value) with its values typed as Kedro
    types them (:class:`ParameterYamlLoader`)."""
    return yaml.load(text, Loader=ParameterYamlLoader)  # noqa: S506 - a SafeLoader subclass


def split_params_text(text: str) -> list[str]:
    """``kedro run --params`` text split into its ``key=value`` items at the commas that
    are not inside brackets or braces: ``a=[1,2],b={x: 1, y: 2},c=3`` has three items
    (Kedro's own splitting cuts at every comma, so no list could be given)."""
    items, current, depth = [], [], 0
    for char in text:
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth <= 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip())
    return [item for item in items if item]


def parse_params_text(text: str | None) -> dict:
    """``--params`` text as the nested runtime parameters Kedro takes: ``a.b=1,c=[2,3]``
    -> ``{"a": {"b": 1}, "c": [2, 3]}``, values typed as YAML types them. An item without
    ``key=`` is a :class:`ParameterError` naming it."""
    from omegaconf import OmegaConf

    items = split_params_text(text or "")
    bad = [item for item in items if not item.partition("=")[0].strip() or "=" not in item]
    if bad:
        raise ParameterError(f"--params: {', '.join(repr(item) for item in bad)} is not key=value; "
                             "separate items with commas, e.g. --params \"seed=43,declutr.seeds=[42,43,44]\"")
    parsed: dict = {}
    for key, _, value in (item.partition("=") for item in items):
        try:  # one item at a time, so that a value YAML cannot read is named
            parsed = merge_parameters(parsed, OmegaConf.to_container(OmegaConf.from_dotlist([f"{key.strip()}={value}"])))
        except Exception as error:  # noqa: BLE001 - yaml's and OmegaConf's errors alike
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ParameterError(f"--params: {key.strip()}={value}: the value is not valid YAML ({problem}); "
                                 "a list is [a,b], a mapping {k: v}", key=key.strip()) from None
    return parsed


# --- which file said it -----------------------------------------------------------------
def files_setting(key_path: str, conf_dirs: Iterable[Path]) -> list[str]:
    """The parameter files under ``conf_dirs`` that set ``key_path`` (``a.b.c``), or
    that set its longest existing prefix: what to name in an error message."""
    parts = key_path.split(".")
    found: list[str] = []
    for conf_dir in conf_dirs:
        for path in sorted(Path(conf_dir).glob("**/parameters*.y*ml")):
            try:
                node = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError):
                continue
            depth = 0
            for part in parts:
                if not isinstance(node, Mapping) or part not in node:
                    break
                node, depth = node[part], depth + 1
            if depth == len(parts):
                found.append(str(path))
    return found


def named_key(error: BaseException, where: str) -> str | None:
    """The key a library dataclass's "unknown ... parameter(s)" message names, under
    ``where`` (``TrainingConfig`` and the methods word it their own way)."""
    import re

    match = re.search(r"unknown [\w ]*parameter\(s\):? (\w+)", str(error)) or re.match(r"(\w+) must be", str(error))
    return f"{where}.{match.group(1)}" if match else None


def accepted_if_unknown(error: BaseException, schema) -> list[str] | None:
    """The keys dataclass ``schema`` takes when ``error`` is its "unknown parameter"
    error (for the "did you mean" of the message), else None."""
    if re.search(r"unknown [\w ]*parameter\(s\)", str(error)):
        return [f.name for f in dataclasses.fields(schema)]
    return None


def offending_key(error: BaseException) -> str | None:
    """The dotted path of the key an error is about, when it names one."""
    return getattr(error, "key", None)


def where_set(key: str, runtime: Mapping, overlay: Mapping, overlay_name: str,
              conf_dirs: Iterable[Path]) -> list[str]:
    """Where ``key`` was given, highest precedence first: ``--params``, the overlay file
    (where it gives a value), then the parameter files under ``conf_dirs`` (given base
    first: the last, the run's environment, wins); the overlay when it alone names the key.
    A key inside a list (an objective's term, ``simcse.objective[1].weight``) was set
    where its list was: the files are searched for the list's key (``simcse.objective``)."""
    key = key.split("[", 1)[0]
    sources = ["--params"] if has_key(runtime or {}, key) else []
    # The overlay's null means "as configured": it sets the key only with a value.
    if has_key(without_nulls(overlay or {}), key):
        sources.append(overlay_name)
    sources += [file for conf_dir in reversed(list(conf_dirs)) for file in files_setting(key, [conf_dir])]
    if not sources and has_key(overlay or {}, key):
        sources.append(overlay_name)  # a key only the overlay names (a misspelt one, null or not)
    return sources


def explain_parameter_error(error: ParameterError, sources: Sequence[str]) -> str:
    """The message a user reads: one line naming the key, where it was set and, for an
    unknown key, the closest key its block takes ("did you mean learning_rate?"); when
    none is close, a second line lists the keys the block takes."""
    key = getattr(error, "key", None)
    where = f" (set in {', '.join(sources)})" if sources else ""
    accepted = getattr(error, "accepted", None)
    if key and accepted is not None:
        parent, _, leaf = key.rpartition(".")
        close = difflib.get_close_matches(leaf, accepted, n=1, cutoff=0.6)
        if close:
            return f"unknown parameter {key}{where}: did you mean {close[0]}?"
        return f"unknown parameter {key}{where}\n{parent or 'the top level'} takes: {', '.join(accepted)}"
    if isinstance(error, ParameterValueError):
        return f"{key} = {shown_value(error.value)}{where}: {error.problem}"
    message = str(error).replace("\n", " ")
    named = message if not key or key in message else f"parameter {key}: {message}"
    return f"{named}{where}"


def method_parameters(parameters: Mapping) -> Mapping | None:
    """The run's parameters as ``after_catalog_created`` receives them (Kedro passes the
    ``params:`` feed and the whole dict under ``parameters``), or None when ``methods``
    names a method without a block (``validate_parameters`` reports that)."""
    parameters = parameters.get("parameters", parameters)
    names = parameters.get("methods") or []
    if not names or not all(name in parameters for name in names):
        return None
    return parameters
