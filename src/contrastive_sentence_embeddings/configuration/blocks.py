"""The parameter blocks no library code owns, each a dataclass parsed strictly
(``strict.py``: a misspelt key such as ``learnig_rate`` is an error naming its full path,
``simcse.training.learnig_rate``, and the closest key the block takes).
:class:`StrictParametersHook` parses every block once the configuration is loaded,
before any node runs, and names the file(s) that set the offending key, so a typo in
``conf/paper`` fails at ``kedro run --env paper``'s first second, not after hours of
data preparation.

The ``configuration`` folder is a leaf: it imports nothing of the training, data,
evaluation or pipelines packages, which all import it (its parsing, the range helpers
``integer``/``number``/``flag`` their dataclasses declare their values with). This
module holds the blocks that belong to the wiring: a method's block's shape
(:class:`MethodConfig`), the top-level ``methods`` list, the data preparation's
sub-blocks, own-data sources, the evaluation's and leaderboard's blocks. The library's
dataclasses live with the code they configure (``TrainingConfig`` in
``training/trainer.py``, ``EvaluationSettings`` in ``evaluation/evaluator.py``,
``SpansParams`` in ``data/spans.py``, ``RawDataConfig`` in ``data/raw_sources.py``, each
method's hyper-parameters in ``training/methods.py``); ``pipelines/parameter_blocks.py``
composes them: a whole parameter set, or a method's block into its typed
``training.method_block.MethodBlock``. The values several blocks share, the experiment
overlay and ``--params`` are layered in ``layering.py``.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contrastive_sentence_embeddings.configuration.layering import check_shared_values
from contrastive_sentence_embeddings.configuration.strict import (
    RANGE,
    Labels,
    ParameterError,
    ParameterValueError,
    flag,
    integer,
    number,
    parse_strict,
    random_seed,
)


# --- data preparation -------------------------------------------------------------------
@dataclass(frozen=True)
class WikiSentencesConfig:
    inputs: list = field(default_factory=lambda: ["sentence_per_line"])
    min_words: int = field(default=5, metadata=integer(1))
    max_words: int = field(default=64, metadata=integer(1))
    drop_unk: bool = field(default=True, metadata=flag())
    n_sentences: int | None = field(default=None, metadata=integer(1, null=True))
    seed: int = field(default=42, metadata=random_seed())


@dataclass(frozen=True)
class LongDocumentsConfig:
    """``data_processing.long_documents``. ``max_unk_fraction``: a document whose tokens
    are more than this share the tokenizer's unknown token (a line of emoji, a script
    the vocabulary lacks) is dropped and counted; None keeps every document."""

    inputs: list = field(default_factory=lambda: ["openwebtext"])
    min_doc_tokens: int = field(default=2048, metadata=integer(1))
    tokenize_batch_size: int = field(default=64, metadata=integer(1))
    max_unk_fraction: float | None = field(default=0.5, metadata=number(0, 1, null=True))

    def __post_init__(self) -> None:
        if self.max_unk_fraction is not None and not 0.0 <= self.max_unk_fraction <= 1.0:
            raise ValueError(f"max_unk_fraction must be in [0, 1] (or null), got {self.max_unk_fraction}")


@dataclass(frozen=True)
class StsbPairsConfig:
    splits: list = field(default_factory=lambda: ["train"])
    min_score: float = field(default=4.0, metadata=number(0, 5))  # STS-B's scores run from 0 to 5


@dataclass(frozen=True)
class NliPairsConfig:
    splits: list | None = None


# --- evaluation -------------------------------------------------------------------------
@dataclass(frozen=True)
class BaselineConfig:
    poolings: list = field(default_factory=lambda: ["mean"])
    overrides: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TransferEvaluationConfig:
    """``transfer_evaluation``: what the transfer instances of the evaluation add on top
    of ``params:evaluation`` (the transfer tasks) and which baseline poolings they score."""

    evaluation: dict = field(default_factory=lambda: {"transfer": True})
    baseline_poolings: list = field(default_factory=lambda: ["mean"])


# A row's name becomes a file name (metrics/<name>.json) and a Markdown cell.
_ROW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ExternalConfig:
    """``external``: any encoder scored on the harness as its own leaderboard row
    (``kedro run --pipelines=external``): a model folder or Hub id, the pooling it is
    scored with (a name of ``pooling.POOLING_METHODS``, checked with the whole parameter
    set: :func:`parameter_blocks.external_block`), the row's name (None: ``external-``
    and the folder's or id's last part) and whether the transfer tasks are scored too."""

    model: str | None = None
    pooling: str = "mean"
    name: str | None = None
    transfer: bool = field(default=False, metadata=flag())

    def __post_init__(self) -> None:
        for key in ("model", "name"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ParameterValueError(f"external.{key}", value, "must be a non-empty string or null")
        if self.name is not None and not _ROW_NAME.match(self.name):
            raise ParameterValueError("external.name", self.name,
                                      "must be letters, digits, '_', '-' or '.' (it names the metrics file)")
        # The pooling's name is checked by parameter_blocks (this module imports no library package).

    def row_name(self) -> str:
        """The leaderboard row (and metrics file) of the scored model."""
        if self.name:
            return self.name
        if not self.model:
            raise ValueError("external.model is not set")
        last = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(str(self.model).rstrip("/\\")).name).strip("-.") or "model"
        return f"external-{last}"


@dataclass(frozen=True)
class DvcStagesConfig:
    """``dvc``: the methods ``dvc repro`` keeps up to date (``dvc.yaml`` iterates over these
    lists): a ``train@<method>`` stage per name in ``train``, a ``transfer@<method>`` stage
    per name in ``transfer``. Every method in ``methods`` runs with ``kedro run`` whether
    listed or not; the lists only choose what the default DVC graph pays for."""

    train: list = field(default_factory=list)
    transfer: list = field(default_factory=list)

    def check(self, methods: Sequence[str], where: str = "dvc") -> None:
        for key, names in (("train", self.train), ("transfer", self.transfer)):
            unknown = [name for name in names if name not in methods]
            if unknown:
                raise ParameterError(f"{where}.{key} names {', '.join(unknown)}, not in `methods` "
                                     f"({', '.join(methods)})", key=f"{where}.{key}")
        # transfer@<m> depends on data/06_models/<m>, which only train@<m> writes: without
        # it DVC would stop on a missing dependency, or score a model no stage tracks.
        untrained = [name for name in self.transfer if name not in self.train]
        if untrained:
            raise ParameterError(f"{where}.transfer names {', '.join(untrained)}, not in {where}.train: a "
                                 "transfer stage scores the model its train stage writes", key=f"{where}.transfer")


@dataclass(frozen=True)
class LeaderboardConfig:
    """``leaderboard``: the paired bootstrap tests against the starting encoder and,
    optionally, against a ``reference`` row (resamples, seed, significance level), and
    an optional equal-budget filter."""

    bootstrap_resamples: int = field(default=1000, metadata=integer(1))
    bootstrap_seed: int = field(default=0, metadata=random_seed())
    alpha: float = field(default=0.05, metadata=number(0, 1, low_open=True, high_open=True))
    # keep trained rows that saw exactly this many examples
    examples_budget: int | None = field(default=None, metadata=integer(1, null=True))
    # a row's name (a method, its seed summary, baseline-<pooling>, an external row):
    # every other row is tested against it as `vs base` is against the starting encoder
    reference: str | None = None

    def __post_init__(self) -> None:
        if self.bootstrap_resamples < 1 or not 0 < self.alpha < 1:
            raise ValueError("bootstrap_resamples must be positive and alpha in (0, 1)")
        if self.reference is not None and (not isinstance(self.reference, str) or not self.reference.strip()):
            raise ParameterValueError("leaderboard.reference", self.reference, "must be a row's name or null")


# --- your own data ---------------------------------------------------------------------
# A method's ``data.<input>`` is a catalog data set name (``nli_pairs``) or a source of
# the user's own data, which the graph prepares for that method (pipelines/own_data).
# A name is letters, digits and underscores only; any other string is a path (so
# ``my.txt`` and ``./docs`` are paths, ``wiki_sentences`` is a data set).
_DATASET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

SOURCE_FORMATS = ("txt", "csv", "tsv", "parquet", "jsonl")


def is_dataset_name(value) -> bool:
    """Whether a ``data.<input>`` value names a catalog data set (else it is a source)."""
    return isinstance(value, str) and bool(_DATASET_NAME.match(value))


def _reads_lines(encoding) -> bool:
    """Whether ``encoding`` is a codec a file can be read in line by line: one that
    reads ASCII text, line breaks included, as ASCII (not UTF-16)."""
    try:
        return b"a\n".decode(encoding) == "a\n"
    except (LookupError, TypeError, UnicodeDecodeError):
        return False


@dataclass(frozen=True)
class _Source:
    """Where a source's records come from: a local ``path`` or a Hub data set ``hub``
    (with ``subset``, its configuration name, and ``split``), never both. ``format``
    is inferred from the path's extension when null. ``max_rows`` reads the first rows
    only (a huge Hub data set is streamed, so the rest is never downloaded).
    ``encoding``: a line of a text, CSV, TSV or JSONL file that is not UTF-8 is decoded
    in it, counted (null: Windows-1252; ``utf-8``: no fallback, such a line is bad
    input). ``quoting`` of a CSV or TSV file: ``rfc4180`` (quoted fields, which may span
    lines) or ``none`` (a quote is text); null: ``rfc4180`` for CSV, ``none`` for TSV
    (``data.own_data``)."""

    path: str | None = None
    hub: str | None = None
    subset: str | None = None
    split: str = "train"
    format: str | None = None
    max_rows: int | None = field(default=None, metadata=integer(1, null=True))
    encoding: str | None = None
    quoting: str | None = None

    FORMATS = SOURCE_FORMATS

    def __post_init__(self) -> None:
        if (self.path is None) == (self.hub is None):
            raise ValueError("give exactly one of path (a local file or folder) or hub (a Hub data set id)")
        if self.hub is not None and self.format is not None:
            raise ValueError("format is for local files; a Hub data set is read as the Hub serves it")
        if self.format is not None and self.format not in self.FORMATS:
            raise ValueError(f"format must be one of {', '.join(self.FORMATS)}, got {self.format!r}")
        if self.max_rows is not None and (not isinstance(self.max_rows, int) or self.max_rows < 1):
            raise ValueError(f"max_rows must be a positive integer or null, got {self.max_rows!r}")
        if self.hub is not None and (self.encoding is not None or self.quoting is not None):
            raise ValueError("encoding and quoting are for local files; a Hub data set is read as the Hub serves it")
        if self.encoding is not None and not _reads_lines(self.encoding):
            raise ValueError(f"encoding must name a Python codec that keeps ASCII line breaks (utf-8, cp1252, "
                             f"latin-1, ...), got {self.encoding!r}")
        if self.quoting not in (None, "none", "rfc4180"):
            raise ValueError(f"quoting must be rfc4180, none or null, got {self.quoting!r}")

    @property
    def origin(self) -> str:
        """The source as named in reports and metadata."""
        if self.hub is not None:
            return f"hub:{self.hub}" + (f"/{self.subset}" if self.subset else "") + f":{self.split}"
        return self.path


@dataclass(frozen=True)
class SentenceSource(_Source):
    """Own sentences (SimCSE, SCD, ImSimCSE): a text file of one sentence per line, a
    CSV/TSV/Parquet/JSONL file or a Hub data set with a text ``column``. Sentences are
    cleaned like the built-in ones: whitespace and unicode normalised; blank, letterless,
    shorter than ``min_words`` or longer than ``max_words`` words and duplicate sentences
    dropped and counted. A line or value over ``max_chars`` characters (a file without
    line breaks, a binary blob) is bad input (skipped and counted, or an error)."""

    column: str = "text"
    min_words: int = field(default=1, metadata=integer(1))
    max_words: int = field(default=256, metadata=integer(1))
    max_chars: int = field(default=10_000, metadata=integer(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.min_words <= self.max_words or self.max_chars < 1:
            raise ValueError("need 1 <= min_words <= max_words and max_chars >= 1")


@dataclass(frozen=True)
class DocumentSource(_Source):
    """Own documents (DeCLUTR): a folder of ``.txt`` files (one document each), a
    JSONL/Parquet file or a Hub data set with a text ``column``. They go through the
    built-in documents' filter (at least ``min_tokens`` tokens, null:
    ``data_processing.long_documents.min_doc_tokens``; the unknown-token share) and
    span sampling (``data_processing.declutr_spans``)."""

    FORMATS = ("folder", "jsonl", "parquet")

    column: str = "text"
    min_tokens: int | None = field(default=None, metadata=integer(1, null=True))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_tokens is not None and (not isinstance(self.min_tokens, int) or self.min_tokens < 1):
            raise ValueError(f"min_tokens must be a positive integer or null, got {self.min_tokens!r}")


@dataclass(frozen=True)
class PairSource(_Source):
    """Own positive pairs (CLSR): a CSV/TSV/Parquet/JSONL file or a Hub data set with two
    text columns, ``column1`` and ``column2``. Optionally keep only pairs whose ``score``
    column is strictly above ``min_score``, or whose ``label`` column is ``keep_label``
    (one value or a list). Missing text and non-numeric scores are bad input (skipped
    and counted, or an error); pairs the filters leave out and duplicates ((a, b) and
    (b, a) are one pair: CLSR's loss is symmetric) are counted."""

    FORMATS = ("csv", "tsv", "parquet", "jsonl")

    # Two scalar keys rather than a list, so that `kedro run --params` (which splits
    # its argument at every comma) can set them.
    column1: str = "sentence1"
    column2: str = "sentence2"
    score: str | None = None
    min_score: float | None = field(default=None, metadata=number(null=True))
    label: str | None = None
    keep_label: str | int | list | None = field(default=None, metadata={RANGE: Labels()})
    max_chars: int = field(default=10_000, metadata=integer(1))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not all(isinstance(c, str) and c for c in (self.column1, self.column2)) or self.column1 == self.column2:
            raise ValueError(f"column1 and column2 must name two different text columns, "
                             f"got {self.column1!r} and {self.column2!r}")
        if (self.score is None) != (self.min_score is None):
            raise ValueError("score (the column) and min_score (pairs scored strictly above it are kept) go together")
        if self.min_score is not None and (isinstance(self.min_score, bool)
                                           or not isinstance(self.min_score, (int, float))):
            raise ValueError(f"min_score must be a number, got {self.min_score!r}")
        if (self.label is None) != (self.keep_label is None):
            raise ValueError("label (the column) and keep_label (the label or labels kept) go together")
        if isinstance(self.keep_label, list) and not self.keep_label:
            raise ValueError("keep_label must be a label or a non-empty list of labels")
        if self.max_chars < 1:
            raise ValueError("max_chars must be at least 1")

    @property
    def kept_labels(self) -> set[str] | None:
        """The labels kept, as text (a label read as 0 or "0" is the same label)."""
        if self.keep_label is None:
            return None
        labels = self.keep_label if isinstance(self.keep_label, list) else [self.keep_label]
        return {str(label).strip() for label in labels}


# Which template inputs may be a source, and the dataclass that parses it. DeCLUTR's
# spans are sampled from its documents, so ``spans`` is never a source of its own.
SOURCE_TYPES = {"sentences": SentenceSource, "documents": DocumentSource, "pairs": PairSource}


def check_data_set_names(params: Mapping, readable: Iterable[str], project: Path | None = None) -> None:
    """Every catalog data set name a method's ``data`` gives is one the run can read
    (``readable``: the catalog's entries and what the graph's nodes write), else a
    :class:`ParameterValueError` saying the value was taken as a data set name, the
    closest name, and how to give a file instead: a value without an extension
    (``corpus``) or a misspelt name (``wiki_sentence``) would otherwise stop the run
    with Kedro's "Pipeline input(s) {...} not found in the DataCatalog", which names
    neither the parameter nor the reading. ``project``: where a relative path is read
    from, to say when a file of that name is there."""
    readable = set(readable)
    for name, config in listed_method_configs(params).items():
        for input_name, value in config.data.items():
            if is_dataset_name(value) and value not in readable:
                raise ParameterValueError(f"{name}.data.{input_name}", value,
                                          _unknown_data_set_problem(value, input_name, f"{name}.data.{input_name}",
                                                                    readable, project))


def _unknown_data_set_problem(value: str, input_name: str, key: str, readable: Iterable[str],
                              project: Path | None) -> str:
    close = difflib.get_close_matches(value, sorted(readable), n=1, cutoff=0.75)
    problem = (f"taken as a catalog data set name (a value without '.' or '/' is one), but the catalog has no "
               f"data set {value!r}" + (f": did you mean {close[0]}?" if close else "."))
    kind = SOURCE_TYPES.get(input_name)
    if kind is None:
        return problem
    extensions = ", ".join(f".{fmt}" for fmt in kind.FORMATS if fmt != "folder")
    folder = " or a folder as ./name/" if "folder" in kind.FORMATS else ""
    example = "folder" if "folder" in kind.FORMATS else kind.FORMATS[0]
    how = (f"give its path with an extension ({extensions}){folder}, "
           f"or its format: {key}.path={value},{key}.format={example}")
    found = Path(project) / value if project is not None else None
    if found is not None and found.exists():
        what = "folder" if found.is_dir() else "file"
        return f"{problem} There is a {what} {value!r} in the project: to read it, {how}"
    return f"{problem} To read a file of your own, {how}"


def own_dataset(method: str, input_name: str) -> str:
    """The catalog data set a method's own ``input_name`` is prepared into (a catalog
    factory, ``conf/base/catalog.yml``). ``own_`` keeps these names apart from the
    reports, ``report_<method>.<input>``, so no two factories match one name."""
    return f"{method}.own_{input_name}"


def parse_source(input_name: str, value, where: str) -> _Source:
    """A ``data.<input>`` value that is not a data set name: a path (string) or a
    mapping, parsed strictly by the input's source dataclass."""
    kind = SOURCE_TYPES.get(input_name)
    if kind is None:
        raise ParameterError(f"{where}: {input_name!r} cannot be read from your own data "
                             f"(own data goes in: {', '.join(SOURCE_TYPES)}); give a catalog data set name",
                             key=where)
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, Mapping):
        raise ParameterError(f"{where}: expected a data set name, a path or a mapping "
                             f"({{path: ...}} or {{hub: ...}}), got {value!r}", key=where)
    return parse_strict(kind, value, where)


