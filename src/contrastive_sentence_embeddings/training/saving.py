"""Saving a trained encoder so that every loader reads it the same way.

``save_sentence_encoder`` writes one folder that three loaders accept:

* ``transformers.AutoModel.from_pretrained(folder)`` (and ``AutoTokenizer``): the
  Hugging Face model (``config.json``, ``model.safetensors``) and the tokenizer sit at
  the root of the folder;
* ``SentenceEncoder.load(folder)``: this project's ``cse_metadata.json`` names the
  pooling, so no pooling argument is needed;
* ``sentence_transformers.SentenceTransformer(folder)``: ``modules.json``,
  ``sentence_bert_config.json``, ``config_sentence_transformers.json`` and the pooling
  module's folder, giving the same embeddings as ``SentenceEncoder`` for every
  pooling method (to float rounding; ``normalize=True`` adds a final L2
  normalisation on the sentence-transformers side only).

Only the encoder is saved. The caller passes the bare Hugging Face encoder (what
``AutoModel`` builds, e.g. ``BertModel``), never the training wrapper: SimCSE's MLP,
SCD's projector, MLM heads and any other training-only module are simply not part of
it. A model whose weights go beyond what ``AutoModel`` would build for its config
(e.g. a ``BertForMaskedLM`` or a subclass with an extra head) is the caller's
mistake and is refused with an error rather than silently stripped.

How each pooling method is expressed with sentence-transformers' own modules (all
built in, so loading needs neither ``trust_remote_code=True`` nor this package
installed; sentence-transformers 6 refuses any module class outside its own
namespace unless ``trust_remote_code=True`` is passed, even for a local folder):

* ``mean`` / ``last_avg``: ``Transformer`` (last layer) -> ``Pooling`` in ``mean`` mode;
* ``cls_before_pooler``: ``Transformer`` -> ``Pooling`` in ``cls`` mode (the first
  token's state; padding is on the right, so that is [CLS]);
* ``cls``: the ``Transformer`` module's ``modality_config`` reads the model's
  ``pooler_output`` and writes it straight to ``sentence_embedding`` (no pooling
  module): the model's own pooler runs, whatever it is;
* ``first_last_avg``: ``sentence_bert_config.json`` passes
  ``config_kwargs={"output_hidden_states": true}`` to the model config when
  sentence-transformers loads it (``config.json`` itself is left as saved, so
  ``AutoModel`` users get no extra outputs), the ``Transformer`` module then hands
  every layer's states on as ``all_layer_embeddings``, a ``WeightedLayerPooling``
  over ``hidden_states[1:]`` with weights ``[1, 0, ..., 0, 1]`` averages the first
  transformer layer and the last one, and ``Pooling`` takes the masked mean.

A ``head`` (dense layers applied to the pooled embedding, such as CLSR's MLP on top
of a frozen encoder) is saved as sentence-transformers' built-in ``Dense`` modules
after the pooling (one per ``Linear`` + activation, see
:func:`~contrastive_sentence_embeddings.encoders.encoding.dense_layers`), before ``Normalize``;
``SentenceEncoder.load`` reads them back (``encoding.load_dense_head``), so both
loaders embed raw text end to end. ``AutoModel`` loads the encoder alone.

The layout is written with the module classes and key names of the installed
sentence-transformers (6.x): ``modality_config`` / ``config_kwargs`` are not
understood by much older versions.

The save is atomic from a reader's point of view: everything is written to a hidden
sibling folder (``.<name>.saving-<random>``, same file system), ``cse_metadata.json``
last, and renamed to ``output_dir`` at the end. A save that fails or is interrupted
removes its partial folder and leaves any previous ``output_dir`` untouched. An
existing ``output_dir`` is replaced by swapping the two folders in one
``renameat2(RENAME_EXCHANGE)`` call where the system has it (Linux), so there is no
moment without a model folder; elsewhere the old folder is moved aside
(``.<name>.replaced-<random>``) and the new one renamed in. A process killed between
those two renames (or before its dot-folders were removed) is repaired by
:func:`recover_interrupted_saves`, which every save and every load of the model data
set runs first: the complete new model is put in place (or, failing that, the old
one back), leftovers are removed, and the log says so. A folder that does not look
like a saved model is never replaced.
"""

