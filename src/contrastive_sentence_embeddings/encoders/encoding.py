"""Turning sentences into embeddings with any saved encoder.

The evaluation protocol (SentEval as SimCSE runs it) encodes every sentence at full
length: nothing is truncated below the model's own maximum, and the few sentences
longer than that are counted and logged. Sentences are tokenised once, sorted by
length and batched, so each batch is padded only to its own longest sentence
(dynamic padding); the embeddings come back in the input order.

One forward pass can feed several pooling methods at once, which is how the
``baseline`` pipeline scores every pooling of the default encoder for the price of
one encoding.

A saved model may end in dense layers after the pooling (CLSR's trained MLP on top
of a frozen encoder): sentence-transformers ``Dense`` modules listed in the folder's
``modules.json``. :meth:`SentenceEncoder.load` reads them into ``head`` and
``encode`` applies it to the pooled embedding, so this project and
``SentenceTransformer(path)`` give the same embeddings.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from contrastive_sentence_embeddings.encoders.attention_kernels import allowed_attention, check_attention_backends
from contrastive_sentence_embeddings.encoders.loading import explained_encoder_failure, resolve_encoder
from contrastive_sentence_embeddings.encoders.integrity import check_loaded_model, check_recorded_files
from contrastive_sentence_embeddings.encoders.pooling import check_pooling, needs_hidden_states, pool_outputs

logger = logging.getLogger(__name__)

# Written next to a model saved by this project's trainer: method, base encoder,
# pooling, seed, training parameters and library versions.
METADATA_FILE = "cse_metadata.json"
# Beyond this, a tokenizer's model_max_length is a placeholder ("no limit"), not a limit.
_UNSET_MAX_LENGTH = 1_000_000
# sentence-transformers' Dense modules: their folder holds config.json and the weights.
DENSE_CONFIG = "config.json"
DENSE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def pick_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when present, else CPU."""
    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager:
    """Mixed precision on CUDA (bf16 where supported, else fp16); full fp32 on CPU,
    where bf16 autocast is far slower without AVX-512/AMX."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.autocast("cuda", dtype=dtype)


def precision_tag(device: torch.device) -> str:
    """How ``SentenceEncoder`` computes on ``device`` (:func:`autocast_for`): fp32 on
    CPU, bf16 or fp16 autocast on CUDA. Embeddings differ slightly between them, so a
    cache of embeddings keeps them apart by this tag."""
    if device.type != "cuda":
        return f"{device.type}-fp32"
    return "cuda-bf16" if torch.cuda.is_bf16_supported() else "cuda-fp16"


@contextlib.contextmanager
def inference_mode(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode and no autograd for the duration, then the model's previous
    train/eval flags back: the trainer calls the evaluator in the middle of training."""
    flags = {module: module.training for module in model.modules()}
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, was_training in flags.items():
            module.train(was_training)


def max_sequence_length(tokenizer, config) -> int:
    """The longest input the model accepts: the smaller of the tokenizer's
    ``model_max_length`` (when set) and the position embeddings' size (RoBERTa's 514
    includes its padding offset, so its tokenizer's 512 is the one that counts)."""
    limits = [int(getattr(config, "max_position_embeddings", 0) or 0)]
    declared = getattr(tokenizer, "model_max_length", None)
    if declared is not None and declared < _UNSET_MAX_LENGTH:
        limits.append(int(declared))
    limits = [limit for limit in limits if limit > 0]
    if not limits:
        raise ValueError("neither the tokenizer nor the model config states a maximum sequence length")
    return min(limits)


def read_model_metadata(path: str | Path) -> dict:
    """The project's metadata of a saved model, or ``{}`` for any other model."""
    file = Path(path) / METADATA_FILE
    if not file.is_file():
        return {}
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{file}: not valid JSON ({err})") from err


