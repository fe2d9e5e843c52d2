"""What produced a result: the parameters, code and data behind a trained model and
behind each metrics record, and the hashes that tell whether they are still today's.

Training records its side in the model's ``cse_metadata.json`` (``provenance``:
:func:`training_provenance`); the evaluator copies it into every metrics record and
adds its own (:func:`record_provenance`). The leaderboard compares them with today's
parameters and code (``evaluation.leaderboard.record_status``).

What is hashed (sha256, hex; :func:`short` is the 12-character form tables show):

* ``params_hash``: the run's parameter block as its training node received it, in
  canonical JSON (keys sorted, no spaces), less the keys that cannot change the trained
  weights (:data:`RUN_INDEPENDENT_KEYS`): the method's ``seeds`` list and
  ``training.checkpoint_dir`` and ``training.live_log_dir`` (which runs exist, where
  files go), so changing ``seeds``
  from ``[42, 43, 44]`` to ``[42, 43]`` leaves seed 42's run current;
  ``training.log_every`` (how often the loss is logged) and ``training.resume``
  (whether an interrupted run continues from its checkpoint, which restores the
  optimiser and random states: the same weights), the two training settings the
  trainer's own checkpoint fingerprint ignores; and the block's ``evaluation``
  overrides, which decide how the weights are scored, not what they are: the scoring
  settings are compared on their own (``evaluation.settings_hash``, less
  :data:`EXECUTION_ONLY_SETTINGS`), so ``evaluation.batch_size`` changes no status.
  ``config_hash``: the same less ``training.seed`` too: runs that differ only by their
  seed share it, and only such runs, scored with equal settings, are averaged over
  seeds. Both are recomputed from a record's ``parameters`` when compared
  (:func:`recorded_params_hash`), so a record written before a key joined this list
  compares as if it had been left out then too.
* ``source_hash``: every file of the installed package (``.py`` and the data files it
  ships, not bytecode), by path and content. Code staleness uses it, not the git
  commit: a commit that changes docs or tests changes no result.
* training data (``training.data``): for each input the training node read (``sentences``,
  ``documents``, ``spans``, ``pairs``), the ``_fingerprint`` ``datasets`` stored in the
  prepared data set's ``state.json`` when the data-processing step wrote it (derived from
  the content or from the transformations that made it: equal values mean the same
  write of the data), or a hash of the table's content for a pandas table, and the
  row count; for CLSR's pairs the fingerprint of their frozen embeddings and pairing.
* scoring data (``evaluation.data``): a hash of the evaluation data as read: every STS
  pair's two sentences and gold score, task by task (``sts``), the alignment split
  (``alignment``) and the transfer tasks' sentences and labels (``transfer``).

The git commit and whether ``src/`` or ``conf/`` had uncommitted changes (``dirty``;
outputs that runs rewrite, such as the committed metrics files, do not count) are
read with ``git`` in the project folder, and are ``"unknown"`` / ``null`` where git or a
repository is missing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

logger = logging.getLogger(__name__)

# Keys of a method's block that cannot change the trained weights (module docstring):
# which runs exist, where files go, how often the loss is logged, whether a run resumes,
# and how the weights are scored (compared as evaluation settings). Left out of
# ``params_hash`` and ``config_hash``.
RUN_INDEPENDENT_KEYS: tuple[tuple[str, ...], ...] = (
    ("seeds",), ("training", "checkpoint_dir"), ("training", "live_log_dir"), ("training", "log_every"),
    ("training", "resume"), ("evaluation",))
SEED_KEY = ("training", "seed")
# Evaluation settings that change how fast scores come, not what they are.
# (They can change float rounding: a record's evaluation.execution says how they were.)
EXECUTION_ONLY_SETTINGS = ("batch_size", "device", "cache_dir", "attention_backends")
# The folders whose uncommitted changes make a tree "dirty".
CODE_FOLDERS = ("src", "conf")
UNKNOWN = "unknown"
SHORT_LENGTH = 12


def canonical_json(value) -> str:
    """``value`` as JSON with sorted keys and no spaces: equal parameters, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_of(value) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def short(digest: str | None) -> str:
    """The first 12 characters of a hash (``""`` for none), as tables show it."""
    return str(digest)[:SHORT_LENGTH] if digest else ""