from __future__ import annotations

import copy
import ctypes
import errno
import json
import logging
import os
import platform
import re
import shutil
import sys
import uuid
from collections.abc import Collection, Mapping
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path

import torch

from contrastive_sentence_embeddings.runs.crash_points import crash_point
from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE, dense_layers, max_sequence_length, read_model_metadata
from contrastive_sentence_embeddings.encoders.fingerprint import (
    EARLIER_KEY,
    FINGERPRINT_KEY,
    content_fingerprint,
    lineage_for_save,
)
from contrastive_sentence_embeddings.encoders.pooling import check_pooling
from contrastive_sentence_embeddings.runs.scratch import explained_no_space

logger = logging.getLogger(__name__)

# What to do when a model does not fit on its disk (scratch.explained_no_space).
MODEL_SPACE_REMEDY = "Free space on that disk, or move the project's data/06_models to a larger one."
# Files whose presence marks a folder as a saved model that a new save may replace.
_MODEL_MARKERS = (METADATA_FILE, "config.json", "modules.json")
# The sentence-transformers files a save writes beside the Hugging Face model, and the
# classes of the modules it may put after the Transformer (each in "<index>_<class>/").
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
MODULES_AFTER_TRANSFORMER = ("WeightedLayerPooling", "Pooling", "Dense", "Normalize")
# Distribution names whose versions are recorded in the metadata.
_RECORDED_DISTRIBUTIONS = {
    "torch": "torch",
    "transformers": "transformers",
    "sentence_transformers": "sentence-transformers",
    "contrastive_sentence_embeddings": "contrastive_sentence_embeddings",
}


