"""The one training loop every method shares.

``train`` takes a model (:class:`~.methods.ContrastiveModel`: encoder + pooling +
heads + the method's loss as ``forward``), the training examples (tokenised sentences
by default; any items with a ``collate`` function that turns a list of them into
``forward``'s keyword arguments, e.g. DeCLUTR's documents or CLSR's cached pairs) and
a dev scorer, and runs:

* AdamW (no weight decay on biases and LayerNorm weights) or SGD with momentum,
  warm-up then a linear, cosine or slanted-triangular schedule (or constant),
  gradient-norm clipping, seeded data order;
* accelerate for the device (CUDA when present, with bf16/fp16 mixed precision
  there; fp32 on CPU) and for DDP over the processes a launcher started (one per
  GPU, or gloo on CPU without CUDA); before the first step every process checks
  that accelerate's world is the launcher's and torch.distributed's
  (:func:`check_world`);
* dynamic padding: each batch padded to its own longest sentence (the default
  collate);
* every ``eval_every`` steps (and at step 0 and at the end) the dev scores (STS-B dev,
  SICK-R trial); the encoder weights with the best ``select_by`` score (STS-B dev, as
  SimCSE selects; or ``dev_avg``, the mean of both) are kept, because SimCSE and SCD
  runs can degrade late in an epoch. When no step beats step 0, the saved encoder is
  the pretrained one, and the log says so;
* a progress bar with the loss and examples/s, and a training curve (step, loss
  terms, learning rate, examples/s, peak memory, dev scores) returned as a table;
* a checkpoint at each evaluation (accelerate state + trainer state + best weights),
  from which an interrupted run resumes when started again with the same settings.

Checkpoints (see :class:`CheckpointStore`) live in ``checkpoint_dir/step-<n>``
folders that are written complete in a hidden staging folder and published with one
rename, so a crash at any moment leaves either the new checkpoint or the previous
one, never a mix. A checkpoint that cannot be read (e.g. an empty
``trainer_state.json`` after a full disk) is reported with its path and set aside
(renamed ``*.corrupt-<time>``), and the run resumes from an older one or from
scratch. Only folders the trainer created (they hold its marker file) are ever
deleted, and the last checkpoint is kept after training: the run's result is safe
only once the model is saved, so the model data set removes it then
(:func:`release_checkpoints`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically
from contrastive_sentence_embeddings.encoders.attention_kernels import allowed_attention, check_attention_backends
from contrastive_sentence_embeddings.configuration.strict import flag, integer, number, random_seed
from contrastive_sentence_embeddings.runs.crash_points import crash_point
from contrastive_sentence_embeddings.encoders.encoding import pad_batch, precision_tag
from contrastive_sentence_embeddings.runs.library_messages import held_messages
from contrastive_sentence_embeddings.runs.run_locks import HeldLocks, LockHeld, acquire
from contrastive_sentence_embeddings.runs.scratch import explained_no_space
from contrastive_sentence_embeddings.training.live_log import open_live_log
from contrastive_sentence_embeddings.training.gradient_cache import GradientCache, chunk_count, presplit_batch
from contrastive_sentence_embeddings.training.methods import ContrastiveModel
from contrastive_sentence_embeddings.training.run_name import current_run

logger = logging.getLogger(__name__)

TRAINER_STATE = "trainer_state.json"
BEST_WEIGHTS = "best_encoder.pt"
ACCELERATE_STATE = "accelerate"
# The file in every folder the trainer creates under checkpoint_dir: what it may delete.
CHECKPOINT_MARKER = ".cse_trainer_checkpoint"
_STEP_FOLDER = re.compile(r"^step-(\d+)$")
_STAGING_PREFIX = ".staging-step-"
# The checkpoint folders this process has locked (CheckpointStore.claim), by resolved path.
_CLAIMED: dict[Path, HeldLocks] = {}
SCHEDULES = ("linear", "cosine", "slanted_triangular", "constant")
OPTIMIZERS = ("adamw", "sgd")
# accelerate's precisions, and auto (bf16 or fp16 on CUDA, none on CPU).
MIXED_PRECISIONS = ("auto", "no", "bf16", "fp16", "fp8")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the modes that replay CUDA graphs
# What to do when a checkpoint does not fit on its disk (scratch.explained_no_space).
CHECKPOINT_SPACE_REMEDY = ("Free space there, or set the method's training.checkpoint_dir to a folder on a larger "
                           "disk (null: no checkpoints, and no resume).")


@dataclass
class TrainingConfig:
    """Optimisation settings. ``max_steps`` (when set) caps the number of steps;
    ``eval_every`` 0 evaluates only at the start and the end."""

    # Each numeric or true/false setting declares the values it takes (configuration/strict.py's
    # helpers; checked before any node runs, tests/configuration/test_parameters.py).
    learning_rate: float = field(default=3e-5, metadata=number(0, low_open=True))
    batch_size: int = field(default=64, metadata=integer(1))
    epochs: int = field(default=1, metadata=integer(1))
    max_steps: int | None = field(default=None, metadata=integer(1, null=True))
    max_length: int = field(default=32, metadata=integer(1))
    weight_decay: float = field(default=0.0, metadata=number(0))
    optimizer: str = "adamw"           # adamw, or sgd (with momentum; CLSR's large learning rate)
    momentum: float = field(default=0.9, metadata=number(0, 1))  # sgd only
    warmup_ratio: float = field(default=0.0, metadata=number(0, 1))
    schedule: str = "linear"
    # slanted triangular: share of steps spent rising (DeCLUTR's schedule divides by it)
    cut_fraction: float = field(default=0.1, metadata=number(0, 1, low_open=True))
    max_grad_norm: float | None = field(default=1.0, metadata=number(0, low_open=True, null=True))
    seed: int = field(default=42, metadata=random_seed())
    eval_every: int = field(default=125, metadata=integer(0))  # 0: only at the start and the end
    mixed_precision: str = "auto"      # auto: bf16 (or fp16) on CUDA, none on CPU
    device: str | None = None          # None: CUDA when present (several processes without it: CPU DDP); "cpu" forces CPU
    checkpoint_dir: str | None = None  # None: no checkpoints (no resume)
    # DVCLive logs each training row and dev score here as it happens (training/live_log.py;
    # per seed <dir>/seed<k>); None: no live log. What is computed is the same either way.
    live_log_dir: str | None = None
    resume: bool = field(default=True, metadata=flag())
    log_every: int = field(default=10, metadata=integer(1))
    select_by: str = "stsb_dev"        # the dev score that picks the kept weights: stsb_dev (SimCSE) or dev_avg
    # Processes the training node starts (training/fanout.py): an integer >= 1, or "auto" (one
    # per visible CUDA GPU, 1 without). batch_size is per process: the global batch is
    # batch_size x processes. The loop itself reads only the processes it actually runs in.
    num_processes: int | str = field(default=1, metadata=integer(1, words=("auto",)))
    # Speed settings that do not change what is computed (benchmarks/training_throughput.py
    # measures each on and off; docs/record/gpu.md). null: chosen by the device.
    # null: fused AdamW on CPU and CUDA (one vectorised pass over each parameter; what the
    # transformers Trainer uses by default); false: the multi-tensor (foreach) update.
    fused_optimizer: bool | None = field(default=None, metadata=flag(null=True))
    pin_memory: bool | None = field(default=None, metadata=flag(null=True))  # null: on CUDA (async host-to-GPU copies)
    loader_workers: int = field(default=0, metadata=integer(0))  # processes building batches beside the loop
    tf32: bool = field(default=True, metadata=flag())  # CUDA: float32 matmuls (outside autocast) on TF32 units
    compile: bool = field(default=False, metadata=flag())  # torch.compile the encoder's training forward
    # torch.compile's mode: "reduce-overhead" (and "max-autotune") replay the encoder's
    # forward and backward as CUDA graphs (one launch instead of ~1,500 kernel launches a
    # step: the host, not the GPU, bounds a paper-size step at batch 64, docs/record/gpu.md). CUDA
    # graphs need one input shape: static_shapes, and no gradient caching.
    compile_mode: str = "default"
    # Pad every sentence batch to max_length instead of its longest member: one input shape
    # for the whole run (torch.compile compiles once; CUDA graphs need it). The loss and
    # gradients are those of the dynamic padding (padding is masked out); more tokens to
    # compute. Sentence batches only (the methods that build their own batches refuse it).
    static_shapes: bool = field(default=False, metadata=flag())
    # Gradient caching (training/gradient_cache.py): each process's batch runs in mini-batches
    # of this many examples, its loss and gradient still those of the whole batch; memory is
    # one mini-batch's, compute one more forward pass. Must divide batch_size; null: off.
    mini_batch_size: int | None = field(default=None, metadata=integer(1, null=True))
    # Recompute each encoder layer's activations in the backward pass instead of keeping
    # them (Hugging Face's activation checkpointing): less memory for about one more
    # forward pass of compute; the gradients are the same (benchmarks/declutr_memory.py).
    gradient_checkpointing: bool = field(default=False, metadata=flag())
    # The kernels scaled_dot_product_attention may run while training and scoring dev sets
    # (encoders/attention_kernels.py): a list of cudnn, flash, efficient, math; null:
    # PyTorch's choice. On Hopper that choice is cuDNN's attention, which prepares every
    # new input shape for ~150 ms: DeCLUTR, whose batches keep changing shape, leaves it
    # out (3.7x faster steps on an H100, docs/record/gpu.md run 5). Keep math: every device has it.
    attention_backends: list[str] | None = None

    @classmethod
    def from_params(cls, params: dict) -> "TrainingConfig":
        unknown = sorted(set(params) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown training parameter(s): {', '.join(unknown)}")
        config = cls(**params)
        if config.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {config.schedule!r}; choose one of {', '.join(SCHEDULES)}")
        if config.mixed_precision is False:  # YAML (Kedro's OmegaConf too) reads an unquoted `no` as false
            config.mixed_precision = "no"
        if config.mixed_precision not in MIXED_PRECISIONS:
            raise ValueError(f"unknown mixed_precision {config.mixed_precision!r}; choose one of "
                             f"{', '.join(MIXED_PRECISIONS)}")
        if config.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {config.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
        check_num_processes(config.num_processes)
        config.attention_backends = check_attention_backends(config.attention_backends)
        if config.mini_batch_size is not None:
            chunk_count(config.batch_size, config.mini_batch_size)
        if config.compile_mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile_mode {config.compile_mode!r}; choose one of {', '.join(COMPILE_MODES)}")
        if config.compile_mode != "default" and not config.compile:
            raise ValueError(f"compile_mode {config.compile_mode!r} is read only with compile: true")
        if config.compile and config.compile_mode in CUDA_GRAPH_MODES:
            if not config.static_shapes:
                raise ValueError(f"compile_mode {config.compile_mode!r} replays CUDA graphs, which need one input "
                                 "shape: set static_shapes: true")
            if config.mini_batch_size is not None:
                raise ValueError(f"compile_mode {config.compile_mode!r} (CUDA graphs) with mini_batch_size: "
                                 "gradient caching runs the encoder several times a step and keeps the earlier "
                                 "runs' outputs, which a graph replay overwrites; use compile_mode: default")
        return config


class _ExampleCollate:
    """The loader's collate: the examples at the sampled indices, through ``collate``,
    then through ``split`` when given (gradient caching: the batch cut into its
    mini-batches here, on the host; a class rather than a closure, so that loader
    workers can run it)."""

    def __init__(self, examples: Sequence, collate: Callable[[list], dict],
                 split: Callable[[dict], dict] | None = None):
        self.examples, self.collate, self.split = examples, collate, split

    def __call__(self, rows: list[int]) -> dict:
        batch = self.collate([self.examples[i] for i in rows])
        return self.split(batch) if self.split is not None else batch


# Read the loss back to the host at every step (the loop before it kept the window's
# sums on the device): only benchmarks/training_throughput.py's ablation sets it, to
# measure what the per-step synchronisation costs on a GPU.
HOST_SYNC_EVERY_STEP = False


class SettingsRead:
    """A :class:`TrainingConfig` that notes which of its settings are read, handed to
    the code that trains (the family's examples builder and :func:`train`) in place of
    the config itself. What was never read had no effect on the run: DeCLUTR's spans
    are sampled in data preparation, so ``max_length`` (the sentence families'
    truncation) is never read; ``momentum`` only with SGD; ``cut_fraction`` only with
    the slanted triangular schedule, ``warmup_ratio`` only without it; ``resume`` only
    with a ``checkpoint_dir``. The model card lists only the settings read
    (:meth:`unread`, recorded as ``training_unused`` in the model's metadata), so the
    rule follows the code instead of a hand-kept list. Book-keeping that copies every
    setting (the checkpoint fingerprint, the metadata) reads :attr:`settings`."""

    def __init__(self, config: TrainingConfig):
        self.__dict__["settings"] = config
        self.__dict__["read"] = set()

    def __getattr__(self, name: str):
        value = getattr(self.settings, name)
        if name in TrainingConfig.__dataclass_fields__:
            self.read.add(name)
        return value

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"training settings are read-only here (tried to set {name})")

    def unread(self) -> list[str]:
        """The settings nothing has read so far, in declaration order."""
        return [name for name in TrainingConfig.__dataclass_fields__ if name not in self.read]


def reading(config: "TrainingConfig | SettingsRead") -> SettingsRead:
    """``config`` as a :class:`SettingsRead` (itself when it already is one)."""
    return config if isinstance(config, SettingsRead) else SettingsRead(config)


def check_num_processes(value) -> int | str:
    """``training.num_processes``: a positive integer or ``"auto"`` (bool is refused:
    YAML's ``yes`` is not a process count)."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"num_processes must be a positive integer or 'auto', got {value!r}")


@dataclass
class TrainingResult:
    best_state: dict[str, torch.Tensor]
    best_step: int
    best_scores: dict[str, float]
    curve: pd.DataFrame
    steps: int
    seconds: float
    examples_per_second: float
    extra: dict = field(default_factory=dict)


# --- pure pieces ------------------------------------------------------------------------
def tokenize_sentences(tokenizer, sentences: Sequence[str], max_length: int) -> list[list[int]]:
    """Token ids of every sentence, once for the whole run (truncated to max_length)."""
    return tokenizer(list(sentences), truncation=True, max_length=max_length)["input_ids"]


def slanted_triangular(step: int, total_steps: int, cut_fraction: float = 0.1, ratio: float = 32.0) -> float:
    """ULMFiT's slanted triangular learning-rate multiplier (Howard and Ruder, 2018),
    which DeCLUTR uses: a linear rise over the first ``cut_fraction`` of the steps
    from 1/ratio to 1, then a linear decay back to 1/ratio."""
    cut = max(1, math.floor(total_steps * cut_fraction))
    if step < cut:
        progress = step / cut
    else:
        progress = 1 - (step - cut) / max(1, cut * (1 / cut_fraction - 1))
    return (1 + max(progress, 0.0) * (ratio - 1)) / ratio


def warmup_then(step: int, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Learning-rate multiplier: linear warm-up, then ``linear`` decay to 0, half-cosine
    ``cosine`` decay to 0 (SimCLR, CLSR), or ``constant``."""
    if step < warmup_steps:
        return (step + 1) / max(1, warmup_steps)
    if schedule == "constant":
        return 1.0
    remaining = max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    if schedule == "cosine":
        return 0.5 * (1 - math.cos(math.pi * remaining))
    return remaining


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on weight matrices, none on biases and normalisation
    weights (LayerNorm, BatchNorm), as BERT and DeCLUTR train."""
    decay, no_decay, seen = [], [], set()
    for module in model.modules():
        is_norm = isinstance(module, (torch.nn.LayerNorm, torch.nn.modules.batchnorm._BatchNorm)) or \
            "norm" in type(module).__name__.lower()
        for name, parameter in module.named_parameters(recurse=False):
            # Tied weights (an MLM decoder sharing the word embeddings) are one parameter.
            if not parameter.requires_grad or id(parameter) in seen:
                continue
            seen.add(id(parameter))
            (no_decay if is_norm or name.endswith("bias") else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def total_steps(n_examples: int, config: TrainingConfig, processes: int = 1) -> int:
    """Optimiser steps of the run: an epoch is ``n_examples // (batch_size x processes)``
    steps, since every process takes its own ``batch_size`` examples per step."""
    steps_per_epoch = n_examples // (config.batch_size * processes)
    total = steps_per_epoch * config.epochs
    return min(total, config.max_steps) if config.max_steps else total


def data_digest(examples: Sequence) -> str:
    """A digest of the training examples: token-id lists hashed exactly, anything else
    through its ``repr`` (callers with large tensors behind indices pass their own)."""
    digest = hashlib.sha256()
    for example in examples:
        if isinstance(example, (list, tuple)) and all(isinstance(i, int) for i in example):
            digest.update(len(example).to_bytes(4, "little"))
            digest.update(b"".join(int(i).to_bytes(4, "little") for i in example))
        else:
            digest.update(repr(example).encode())
    return digest.hexdigest()


# Settings that change how fast a run goes, not what it computes (up to float rounding):
# a checkpoint resumes under other values of them.
SPEED_SETTINGS = ("fused_optimizer", "pin_memory", "loader_workers", "tf32", "compile", "compile_mode",
                  "static_shapes", "attention_backends")


def run_fingerprint(config: TrainingConfig, data: str, model: torch.nn.Module, processes: int = 1) -> str:
    """What a checkpoint must match to be resumed: the optimisation settings (other
    than the checkpoint options), the method and its parameters, the pooling, the
    data (``data``: a digest, see :func:`data_digest`) and the number of processes
    the run actually has (not the ``num_processes`` setting: ``auto`` means different
    counts on different machines, and a checkpoint holds one RNG state per process)."""
    # gradient_checkpointing changes memory, not the arithmetic: a run that ran out of
    # memory resumes with it turned on.
    ignored = ("checkpoint_dir", "live_log_dir", "resume", "log_every", "num_processes", "gradient_checkpointing",
               *SPEED_SETTINGS)
    settings = {k: v for k, v in asdict(config).items() if k not in ignored}
    if settings.get("mini_batch_size") is None:  # fingerprints without it stay as they were before it existed
        settings.pop("mini_batch_size", None)
    if processes > 1:  # single-process fingerprints stay as they were before the setting existed
        settings["processes"] = processes
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    digest.update(repr(model.method).encode())
    digest.update(str(getattr(model, "pooling", "")).encode())
    digest.update(data.encode())
    return digest.hexdigest()[:16]


# What ``peak_memory_gib`` measures (``peak_memory_measure`` in a model's metadata),
# by device: the card and the docs name it from here.
MEMORY_MEASURES = {
    "cuda_max_allocated": "peak GPU memory allocated by PyTorch's tensors during training "
                          "(torch.cuda.max_memory_allocated, reset when training starts; the caching "
                          "allocator may hold more)",
    "process_peak_rss": "peak resident memory (RSS) of the training process since the process started "
                        "(data preparation run in the same process counts too)",
}


def memory_measure(device: torch.device) -> str:
    """The key of :data:`MEMORY_MEASURES` that :func:`peak_memory_gib` reports on ``device``."""
    return "cuda_max_allocated" if device.type == "cuda" else "process_peak_rss"


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory of this process so far: allocated CUDA memory on a GPU, resident set
    size on CPU (Linux reports ru_maxrss in KiB, macOS in bytes); see
    :data:`MEMORY_MEASURES`."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)


def enable_gradient_checkpointing(encoder: torch.nn.Module) -> None:
    """Turn on ``encoder``'s activation checkpointing (``training.gradient_checkpointing``):
    each layer's activations are recomputed in the backward pass, with the same dropout
    masks (torch's checkpoint replays the random state). Non-reentrant checkpointing,
    which needs no input that requires a gradient. An encoder that is not a Hugging Face
    model supporting it (CLSR trains a small network on cached embeddings) is refused."""
    if not getattr(encoder, "supports_gradient_checkpointing", False):
        raise ValueError(f"training.gradient_checkpointing: the trained {type(encoder).__name__} does not support "
                         "activation checkpointing (only Hugging Face encoders do); set it to false")
    # transformers 5 renamed gradient_checkpointing_enable (now a deprecated alias) to
    # activation_checkpointing_enable; both take the checkpoint's keyword arguments first.
    enable = getattr(encoder, "activation_checkpointing_enable", None) or encoder.gradient_checkpointing_enable
    enable({"use_reentrant": False})


def build_optimizer(model: torch.nn.Module, config: TrainingConfig, device: torch.device | None = None
                    ) -> torch.optim.Optimizer:
    """AdamW or SGD over :func:`parameter_groups` (``device``: where the parameters live,
    CPU when not given). AdamW is torch's fused kernel on CPU and CUDA unless
    ``fused_optimizer`` is false, then the multi-tensor (foreach) update; either is the
    per-parameter loop's update up to float rounding (the foreach one bit for bit on CPU).
    On CPU the fused step of the default encoder takes ~20 ms where the foreach one takes
    ~110 ms (docs/record/results.md); the transformers Trainer, sentence-transformers' included,
    uses the fused kernel by default."""
    groups = parameter_groups(model, config.weight_decay)
    # foreach: one multi-tensor update instead of a Python loop over ~100 parameters (torch
    # picks it by itself on CUDA only).
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.learning_rate, momentum=config.momentum, foreach=True)
    return torch.optim.AdamW(groups, lr=config.learning_rate, **update_kind(config, device))


FUSED_ADAMW_DEVICES = ("cpu", "cuda")


def update_kind(config: TrainingConfig, device: torch.device | None) -> dict[str, bool | None]:
    """The AdamW implementation flags for ``config.fused_optimizer`` on ``device``."""
    supported = (device.type if device is not None else "cpu") in FUSED_ADAMW_DEVICES
    fused = supported and config.fused_optimizer is not False
    return {"fused": True, "foreach": None} if fused else {"fused": None, "foreach": True}


IMPLEMENTATION_FLAGS = ("fused", "foreach")


def implementation_flags(optimizer: torch.optim.Optimizer) -> list[dict[str, bool | None]]:
    """Each parameter group's choice of update kernel (fused, foreach), to keep across
    :func:`restore_implementation_flags`."""
    return [{name: group[name] for name in IMPLEMENTATION_FLAGS if name in group} for group in optimizer.param_groups]


def restore_implementation_flags(optimizer: torch.optim.Optimizer, flags: list[dict[str, bool | None]]) -> None:
    """Put back the kernels the optimizer was built with after a checkpoint's state was
    loaded into it: ``load_state_dict`` restores every parameter group as saved, flags
    included, so a run resumed with another ``fused_optimizer`` (a speed setting, not in
    the resume fingerprint), or from a checkpoint an older version wrote, would silently
    keep the saved kernel. The fused kernel wants each step count on its parameter's
    device, which a foreach checkpoint keeps on the CPU."""
    for group, chosen in zip(optimizer.param_groups, flags, strict=True):
        group.update(chosen)
        if not chosen.get("fused"):
            continue
        for parameter in group["params"]:
            step = optimizer.state.get(parameter, {}).get("step")
            if torch.is_tensor(step) and step.device != parameter.device:
                optimizer.state[parameter]["step"] = step.to(parameter.device)


def launched_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(world size, rank)`` as the launcher that started this process set them:
    ``WORLD_SIZE``/``RANK`` (the fan-out's elastic launcher, ``torchrun``, ``accelerate
    launch``) or MPI's variables, which accelerate reads too; ``(1, 0)`` for a process
    nobody launched."""
    from contrastive_sentence_embeddings.runs.launch_guard import RANK_VARS, WORLD_SIZE_VARS

    environ = os.environ if environ is None else environ
    for variable in WORLD_SIZE_VARS:
        try:
            return int(environ[variable].strip()), int(environ.get(RANK_VARS[variable], "0").strip())
        except (KeyError, ValueError):
            continue
    return 1, 0


def trains_on_cpu(device: str | None, launched_processes: int, cuda_available: bool) -> bool:
    """Whether accelerate must be told ``cpu=True``: ``device: cpu``, or several launched
    processes and no CUDA. accelerate joins the launched processes into one DDP run
    only for a device backend (NCCL on CUDA, ...) or when told CPU (gloo); with
    neither it still initialises torch.distributed over all of them but reports one
    process (``DistributedType.NO``): no gradient sync, no data sharding, and every
    rank believing itself the main one."""
    return device == "cpu" or (launched_processes > 1 and not cuda_available)


def check_world(accelerator_world: tuple[int, int], launcher_world: tuple[int, int],
                torch_world: tuple[int, int] | None, distributed_type: str = "") -> None:
    """Refuse to train unless accelerate's ``(num_processes, process_index)`` is the
    launcher's ``(WORLD_SIZE, RANK)`` and torch.distributed's (when initialised): a
    process that counts a different world would train on its own while the others wait
    for it, or gather the others' embeddings as negatives without sharing gradients."""
    worlds = [accelerator_world, launcher_world] + ([torch_world] if torch_world is not None else [])
    if all(world == accelerator_world for world in worlds):
        return
    torch_text = f"torch.distributed process {torch_world[1]} of {torch_world[0]}" if torch_world else \
        "torch.distributed not initialised"
    raise RuntimeError(
        f"training process RANK={launcher_world[1]} of WORLD_SIZE={launcher_world[0]} ({torch_text}) is process "
        f"{accelerator_world[1]} of {accelerator_world[0]} for accelerate ({distributed_type or 'its own world'}): "
        "the processes would not train together; set training.device: cpu to train in CPU processes, "
        "or training.num_processes: 1")


def _torch_world() -> tuple[int, int] | None:
    """``(world size, rank)`` of torch.distributed, or None when it is not initialised."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return None


def _mixed_precision(config: TrainingConfig) -> str:
    if config.mixed_precision != "auto":
        return config.mixed_precision
    if config.device == "cpu" or not torch.cuda.is_available():
        return "no"
    return "bf16" if torch.cuda.is_bf16_supported() else "fp16"


# --- checkpoints -------------------------------------------------------------------------
class CorruptCheckpointError(ValueError):
    """A checkpoint folder that cannot be resumed from (the message says why)."""


class CheckpointStore:
    """The trainer's checkpoints under ``root`` (``checkpoint_dir``).

    Each checkpoint is a folder ``step-<n>`` holding the accelerate state, the best
    weights and ``trainer_state.json``. It is written in ``.staging-step-<n>`` and
    renamed to ``step-<n>`` when complete (one rename: a reader sees the whole
    checkpoint or none of it); older checkpoints are removed after that. Every folder
    the store creates holds :data:`CHECKPOINT_MARKER`, and only such folders are
    ever deleted: anything else in ``root`` is the user's.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def claim(self) -> None:
        """Lock ``root`` for this process (``run_locks``; kept until :meth:`unclaim` or
        the process ends, however it ends) before anything in it is cleaned up or
        written, or raise ``LockHeld`` naming the live run that trains into it: its
        staging folders are not an interrupted run's leftovers, and its checkpoints are
        not stale. A process that holds the lock already keeps it."""
        key = self.root.resolve()
        if key not in _CLAIMED:
            _CLAIMED[key] = acquire(key.parent, [key.name], what="checkpoint folder",
                                    advice="Two runs cannot train into one training.checkpoint_dir: wait for that "
                                           "run to end, stop it, or give this run another checkpoint_dir.")

    def unclaim(self) -> None:
        held = _CLAIMED.pop(self.root.resolve(), None)
        if held is not None:
            held.release()

    @staticmethod
    def is_ours(folder: Path) -> bool:
        return folder.is_dir() and (folder / CHECKPOINT_MARKER).is_file()

    def checkpoints(self) -> list[tuple[int, Path]]:
        """Published checkpoints, oldest first."""
        if not self.root.is_dir():
            return []
        found = [(int(match.group(1)), path) for path in self.root.iterdir()
                 if (match := _STEP_FOLDER.match(path.name)) and self.is_ours(path)]
        return sorted(found)

    def clean_interrupted(self) -> None:
        """Remove staging folders left by a run killed while writing a checkpoint."""
        if not self.root.is_dir():
            return
        for path in sorted(self.root.glob(f"{_STAGING_PREFIX}*")):
            if self.is_ours(path):
                logger.warning("%s: removing an incomplete checkpoint left by an interrupted run", path)
                shutil.rmtree(path)

    @staticmethod
    def read(folder: Path) -> dict:
        """The trainer state of a complete checkpoint, or :class:`CorruptCheckpointError`."""
        state_file = folder / TRAINER_STATE
        try:
            state = json.loads(state_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CorruptCheckpointError(f"{state_file} is unreadable ({type(err).__name__}: {err})") from None
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            raise CorruptCheckpointError(f"{state_file} holds no trainer state (no step)")
        weights = folder / BEST_WEIGHTS
        if not weights.is_file() or weights.stat().st_size == 0:
            raise CorruptCheckpointError(f"{weights} is missing or empty")
        if not (folder / ACCELERATE_STATE).is_dir() or not any((folder / ACCELERATE_STATE).iterdir()):
            raise CorruptCheckpointError(f"{folder / ACCELERATE_STATE} is missing or empty")
        return state

    def set_aside(self, folder: Path, reason: str) -> Path:
        """Rename a bad checkpoint out of the way (never delete it: it is evidence)."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = folder.with_name(f"{folder.name}.corrupt-{stamp}")
        os.rename(folder, target)
        logger.warning("corrupt checkpoint %s (%s): set aside as %s, not resumed from", folder, reason, target)
        return target

    def latest(self) -> tuple[Path, dict] | None:
        """The newest checkpoint that reads back whole; corrupt newer ones are set aside."""
        for _, folder in reversed(self.checkpoints()):
            try:
                return folder, self.read(folder)
            except CorruptCheckpointError as err:
                self.set_aside(folder, str(err))
        return None

    def staging(self, step: int) -> Path:
        """A fresh staging folder for the checkpoint of ``step`` (same name on every
        process of a DDP run), marked as the trainer's."""
        folder = self.root / f"{_STAGING_PREFIX}{step}"
        if self.is_ours(folder):
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CHECKPOINT_MARKER).write_text("written by contrastive_sentence_embeddings' trainer\n")
        return folder

    def publish(self, staging: Path, step: int) -> Path:
        """Rename the complete ``staging`` folder to ``step-<step>`` and remove the
        older checkpoints."""
        target = self.root / f"step-{step}"
        if self.is_ours(target):  # a rerun of the same step: replace it, it is ours
            shutil.rmtree(target)
        os.rename(staging, target)
        crash_point("checkpoint:after_publish")
        for other_step, folder in self.checkpoints():
            if other_step != step:
                shutil.rmtree(folder)
        return target

    def remove_all(self) -> list[Path]:
        """Delete every checkpoint and staging folder of the trainer (and nothing
        else); ``root`` itself is removed only when that leaves it empty."""
        removed = []
        if not self.root.is_dir():
            return removed
        for path in sorted(self.root.iterdir()):
            if (_STEP_FOLDER.match(path.name) or path.name.startswith(_STAGING_PREFIX)) and self.is_ours(path):
                shutil.rmtree(path)
                removed.append(path)
        if not any(self.root.iterdir()):
            self.root.rmdir()
        return removed


def release_checkpoints(checkpoint_dir: str | Path | None) -> list[Path]:
    """Delete the trainer's checkpoints in ``checkpoint_dir`` (only what the trainer
    wrote there). Call it once the trained model is published: until then the
    checkpoint is the only copy of the run's result. A folder another live run trains
    into (it holds the lock) is left to that run, with a warning."""
    if not checkpoint_dir:
        return []
    store = CheckpointStore(checkpoint_dir)
    try:
        store.claim()
    except LockHeld as busy:
        logger.warning("the training checkpoints in %s were not removed: %s", checkpoint_dir, busy)
        return []
    try:
        removed = store.remove_all()
    finally:
        store.unclaim()
    if removed:
        logger.info("model published: removed the training checkpoint(s) %s", ", ".join(map(str, removed)))
    return removed


# --- the loop ----------------------------------------------------------------------------
@contextlib.contextmanager
def compiled_for_training(core: torch.nn.Module, config: TrainingConfig):
    """With ``training.compile``: the encoder's forward compiled for the duration (the
    forward only: the module, its weights and their names stay as they are) and the CPU
    shortcuts off; the class's own forward and the shortcuts are put back however the
    block ends, so a run that fails leaves the model as a caller can use it. Without
    it: nothing changes."""
    if not config.compile:
        yield
        return
    encoder = core.encoder
    encoder.forward = torch.compile(encoder.forward, dynamic=not config.static_shapes,
                                    mode=None if config.compile_mode == "default" else config.compile_mode)
    # One whole graph: no CPU packing of real tokens (its row counts depend on the data)
    # and torch's dropout (a function mode was not tried inside a graph).
    shortcuts = {name: getattr(core, name) for name in ("uniform_dropout", "real_tokens_only") if hasattr(core, name)}
    for name in shortcuts:
        setattr(core, name, False)
    try:
        yield
    finally:
        encoder.__dict__.pop("forward", None)
        for name, value in shortcuts.items():
            setattr(core, name, value)


@contextlib.contextmanager
def uncompiled(module: torch.nn.Module):
    """``module`` with its class's own forward for the duration (the compiled one that
    ``training.compile`` set on the instance is put back after)."""
    compiled = module.__dict__.pop("forward", None)
    try:
        yield module
    finally:
        if compiled is not None:
            module.forward = compiled


def releases_checkpoint_lock(run: Callable[..., TrainingResult]) -> Callable[..., TrainingResult]:
    """``run`` with the checkpoint folder's lock released however it ends: a run that
    fails (an error in a step, a bad batch, Ctrl-C) must not leave its lock and holder
    record beside ``checkpoint_dir`` for the rest of the process (a notebook, the next
    seed of a fan-out); the checkpoints themselves stay, to resume from. A lock this
    process held before the call is left to its holder."""
    signature = inspect.signature(run)

    @functools.wraps(run)
    def released(*args, **kwargs) -> TrainingResult:
        checkpoint_dir = getattr(signature.bind(*args, **kwargs).arguments["config"], "checkpoint_dir", None)
        key = Path(checkpoint_dir).resolve() if checkpoint_dir else None
        held_before = key in _CLAIMED
        try:
            return run(*args, **kwargs)
        finally:
            if key is not None and not held_before and key in _CLAIMED:
                CheckpointStore(key).unclaim()

    return released


@releases_checkpoint_lock
def train(
    model: ContrastiveModel,
    tokenizer,
    examples: Sequence,
    config: TrainingConfig | SettingsRead,
    dev_scorer: Callable[[Callable[[list[str]], np.ndarray]], dict[str, float]] | None = None,
    collate: Callable[[list], dict[str, torch.Tensor]] | None = None,
    data_fingerprint: str | None = None,
) -> TrainingResult:
    """Train ``model`` on ``examples`` and return the best ``model.encoder`` weights by
    dev score (the last ones without a dev scorer).

    ``examples`` are token-id lists (one per sentence) unless ``collate`` is given; it
    turns a list of examples into the keyword arguments of ``model.forward``.
    ``data_fingerprint`` identifies the data for resuming (default: the collate's
    ``fingerprint()`` when it has one, else a digest of ``examples``). The dev scorer
    encodes with ``model.sentence_encoder(tokenizer, device)``: the encoder as it
    stands, pooled the way it will be saved."""
    from accelerate import Accelerator, DistributedDataParallelKwargs
    from accelerate.utils import set_seed

    config = reading(config)  # notes the settings this run reads (SettingsRead)
    settings = config.settings
    # Unused parameters are normal here (e.g. BERT's pooler under [CLS]-before-pooler or
    # mean pooling), and DDP refuses them unless told to look for them. The schedule is
    # stepped once per optimiser step: accelerate's default steps it once per process
    # (it assumes a step count computed for one process), which with W processes ran the
    # warm-up and decay W times too fast against `steps` below.
    launcher_world = launched_world()
    from accelerate.utils import DataLoaderConfiguration

    accelerator = Accelerator(mixed_precision=_mixed_precision(config),
                              cpu=trains_on_cpu(config.device, launcher_world[0], torch.cuda.is_available()),
                              step_scheduler_with_optimizer=False,
                              # pinned batches are copied to the GPU without waiting (pin_memory)
                              dataloader_config=DataLoaderConfiguration(non_blocking=True),
                              kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    # Before any collective and any step: every process must see the world it was launched into.
    check_world((accelerator.num_processes, accelerator.process_index), launcher_world, _torch_world(),
                str(accelerator.distributed_type))
    processes = accelerator.num_processes
    if accelerator.device.type == "cuda":  # this run's peak, not an earlier run's in the same process
        torch.cuda.reset_peak_memory_stats(accelerator.device)
        # Process-wide, as transformers' Trainer sets it: the float32 matrix products left
        # outside autocast (the loss's similarity matrices, a fp32 run) on TF32 units.
        torch.backends.cuda.matmul.allow_tf32 = bool(config.tf32)
    global_batch = config.batch_size * processes
    if len(examples) < global_batch:
        raise ValueError(f"{len(examples)} training examples cannot fill a batch of {config.batch_size}"
                         + (f" in each of {processes} processes" if processes > 1 else ""))
    set_seed(config.seed)
    steps = total_steps(len(examples), config, processes)
    if processes > 1:
        logger.info("%d processes x %d examples a step = a global batch of %d", processes, config.batch_size,
                    global_batch)
    # Where the run computes, in words a user checks their GPU setup against.
    device = accelerator.device
    logger.info("training %s on %s%s, mixed precision %s", current_run(getattr(getattr(model, "method", None),
                                                                               "name", "the model")),
                device.type, f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "",
                accelerator.mixed_precision)
    dropped = len(examples) % global_batch
    if dropped:
        logger.info("%d examples do not fill the last batch of each epoch and are left out of it "
                    "(the order is reshuffled every epoch)", dropped)
    if collate is None:
        pad_to = config.max_length if config.static_shapes else None

        def collate(rows):  # the default: padding of token ids to the batch's longest, or to max_length
            return pad_batch(rows, tokenizer.pad_token_id, length=pad_to)
    elif config.static_shapes:
        raise ValueError("training.static_shapes pads sentence batches to max_length, but this method builds its "
                         "own batches (its collate); turn it off for this method")

    generator = torch.Generator().manual_seed(config.seed)
    on_cuda = accelerator.device.type == "cuda"
    pin = on_cuda if config.pin_memory is None else bool(config.pin_memory and on_cuda)
    split = None
    if config.mini_batch_size is not None:  # cut on the host, as the batch is built (gradient_cache.MINI_BATCHES)
        split = functools.partial(presplit_batch, family=model.method.family,
                                  chunks=chunk_count(config.batch_size, config.mini_batch_size))
    # Loader workers are started afresh for every epoch (never persistent), so that they
    # change nothing but speed: (1) they build batches from copies of the collate made
    # when they start, and kept between epochs they would keep the epoch a stateful
    # collate (DeCLUTR's spans and masks, `set_epoch` below) had then: every epoch would
    # train on the first one's batches; (2) each epoch's pass draws the workers' base
    # seed from `generator` before the shuffle does, as a pass without workers does,
    # and a kept worker's pass would not: the order of every later epoch would differ.
    loader = DataLoader(list(range(len(examples))), batch_size=config.batch_size, shuffle=True, drop_last=True,
                        generator=generator, collate_fn=_ExampleCollate(examples, collate, split),
                        num_workers=config.loader_workers, pin_memory=pin, persistent_workers=False)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model.encoder)
    optimizer = build_optimizer(model, config, accelerator.device)
    if config.schedule == "slanted_triangular":  # its own rise: warmup_ratio is not read
        cut_fraction = config.cut_fraction
        multiplier = lambda step: slanted_triangular(step, steps, cut_fraction)  # noqa: E731
    else:
        warmup, schedule = int(config.warmup_ratio * steps), config.schedule
        multiplier = lambda step: warmup_then(step, steps, warmup, schedule)  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    core: ContrastiveModel = accelerator.unwrap_model(model)
    cuda_graphs = config.compile and config.compile_mode in CUDA_GRAPH_MODES
    gradient_cache = None
    if config.mini_batch_size is not None:
        gradient_cache = GradientCache(core, config.batch_size, config.mini_batch_size, autocast=accelerator.autocast,
                                       scaler=accelerator.scaler, average_gradients=accelerator.num_processes > 1)

    state = {"step": 0, "best_step": -1, "best_scores": {}, "curve": [], "seconds": 0.0, "examples": 0}
    best_state = {k: v.detach().cpu().clone() for k, v in core.encoder.state_dict().items()}
    store = CheckpointStore(config.checkpoint_dir) if config.checkpoint_dir else None
    if data_fingerprint is None:  # a collate that builds batches from more than the examples knows its data
        data_fingerprint = collate.fingerprint() if hasattr(collate, "fingerprint") else data_digest(examples)
    fingerprint = run_fingerprint(settings, data_fingerprint, core, processes)
    state["fingerprint"] = fingerprint
    if store is not None and accelerator.is_main_process:
        store.claim()  # before the clean-up: another live run's staging folders are not leftovers
        store.clean_interrupted()
        if (store.root / TRAINER_STATE).is_file():
            logger.warning("%s holds a checkpoint in an older layout; it is not resumed from and left as it is",
                           store.root)
    accelerator.wait_for_everyone()
    resumed = store.latest() if store is not None and config.resume and accelerator.is_main_process else None
    if resumed is not None and resumed[1].get("fingerprint") != fingerprint:
        logger.warning("%s holds a checkpoint of a different run (settings, data or method changed); "
                       "starting from scratch and replacing it", resumed[0])
        store.remove_all()
        resumed = None
    if accelerator.num_processes > 1:  # every process resumes from the checkpoint the main one chose
        from accelerate.utils import broadcast_object_list

        resumed = broadcast_object_list([resumed])[0]
    if resumed is not None:
        folder, state = resumed
        built_with = implementation_flags(optimizer)
        accelerator.load_state(str(folder / ACCELERATE_STATE))
        restore_implementation_flags(optimizer, built_with)
        # weights_only: a checkpoint is data, never code to run (and older torch defaults differ).
        best_state = torch.load(folder / BEST_WEIGHTS, map_location="cpu", weights_only=True)
        logger.info("resumed from %s at step %d (best %s %.2f at step %d)", folder, state["step"],
                    config.select_by, state["best_scores"].get(config.select_by, float("nan")), state["best_step"])

    live = open_live_log(config.live_log_dir, accelerator.is_main_process,
                         resume_after=state["step"] if resumed is not None else None)

    def evaluate() -> None:
        nonlocal best_state
        if dev_scorer is None or not accelerator.is_main_process:
            return
        # The dev sets run through the encoder's own forward: their batches have other
        # shapes, which a compiled forward would compile again (once per shape when static).
        with uncompiled(core.encoder):
            encode = core.sentence_encoder(tokenizer, accelerator.device).encode
            if state["step"] == 0 and hasattr(dev_scorer, "starting_scores"):
                scores = dev_scorer.starting_scores(starting_point_key(core, accelerator.device, config), encode)
            else:
                scores = dev_scorer(encode)
        row = {"step": state["step"], **{f"dev/{k}": v for k, v in scores.items()}}
        state["curve"].append(row)
        if live is not None:
            live.log(row)
        if config.select_by not in scores:
            raise ValueError(f"training.select_by is {config.select_by!r}, but the dev scorer gives "
                             f"{', '.join(scores)}")
        if not math.isfinite(scores[config.select_by]):
            # A NaN never compares greater: the run would silently keep the weights of step 0.
            raise FloatingPointError(f"dev score {config.select_by} is {scores[config.select_by]} at step "
                                     f"{state['step']}; the kept weights cannot be chosen by it")
        if scores[config.select_by] > state["best_scores"].get(config.select_by, -math.inf):
            state["best_scores"], state["best_step"] = scores, state["step"]
            best_state = {k: v.detach().cpu().clone() for k, v in core.encoder.state_dict().items()}
        logger.info("step %d: STS-B dev %.2f, SICK-R trial %.2f (best %s %.2f at step %d)", state["step"],
                    scores.get("stsb_dev", float("nan")), scores.get("sickr_dev", float("nan")), config.select_by,
                    state["best_scores"][config.select_by], state["best_step"])

    def save_checkpoint() -> None:
        if store is None:
            return
        accelerator.wait_for_everyone()
        staging = store.root / f"{_STAGING_PREFIX}{state['step']}"
        if accelerator.is_main_process:
            staging = store.staging(state["step"])
        accelerator.wait_for_everyone()
        # Only the main process writes: it saves the accelerate state (under DDP the
        # weights, optimiser and schedule are the same on every process) and every
        # process's RNG state, gathered to it, in the files accelerate's load_state reads.
        rng_states = _gather_rng_states(accelerator)
        with explained_no_space(staging, CHECKPOINT_SPACE_REMEDY):
            _write_checkpoint(staging, rng_states)

    def _write_checkpoint(staging: Path, rng_states: list) -> None:
        if accelerator.is_main_process:
            # DeCLUTR's masked-LM decoder shares its weight with the word embeddings (and
            # its bias with the head's): safetensors stores one tensor per storage, so
            # accelerate saves each shared tensor once and warns "Removed shared tensor
            # ... while saving" at every checkpoint. Benign here: load_state reads the
            # file with safetensors' load_model into this same model, whose ties make the
            # removed names the kept tensors again (tests/training/test_trainer.py resumes
            # such a model and checks it). Nothing else of accelerate's is held.
            with held_messages("accelerate.utils.other", r"Removed shared tensor"):
                accelerator.save_state(str(staging / ACCELERATE_STATE))
            for rank, rng_state in enumerate(rng_states[1:], start=1):
                torch.save(rng_state, staging / ACCELERATE_STATE / f"{_RNG_STATE_FILE}_{rank}.pkl")
        crash_point("checkpoint:after_accelerate_state")
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            torch.save(best_state, staging / BEST_WEIGHTS)
            # The loss window under way (a checkpoint between two logged rows): a resumed
            # run's next row averages the same steps as the uninterrupted run's.
            window = {"loss": _read_window(window_loss, window_steps), "count": window_count,
                      "seconds": time.perf_counter() - window_start}
            write_text_atomically(staging / TRAINER_STATE,  # synced before publish
                                  json.dumps({**state, "window": window}, indent=1))
            crash_point("checkpoint:before_publish")
            store.publish(staging, state["step"])
        accelerator.wait_for_everyone()

    # The attention kernels allowed, around training and the dev scoring it runs (each
    # process of a fan-out enters it itself), set before compiling traces the forward.
    with allowed_attention(config.attention_backends), compiled_for_training(core, config):
        if state["step"] == 0:
            evaluate()
        model.train()
        started = time.perf_counter() - state["seconds"]
        # The steps since the last logged row; a checkpoint written before the "window"
        # entry existed resumes with an empty one.
        window = state.pop("window", None) or {}
        window_loss: dict[str, float | torch.Tensor] = dict(window.get("loss", {}))
        window_count = int(window.get("count", 0))
        window_steps: list[int] = []  # the steps summed in window_loss since it was last checked
        window_start = time.perf_counter() - float(window.get("seconds", 0.0))
        progress = tqdm(total=steps, initial=state["step"], desc=f"training {current_run(core.method.name)}", unit="step",
                        disable=not accelerator.is_local_main_process)
        steps_per_epoch = len(loader)
        while state["step"] < steps:
            epoch, done_in_epoch = divmod(state["step"], steps_per_epoch)
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            if hasattr(collate, "set_epoch"):  # e.g. DeCLUTR: each epoch has its own sampled spans
                collate.set_epoch(epoch)
            generator.manual_seed(config.seed + epoch)  # the same order on resume
            batches = accelerator.skip_first_batches(loader, done_in_epoch) if done_in_epoch else loader
            for batch in batches:
                if cuda_graphs:  # a new iteration: the graphs' outputs of the last one may be overwritten
                    torch.compiler.cudagraph_mark_step_begin()
                # A loss over embeddings gathered from every process is the global-batch loss
                # on each of them, but each backpropagates only through its own slice; DDP
                # then averages, so the loss is scaled by the number of processes to give
                # exactly the single-process gradient (training/distributed.py derives it).
                scale = accelerator.num_processes if core.method.gathers_embeddings else 1
                if gradient_cache is not None:  # the same loss and gradient, one mini-batch's graph at a time
                    outputs = gradient_cache.step(batch, loss_scale=scale)
                else:
                    outputs = model(**batch)
                    accelerator.backward(outputs["loss"] * scale)
                if config.max_grad_norm:
                    accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                state["step"] += 1
                state["examples"] += config.batch_size * accelerator.num_processes
                # The window's sums stay on the device: reading a loss back waits for the GPU
                # to finish the step, so the host could not queue the next one meanwhile. They
                # are read (and checked) when a row is logged, at a checkpoint and at the end.
                for key, value in outputs.items():
                    window_loss[key] = window_loss.get(key, 0.0) + value.detach().float()
                window_count += 1
                window_steps.append(state["step"])
                logs_a_row = state["step"] % config.log_every == 0 or state["step"] == steps
                if HOST_SYNC_EVERY_STEP or logs_a_row:
                    window_loss = _read_window(window_loss, window_steps)
                    window_steps = []
                if logs_a_row:
                    elapsed = time.perf_counter() - window_start
                    seen = window_count * config.batch_size * accelerator.num_processes
                    row = {"step": state["step"], "epoch": epoch, "lr": scheduler.get_last_lr()[0],
                           "examples_per_second": seen / elapsed,
                           "peak_memory_gib": round(peak_memory_gib(accelerator.device), 3),
                           **{k: v / window_count for k, v in window_loss.items()}}
                    state["curve"].append(row)
                    if live is not None:
                        live.log(row)
                    progress.set_postfix(loss=f"{row['loss']:.4f}", ex_s=f"{row['examples_per_second']:.1f}",
                                         mem=f"{row['peak_memory_gib']:.1f}G")
                    window_loss, window_count, window_start = {}, 0, time.perf_counter()
                progress.update(1)
                if (config.eval_every and state["step"] % config.eval_every == 0) or state["step"] == steps:
                    window_loss = _read_window(window_loss, window_steps)  # no weights of a diverged step are scored
                    window_steps = []
                    model.eval()
                    evaluate()
                    model.train()
                    state["seconds"] = time.perf_counter() - started
                    save_checkpoint()
                if state["step"] >= steps:
                    break
        progress.close()
    if live is not None:
        live.close()
    seconds = time.perf_counter() - started
    # The last checkpoint stays until the model is saved (release_checkpoints): a crash
    # before that would otherwise lose the whole run.
    if dev_scorer is None:
        best_state = {k: v.detach().cpu().clone() for k, v in core.encoder.state_dict().items()}
        state["best_step"] = state["step"]
    curve = _curve_table(state["curve"])
    rate = state["examples"] / max(seconds, 1e-9)
    peak = peak_memory_gib(accelerator.device)
    kept = "the last weights"
    if dev_scorer is not None:
        kept = (f"best {config.select_by} {state['best_scores'].get(config.select_by, float('nan')):.2f} "
                f"at step {state['best_step']}")
    logger.info("trained %d steps in %.0f s (%.1f examples/s, peak %s memory %.2f GiB); %s",
                state["step"], seconds, rate, "GPU (allocated)" if accelerator.device.type == "cuda" else "process (RSS)",
                peak, kept)
    if dev_scorer is not None and state["best_step"] == 0:
        logger.warning("no training step scored above step 0 on %s: the kept weights are the starting ones "
                       "(the pretrained encoder, with any newly initialised layers; see the training curve)",
                       config.select_by)
    if store is not None:
        store.unclaim()
    return TrainingResult(best_state, state["best_step"], state["best_scores"], curve, state["step"], seconds, rate,
                          {"config": asdict(settings), "settings_unread": config.unread(),
                           "num_processes": accelerator.num_processes, "peak_memory_gib": round(peak, 3),
                           # where it ran, in accelerate's words ("cuda:0", "bf16"): a paper run's proof
                           "device": str(accelerator.device), "mixed_precision": str(accelerator.mixed_precision),
                           "peak_memory_measure": memory_measure(accelerator.device),
                           "examples_seen": int(state["examples"])})


_RNG_STATE_FILE = "random_states"  # accelerate's name for a process's RNG state: <name>_<process>.pkl


def starting_point_key(core: torch.nn.Module, device: torch.device, config: TrainingConfig) -> str | None:
    """What the step-0 dev scores of ``core`` depend on, for ``DevScorer.starting_scores``:
    its encoding key (weights and pooling; None for a model without one, whose step 0 is
    always scored), the precision on ``device``, the attention kernels allowed, and the
    torch and transformers versions (their kernels move the last digits)."""
    if not hasattr(core, "encoding_key"):
        return None
    import transformers

    return json.dumps({"weights": core.encoding_key(), "precision": precision_tag(device),
                       "attention": list(config.attention_backends or []),
                       "torch": torch.__version__, "transformers": transformers.__version__})


def _gather_rng_states(accelerator) -> list[dict]:
    """Every process's random-number-generator state, in process order (on every
    process; a collective), with the keys ``accelerate``'s ``load_state`` restores."""
    import random

    state = {"step": accelerator.step, "random_state": random.getstate(),
             "numpy_random_seed": np.random.get_state(), "torch_manual_seed": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["torch_cuda_manual_seed"] = torch.cuda.get_rng_state_all()
    if accelerator.num_processes == 1:
        return [state]
    from accelerate.utils import gather_object

    return gather_object([state])


def _read_window(window_loss: Mapping[str, float | torch.Tensor], steps: Sequence[int]) -> dict[str, float]:
    """The window's loss sums as numbers (one transfer for all of them), refusing a
    non-finite loss: ``steps`` are those summed since the last check, named in the
    error (a NaN or an infinity in a sum comes from one of them)."""
    keys = list(window_loss)
    values = [window_loss[k] for k in keys]
    if any(isinstance(v, torch.Tensor) for v in values):
        values = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=_device_of(values)) for v in values]
                             ).tolist()
    read = dict(zip(keys, (float(v) for v in values)))
    if "loss" in read and not math.isfinite(read["loss"]):
        where = (f"at step {steps[0]}" if len(steps) == 1 else f"in steps {steps[0]}-{steps[-1]}") if steps else ""
        raise FloatingPointError(f"loss became {read['loss']} {where}; lower the learning rate or check the data")
    return read


def _device_of(values: Sequence) -> torch.device:
    return next(v.device for v in values if isinstance(v, torch.Tensor))


def _curve_table(rows: list[dict]) -> pd.DataFrame:
    """Training rows and evaluation rows merged per step, in step order."""
    if not rows:
        return pd.DataFrame(columns=["step"])
    table = pd.DataFrame(rows).groupby("step", as_index=False).first()
    return table.sort_values("step").reset_index(drop=True)