def default_pooling(path: str | Path) -> str | None:
    """The pooling a saved model declares: this project's metadata first, else a
    sentence-transformers ``1_Pooling/config.json`` (mean or CLS)."""
    metadata = read_model_metadata(path)
    if metadata.get("pooling"):
        return check_pooling(metadata["pooling"])
    st_pooling = Path(path) / "1_Pooling" / "config.json"
    if st_pooling.is_file():
        config = json.loads(st_pooling.read_text(encoding="utf-8"))
        # sentence-transformers >= 6 writes "pooling_mode"; older versions one flag per mode.
        if config.get("pooling_mode") == "mean" or config.get("pooling_mode_mean_tokens"):
            return "mean"
        if config.get("pooling_mode") == "cls" or config.get("pooling_mode_cls_token"):
            return "cls_before_pooler"
    return None


def is_activation_module(module: torch.nn.Module) -> bool:
    """A parameter-free ``torch.nn`` module (ReLU, Tanh, GELU, Identity, ...) that its
    class rebuilds exactly with no arguments, which is how sentence-transformers'
    ``Dense`` reloads its activation (by class name): ``LeakyReLU(0.2)`` would come
    back as ``LeakyReLU(0.01)`` and is therefore not one."""
    cls = type(module)
    if not cls.__module__.startswith("torch.nn") or any(True for _ in module.parameters()):
        return False
    try:
        return repr(cls()) == repr(module)
    except TypeError:  # needs constructor arguments
        return False


def dense_layers(head: torch.nn.Module) -> list[tuple[torch.nn.Linear, torch.nn.Module]]:
    """The ``(linear, activation)`` steps of a head made of ``nn.Linear`` layers, each
    optionally followed by one activation (:func:`is_activation_module`; a missing one
    is ``nn.Identity``): an ``nn.Sequential`` such as ``Linear, ReLU, Linear`` or a
    single ``nn.Linear``. Each step is one sentence-transformers ``Dense`` module in a
    saved model. Anything else (another module with weights, two activations in a
    row, widths that do not chain) raises ``ValueError``."""
    modules = list(head) if isinstance(head, torch.nn.Sequential) else [head]
    steps: list[list] = []
    for module in modules:
        if isinstance(module, torch.nn.Linear):
            if steps and steps[-1][0].out_features != module.in_features:
                raise ValueError(f"head: a Linear of {steps[-1][0].out_features} outputs is followed by one of "
                                 f"{module.in_features} inputs")
            steps.append([module, None])
        elif is_activation_module(module) and steps and steps[-1][1] is None:
            steps[-1][1] = module
        else:
            raise ValueError(f"head: expected Linear layers, each optionally followed by one argument-free "
                             f"torch.nn activation; cannot express {module!r} as a sentence-transformers Dense "
                             "module")
    if not steps:
        raise ValueError("head: no Linear layer")
    return [(linear, activation if activation is not None else torch.nn.Identity()) for linear, activation in steps]


def _import_activation(name: str) -> torch.nn.Module:
    """The activation a ``Dense`` config names (``torch.nn.modules.activation.ReLU``);
    only ``torch.nn`` classes are imported, as sentence-transformers does without
    ``trust_remote_code``."""
    import importlib

    module_name, _, class_name = name.rpartition(".")
    if not module_name.startswith("torch.nn"):
        raise ValueError(f"Dense activation {name!r} is not a torch.nn module; refusing to import it")
    cls = getattr(importlib.import_module(module_name), class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise ValueError(f"Dense activation {name!r} is not a torch.nn module class")
    return cls()


def _load_dense(folder: Path) -> list[torch.nn.Module]:
    """``[Linear, activation]`` from one sentence-transformers ``Dense`` folder."""
    config = json.loads((folder / DENSE_CONFIG).read_text(encoding="utf-8"))
    if config.get("use_residual") or config.get("module_input_name", "sentence_embedding") != "sentence_embedding" \
            or config.get("module_output_name", "sentence_embedding") not in (None, "sentence_embedding"):
        raise ValueError(f"{folder}: only Dense modules on the sentence embedding without a residual are supported "
                         f"(config {config})")
    # sentence-transformers' default activation when the config names none is Tanh.
    activation = _import_activation(config.get("activation_function", "torch.nn.modules.activation.Tanh"))
    bias = bool(config.get("bias", True))
    linear = torch.nn.Linear(int(config["in_features"]), int(config["out_features"]), bias=bias)
    weights_file = next((folder / name for name in DENSE_WEIGHTS if (folder / name).is_file()), None)
    if weights_file is None:
        raise FileNotFoundError(f"{folder}: no Dense weights ({' or '.join(DENSE_WEIGHTS)})")
    if weights_file.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(weights_file))
    else:
        state = torch.load(weights_file, map_location="cpu", weights_only=True)
    prefix = "linear."
    linear.load_state_dict({key[len(prefix):]: value for key, value in state.items() if key.startswith(prefix)})
    return [linear, activation]