def save_sentence_encoder(
    output_dir: str | Path,
    model,
    tokenizer,
    pooling: str,
    metadata: Mapping,
    max_seq_length: int | None = None,
    normalize: bool = False,
    head: torch.nn.Module | None = None,
) -> Path:
    """Save ``model`` (the bare Hugging Face encoder, no training heads) and
    ``tokenizer`` to ``output_dir`` for ``AutoModel``, ``SentenceEncoder`` and
    ``SentenceTransformer`` alike; return ``output_dir`` as a ``Path``.

    ``metadata`` (JSON-serialisable: method, base encoder, seed, training parameters,
    ...) is written to ``cse_metadata.json`` together with ``pooling``, the library
    versions (``versions``), the UTC time of the save (``saved_at``), the files it
    wrote (``files``), the weights' fingerprint (``weights_fingerprint``) and the
    models the folder held before (``earlier_models``; ``encoders/fingerprint.py``);
    those keys are this function's. ``max_seq_length`` is the truncation length that
    sentence-transformers applies (``sentence_bert_config.json``); left at None it
    uses the tokenizer / position-embedding limit, which is also what
    ``SentenceEncoder`` uses, so both truncate identically. ``SentenceEncoder``
    always encodes at the model's full length, whatever ``max_seq_length`` says.
    ``normalize`` appends sentence-transformers' ``Normalize`` module (unit-length
    embeddings from ``SentenceTransformer.encode`` only). ``head`` (``Linear`` layers,
    each optionally followed by an activation, taking the encoder's hidden size) is
    written as ``Dense`` modules after the pooling, for both loaders.
    """
    pooling = check_pooling(pooling)
    output_dir = Path(output_dir)
    _check_bare_encoder(model, pooling)
    limit = max_sequence_length(tokenizer, model.config)
    if max_seq_length is not None and not 0 < max_seq_length <= limit:
        raise ValueError(f"max_seq_length={max_seq_length} is outside 1..{limit}, the longest input this "
                         "model and tokenizer accept")
    steps = dense_layers(head) if head is not None else []
    if steps and steps[0][0].in_features != model.config.hidden_size:
        raise ValueError(f"the head takes {steps[0][0].in_features} inputs but the encoder's pooled embedding has "
                         f"{model.config.hidden_size}")
    # Serialised before anything is written: unserialisable metadata fails here.
    metadata_text = json.dumps(_full_metadata(metadata, pooling), indent=2, ensure_ascii=False) + "\n"
    recover_interrupted_saves(output_dir)
    _check_replaceable(output_dir)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = output_dir.parent / f".{output_dir.name}.saving-{uuid.uuid4().hex[:12]}"
    try:
        with explained_no_space(staging, MODEL_SPACE_REMEDY):
            staging.mkdir()
            model.save_pretrained(staging)
            if not any(staging.glob("model*.safetensors")):
                raise RuntimeError(f"{type(model).__name__}.save_pretrained wrote no safetensors weights")
            tokenizer.save_pretrained(staging)
            _write_sentence_transformers_files(staging, model.config, pooling, max_seq_length, normalize, steps)
            _permissions_as_created(staging)
            # What this save wrote (the folder's entries): all a stale model's removal may delete;
            # the weights' fingerprint, computed once here so that comparing a metrics record with
            # this model reads no weights; and the models this folder held before, so that their
            # scores can be told apart from this model's (encoders/fingerprint.py).
            metadata_text = json.dumps({
                **json.loads(metadata_text),
                "files": sorted([entry.name for entry in staging.iterdir()] + [METADATA_FILE]),
                FINGERPRINT_KEY: content_fingerprint(staging),
                EARLIER_KEY: lineage_for_save(output_dir)}, indent=2, ensure_ascii=False) + "\n"
            (staging / METADATA_FILE).write_text(metadata_text, encoding="utf-8")  # last: marks a complete model
        _move_into_place(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("encoder saved to %s (pooling %s%s)", output_dir, pooling,
                f", then {len(steps)} dense layer(s)" if steps else "")
    return output_dir


def _permissions_as_created(folder: Path) -> None:
    """Every file under ``folder`` with the mode a file created here gets (0666 less the
    umask): the weights file came out 0600 (the library writes it through a private
    temporary file), so a model folder shared with a group or served read-only had
    every file readable but its weights."""
    mask = os.umask(0)
    os.umask(mask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~mask)


def library_versions() -> dict[str, str | None]:
    """Versions of Python and of the libraries a saved model depends on (None when
    a library is not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for key, distribution in _RECORDED_DISTRIBUTIONS.items():
        try:
            versions[key] = importlib_metadata.version(distribution)
        except importlib_metadata.PackageNotFoundError:
            versions[key] = None
    return versions


def _full_metadata(metadata: Mapping, pooling: str) -> dict:
    declared = metadata.get("pooling")
    if declared is not None and declared != pooling:
        raise ValueError(f"metadata says pooling {declared!r} but the model is saved with pooling {pooling!r}")
    return {
        **metadata,
        "pooling": pooling,
        "versions": library_versions(),
        "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _check_bare_encoder(model, pooling: str) -> None:
    """Refuse anything but a bare Hugging Face encoder: a training wrapper, a head
    model, or an encoder with extra weights (see the module docstring)."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise TypeError(f"expected the bare Hugging Face encoder (a transformers PreTrainedModel such as BertModel), "
                        f"got {type(model).__name__}; unwrap it (DDP .module, torch.compile ._orig_mod) and "
                        "pass only the encoder, without training heads")
    if pooling == "cls" and hasattr(model, "pooler") and model.pooler is None:
        raise ValueError("pooling 'cls' needs the model's pooler output, and this model has no pooler; "
                         "use 'cls_before_pooler'")
    expected = _auto_model_state_keys(model.config)
    if expected is None:
        return
    actual = set(model.state_dict())
    extra = sorted(actual - expected)
    if extra:
        raise ValueError(f"the model has {len(extra)} weight(s) that AutoModel would not load for this config "
                         f"(e.g. {', '.join(extra[:3])}): pass the bare encoder (e.g. model.bert), not the "
                         "training heads")
    missing = sorted(expected - actual)
    if missing:
        logger.warning("the model lacks %d weight(s) that AutoModel builds for this config (e.g. %s); AutoModel "
                       "will initialise them randomly when loading", len(missing), ", ".join(missing[:3]))


