"""Strict parsing: a block is a dataclass, and a key it does not declare is an error naming
the key's full path (``simcse.training.learnig_rate``) with the closest key it takes; a
value outside the range its field declares (:func:`integer`, :func:`number`,
:func:`flag`, :class:`PerName`, ...) is an error naming the key, the value and what it
must be. Every block of the project is parsed through :func:`parse_strict`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


ON_BAD_INPUT = ("skip", "error")


class ParameterError(ValueError):
    """A parameter block that does not parse: unknown key, missing key or bad value.
    ``key`` is the dotted path of the offending key, when there is one; for an unknown
    key, ``accepted`` lists the keys its block takes (what "did you mean" picks from)."""

    def __init__(self, message: str, key: str | None = None, accepted: Iterable[str] | None = None):
        super().__init__(message)
        self.key = key
        self.accepted = sorted(accepted) if accepted is not None else None


class ParameterValueError(ParameterError):
    """A value of the right key but of the wrong type or out of range: ``key`` is its
    dotted path, ``value`` what was given, ``problem`` what it must be. The message a
    user reads puts where it was set between the two (:func:`explain_parameter_error`):
    ``simcse.training.batch_size = 0 (set in --params): must be an integer >= 1``."""

    def __init__(self, key: str, value, problem: str):
        super().__init__(f"{key} = {shown_value(value)}: {problem}", key=key)
        self.value = value
        self.problem = problem


def shown_value(value) -> str:
    """A parameter value as YAML writes it (``null``, ``true``, ``'forty'``, ``0``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


# --- what a value may be --------------------------------------------------------------------
# Every numeric or true/false setting declares the values it takes, so that a value of
# the wrong type or out of range stops the run before any node (the strict check), not
# hours later as a ZeroDivisionError, a TypeError deep in data preparation, or a run
# that "succeeds" with nothing learnt (max_steps: -5). Every parsed dataclass, this
# module's and the library's (``TrainingConfig``, ``EvaluationSettings``, the methods),
# declares it on the field (``field(metadata=integer(1))``) with the helpers below.
# tests/test_parameters.py walks every field of every parsed dataclass to prove that
# none is left unchecked.
RANGE = "range"
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit unsigned integers


class ValueRange:
    """What every declared range answers: :meth:`problem` (what is wrong with a value, or
    None) and :meth:`located_problem` (the same with where below the setting it is:
    ``.SST2`` for a mapping's key; "" for the value itself), which :func:`check_values`
    reports."""

    def problem(self, value) -> str | None:
        raise NotImplementedError

    def located_problem(self, value) -> tuple[str, object, str] | None:
        problem = self.problem(value)
        return None if problem is None else ("", value, problem)


@dataclass(frozen=True)
class Allowed(ValueRange):
    """The values a setting takes: ``kind`` int, float (an integer is a number too) or
    bool, between ``low`` and ``high`` (inclusive unless ``*_open``), null when
    ``nullable``, any of ``words`` besides (num_processes' ``auto``), and with
    ``each`` a list of such values. A bool is never a number (YAML reads ``yes`` as
    true), nor a float an integer, nor a string either."""

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    words: tuple[str, ...] = ()
    each: bool = False

    def problem(self, value) -> str | None:
        """What is wrong with ``value`` ("must be an integer >= 1"), or None."""
        if (value is None and self.nullable) or (isinstance(value, str) and value in self.words):
            return None
        if self.each:
            if isinstance(value, list) and value and all(self._fits(item) for item in value):
                return None
        elif self._fits(value):
            return None
        return f"must be {self.describe()}"

    def _fits(self, value) -> bool:
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool) or not isinstance(value, int if self.kind is int else (int, float)):
            return False
        if not math.isfinite(value):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def describe(self) -> str:
        if self.kind is bool:
            text = "true or false"
        else:
            text = "an integer" if self.kind is int else "a number"
            low, high = (None if b is None else _number_text(b) for b in (self.low, self.high))
            if low is not None and high is not None:
                text += f" in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
            elif low is not None:
                text += f" {'>' if self.low_open else '>='} {low}"
            elif high is not None:
                text += f" {'<' if self.high_open else '<='} {high}"
        if self.each:
            text = f"a non-empty list, each {text}"
        alternatives = [*(repr(word) for word in self.words), *(["null"] if self.nullable else [])]
        return " or ".join([text, *alternatives]) if alternatives else text