# --- a method ---------------------------------------------------------------------------
@dataclass(frozen=True)
class MethodConfig:
    """One method's block (``conf/base/parameters_<method>.yml``)::

        <name>:
          kind: simcse               # the loss and batch recipe (training.methods.METHODS)
          seeds: null                # [42, 43, 44]: one run per seed (namespaces <name>.seed<k>)
          data: {}                   # the training pipeline's inputs -> catalog data sets or own data
          max_examples: null         # train on the first n examples only (null: all)
          pooling: cls_before_pooler
          method: {...}              # the kind's hyper-parameters (strict)
          views: []                  # views added to the kind's (docs/objectives.md), e.g. [off_dropout]
          objective: []              # terms added to the kind's: [{term: dcl, weight: 0.1, ...}]
          training: {...}            # training.trainer.TrainingConfig (strict)
          evaluation: {}             # overrides of params:evaluation for this method

    ``kind`` decides the data family (sentences, documents or pairs), hence which
    training pipeline the method is an instance of; ``data`` maps that pipeline's
    input names to catalog data sets where they differ from the family's defaults
    (CLSR on NLI: ``{pairs: nli_pairs}``), or to a source of the user's own data (a
    path, or a mapping parsed by :data:`SOURCE_TYPES`; ``docs/own_data.md``).

    This is the block's shape: its keys and the values it checks alone. What ``kind``,
    ``method`` and ``training`` take is the training package's to say:
    :class:`~contrastive_sentence_embeddings.training.method_block.MethodBlock` parses
    the whole block once, into the typed objects a run trains with.
    """

    kind: str
    pooling: str
    seeds: list | None = None
    data: dict = field(default_factory=dict)
    max_examples: int | None = field(default=None, metadata=integer(1, null=True))
    method: dict = field(default_factory=dict)
    views: list = field(default_factory=list)
    objective: list = field(default_factory=list)
    training: dict = field(default_factory=dict)
    evaluation: dict = field(default_factory=dict)

    @classmethod
    def from_params(cls, params: Mapping, name: str) -> "MethodConfig":
        """The block's keys (``kind`` and ``pooling`` required) and ``seeds``."""
        config = parse_strict(cls, params, name, required=("kind", "pooling"))
        if config.seeds is not None:
            seeds = config.seeds
            if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
                    or not all(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 for seed in seeds)):
                raise ParameterError(f"{name}.seeds must be null or a list of distinct non-negative integers, "
                                     f"got {seeds!r}", key=f"{name}.seeds")
        return config

    def run_names(self, name: str) -> dict[str, int | None]:
        """The namespaces this method runs under: ``{name: None}`` for one run with
        ``training.seed``, else ``{<name>.seed<k>: k}`` for each of ``seeds``."""
        if not self.seeds:
            return {name: None}
        return {f"{name}.seed{seed}": seed for seed in self.seeds}

    def sources(self, name: str = "method") -> dict[str, _Source]:
        """The template inputs read from the user's own data (``data.<input>`` given as
        a path or a source mapping), parsed; ``name`` is the method, for errors."""
        sources = {key: parse_source(key, value, f"{name}.data.{key}")
                   for key, value in self.data.items() if not is_dataset_name(value)}
        if "documents" in sources and "spans" in self.data:
            raise ParameterError(f"{name}.data.spans: the spans of your own documents are sampled from them "
                                 f"(data_processing.declutr_spans); leave {name}.data.spans out",
                                 key=f"{name}.data.spans")
        return sources

    def check_inputs(self, family: str, name: str) -> None:
        """``data`` names only inputs of the ``family`` pipeline (the kind's)."""
        inputs = FAMILIES.get(family)
        if inputs is None:
            raise ParameterError(f"{name}: kind {self.kind!r} has no training pipeline (family {family!r})")
        unknown_inputs = sorted(set(self.data) - set(inputs))
        if unknown_inputs:
            raise ParameterError(f"unknown parameter(s) {', '.join(f'{name}.data.{k}' for k in unknown_inputs)}; "
                                 f"the {family} pipeline reads: {', '.join(inputs)}",
                                 key=f"{name}.data.{unknown_inputs[0]}", accepted=inputs)

    def inputs(self, family: str, name: str | None = None) -> dict[str, str]:
        """The ``family`` pipeline's input names -> this method's catalog data sets: the
        family's defaults, the data sets ``data`` names, and for own data the data sets
        the method's preparation writes (``<name>.own_<input>``; own documents bring
        their own ``<name>.own_spans``)."""
        mapping = {**FAMILIES[family], **{k: v for k, v in self.data.items() if is_dataset_name(v)}}
        sources = self.sources(name or "method")
        if sources and name is None:
            raise ValueError("a method reading its own data needs its name to name its prepared data sets")
        for key in sources:
            mapping[key] = own_dataset(name, key)
        if "documents" in sources:
            mapping["spans"] = own_dataset(name, "spans")
        return mapping

    def data_label(self, family: str, input_name: str) -> str:
        """What ``input_name`` of the ``family`` pipeline is read from, as recorded with
        the model: a catalog data set name, or the own-data source (its path or
        ``hub:<id>:<split>``)."""
        value = self.data.get(input_name, FAMILIES[family].get(input_name))
        return value if is_dataset_name(value) else parse_source(input_name, value, f"data.{input_name}").origin