def _auto_model_state_keys(config) -> set[str] | None:
    """The state-dict keys of the model ``AutoModel`` builds for ``config``, found by
    building it on the meta device (no memory, no initialisation); None when that
    cannot be told (a model type ``AutoModel`` does not know)."""
    from transformers import MODEL_MAPPING

    try:
        model_class = MODEL_MAPPING[type(config)]
        with torch.device("meta"):
            reference = model_class(copy.deepcopy(config))
        return set(reference.state_dict())
    except Exception as err:  # noqa: BLE001 - the check is a courtesy; saving does not depend on it
        logger.debug("cannot tell which weights AutoModel expects for %s: %s", type(config).__name__, err)
        return None


def _check_replaceable(output_dir: Path) -> None:
    if not output_dir.exists():
        return
    if not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} exists and is not a folder")
    if any(output_dir.iterdir()) and not any((output_dir / name).exists() for name in _MODEL_MARKERS):
        raise ValueError(f"{output_dir} exists and does not look like a saved model (none of "
                         f"{', '.join(_MODEL_MARKERS)}); refusing to replace it")


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2`` with ``RENAME_EXCHANGE``); False
    where the C library, the kernel or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(first), None, str(second))


def _move_into_place(staging: Path, output_dir: Path) -> None:
    """Rename ``staging`` to ``output_dir``. An existing ``output_dir`` is swapped
    with it in one step where possible, else moved aside first (a folder cannot be
    renamed over a non-empty one); the old model is deleted after."""
    if not output_dir.exists():
        os.rename(staging, output_dir)
        return
    if _exchange(staging, output_dir):
        crash_point("model_save:after_exchange")
        shutil.rmtree(staging, ignore_errors=True)  # it now holds the previous model
        return
    previous = output_dir.parent / f".{output_dir.name}.replaced-{uuid.uuid4().hex[:12]}"
    os.rename(output_dir, previous)
    crash_point("model_save:between_renames")
    try:
        os.rename(staging, output_dir)
    except BaseException:
        os.rename(previous, output_dir)
        raise
    shutil.rmtree(previous, ignore_errors=True)


def _leftovers(output_dir: Path, kind: str) -> list[Path]:
    """This module's dot-folders beside ``output_dir`` (``kind``: saving or replaced)."""
    if not output_dir.parent.is_dir():
        return []
    return sorted(p for p in output_dir.parent.glob(f".{output_dir.name}.{kind}-*") if p.is_dir())