@dataclass(frozen=True)
class PerName(ValueRange):
    """A mapping from some of ``names`` to values ``allowed`` takes (``transfer_train_rows:
    {SST2: 10000}``); an empty mapping is one."""

    names: tuple[str, ...]
    allowed: Allowed

    def located_problem(self, value) -> tuple[str, object, str] | None:
        """The first thing wrong with ``value`` as (the key below the setting, the value
        there, what is wrong), or None."""
        if not isinstance(value, Mapping):
            return "", value, f"must be a mapping of {' / '.join(self.names)} to {self.allowed.describe()}"
        for name, item in value.items():
            if name not in self.names:
                return "", value, f"names {name!r}, which is not one of {', '.join(self.names)}"
            problem = self.allowed.problem(item)
            if problem:
                return f".{name}", item, problem
        return None

    def problem(self, value) -> str | None:
        found = self.located_problem(value)
        return None if found is None else f"{found[0].lstrip('.')} {found[2]}, not {found[1]!r}".lstrip()


def _number_text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def integer(low: int | None = None, high: int | None = None, *, null: bool = False, words: tuple[str, ...] = (),
            each: bool = False) -> dict:
    """Field metadata: an integer in [low, high] (either end open-ended when None)."""
    return {RANGE: Allowed(int, low, high, nullable=null, words=words, each=each)}


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False, high_open: bool = False,
           null: bool = False) -> dict:
    """Field metadata: a number (an integer is one too) between low and high."""
    return {RANGE: Allowed(float, low, high, low_open, high_open, nullable=null)}


def flag(*, null: bool = False) -> dict:
    """Field metadata: true or false (or null, when ``null``: the default chosen at run time)."""
    return {RANGE: Allowed(bool, nullable=null)}


def random_seed() -> dict:
    """Field metadata: a random seed (numpy takes 0 .. 2**32 - 1)."""
    return integer(0, SEED_MAX)


@dataclass(frozen=True)
class Labels(ValueRange):
    """``keep_label``'s values: a label (text or an integer, as the column holds it), a
    list of them (``PairSource`` refuses an empty one), or null."""

    def problem(self, value) -> str | None:
        def is_label(item) -> bool:
            return isinstance(item, str) or (isinstance(item, int) and not isinstance(item, bool))

        if value is None or is_label(value) or (isinstance(value, list) and all(map(is_label, value))):
            return None
        return "must be a label (text or an integer), a list of labels or null"


def ranges_of(cls) -> dict[str, ValueRange]:
    """``cls``'s settings that declare their values (on the field), by field name."""
    return {f.name: f.metadata[RANGE] for f in dataclasses.fields(cls) if RANGE in f.metadata}


def check_values(cls, params: Mapping, where: str) -> None:
    """Each value ``params`` gives for a setting of dataclass ``cls`` that declares its
    values (:func:`ranges_of`) is one of them, else a :class:`ParameterValueError` naming
    the first that is not (keys ``cls`` does not have are left to the key check)."""
    if not isinstance(params, Mapping):
        return
    for name, allowed in ranges_of(cls).items():
        if name in params:
            found = allowed.located_problem(params[name])  # e.g. (".SST2", -5, "must be ...")
            if found:
                below, value, problem = found
                raise ParameterValueError(f"{where}.{name}{below}", value, problem)


def check_keys(cls, params: Mapping, where: str, required: Iterable[str] = ()) -> None:
    if not isinstance(params, Mapping):
        raise ParameterError(f"{where}: expected a mapping of parameters, got {type(params).__name__} {params!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ParameterError(
            f"unknown parameter(s) {', '.join(f'{where}.{key}' for key in unknown)}; "
            f"{where} takes: {', '.join(sorted(known))}",
            key=f"{where}.{unknown[0]}", accepted=known,
        )
    missing = sorted(set(required) - set(params))
    if missing:
        raise ParameterError(f"missing parameter(s) {', '.join(f'{where}.{key}' for key in missing)}", key=where)


def parse_strict(cls, params: Mapping | None, where: str, required: Iterable[str] = ()):
    """``cls(**params)`` for a dataclass ``cls``, refusing keys it does not declare;
    errors from the dataclass's own checks are re-raised with ``where`` in front."""
    params = {} if params is None else params
    check_keys(cls, params, where, required)
    check_values(cls, params, where)
    try:
        return cls(**dict(params))
    except ParameterError:
        raise
    except (TypeError, ValueError) as error:
        raise ParameterError(f"{where}: {error}", key=where) from error


def check_on_bad_input(value: str, where: str) -> str:
    if value not in ON_BAD_INPUT:
        raise ParameterError(f"{where}: on_bad_input must be one of {ON_BAD_INPUT}, got {value!r}")
    return value