def load_dense_head(path: str | Path) -> torch.nn.Sequential | None:
    """The sentence-transformers ``Dense`` modules a saved model applies after its
    pooling (``modules.json``), in order, as ``Sequential(Linear, activation, ...)``;
    None when there are none (or no ``modules.json``). A ``Normalize`` before a
    ``Dense`` cannot be reproduced (this project encodes without normalising) and
    raises ``ValueError``."""
    folder = Path(path)
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return None
    entries = sorted(json.loads(modules_file.read_text(encoding="utf-8")), key=lambda entry: int(entry["idx"]))
    layers: list[torch.nn.Module] = []
    normalized = False
    for entry in entries:
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
        if kind == "Normalize":
            normalized = True
        elif kind == "Dense":
            if normalized:
                raise ValueError(f"{folder}: a Dense module after Normalize is not supported")
            layers.extend(_load_dense(folder / entry["path"]))
    return torch.nn.Sequential(*layers) if layers else None


def pad_batch(token_ids: Sequence[Sequence[int]], pad_token_id: int, length: int | None = None
              ) -> dict[str, torch.Tensor]:
    """Right-pad a batch to its longest member, or to ``length`` (one shape for every
    batch): ``input_ids`` and ``attention_mask``."""
    longest = max(len(ids) for ids in token_ids)
    if length is not None:
        if longest > length:
            raise ValueError(f"a sequence of {longest} tokens does not fit the padded length {length}")
        longest = length
    input_ids = torch.full((len(token_ids), longest), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(token_ids), longest), dtype=torch.long)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