def without(block: Mapping, paths: Iterable[Sequence[str]]) -> dict:
    """A copy of ``block`` with the nested keys ``paths`` (``("training", "seed")``) removed."""
    copy = json.loads(canonical_json(block))
    for path in paths:
        node = copy
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return copy


def params_hash(block: Mapping) -> str:
    """The hash of a run's block, less :data:`RUN_INDEPENDENT_KEYS` (module docstring)."""
    return sha256_of(without(block, RUN_INDEPENDENT_KEYS))


def config_hash(block: Mapping) -> str:
    """The hash of a run's block less its seed too: equal for the seeds of one configuration."""
    return sha256_of(without(block, (*RUN_INDEPENDENT_KEYS, SEED_KEY)))


def recorded_params_hash(record_provenance: Mapping | None) -> str | None:
    """A record's ``params_hash`` as today's rule computes it: from its ``parameters``
    when it holds them (its stored hash may leave out fewer keys), else the stored one."""
    record_provenance = record_provenance or {}
    parameters = record_provenance.get("parameters")
    return params_hash(parameters) if parameters else record_provenance.get("params_hash")


def recorded_config_hash(record_provenance: Mapping | None) -> str | None:
    """A record's ``config_hash`` as today's rule computes it (see :func:`recorded_params_hash`)."""
    record_provenance = record_provenance or {}
    parameters = record_provenance.get("parameters")
    return config_hash(parameters) if parameters else record_provenance.get("config_hash")


def parameter_changes(before, after, limit: int | None = None, form: str = "{key} {old} -> {new}") -> list[str]:
    """The keys whose values differ between two parameter blocks, each written as
    ``form`` says (default ``"training.max_steps 120 -> 4"``; a key one side lacks
    shows ``unset``); every one of them (a status reason that named three and "..."
    hid what a `--params` run had changed), or at most ``limit``, then ``"..."``."""
    changes: list[str] = []

    def walk(old, new, path: str) -> None:
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            for key in sorted(set(old) | set(new), key=str):
                walk(old.get(key, _UNSET), new.get(key, _UNSET), f"{path}.{key}" if path else str(key))
        elif old is _UNSET or new is _UNSET or canonical_json(old) != canonical_json(new):
            changes.append(form.format(key=path or "block", old=_shown(old), new=_shown(new)))

    walk(before, after, "")
    return changes if limit is None or len(changes) <= limit else [*changes[:limit], "..."]


_UNSET = object()


def _shown(value) -> str:
    return "unset" if value is _UNSET else canonical_json(value)


# --- code ---------------------------------------------------------------------------------
def package_dir() -> Path:
    return Path(__file__).resolve().parent