def recover_interrupted_saves(output_dir: str | Path) -> str | None:
    """Repair what a killed :func:`save_sentence_encoder` left beside ``output_dir``
    and say so in the log; returns what was done (None: nothing to do).

    With no ``output_dir``: the newest complete new model (a staging folder with
    ``cse_metadata.json``, written last) is renamed into place; failing that, the
    previous model that was moved aside is renamed back. Then the remaining staging
    and moved-aside folders of this model (only this module's dot-folders) are
    removed.
    """
    output_dir = Path(output_dir)
    staged = _leftovers(output_dir, "saving")
    replaced = _leftovers(output_dir, "replaced")
    if not staged and not replaced:
        return None
    action = None
    if not output_dir.exists():
        complete = [p for p in staged if (p / METADATA_FILE).is_file()]
        if complete:
            newest = max(complete, key=lambda p: (p / METADATA_FILE).stat().st_mtime_ns)
            os.rename(newest, output_dir)
            action = f"an interrupted save of {output_dir} was completed (the new model, from {newest.name})"
        elif replaced:
            previous = max(replaced, key=lambda p: p.stat().st_mtime_ns)
            os.rename(previous, output_dir)
            action = f"an interrupted save of {output_dir} was rolled back (the previous model, from {previous.name})"
    leftover = [p for p in (*staged, *replaced) if p.exists()]
    for path in leftover:
        shutil.rmtree(path, ignore_errors=True)
    if leftover:
        removed = f"removed {len(leftover)} leftover folder(s) of interrupted saves: " + \
            ", ".join(p.name for p in leftover)
        action = f"{action}; {removed}" if action else f"{output_dir}: {removed}"
    logger.warning("%s", action)
    return action


def recover_interrupted_saves_under(models_dir: str | Path) -> list[str]:
    """:func:`recover_interrupted_saves` for every model folder name that has
    leftovers in ``models_dir`` (e.g. ``data/06_models``), before listing models."""
    root = Path(models_dir)
    if not root.is_dir():
        return []
    names = set()
    for path in root.glob(".*"):
        for kind in (".saving-", ".replaced-"):
            if path.is_dir() and kind in path.name:
                names.add(path.name[1:path.name.rindex(kind)])
    return [action for name in sorted(names) if (action := recover_interrupted_saves(root / name))]