@dataclass
class SentenceEncoder:
    """A Hugging Face encoder, its tokenizer, a pooling method and an optional
    ``head`` applied to the pooled embedding (dense layers saved with the model,
    e.g. CLSR's MLP; see :func:`load_dense_head`).

    ``encode`` returns float32 numpy embeddings (not normalised; cosine scoring
    normalises). ``batch_size`` counts sentences per forward pass. ``attention_backends``
    names the attention kernels the encoding may use (``encoders/attention_kernels.py``; None:
    PyTorch's choice).
    """

    model: torch.nn.Module
    tokenizer: object
    pooling: str = "mean"
    batch_size: int = 128
    device: torch.device = field(default_factory=pick_device)
    name: str = ""
    max_length: int | None = None
    head: torch.nn.Module | None = None
    attention_backends: Sequence[str] | None = None

    def __post_init__(self) -> None:
        check_pooling(self.pooling)
        self.attention_backends = check_attention_backends(self.attention_backends)
        if self.max_length is None:
            self.max_length = max_sequence_length(self.tokenizer, self.model.config)
        self.model.to(self.device)
        if self.head is not None:
            self.head.to(self.device)

    @property
    def dimension(self) -> int:
        """The width of the embeddings ``encode`` returns."""
        if self.head is not None:
            return [m for m in self.head.modules() if isinstance(m, torch.nn.Linear)][-1].out_features
        return int(self.model.config.hidden_size)

    @classmethod
    def load(
        cls,
        name_or_path: str,
        pooling: str | None = None,
        batch_size: int = 128,
        device: str | None = None,
        attention_backends: Sequence[str] | None = None,
    ) -> "SentenceEncoder":
        """Load any ``AutoModel`` directory or Hub id (``all-MiniLM-L6-v2`` resolves to
        the offline copy). Without ``pooling``, the saved model's declared pooling is
        used; a model that declares none needs one. A local directory's ``Dense``
        modules (``modules.json``) become the ``head`` (for a Hub id only the
        ``AutoModel`` is loaded)."""
        from transformers import AutoModel, AutoTokenizer

        source = resolve_encoder(name_or_path)
        pooling = pooling or (default_pooling(source) if Path(source).is_dir() else None)
        if pooling is None:
            raise ValueError(f"{name_or_path}: the model does not declare a pooling method; pass one")
        check_recorded_files(source)  # before loading: a missing file is named, not guessed around
        with explained_encoder_failure(name_or_path, source):
            tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True)
            model = AutoModel.from_pretrained(source)
        check_loaded_model(source, tokenizer, model)
        head = load_dense_head(source) if Path(source).is_dir() else None
        logger.info("encoder %s loaded from %s (pooling %s%s)", name_or_path, source, pooling,
                    f", then {len(dense_layers(head))} dense layer(s)" if head is not None else "")
        return cls(model, tokenizer, pooling, batch_size, pick_device(device), name=name_or_path, head=head,
                   attention_backends=attention_backends)

    def execution(self) -> dict:
        """How this encoder computes, for a score's record: the device (and the GPU's
        name), the precision (:func:`precision_tag`), the batch size and the attention
        kernels allowed (None: PyTorch's choice)."""
        record = {"device": self.device.type, "precision": precision_tag(self.device), "batch_size": self.batch_size,
                  "attention_backends": self.attention_backends}
        if self.device.type == "cuda":
            record["device_name"] = torch.cuda.get_device_name(self.device)
        return record

    def tokenize(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids of every sentence, truncated only at the model maximum; the
        truncated ones are counted in the log."""
        encoded = self.tokenizer(
            list(sentences), truncation=True, max_length=self.max_length, add_special_tokens=True
        )["input_ids"]
        truncated = sum(len(ids) >= self.max_length for ids in encoded)
        if truncated:
            logger.warning("%d of %d sentences reach the model maximum of %d tokens and were truncated",
                           truncated, len(encoded), self.max_length)
        return encoded

    def encode(self, sentences: Sequence[str], show_progress: bool | None = None) -> np.ndarray:
        """Embeddings (len(sentences), dim) with this encoder's pooling."""
        return self.encode_poolings(sentences, [self.pooling], show_progress)[self.pooling]

    def encode_poolings(
        self, sentences: Sequence[str], poolings: Sequence[str], show_progress: bool | None = None
    ) -> dict[str, np.ndarray]:
        """Embeddings for several pooling methods from one forward pass per batch
        (each pooled embedding then goes through ``head``, when there is one)."""
        for method in poolings:
            check_pooling(method)
        if not len(sentences):
            return {method: np.zeros((0, self.dimension), dtype=np.float32) for method in poolings}
        start = time.perf_counter()
        token_ids = self.tokenize(sentences)
        # Longest first: a too-large batch fails at once rather than at the end.
        order = np.argsort([-len(ids) for ids in token_ids], kind="stable")
        with_layers = needs_hidden_states(poolings)
        pieces: dict[str, list[np.ndarray]] = {method: [] for method in poolings}
        batches = range(0, len(order), self.batch_size)
        if show_progress is None:
            show_progress = len(sentences) >= 10 * self.batch_size
        head_mode = inference_mode(self.head) if self.head is not None else contextlib.nullcontext()
        with inference_mode(self.model), head_mode, autocast_for(self.device), allowed_attention(self.attention_backends):
            for begin in tqdm(batches, desc=f"encoding {len(sentences)} sentences", disable=not show_progress,
                              unit="batch"):
                batch = pad_batch([token_ids[i] for i in order[begin:begin + self.batch_size]],
                                  self.tokenizer.pad_token_id)
                batch = {key: value.to(self.device) for key, value in batch.items()}
                outputs = self.model(**batch, output_hidden_states=with_layers, return_dict=True)
                for method in poolings:
                    embedding = pool_outputs(method, outputs, batch["attention_mask"])
                    if self.head is not None:
                        embedding = self.head(embedding)
                    pieces[method].append(embedding.float().cpu().numpy())
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        elapsed = time.perf_counter() - start
        logger.info("encoded %d sentences in %.1f s (%.0f sentences/s)", len(sentences), elapsed,
                    len(sentences) / max(elapsed, 1e-9))
        return {method: np.concatenate(pieces[method])[inverse] for method in poolings}