def source_hash(folder: Path | None = None) -> str:
    """sha256 over the package's files (relative path and content of each, in path
    order), bytecode and hidden files left out."""
    folder = Path(folder or package_dir())
    digest = hashlib.sha256()
    for file in sorted(folder.rglob("*")):
        relative = file.relative_to(folder)
        if not file.is_file() or file.suffix in (".pyc", ".pyo") or any(
                part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue
        content = file.read_bytes()
        digest.update(f"{relative.as_posix()}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})  # a status that writes no index lock
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: Path | str | None = None) -> dict:
    """``{"commit": <sha or "unknown">, "dirty": <bool or None>}`` of the repository
    holding ``root`` (the working directory: the project under ``kedro run``)."""
    root = Path(root or Path.cwd())
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return {"commit": UNKNOWN, "dirty": None}
    status = _git(root, "status", "--porcelain", "--", *CODE_FOLDERS)
    return {"commit": commit.strip(), "dirty": None if status is None else bool(status.strip())}


CODE_VERSION_ENV_VAR = "CSE_CODE_VERSION"


def results_commit(root: Path | str) -> str:
    """The commit a benchmark's results file records for the checkout at ``root``:
    ``$CSE_CODE_VERSION`` when set (a copy of the tree without its git history, as on
    the GPU machine, names the commit it was copied from this way), else the checkout's
    commit, with ``+dirty`` when a tracked file differs from it (the figures may not be
    that commit's), else ``unknown (...)`` saying how to name it."""
    if os.environ.get(CODE_VERSION_ENV_VAR):
        return os.environ[CODE_VERSION_ENV_VAR]
    commit = _git(Path(root), "rev-parse", "HEAD")
    if not commit:
        return f"{UNKNOWN} (no git history here; set {CODE_VERSION_ENV_VAR})"
    status = _git(Path(root), "status", "--porcelain", "--untracked-files=no")
    return commit.strip() + ("+dirty" if status and status.strip() else "")


def cpu_fields(cpuinfo: str | None = None) -> dict[str, str] | None:
    """The first CPU's fields in Linux's /proc/cpuinfo (``model name``, ``flags``, ...),
    parsed from ``cpuinfo`` where given, else read now; None where that cannot be read.
    Callers that need two facts of one CPU parse one reading, not two."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return None
    fields: dict[str, str] = {}
    for key, _, value in (line.partition(":") for line in cpuinfo.splitlines() if ":" in line):
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(fields: dict[str, str] | None = None) -> set[str]:
    """The instruction-set flags of this CPU (``avx2``, ``avx512f``, ``amx_tile``, ...),
    or of the :func:`cpu_fields` given; empty where /proc/cpuinfo cannot be read."""
    return set((fields if fields is not None else cpu_fields() or {}).get("flags", "").split())


def cpu_description(fields: dict[str, str] | None = None) -> str:
    """The CPU a benchmark ran on: its model name and whether it has AVX-512 and AMX
    (Linux's /proc/cpuinfo, or the :func:`cpu_fields` given; elsewhere the platform's
    word for it). CPU timings differ 2x between such machines, so a results file names it."""
    fields = fields if fields is not None else cpu_fields()
    if fields is None:
        return platform.processor() or platform.machine()
    units = cpu_feature_labels(cpu_flags(fields), ("avx512f", "amx_tile"))
    return f"{fields.get('model name', 'unknown')} ({', '.join(units) or 'no AVX-512, no AMX'})"


# The CPU features that decide which kernels torch runs, as tables name them.
CPU_FEATURES = {"avx512f": "AVX-512", "amx_tile": "AMX", "avx2": "AVX2", "sve": "SVE", "asimd": "NEON"}


def cpu_feature_labels(flags, wanted=tuple(CPU_FEATURES)) -> list[str]:
    """The names of the ``wanted`` features (:data:`CPU_FEATURES` keys) among a CPU's
    ``flags``; AVX2 is left unsaid where AVX-512 is there (every such CPU has it)."""
    labels = [CPU_FEATURES[flag] for flag in wanted if flag in set(flags)]
    return [label for label in labels if not (label == "AVX2" and "AVX-512" in labels)]


# Environment variables that change a run's speed or memory without showing in its
# command: thread counts, the allocator's thresholds, oneDNN's primitive cache (which
# holds a packed copy of the weights for every batch shape it has seen in bf16 on CPU:
# docs/record/results.md), CUDA's allocator and visible devices, TorchInductor's settings, and
# the instruction sets torch's kernels may use (:data:`INSTRUCTION_SET_CAPS`).
TUNING_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "GLIBC_TUNABLES", "PYTORCH_CUDA_ALLOC_CONF",
                    "CUDA_VISIBLE_DEVICES", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
TUNING_PREFIXES = ("ONEDNN_", "DNNL_", "KMP_", "MALLOC_", "TORCHINDUCTOR_",
                   "TORCH_CUDNN_")  # e.g. TORCH_CUDNN_SDPA_AVOID_RECOMPILE: cuDNN attention's per-length graphs

# What makes a CPU with AVX-512 run torch as one without it would: the three libraries
# behind a CPU step each choose their kernels by the widest instruction set the CPU has,
# and each reads its own variable (at load, so it must be set before torch is imported:
# in a child process's environment). ATen's vectorised elementwise kernels
# (ATEN_CPU_CAPABILITY), oneDNN's convolutions, matmuls and bf16 paths (ONEDNN_MAX_CPU_ISA)
# and MKL's sgemm behind every fp32 Linear (MKL_ENABLE_INSTRUCTIONS): capping only one of
# them leaves the matmuls, most of a step, on AVX-512. A stand-in, not the other machine:
# clock, caches and core count stay this CPU's.
INSTRUCTION_SET_CAPS = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}


def starting_environment() -> Mapping[str, str]:
    """The environment this process was started with (Linux's /proc/self/environ; where
    that cannot be read, ``os.environ`` as it is now). Libraries set variables of their
    own at import (scikit-learn KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK, TorchInductor
    its cache folder), which are not a setting of the run that a results file should
    record."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    pairs = (entry.decode("utf-8", "surrogateescape").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def is_tuning_variable(name: str) -> bool:
    return name in TUNING_VARIABLES or name.startswith(TUNING_PREFIXES)


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process that measures a setting of its own: this
    process's variables (``os.environ``, with what its own code set, e.g. the tests'
    offline switches), except that each tuning variable is as this process started
    with it (:func:`starting_environment`): one a library set since (TorchInductor's
    cache folder, scikit-learn's KMP_ pair) is the child's libraries' to set again, as
    in any fresh process; plus ``extra``, the setting measured."""
    started = starting_environment()
    return {**{name: value for name, value in os.environ.items() if not is_tuning_variable(name)},
            **{name: value for name, value in started.items() if is_tuning_variable(name)}, **(extra or {})}


def tuning_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: what this process was started with,
    :func:`starting_environment`) that tune speed or memory (:data:`TUNING_VARIABLES`,
    names starting with :data:`TUNING_PREFIXES`), sorted: what a benchmark records beside
    its command so that two runs' figures can be told apart. A value that is an absolute
    path (a cache folder) is shown as ``<elsewhere>/<its name>``, as commands are
    (``project_paths.recorded_command``): where a machine keeps its scratch folders is not
    a setting, and no results file records it."""
    environ = starting_environment() if environ is None else environ
    return {name: f"<elsewhere>/{Path(environ[name]).name}" if Path(environ[name]).is_absolute() else environ[name]
            for name in sorted(environ) if is_tuning_variable(name)}


# --- the machine and libraries ------------------------------------------------------------
# The libraries whose version can change a score (kernels, tokenisation, data reading).
RECORDED_LIBRARIES = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "sentence-transformers",
                      "numpy", "scipy", "scikit-learn")