def seeded_block(block: Mapping, seed: int) -> dict:
    """A method's block for its run with ``seed``: the training seed replaced and the
    checkpoints and live logs kept apart per seed (``<checkpoint_dir>/seed<k>``). The data are the
    same for every seed (their sampling seed is the global ``seed``): seeds vary the
    training only, as the papers' reruns do."""
    training = dict(block.get("training") or {})
    training["seed"] = seed
    for folder in ("checkpoint_dir", "live_log_dir"):  # each seed's own checkpoints and live log
        if training.get(folder):
            training[folder] = f"{training[folder]}/seed{seed}"
    return {**block, "training": training}


def run_blocks(params: Mapping) -> dict[str, dict]:
    """The block every training run of the project trains with, by run name: a method's
    block (``<method>``) or, for a method with ``seeds``, one :func:`seeded_block` per
    seed (``<method>.seed<k>``). ``params`` are resolved already (the config loader fills
    in the shared values: :func:`compose_parameters`). This is exactly what each run's
    training node receives as ``params:<run>`` (pipelines.hooks.SeedRunsHook puts the seeded ones
    in the catalog), so a hash of it identifies the run's configuration. Each block is
    a copy: nothing done to it reaches ``params``."""
    blocks: dict[str, dict] = {}
    for name, config in listed_method_configs(params).items():
        for run, seed in config.run_names(name).items():
            block = copy.deepcopy(dict(params[name]))
            blocks[run] = block if seed is None else seeded_block(block, seed)
    return blocks