def _write_sentence_transformers_files(folder: Path, config, pooling: str, max_seq_length: int | None,
                                       normalize: bool, dense: list | None = None) -> None:
    """modules.json, sentence_bert_config.json, config_sentence_transformers.json and
    the folders of the modules after the ``Transformer`` (whose files are the model
    and tokenizer already at the root). The small modules are built with the
    installed sentence-transformers classes and saved by their own ``save``, so their
    files are in the format that version reads. ``dense``: ``(Linear, activation)``
    steps, one ``Dense`` module each, after the pooling."""
    import sentence_transformers
    import transformers
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Normalize,
        Pooling,
        Transformer,
        WeightedLayerPooling,
    )

    hidden_size = config.hidden_size
    transformer_config: dict = {
        "transformer_task": "feature-extraction",
        "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
        "module_output_name": "token_embeddings",
    }
    after_transformer: list = []
    if pooling == "cls":
        transformer_config["modality_config"]["text"]["method_output_name"] = "pooler_output"
        transformer_config["module_output_name"] = "sentence_embedding"
    elif pooling == "cls_before_pooler":
        after_transformer.append(Pooling(hidden_size, pooling_mode="cls"))
    elif pooling in ("mean", "last_avg"):
        after_transformer.append(Pooling(hidden_size, pooling_mode="mean"))
    else:  # first_last_avg: hidden_states[1] and hidden_states[-1], averaged, then the masked mean
        transformer_config["config_kwargs"] = {"output_hidden_states": True}
        layers = int(config.num_hidden_layers)
        weights = torch.zeros(layers)
        weights[0] += 1.0
        weights[-1] += 1.0
        after_transformer.append(WeightedLayerPooling(hidden_size, num_hidden_layers=layers, layer_start=1,
                                                      layer_weights=torch.nn.Parameter(weights)))
        after_transformer.append(Pooling(hidden_size, pooling_mode="mean"))
    for linear, activation in dense or []:
        bias = linear.bias is not None
        after_transformer.append(Dense(linear.in_features, linear.out_features, bias=bias,
                                       activation_function=copy.deepcopy(activation),
                                       init_weight=linear.weight.detach().float().cpu().clone(),
                                       init_bias=linear.bias.detach().float().cpu().clone() if bias else None))
    if max_seq_length is not None:
        transformer_config["max_seq_length"] = int(max_seq_length)
    if normalize:
        after_transformer.append(Normalize())

    modules = [{"idx": 0, "name": "0", "path": "", "type": _class_ref(Transformer)}]
    for idx, module in enumerate(after_transformer, start=1):
        assert type(module).__name__ in MODULES_AFTER_TRANSFORMER  # a stale model's removal knows its folder
        path = f"{idx}_{type(module).__name__}"
        (folder / path).mkdir()
        module.save(str(folder / path))
        modules.append({"idx": idx, "name": str(idx), "path": path, "type": _class_ref(type(module))})

    modules_file, transformer_file, library_file = SENTENCE_TRANSFORMERS_FILES
    _write_json(folder / modules_file, modules)
    _write_json(folder / transformer_file, transformer_config)
    _write_json(folder / library_file, {
        "model_type": "SentenceTransformer",
        "__version__": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "pytorch": torch.__version__,
        },
        "prompts": {"query": "", "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    })


def _class_ref(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _write_json(path: Path, content) -> None:
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


# --- models a change of seeds or parameters left behind ----------------------------------
# A method's models live in one folder, data/06_models/<method> (the catalog's
# "<method>.model"): its one model at the root (seeds: null), or one model per seed in
# seed<k>/ beside nothing else; its MTEB result files likewise in
# data/08_reporting/mteb/<method> ("<method>.mteb_results") or its seed<k>/ folders. After
# the seeds or the method's parameters change, a model (or MTEB result) of the old
# setting must not stay where a loader still finds it.
SEED_FOLDER = re.compile(r"^seed(\d+)$")
# What a removal moves a stale model or result to before deleting it; one left by an
# interrupted removal is deleted by the next (:func:`remove_interrupted_removals`).
STALE_MARK = ".stale-"
# What is moved out of a stale root model first: without these no loader takes the
# folder for a model, so an interruption never leaves a loadable half.
_LOADABILITY_FILES = (METADATA_FILE, "modules.json", "config.json")


def _saved_name(folder: Path) -> str | None:
    """The run name a saved model of ours records (None: no model of ours in ``folder``)."""
    try:
        return read_model_metadata(folder).get("name") if (folder / METADATA_FILE).is_file() else None
    except ValueError:
        return None


def _runs_now(method: str, runs: Collection[str]) -> str:
    return ("the seeds are now " + ", ".join(sorted(runs)) if method not in runs
            else f"{method} now runs once, without seeds")


def stale_models(method_folder: str | Path, method: str, runs: Collection[str],
                 provenance: Mapping | None = None, saving: str | None = None) -> list[tuple[Path, str]]:
    """The models in ``method_folder`` (``data/06_models/<method>``) that the project
    saved for ``method`` and that no longer belong there, with the reason:

    * the root model (``<method>``, a run without seeds) when ``runs`` (the method's
      runs now: ``<method>``, or ``<method>.seed<k>`` for each seed) does not hold it;
    * a ``seed<k>/`` model of a seed no longer in ``runs``, or, when ``provenance``
      (the ``provenance`` in the metadata of the model being saved as run ``saving``)
      is given, any other seed's model of another configuration by the rule the
      average over seeds uses (:func:`.provenance.configuration_key`: parameters less
      the seed, encoder, training code, training data), so no model stays that the
      average would leave out.

    Only folders holding this project's metadata naming that run are considered: a
    folder of anyone else's is never a stale model of ours."""
    from contrastive_sentence_embeddings.records.provenance import configuration_difference, configuration_key

    folder = Path(method_folder)
    found: list[tuple[Path, str]] = []
    if not folder.is_dir():
        return found
    if _saved_name(folder) == method and method not in runs:
        found.append((folder, f"the single run of {method}, which now runs over seeds ({', '.join(sorted(runs))})"))
    reference = configuration_key(provenance)
    for path in sorted(folder.iterdir()):
        match = SEED_FOLDER.match(path.name)
        if not match or not path.is_dir() or _saved_name(path) != f"{method}.{path.name}":
            continue
        run = f"{method}.{path.name}"
        if run not in runs:
            found.append((path, f"{run}: {_runs_now(method, runs)}"))
        elif reference is not None and run != saving:
            theirs = read_model_metadata(path).get("provenance")
            if configuration_key(theirs) != reference:
                found.append((path, f"{run}: not the configuration {saving} is trained with now "
                                    f"({configuration_difference(theirs, provenance)})"))
    return found


def remove_stale_models(method_folder: str | Path, method: str, runs: Collection[str],
                        provenance: Mapping | None = None, saving: str | None = None) -> list[str]:
    """Delete :func:`stale_models` and log each; returns what was removed, in words. A
    seed folder goes in one rename (then is deleted); the root model's files
    (:func:`_root_model_entries`) leave with the files that make the folder loadable
    moved first, so an interruption never leaves half a model that loads. What an
    earlier, interrupted removal left is deleted first."""
    method_folder = Path(method_folder)
    removed = remove_interrupted_removals(method_folder)
    for path, reason in stale_models(method_folder, method, runs, provenance, saving):
        trash = path.parent / f".{path.name}{STALE_MARK}{uuid.uuid4().hex[:12]}"
        left: list[str] = []
        if path == method_folder:
            entries, left = _root_model_entries(path)
            trash.mkdir()
            first = {name: rank for rank, name in enumerate(_LOADABILITY_FILES)}
            for entry in sorted(entries, key=lambda entry: (first.get(entry.name, len(first)), entry.name)):
                os.rename(entry, trash / entry.name)
        else:
            os.rename(path, trash)
        shutil.rmtree(trash)
        message = f"removed the stale model {path} ({reason})"
        if left:
            message += f"; left {', '.join(left)} there, which the project did not write"
        logger.warning("%s", message)
        removed.append(message)
    return removed


def remove_stale_results(method_folder: str | Path, method: str, runs: Collection[str]) -> list[str]:
    """Delete the MTEB result folders in ``method_folder`` (``data/08_reporting/mteb/<method>``)
    of runs ``method`` no longer has (``runs`` as for :func:`stale_models`) and log each;
    returns what was removed, in words. Only what ``MtebResultsDataset`` wrote goes
    (a folder with ``export_report.json``: that file and ``results/``), the report
    first so that an interruption never leaves a folder that reads as results. The
    method folder itself stays: the single run's results may replace it once it is
    empty (a user's file in it stops that save, naming the folder)."""
    from contrastive_sentence_embeddings.evaluation.mteb_results import REPORT_FILE, RESULTS_FOLDER

    folder = Path(method_folder)
    removed = remove_interrupted_removals(folder)
    if not folder.is_dir():
        return removed
    stale: list[tuple[Path, str]] = []
    if (folder / REPORT_FILE).is_file() and method not in runs:
        stale.append((folder, f"the single run of {method}, which now runs over seeds ({', '.join(sorted(runs))})"))
    for path in sorted(folder.iterdir()):
        run = f"{method}.{path.name}"
        if SEED_FOLDER.match(path.name) and (path / REPORT_FILE).is_file() and run not in runs:
            stale.append((path, f"{run}: {_runs_now(method, runs)}"))
    for path, reason in stale:
        trash = path.parent / f".{path.name}{STALE_MARK}{uuid.uuid4().hex[:12]}"
        if path == folder:  # the single run's files, beside the seeds' folders
            trash.mkdir()
            for name in (REPORT_FILE, RESULTS_FOLDER):
                if (path / name).exists():
                    os.rename(path / name, trash / name)
        else:
            os.rename(path, trash)
        shutil.rmtree(trash)
        message = f"removed the stale MTEB results {path} ({reason})"
        logger.warning("%s", message)
        removed.append(message)
    return removed


def remove_interrupted_removals(method_folder: str | Path) -> list[str]:
    """Delete what an interrupted removal of a stale model or result left: the
    ``.<name>.stale-<random>`` folders (this module's naming) of the method's root
    beside ``method_folder`` and of its seeds inside it; log it and return it in words."""
    folder = Path(method_folder)
    candidates = [*folder.parent.glob(f".{folder.name}{STALE_MARK}*")]
    if folder.is_dir():
        candidates += [path for path in folder.glob(f".seed*{STALE_MARK}*")
                       if SEED_FOLDER.match(path.name[1:path.name.rindex(STALE_MARK)])]
    leftovers = sorted(path for path in candidates if path.is_dir())
    if not leftovers:
        return []
    for path in leftovers:
        shutil.rmtree(path)
    message = (f"{folder}: removed {len(leftovers)} leftover folder(s) of an interrupted removal of stale runs: "
               + ", ".join(str(path) for path in leftovers))
    logger.warning("%s", message)
    return [message]


def _model_file(folder: Path, name: str) -> bool:
    """Whether ``name`` is one of the files a save of this module writes into a model
    folder (used for a model saved before its metadata listed them): the Hugging Face
    model's, its tokenizer's (the vocabulary files its class names), the
    sentence-transformers files and module folders, the metadata and the model card."""
    from transformers import utils as model_files
    from transformers import tokenization_utils_base as tokenizer_files

    from contrastive_sentence_embeddings.publishing.model_card import CARD_FILE

    names = {METADATA_FILE, CARD_FILE, *SENTENCE_TRANSFORMERS_FILES,
             model_files.CONFIG_NAME, model_files.GENERATION_CONFIG_NAME, model_files.SAFE_WEIGHTS_NAME,
             model_files.SAFE_WEIGHTS_INDEX_NAME,
             tokenizer_files.TOKENIZER_CONFIG_FILE, tokenizer_files.SPECIAL_TOKENS_MAP_FILE,
             tokenizer_files.ADDED_TOKENS_FILE, tokenizer_files.FULL_TOKENIZER_FILE,
             tokenizer_files.CHAT_TEMPLATE_FILE, *_vocabulary_files(folder)}
    return name in names or bool(_SHARDED_WEIGHTS.match(name) or _MODULE_FOLDER.match(name))


def _vocabulary_files(folder: Path) -> list[str]:
    """The vocabulary files of the tokenizer class the saved ``tokenizer_config.json`` names."""
    import transformers

    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokenizer_class = getattr(transformers, str(config.get("tokenizer_class")), None)
    except (OSError, ValueError, AttributeError):
        return []
    return [str(name) for name in (getattr(tokenizer_class, "vocab_files_names", None) or {}).values()]


# save_pretrained's shards of a large model, and the folders of the modules
# _write_sentence_transformers_files puts after the Transformer ("<index>_<class>").
_SHARDED_WEIGHTS = re.compile(r"^model-\d+-of-\d+\.safetensors$")
_MODULE_FOLDER = re.compile(r"^\d+_(" + "|".join(MODULES_AFTER_TRANSFORMER) + r")$")


def _root_model_entries(folder: Path) -> tuple[list[Path], list[str]]:
    """The entries of the model saved at the root of ``folder``: those its save wrote
    (``files`` in its metadata) and its model card; for a model saved before that
    list was recorded, the entries named as a save names them (:func:`_model_file`).
    Also the names of what is not the model's, which stay."""
    from contrastive_sentence_embeddings.publishing.model_card import CARD_FILE

    written = read_model_metadata(folder).get("files")
    mine, others = [], []
    for entry in sorted(folder.iterdir()):
        if (SEED_FOLDER.match(entry.name) and entry.is_dir()) or entry.name.startswith(".seed"):
            continue  # a seed's run, or what an interrupted save of one left
        ours = entry.name in written if written is not None else _model_file(folder, entry.name)
        if ours or entry.name == CARD_FILE:
            mine.append(entry)
        else:
            others.append(entry.name)
    return mine, others