# The CPU features that decide which kernels torch, oneDNN and MKL run (and so the
# rounding of every score computed on a CPU).
RECORDED_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve")


def library_versions(names: Iterable[str] = RECORDED_LIBRARIES) -> dict[str, str | None]:
    """Python's version and each library's installed version (None: not installed)."""
    from importlib import metadata

    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_record() -> dict:
    """The hardware a result was computed on: the CPU (model name, architecture, the
    instruction-set flags that pick kernels) and, where torch sees one, the GPU (name,
    count, CUDA and cuDNN versions). The same code and data give scores that differ in
    the second decimal between an Intel Xeon with AMX and an AMD EPYC without."""
    import torch

    fields = cpu_fields() or {}
    flags = set(fields.get("flags", fields.get("Features", "")).split())
    record: dict = {"cpu": fields.get("model name") or platform.processor() or platform.machine(),
                    "architecture": platform.machine(),
                    "cpu_flags": [flag for flag in RECORDED_CPU_FLAGS if flag in flags],
                    "gpu": None}
    if torch.cuda.is_available():
        record["gpu"] = {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                         "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    return record


def environment_record() -> dict:
    """``{"machine": machine_record(), "libraries": library_versions()}``: what, besides
    code, parameters and data, decides the last digits of a result."""
    return {"machine": machine_record(), "libraries": library_versions()}


def environment_label(record: Mapping | None) -> str:
    """One line naming an environment record, as a table's legend shows it: the CPU
    and its kernel-deciding features, the GPU if any, torch and transformers."""
    if not record:
        return "not recorded (written before records named their machine)"
    machine, libraries = record.get("machine") or {}, record.get("libraries") or {}
    flags = cpu_feature_labels(machine.get("cpu_flags") or [])
    text = f"{machine.get('cpu') or 'unknown CPU'} ({', '.join(flags) or 'no AVX2'})"
    if machine.get("gpu"):
        gpu = machine["gpu"]
        text += f", {gpu.get('name')} (CUDA {gpu.get('cuda')}, cuDNN {gpu.get('cudnn')})"
    return text + f", torch {libraries.get('torch')}, transformers {libraries.get('transformers')}"


def environment_key(record: Mapping | None) -> str:
    """A short hash naming an environment record: equal records, equal keys."""
    return short(sha256_of(record)) if record else ""


def code_version(root: Path | str | None = None) -> dict:
    """The code a result came from: git commit, dirty, and the package's ``source_hash``."""
    return {**git_state(root), "source_hash": source_hash()}


# --- data ---------------------------------------------------------------------------------
def data_fingerprint(data, label: str | None = None) -> dict:
    """What a training input was (module docstring): ``{"dataset", "fingerprint", "rows"}``."""
    import pandas as pd

    fingerprint, rows = None, None
    if isinstance(data, pd.DataFrame):
        digest = hashlib.sha256(canonical_json([str(c) for c in data.columns]).encode())
        digest.update(pd.util.hash_pandas_object(data, index=False).to_numpy().tobytes())
        fingerprint, rows = digest.hexdigest(), len(data)
    elif hasattr(data, "_fingerprint"):  # a datasets.Dataset, as the catalog loads it
        fingerprint, rows = str(data._fingerprint), int(data.num_rows)
    elif hasattr(data, "num_rows"):
        rows = int(data.num_rows)
    return {"dataset": label, "fingerprint": fingerprint or UNKNOWN, "rows": rows}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- records ------------------------------------------------------------------------------
def training_provenance(block: Mapping, encoder: str, data: Mapping[str, Mapping]) -> dict:
    """The training side, written into the model's metadata: the block the training
    node received, its hashes, seed, encoder, code and data (``data``: ``{input:
    data_fingerprint(...)}``)."""
    block = json.loads(canonical_json(block))
    return {
        "parameters": block,
        "params_hash": params_hash(block),
        "config_hash": config_hash(block),
        "seed": (block.get("training") or {}).get("seed"),
        "encoder": encoder,
        "training": {"code": code_version(), "data": dict(data), "trained_at": utc_now(),
                     "environment": environment_record()},
    }


def evaluation_settings_record(settings) -> dict:
    """The evaluation settings that decide the scores (a dataclass or mapping), less
    :data:`EXECUTION_ONLY_SETTINGS`."""
    import dataclasses

    values = dataclasses.asdict(settings) if dataclasses.is_dataclass(settings) else dict(settings)
    return json.loads(canonical_json({k: v for k, v in values.items() if k not in EXECUTION_ONLY_SETTINGS}))


def record_provenance(trained: Mapping | None, *, baseline: bool, encoder: str | None, pooling: str,
                      model_path: str, model_fingerprint: str, settings, scored_on: Mapping, evaluated_at: str,
                      code: Mapping | None = None, execution: Mapping | None = None,
                      environment: Mapping | None = None) -> dict:
    """A metrics record's ``provenance``: the model's training side (``trained``: the
    ``provenance`` of its metadata; a model trained before models recorded it has
    none, and its parameters are then unknown), or for the untrained encoder
    (``baseline``) the encoder and pooling as its parameters; then the scoring: code,
    data, settings, time, how the encodings ran (``execution``: device, precision,
    batch size, attention kernels; outside ``settings_hash``, since they change only
    the rounding), the machine and library versions (``environment``:
    :func:`environment_record`; also outside every hash: another machine's scores are
    marked where compared, not made stale), and the model scored (project-relative
    ``path`` and ``fingerprint``)."""
    recorded = evaluation_settings_record(settings)
    evaluation = {"code": dict(code or code_version()), "data": dict(scored_on), "settings": recorded,
                  "settings_hash": sha256_of(recorded), "evaluated_at": evaluated_at,
                  **({"execution": dict(execution)} if execution is not None else {}),
                  "environment": dict(environment or environment_record())}
    model = {"path": model_path, "fingerprint": model_fingerprint}
    if baseline:
        parameters = baseline_parameters(encoder, pooling)
        side = {"parameters": parameters, "params_hash": sha256_of(parameters), "config_hash": sha256_of(parameters),
                "seed": None, "encoder": encoder, "training": None}
    elif trained:
        side = {key: trained.get(key) for key in ("parameters", "params_hash", "config_hash", "seed", "encoder",
                                                  "training")}
    else:
        side = {"parameters": None, "params_hash": None, "config_hash": None, "seed": None, "encoder": encoder,
                "training": None}
    return {**side, "evaluation": evaluation, "model": model}


def baseline_parameters(encoder: str | None, pooling: str) -> dict:
    """What an untrained encoder's row is made of: the encoder and the pooling."""
    return {"encoder": encoder, "pooling": pooling}


def configuration_key(provenance: Mapping | None) -> tuple | None:
    """What runs must share to be averaged over seeds: the block less its seed
    (``config_hash``), the encoder, the training code (``source_hash``), the training
    data's fingerprints and the settings the scores were computed with
    (``evaluation.settings_hash``: the block's ``evaluation`` overrides are not in
    ``config_hash``). None without provenance (then it matches nothing)."""
    hashed = recorded_config_hash(provenance)
    if not provenance or not hashed:
        return None
    training = provenance.get("training") or {}
    data = {name: (entry or {}).get("fingerprint") for name, entry in (training.get("data") or {}).items()}
    return (hashed, provenance.get("encoder"), (training.get("code") or {}).get("source_hash"),
            canonical_json(data), (provenance.get("evaluation") or {}).get("settings_hash"))


def configuration_difference(provenance: Mapping | None, reference: Mapping) -> str:
    """Why a run's configuration is not ``reference``'s, in words."""
    if not provenance or not recorded_config_hash(provenance):
        return "no provenance (written before records carried it): its configuration is unknown"
    if recorded_config_hash(provenance) != recorded_config_hash(reference):
        before = without(provenance.get("parameters") or {}, (*RUN_INDEPENDENT_KEYS, SEED_KEY))
        after = without(reference.get("parameters") or {}, (*RUN_INDEPENDENT_KEYS, SEED_KEY))
        return "other parameters: " + ", ".join(parameter_changes(before, after, form="{key} {old} (kept runs: {new})"))
    if provenance.get("encoder") != reference.get("encoder"):
        return f"other encoder: {provenance.get('encoder')} (kept runs: {reference.get('encoder')})"
    code = ((provenance.get("training") or {}).get("code") or {}).get("source_hash")
    if code != ((reference.get("training") or {}).get("code") or {}).get("source_hash"):
        return "trained by other code (source_hash differs)"
    settings = (provenance.get("evaluation") or {}), (reference.get("evaluation") or {})
    if settings[0].get("settings_hash") != settings[1].get("settings_hash"):
        changes = parameter_changes(settings[0].get("settings") or {}, settings[1].get("settings") or {},
                                    form="{key} {old} (kept runs: {new})")
        return "scored with other evaluation settings: " + ", ".join(changes)
    return "trained on other data (data fingerprints differ)"


def runs_of_one_configuration(records: Sequence[Mapping]) -> tuple[list[Mapping], dict[str, str]]:
    """The seed runs that may be averaged together, and why each other run may not.

    Kept: the runs of the newest run's configuration (:func:`configuration_key`; newest
    by ``evaluated_at``, the last given on a tie); a run without provenance is a
    configuration of its own. Left out: ``{run name: reason}``, e.g. a committed
    120-step record beside this checkout's 4-step runs."""
    records = list(records)
    if not records:
        raise ValueError("no runs to summarise")
    newest = max(range(len(records)), key=lambda i: (str(records[i].get("evaluated_at") or ""), i))
    reference = records[newest].get("provenance") or {}
    reference_key = configuration_key(reference)
    kept, left_out = [], {}
    for index, record in enumerate(records):
        key = configuration_key(record.get("provenance"))
        if index == newest or (key is not None and key == reference_key):
            kept.append(record)
        else:
            name = str((record.get("model") or {}).get("name") or f"run {index}")
            left_out[name] = configuration_difference(record.get("provenance"), reference)
    return kept, left_out


def summary_provenance(runs: Sequence[Mapping]) -> dict:
    """The ``provenance`` of a summary over seeds: each run's own (``runs``) and the
    configuration they share (``config_hash``, ``encoder``)."""
    provenances = {str((run.get("model") or {}).get("name")): run.get("provenance") for run in runs}
    first = next(iter(provenances.values()), None) or {}
    return {"runs": provenances, "config_hash": recorded_config_hash(first), "encoder": first.get("encoder")}