# The families whose training node can fan out over processes (training/fanout.py).
FANOUT_FAMILIES = ("sentences", "documents")

# The data families: each training pipeline's inputs, with the catalog data sets they
# read by default. A method's ``data`` block remaps them.
FAMILIES: dict[str, dict[str, str]] = {
    "sentences": {"sentences": "wiki_sentences"},
    "documents": {"documents": "long_documents", "spans": "declutr_spans"},
    "pairs": {"pairs": "stsb_pairs"},
}


def method_names(params: Mapping) -> list[str]:
    """The ``methods`` list: the names of the method blocks the project trains."""
    names = params.get("methods")
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ParameterError(f"methods: expected a list of method block names, got {names!r}")
    if len(set(names)) != len(names):
        raise ParameterError(f"methods: a name appears twice in {names}")
    missing = [name for name in names if name not in params]
    if missing:
        raise ParameterError(f"methods lists {', '.join(missing)} but no parameter block of that name exists"
                             + queued_copy_hint(missing))
    return names


def queued_copy_hint(blocks: Sequence[str], workspace: Path | None = None) -> str:
    """Why a block the user wrote may be missing here: a queued (or temp-dir) DVC
    experiment runs in a copy of the files git tracks (``.dvc/tmp/exps/...``), with
    ``$DVC_ROOT`` naming the user's workspace; a parameter file there that defines the
    block but that git does not track is not in the copy. ``""`` when that is not so."""
    root = os.environ.get("DVC_ROOT")
    here = (workspace or Path.cwd()).resolve()
    if not root or Path(root).resolve() == here:
        return ""
    found = []
    for path in sorted((Path(root) / "conf").glob("**/parameters*.yml")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if any(re.search(rf"^{re.escape(block)}:", text, re.M) for block in blocks):
            relative = path.relative_to(root)
            if not (here / relative).is_file() or (here / relative).read_text(encoding="utf-8",
                                                                             errors="replace") != text:
                found.append(str(relative))
    if found:
        return (f"; this DVC experiment runs in a copy of the files git tracks ({here}), and {', '.join(found)} "
                f"in your workspace ({root}) defines it but is not committed as it is there: commit it "
                f"(git add {' '.join(found)} && git commit) and queue the experiment again")
    return (f"; this DVC experiment runs in a copy of the files git tracks ({here}): a parameter file not "
            "committed in your workspace is not in it")


def listed_method_configs(params: Mapping) -> dict[str, MethodConfig]:
    """The blocks of the ``methods`` list, by name, parsed for their shape only
    (:meth:`MethodConfig.from_params`); ``parameter_blocks.method_configs`` parses them
    fully."""
    check_shared_values(params)  # a method's null training.seed holds the shared seed: name that one if bad
    return {name: MethodConfig.from_params(params[name], name) for name in method_names(params)}


