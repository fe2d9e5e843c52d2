"""Training throughput of every method at its paper settings, on a GPU or the CPU.

    python benchmarks/training_throughput.py --device cuda            # the whole table
    python benchmarks/training_throughput.py --device cpu --encoder-config tiny --steps 4 --warmup 2   # a smoke run
    python benchmarks/training_throughput.py --device cuda --methods declutr --method-set pad_to_multiple_of=64

Each method trains through the library's own path (the parameter block of
``conf/base`` merged with ``conf/paper``, parsed by :class:`MethodBlock`; the
method's model; the shared trainer ``train``) for ``--warmup`` + ``--steps`` steps,
with an encoder of paper size built from its configuration with random weights
(speed and memory do not depend on the weights; no Hub): ``bert-base-uncased``
for SimCSE, ImSimCSE, SCD and CLSR, ``roberta-base`` for DeCLUTR. Batches are real
text: the mirror's Wikipedia sentences (``wiki/wiki1m_head.txt``) and, for
DeCLUTR, the WikiText-2 articles of >= 2048 tokens with spans sampled by the
library's sampler at the paper's settings (A = 2, P = 2, 32-512 tokens).

Reported per method, over the timed steps (after the warm-up): examples/s,
non-padding tokens/s through the encoder (every view counts: SimCSE encodes each
sentence twice), MFU and peak memory, and the cost of one dev evaluation (STS-B dev
+ SICK-R trial, what the paper runs every 125/250 steps) as seconds and as a share
of 125 steps. sentence-transformers' ``MultipleNegativesRankingLoss`` trainer runs
as the peer in the same process, on the same encoder, sentences, batch, length and
precision (so on CPU it finds the heap our trainer's run has grown, which made its
steps ~13% faster than in a fresh process on the AVX-512 machine: simcse_training.py
runs each trainer in a process of its own). ``--ablation`` measures each speed setting
on and off for SimCSE, and DeCLUTR with its bucket widths rounded or not and with or
without cuDNN's attention. Each row also says which kernel SDPA runs for a padded
training pass there (``attention_kernel``) and how many of a timed step's encoder
passes had a ``(rows, width)`` shape no earlier pass had (``new_pass_shapes_per_timed_step``):
kernels prepared per shape (cuDNN's attention graphs) are prepared again for those.
``--profile N`` adds where a step goes (torch.profiler) and the host reads of one
step with the line behind each (on a GPU, each read is a wait for the device).
``--no-cpu-shortcuts`` trains on CPU the way a GPU does (no packing of real tokens,
torch's dropout masks): a rehearsal of the device's path.

**MFU** (model FLOPs utilisation) = model FLOPs per second / the device's stated
dense bf16 peak (``PEAK_BF16``: NVIDIA's datasheets, without sparsity). Model
FLOPs are counted analytically from the encoder's shape and the real (non-padding)
length of every sequence it encodes: per layer and token ``2 (4 d^2 + 2 d f)`` for
the projections and the feed-forward block, plus ``4 d s`` for the attention scores
and their weighted sum (``s`` the sequence's length), times 3 for a pass that is
back-propagated (backward = 2 x forward), plus ``2 n_in n_out`` per row of every
linear layer of the heads (MLM decoder, projectors, CLSR's networks). Embedding
look-ups, layer norms, softmax and the losses are left out, so MFU slightly
understates the work. **HFU** counts the same formula on the padded shapes (what the
device actually multiplies), and with ``mini_batch_size`` (gradient caching) also
the graph-free first pass over each mini-batch, which MFU leaves out as
recomputation (PaLM's definition: the step's model work, whatever the device
repeats to save memory); tokens/s and the padding share count the step's own
passes. The benchmark imports only torch, transformers, accelerate, numpy, pandas,
pyarrow, scipy and the library's core (no Kedro, datasets, spaCy or DVC); the peer
needs sentence-transformers and ``datasets``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))  # the checkout's library, installed or not

from contrastive_sentence_embeddings.training import trainer as trainer_module  # noqa: E402
from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.configuration.layering import read_parameters_yaml  # noqa: E402
from contrastive_sentence_embeddings.runs.project_paths import recorded_command  # noqa: E402
from contrastive_sentence_embeddings.records.provenance import (  # noqa: E402
    child_environment, cpu_description, results_commit, tuning_environment,
)
from contrastive_sentence_embeddings.encoders.attention_kernels import allowed_attention  # noqa: E402
from contrastive_sentence_embeddings.training.host_reads import HostReads  # noqa: E402
from contrastive_sentence_embeddings.training.method_block import MethodBlock  # noqa: E402
from contrastive_sentence_embeddings.training.trainer import tokenize_sentences, train  # noqa: E402

RESULTS_DIR = PROJECT_ROOT / "benchmarks" / "results"
logger = logging.getLogger("training_throughput")

# Encoder shapes (the published configurations; random weights). "tiny" is for smoke runs only.
ENCODER_CONFIGS = {
    "bert-base-uncased": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512,
                          "type_vocab_size": 2},
    "roberta-base": {"model_type": "roberta", "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12,
                     "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514,
                     "type_vocab_size": 1, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
                     "layer_norm_eps": 1e-5},
    "minilm-l6": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
                  "num_attention_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512,
                  "type_vocab_size": 2},
    "tiny": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 512,
             "type_vocab_size": 2},
}
# Dense bf16 tensor-core peaks (FLOP/s; NVIDIA's datasheets, without sparsity) by a part of
# the device's name; the longest part a name contains decides (an L40S is not an L4, an
# A100 not an A10).
PEAK_BF16 = {"H100": 989.4e12, "H100 PCIe": 756e12, "H100 NVL": 835.5e12, "H200": 989.4e12, "GH200": 989.4e12,
             "A100": 312e12, "L40S": 362.05e12, "L40": 181.05e12, "L4": 121e12, "A10G": 70e12, "A10": 125e12}
# The methods and the block each reads (conf/base/parameters_<file>.yml + conf/paper).
METHODS = {"simcse": "simcse", "imsimcse": "imsimcse", "scd": "scd", "declutr": "declutr", "clsr": "clsr_stsb"}
PAPER_ENCODER = {"declutr": "roberta-base"}
EVAL_EVERY_PAPER = 125  # SimCSE's dev evaluation interval (its paper; 250 in its released script)


# --- inputs ---------------------------------------------------------------------------
def mirror_dir(given: str | None) -> Path:
    return Path(given or os.environ.get("CSE_DATA_MIRROR") or PROJECT_ROOT.parent / "shared" / "datasets")


def tokenizer_dir(given: str | None) -> str:
    """The all-MiniLM-L6-v2 tokenizer (bert-base-uncased's 30,522-token vocabulary): a
    folder (``--tokenizer`` or ``CSE_TOKENIZER_DIR``), else the packaged copy."""
    folder = given or os.environ.get("CSE_TOKENIZER_DIR")
    if folder:
        return folder
    from contrastive_sentence_embeddings.encoders.loading import packaged_default_encoder_path

    return str(packaged_default_encoder_path())


def build_encoder_folder(shape: str, tokenizer, root: Path, seed: int = 0) -> Path:
    """A random-weight masked-LM model of ``shape`` saved with the tokenizer, so that the
    library loads it like a pretrained one (its MLM head included, for DeCLUTR)."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    folder = root / shape
    if folder.is_dir():
        return folder
    values = dict(ENCODER_CONFIGS[shape])
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(seed)
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def read_sentences(mirror: Path) -> list[str]:
    path = mirror / "wiki" / "wiki1m_head.txt"
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_articles(mirror: Path) -> dict[str, str]:
    """WikiText-2's articles (valid + test): an article starts at a ``" = Title = "`` line."""
    articles: dict[str, list[str]] = {}
    title = None
    for split in ("valid", "test"):
        for line in (mirror / "longdocs" / f"wikitext-2.{split}.txt").read_text(encoding="utf-8").splitlines():
            heading = re.fullmatch(r" = ([^=].*[^=]) = ", line)
            if heading:
                title = f"{split}:{heading.group(1)}"
                articles[title] = []
            elif title is not None and line.strip():
                articles[title].append(line.strip())
    return {name: " ".join(lines) for name, lines in articles.items()}


def method_block(name: str, overrides: dict) -> MethodBlock:
    """``conf/base`` merged with ``conf/paper`` for the method's block, then ``overrides``
    (training settings of this benchmark), parsed as the training node parses it."""

    def merge(base: dict, extra: dict) -> dict:
        merged = copy.deepcopy(base)
        for key, value in extra.items():
            merged[key] = merge(merged.get(key) or {}, value) if isinstance(value, dict) else value
        return merged

    block_name = METHODS[name]
    block: dict = {}
    for env in ("base", "paper"):
        path = PROJECT_ROOT / "conf" / env / f"parameters_{block_name}.yml"
        if path.is_file():
            block = merge(block, (read_parameters_yaml(path.read_text(encoding="utf-8")) or {}).get(block_name, {}))
    block = merge(block, overrides)
    # A benchmark measures training, not logging: nothing goes into the project's live log
    # (data/08_reporting/live), and DVCLive, which needs DVC, is absent from the GPU image.
    block.setdefault("training", {})["live_log_dir"] = None
    return MethodBlock.from_params(block, block_name)


def paper_spans(mirror: Path) -> dict:
    path = PROJECT_ROOT / "conf" / "paper" / "parameters_data_processing.yml"
    paper = read_parameters_yaml(path.read_text(encoding="utf-8"))["data_processing"]["declutr_spans"]
    base = read_parameters_yaml((PROJECT_ROOT / "conf" / "base" / "parameters_data_processing.yml").read_text(
        encoding="utf-8"))["data_processing"]["declutr_spans"]
    return {**base, **paper, "seed": 42}  # null there: the shared seed


# --- counting the work ------------------------------------------------------------------
def new_shapes(passes, warmup_steps: int) -> tuple[int, int, int]:
    """Over ``passes``, the ``(step, rows, width)`` of each encoder pass in order: the
    distinct ``(rows, width)`` shapes, the passes from step ``warmup_steps`` on, and how
    many of those had a shape no earlier pass had (on a GPU, kernels prepared per shape,
    such as cuDNN's attention graphs, are prepared again for each of them)."""
    seen: set[tuple[int, int]] = set()
    timed = new = 0
    for step, rows, width in passes:
        if step >= warmup_steps:
            timed += 1
            new += (rows, width) not in seen
        seen.add((rows, width))
    return len(seen), timed, new


class WorkCounter:
    """Counts, with forward hooks, the tokens and FLOPs of every encoder pass and every
    linear layer of the heads (the module docstring says how). Sums stay on the device
    (no synchronisation inside the step); :meth:`totals` reads them once."""

    def __init__(self, encoder: torch.nn.Module | None, heads: list[torch.nn.Module], config=None):
        self.real_tokens: list = []
        self.padded_tokens = 0
        self.model_flops: list = []
        self.hardware_flops = 0.0
        self.steps_done = 0
        self.pass_shapes: list[tuple[int, int, int]] = []  # (step, rows, width) of every encoder pass
        # True while a pass is recomputation (gradient caching's graph-free first pass:
        # the same embeddings are computed again to back-propagate): hardware FLOPs, not
        # model FLOPs, as MFU leaves out activation recomputation.
        self.recomputing = False
        self.handles = []
        if encoder is not None:  # None: CLSR, whose trained networks are linear layers only
            config = config or encoder.config
            self.layers, self.width, self.ffn = config.num_hidden_layers, config.hidden_size, config.intermediate_size
            self.handles.append(encoder.register_forward_pre_hook(self._encoder_pass, with_kwargs=True))
        for head in heads:
            for module in head.modules():
                if isinstance(module, torch.nn.Linear):
                    self.handles.append(module.register_forward_pre_hook(self._linear_pass))

    def _encoder_pass(self, module, args, kwargs) -> None:
        if args and isinstance(args[0], dict):  # a sentence-transformers module: a features dict
            kwargs, args = args[0], ()
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        ids = kwargs.get("input_ids", args[0] if args else None)
        rows, length = ids.shape
        if mask is None:
            mask = torch.ones_like(ids)
        factor = 3 if torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters()) else 1
        per_token = 2 * self.layers * (4 * self.width ** 2 + 2 * self.width * self.ffn)
        per_square = 4 * self.layers * self.width
        lengths = mask.sum(dim=1).to(torch.float64)
        if not self.recomputing:  # the tokens and work of the step itself (tokens/s, padding share, MFU)
            self.real_tokens.append(lengths.sum())
            self.model_flops.append(factor * (per_token * lengths.sum() + per_square * (lengths ** 2).sum()))
            self.padded_tokens += rows * length
        self.hardware_flops += factor * (per_token * rows * length + per_square * rows * length ** 2)
        self.pass_shapes.append((self.steps_done, rows, length))

    def count_step(self, *_) -> None:
        """An optimiser step ended (registered as a global step hook by :func:`run_method`)."""
        self.steps_done += 1

    def shape_summary(self, warmup_steps: int) -> dict:
        """How many distinct ``(rows, width)`` shapes the encoder saw, and how many passes
        a timed step (after ``warmup_steps``) had with a shape no earlier pass had
        (:func:`new_shapes`)."""
        distinct, _, new = new_shapes(self.pass_shapes, warmup_steps)
        timed = self.steps_done - warmup_steps
        return {"distinct_pass_shapes": distinct,
                "new_pass_shapes_per_timed_step": round(new / timed, 2) if timed > 0 else None}

    def _linear_pass(self, module, args) -> None:
        x = args[0]
        rows = x.numel() // x.shape[-1]
        factor = 3 if torch.is_grad_enabled() and module.weight.requires_grad else 1
        flops = factor * 2.0 * rows * module.in_features * module.out_features
        if not self.recomputing:
            self.model_flops.append(torch.tensor(flops, dtype=torch.float64))
        self.hardware_flops += flops

    def totals(self) -> dict:
        def total(values):
            return float(sum(float(v) for v in values)) if values else 0.0

        return {"real_tokens": total(self.real_tokens), "padded_tokens": float(self.padded_tokens),
                "model_flops": total(self.model_flops), "hardware_flops": self.hardware_flops,
                "encoder_passes": len(self.pass_shapes)}

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


@contextlib.contextmanager
def counted_as_recomputation(counter: WorkCounter):
    """Within it, gradient caching's graph-free first pass (``GradientCache.embed_without_graph``,
    computed again with a graph to back-propagate) counts as recomputation in ``counter``."""
    from contrastive_sentence_embeddings.training.gradient_cache import GradientCache

    original = GradientCache.embed_without_graph

    def recomputation(self, *args, **kwargs):
        counter.recomputing = True
        try:
            return original(self, *args, **kwargs)
        finally:
            counter.recomputing = False

    GradientCache.embed_without_graph = recomputation
    try:
        yield
    finally:
        GradientCache.embed_without_graph = original


def stated_peak(name: str) -> float | None:
    """The dense bf16 peak of the device called ``name`` (``PEAK_BF16``), None if unknown."""
    known = [key for key in PEAK_BF16 if key in name]
    return PEAK_BF16[max(known, key=len)] if known else None


def peak_flops(device: torch.device) -> tuple[float | None, str]:
    if device.type != "cuda":
        return None, "cpu (no stated bf16 peak: MFU not reported)"
    name = torch.cuda.get_device_name(device)
    return stated_peak(name), name


COMPOSITE_ATTENTION = "scaled_dot_product_attention"  # the public op; it picks one of the kernels below


def dispatched_attention(call) -> str:
    """The attention kernel ``call()`` ran, read off the aten ops it dispatched to
    (``_scaled_dot_product_cudnn_attention``, ``..._efficient_attention``,
    ``..._flash_attention``, ``..._flash_attention_for_cpu``); the math backend has no
    op of its own (it is decomposed into matmuls and a softmax), so it is named with
    the ops it ran. Under ``torch.inference_mode`` (how the evaluation encodes) the
    composite ``scaled_dot_product_attention`` itself reaches the mode, past autograd:
    it is decomposed here, with the mode on, so that the kernel it picks is seen too."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func.overloadpacket.__name__))
            if func.overloadpacket.__name__ == COMPOSITE_ATTENTION:
                with self:  # a mode is off while it handles an op: on again for the pieces
                    result = func.decompose(*args, **(kwargs or {}))
                if result is not NotImplemented:
                    return result
            return func(*args, **(kwargs or {}))

    with Ops() as ops:
        call()
    fused = [name for name in ops.names if "attention" in name and name != COMPOSITE_ATTENTION]
    return fused[0] if fused else "math (decomposed: " + ", ".join(dict.fromkeys(ops.names)) + ")"


def model_attention_kernel(model, tokenizer, device: torch.device, bf16: bool) -> str:
    """The kernel SDPA runs in one of ``model``'s training passes here: two texts of
    different lengths padded into one batch (with the mask transformers builds for
    it) through ``model.encode_tokens`` in train mode, so with attention dropout and,
    on a CPU, the library's shortcuts when they are on; gradients on, bf16 autocast
    when the run used it, under the backends allowed at the call. Run after training,
    eagerly (a compiled run's forward is put back by then: inductor may lower
    attention its own way). On a CPU, attention with dropout has no fused kernel: it
    is the math backend's ops (or the library's uniform-dropout attention)."""
    batch = tokenizer(["A short sentence.", "A longer sentence, with a few more words in it than the first."],
                      padding=True, return_tensors="pt").to(device)
    was_training = model.training
    model.train()
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            return dispatched_attention(lambda: model.encode_tokens(batch["input_ids"], batch["attention_mask"]))
    finally:
        model.train(was_training)


def results_header(script: str, device: torch.device) -> dict:
    """The first keys of a benchmark's results file: the command as run, the commit, the
    device, and the versions that decide which kernels run (torch, CUDA, cuDNN, Python)."""
    _, device_name = peak_flops(device)
    return {"command": recorded_command(script, sys.argv[1:], PROJECT_ROOT), "git_commit": results_commit(PROJECT_ROOT),
            "device": device_name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "python": platform.python_version()}


def chosen_settings(parser: argparse.ArgumentParser, text: str, known) -> list[str]:
    """The comma-separated ``--settings`` names, each one of ``known`` (else the parser's error)."""
    settings = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in settings if name not in known]
    if unknown or not settings:
        parser.error(f"--settings: unknown {unknown}; choose from {', '.join(known)}")
    return settings


def chosen_device(parser: argparse.ArgumentParser, name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    return device


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- one method ---------------------------------------------------------------------------
def training_examples(name: str, block: MethodBlock, tokenizer, model, inputs: dict, needed: int):
    """``(examples, collate)`` for the method's family, from real text."""
    training = block.training
    if block.family == "sentences":
        sentences = inputs["sentences"]
        reps = math.ceil(needed / len(sentences))
        return tokenize_sentences(tokenizer, (sentences * reps)[:max(needed, len(sentences))], training.max_length), None
    if block.family == "documents":
        import pandas as pd

        from contrastive_sentence_embeddings.data.report import StepReport
        from contrastive_sentence_embeddings.data.spans import SpansParams, sample_spans
        from contrastive_sentence_embeddings.training.declutr import DeclutrCollate, spans_by_document

        spans_params = SpansParams.from_params(inputs["span_settings"])
        documents = {title: tokenizer(text, add_special_tokens=False)["input_ids"]
                     for title, text in inputs["articles"].items()}
        config = spans_params.span_config()
        documents = {t: ids for t, ids in documents.items() if len(ids) >= max(2048, config.min_document_length)}
        # one set of spans per training epoch: with drop_last an epoch can be a single batch
        epochs = math.ceil(needed / training.batch_size) + 1
        table = sample_spans(list(documents), [len(v) for v in documents.values()], config, spans_params.seed,
                             epochs, StepReport("declutr_spans"))
        spans = spans_by_document(table.to_pandas() if not isinstance(table, pd.DataFrame) else table)
        method = model.method
        limit = model.encoder.config.max_position_embeddings - (2 if model.encoder.config.model_type == "roberta"
                                                                 else 0) - tokenizer.num_special_tokens_to_add()
        collate = DeclutrCollate(documents, spans, tokenizer, max_span_tokens=limit,
                                 mlm_probability=method.mlm_probability if method.mlm else None,
                                 bucket_tokens=method.bucket_tokens, pad_to_multiple_of=method.pad_to_multiple_of,
                                 seed=training.seed)
        return sorted(documents), collate
    if block.family == "pairs":  # CLSR: frozen embeddings of STS-B-sized pair data (random vectors: same cost)
        from contrastive_sentence_embeddings.training.clsr import PairCollate

        generator = np.random.default_rng(0)
        hidden = model.encoder[0].in_features
        sentences = max(needed, 2 * training.batch_size)
        embeddings = generator.standard_normal((sentences, hidden)).astype(np.float32)
        pairs = [(int(a), int(b)) for a, b in generator.integers(0, sentences, size=(needed, 2))]
        return pairs, PairCollate(embeddings)
    raise ValueError(f"unknown family {block.family}")


def run_method(name: str, shape: str, args, inputs: dict, tokenizer, folders: Path, device: torch.device,
               settings: dict | None = None, around_training=contextlib.nullcontext,
               method_settings: dict | None = None) -> dict:
    """Train ``name`` for warm-up + timed steps and measure it (see the module docstring).
    ``settings``: training settings over the paper's; ``method_settings``: the method's
    own (e.g. DeCLUTR's ``pad_to_multiple_of``);
    ``around_training``: a context manager factory the training runs inside (the
    profiler of ``--profile``)."""
    from accelerate.utils import set_seed
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from transformers import AutoModel

    from contrastive_sentence_embeddings.encoders.pooling import check_pooling

    window = args.warmup
    steps = args.warmup + args.steps
    # epochs: enough for max_steps to be the limit (DeCLUTR's 74 documents make 4 batches an epoch)
    training = {"max_steps": steps, "epochs": 1000, "eval_every": 0, "log_every": window, "checkpoint_dir": None,
                "device": "cpu" if device.type == "cpu" else None, "num_processes": 1,
                "seed": 42, **args.training_settings, **(settings or {})}
    method_settings = {**getattr(args, "method_settings", {}), **(method_settings or {})}
    block = method_block(name, {"training": training, "max_examples": None, "method": method_settings})
    folder = build_encoder_folder(shape, tokenizer, folders)
    set_seed(42)
    encoder = AutoModel.from_pretrained(folder, **({"attn_implementation": args.attention} if args.attention else {}))
    model = block.method.build_model(encoder, tokenizer, check_pooling(block.pooling), str(folder), seed=42,
                                     **({"encoder_name": str(folder), "device": str(device)}
                                        if block.family == "pairs" else {}))
    if not args.cpu_shortcuts and hasattr(model, "real_tokens_only"):
        model.real_tokens_only = model.uniform_dropout = False  # a GPU's path: all tokens, torch's dropout masks
    batch = block.training.batch_size
    needed = batch * (steps + 1)
    examples, collate = training_examples(name, block, tokenizer, model, inputs, needed)
    heads = list(model.heads.values()) + ([model.encoder] if block.family == "pairs" else [])
    counter = WorkCounter(model.encoder if block.family != "pairs" else None, heads)
    step_hook = register_optimizer_step_post_hook(counter.count_step)
    synchronize(device)
    started = time.perf_counter()
    try:
        with around_training(), counted_as_recomputation(counter):
            result = train(model, tokenizer, examples, block.training, dev_scorer=None, collate=collate)
        synchronize(device)
        wall = time.perf_counter() - started
    finally:
        step_hook.remove()
        counter.remove()
    precision = result.extra.get("mixed_precision")
    if block.family == "pairs":
        kernel = None  # CLSR trains linear layers on cached embeddings
    elif args.attention == "eager":
        kernel = "eager attention (no SDPA)"
    else:  # after the counter's hooks are gone: the probe's pass is not the run's work
        with allowed_attention(block.training.attention_backends):  # as train() ran it
            kernel = model_attention_kernel(model, tokenizer, device, precision == "bf16")
    totals = counter.totals()
    curve = result.curve
    rows = curve[curve["step"] > window].dropna(subset=["examples_per_second"])
    examples_timed = float(len(rows) * window * batch)
    seconds = float(sum(window * batch / rows["examples_per_second"])) if len(rows) else float("nan")
    per_step = {k: totals[k] / steps for k in ("real_tokens", "padded_tokens", "model_flops", "hardware_flops")}
    step_seconds = seconds / (len(rows) * window) if len(rows) else float("nan")
    peak, device_name = peak_flops(device)
    row = {
        "method": name, "encoder_config": shape, "batch_size": batch, "max_length": block.training.max_length,
        "precision": precision, "steps_timed": int(len(rows) * window),
        "warmup_steps": window, "examples_per_second": round(examples_timed / seconds, 2),
        "step_ms": round(1000 * step_seconds, 2),
        "tokens_per_second": round(per_step["real_tokens"] / step_seconds, 1) if per_step["real_tokens"] else None,
        "padding_share": round(1 - per_step["real_tokens"] / per_step["padded_tokens"], 4)
        if per_step["padded_tokens"] else None,
        "model_tflops_per_step": round(per_step["model_flops"] / 1e12, 4),
        "achieved_tflops": round(per_step["model_flops"] / step_seconds / 1e12, 2),
        "mfu": round(per_step["model_flops"] / step_seconds / peak, 4) if peak else None,
        "hfu": round(per_step["hardware_flops"] / step_seconds / peak, 4) if peak else None,
        "peak_memory_gib": result.extra["peak_memory_gib"], "peak_memory_measure": result.extra["peak_memory_measure"],
        "encoder_passes_per_step": round(totals["encoder_passes"] / steps, 2),
        **(counter.shape_summary(window) if block.family != "pairs" else {}), "wall_seconds": round(wall, 1),
        "settings": settings or {}, "method_settings": method_settings or {},
        **({"bucket_tokens": block.method.bucket_tokens, "pad_to_multiple_of": block.method.pad_to_multiple_of}
           if block.family == "documents" else {}),
        "attention": args.attention or "default (sdpa)", "attention_backends": block.training.attention_backends or "any",
        "attention_kernel": kernel, "device": device_name,
        **({} if args.cpu_shortcuts else {"cpu_shortcuts": False}),
    }
    if args.eval_cost and block.family == "sentences" and not settings:
        row.update(dev_evaluation_cost(model, tokenizer, inputs, device, step_seconds))
    del model, encoder, result
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def dev_evaluation_cost(model, tokenizer, inputs: dict, device: torch.device, step_seconds: float) -> dict:
    """Seconds of one dev evaluation (STS-B dev + SICK-R trial through the library's
    scorer, sentences encoded longest first), its share of 125 steps, and the same
    encoding in the data's own order (the ablation of length sorting)."""
    from contrastive_sentence_embeddings.encoders.encoding import autocast_for, pad_batch

    dev = inputs["dev_scorer"]
    encoder = model.sentence_encoder(tokenizer, device)
    model.eval()
    dev(encoder.encode)  # warm
    synchronize(device)
    start = time.perf_counter()
    scores = dev(encoder.encode)
    synchronize(device)
    sorted_seconds = time.perf_counter() - start
    ids = encoder.tokenize(dev.sentences)
    start = time.perf_counter()
    with torch.inference_mode(), autocast_for(device):
        for begin in range(0, len(ids), encoder.batch_size):
            batch = pad_batch(ids[begin:begin + encoder.batch_size], tokenizer.pad_token_id)
            model.encoder(**{k: v.to(device) for k, v in batch.items()})
    synchronize(device)
    unsorted_seconds = time.perf_counter() - start
    model.train()
    share = sorted_seconds / (EVAL_EVERY_PAPER * step_seconds + sorted_seconds)
    return {"dev_eval_seconds": round(sorted_seconds, 3), "dev_eval_sentences": len(dev.sentences),
            "dev_eval_share_of_125_steps": round(share, 4), "dev_eval_unsorted_encode_seconds": round(unsorted_seconds, 3),
            "dev_scores_random_weights": {k: round(v, 2) for k, v in scores.items()}}


# --- the peer -----------------------------------------------------------------------------
def run_peer(shape: str, args, inputs: dict, tokenizer, folders: Path, device: torch.device) -> dict:
    """sentence-transformers' MNRL trainer on SimCSE's paper settings: (s, s) pairs, batch
    64, length 32, [CLS] pooling, scale 20 (temperature 0.05), AdamW 3e-5, bf16 on CUDA."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.models import Pooling, Transformer
    from transformers import TrainerCallback

    try:
        from sentence_transformers.losses import MultipleNegativesRankingLoss
    except ImportError:  # sentence-transformers >= 6 keeps the losses per model kind
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    block = method_block("simcse", {"training": {"seed": 42}})
    batch, length = block.training.batch_size, block.training.max_length
    steps = args.warmup + args.steps
    folder = build_encoder_folder(shape, tokenizer, folders)
    torch.manual_seed(42)
    transformer = Transformer(str(folder), max_seq_length=length)
    st_model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_word_embedding_dimension(), "cls")],
                                   device=str(device))
    sentences = inputs["sentences"]
    reps = math.ceil(batch * (steps + 1) / len(sentences))
    texts = (sentences * reps)[: batch * (steps + 1)]
    pairs = Dataset.from_dict({"anchor": texts, "positive": texts})
    marks: dict[int, float] = {}

    class Clock(TrainerCallback):
        def on_step_end(self, arguments, state, control, **kwargs):  # noqa: ARG002
            if state.global_step in (args.warmup, steps):
                synchronize(device)
                marks[state.global_step] = time.perf_counter()

    # The module sentence-transformers calls (it calls the Hugging Face model's forward
    # directly, past any hook on it), counted with that model's shape.
    counter = WorkCounter(transformer, [], config=transformer.auto_model.config)
    on_cuda = device.type == "cuda"
    with tempfile.TemporaryDirectory() as output:
        training_args = SentenceTransformerTrainingArguments(
            output_dir=output, per_device_train_batch_size=batch, max_steps=steps, learning_rate=3e-5,
            warmup_steps=0, lr_scheduler_type="linear", weight_decay=0.0, save_strategy="no", report_to="none",
            logging_steps=10**6, use_cpu=not on_cuda, bf16=on_cuda, dataloader_drop_last=True, seed=42)
        trainer = SentenceTransformerTrainer(model=st_model, args=training_args, train_dataset=pairs,
                                             loss=MultipleNegativesRankingLoss(st_model, scale=20.0),
                                             callbacks=[Clock()])
        if on_cuda:
            torch.cuda.reset_peak_memory_stats(device)
        trainer.train()
    counter.remove()
    totals = counter.totals()
    seconds = marks[steps] - marks[args.warmup]
    step_seconds = seconds / args.steps
    per_step = {k: totals[k] / steps for k in ("real_tokens", "padded_tokens", "model_flops", "hardware_flops")}
    peak, device_name = peak_flops(device)
    import sentence_transformers

    return {"method": f"sentence-transformers {sentence_transformers.__version__} MNRL", "encoder_config": shape,
            "batch_size": batch, "max_length": length, "precision": "bf16" if on_cuda else "no",
            "steps_timed": args.steps, "warmup_steps": args.warmup,
            "examples_per_second": round(args.steps * batch / seconds, 2), "step_ms": round(1000 * step_seconds, 2),
            "tokens_per_second": round(per_step["real_tokens"] / step_seconds, 1),
            "padding_share": round(1 - per_step["real_tokens"] / per_step["padded_tokens"], 4),
            "model_tflops_per_step": round(per_step["model_flops"] / 1e12, 4),
            "achieved_tflops": round(per_step["model_flops"] / step_seconds / 1e12, 2),
            "mfu": round(per_step["model_flops"] / step_seconds / peak, 4) if peak else None,
            "hfu": round(per_step["hardware_flops"] / step_seconds / peak, 4) if peak else None,
            "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if on_cuda else None,
            "encoder_passes_per_step": round(totals["encoder_passes"] / steps, 2), "device": device_name}


# --- where a step goes (--profile) --------------------------------------------------------
# Host-side calls that launch device work, and those that make the host wait for the device.
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")
DEVICE_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
# Tensor operations that read a device value back to the host (``.item()``, ``int(t)``,
# ``if t.any()``, boolean indexing): each one waits until the queue before it has run.
HOST_READS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")


def profiler_steps(events) -> list:
    """The host's ``ProfilerStep#N`` ranges, one per recorded step. With CUDA activity
    the profiler also puts a range's copy on the device timeline (a user annotation
    over the kernels it ran), under the same name: counting those as steps made the
    first H100 profile (2026-11-27) find 6 steps where 5 were recorded."""
    from torch.autograd import DeviceType

    return [event for event in events if event.name.startswith("ProfilerStep") and event.device_type == DeviceType.CPU]


def profile_method(name: str, shape: str, args, inputs: dict, tokenizer, folders: Path,
                   device: torch.device) -> dict:
    """One more short run of ``name`` under ``torch.profiler``: ``--warmup`` steps, one
    step for the profiler's own warm-up, then ``--profile`` steps recorded. The
    profiler steps with the optimiser (a global step hook), so a recorded step is one
    whole training step: collate, forward, backward, clipping, update. Profiling adds
    host overhead of its own, so its step times are for the shares, not for the
    throughput (the rows above are).

    The profiler's own warm-up step (traced, then discarded) also runs under
    :class:`HostReads`, which names the line behind each host read (on a GPU, a wait
    for the device): ``host_read_sites``. Not under torch.compile (a dispatch mode
    would change what is compiled)."""
    from torch.autograd import DeviceType
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile, schedule

    on_cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    recorded = args.profile
    profiler = profile(activities=activities, schedule=schedule(wait=args.warmup, warmup=1, active=recorded, repeat=1))
    local = argparse.Namespace(**{**vars(args), "steps": 1 + recorded, "eval_cost": False})

    reads = HostReads(depth=3)
    count_reads = not args.training_settings.get("compile")
    steps_done, counting = [0], [False]

    def stop_counting() -> None:
        if counting[0]:
            reads.__exit__(None, None, None)
            counting[0] = False

    def after_step(*_) -> None:
        stop_counting()
        steps_done[0] += 1
        if count_reads and steps_done[0] == args.warmup:  # the profiler's warm-up step comes next
            reads.__enter__()
            counting[0] = True
        profiler.step()

    @contextlib.contextmanager
    def profiled():
        hook = register_optimizer_step_post_hook(after_step)
        try:
            with profiler:
                yield
        finally:
            hook.remove()
            stop_counting()

    run_method(name, shape, local, inputs, tokenizer, folders, device, around_training=profiled)
    steps = profiler_steps(profiler.events())
    if len(steps) != recorded:
        found = [(event.name, str(event.device_type)) for event in profiler.events() if event.name.startswith("ProfilerStep")]
        raise RuntimeError(f"the profiler recorded {len(steps)} training steps, expected {recorded}: {found}")
    averages = profiler.key_averages()

    def count(names) -> float:
        return round(sum(e.count for e in averages if e.key in names) / recorded, 1)

    def per_step_ms(microseconds: float) -> float:
        return round(microseconds / recorded / 1000, 3)

    host_ops = sorted((e for e in averages if e.device_type == DeviceType.CPU and not e.key.startswith("ProfilerStep")),
                      key=lambda e: e.self_cpu_time_total, reverse=True)
    kernels = sorted((e for e in averages if e.device_type == DeviceType.CUDA and not e.is_user_annotation),
                     key=lambda e: e.self_device_time_total, reverse=True)
    step_ms = sum(e.cpu_time_total for e in steps) / recorded / 1000
    # The loader's next batch (with no loader workers: the collate, in the loop's process)
    batch_us = sum(e.cpu_time_total for e in averages if e.key.startswith("enumerate(DataLoader)"))
    report = {
        "method": name, "encoder_config": shape, "steps_recorded": recorded, "step_ms_profiled": round(step_ms, 2),
        "batch_ms_per_step": per_step_ms(batch_us),
        "host_reads_per_step": count(HOST_READS),
        "host_reads_outside_batching": reads.total if count_reads else None,
        "host_read_sites": reads.table()[:12] if count_reads else "not counted under torch.compile",
        "top_host_ops": [{"op": e.key, "self_ms_per_step": per_step_ms(e.self_cpu_time_total),
                          "calls_per_step": round(e.count / recorded, 1)} for e in host_ops[:12]],
    }
    if on_cuda:
        device_ms = per_step_ms(sum(e.self_device_time_total for e in kernels))
        report.update({
            "device_ms_per_step": device_ms, "device_busy_share": round(device_ms / step_ms, 4),
            "kernel_launches_per_step": count(KERNEL_LAUNCHES), "device_waits_per_step": count(DEVICE_WAITS),
            "top_kernels": [{"kernel": e.key[:120], "ms_per_step": per_step_ms(e.self_device_time_total),
                             "calls_per_step": round(e.count / recorded, 1)} for e in kernels[:12]],
        })
    if args.trace_dir:
        folder = Path(args.trace_dir)
        folder.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(folder / f"{name}_{shape}_{device.type}.json"))
    return report


# --- the ablation -------------------------------------------------------------------------
# SimCSE with each speed setting turned off (or on, where off is the default), one at a
# time against the default, then DeCLUTR's: (key for --ablation, label in the table,
# training settings, switches: "method" (default simcse), "method_settings" (the
# method's own parameters), "environment" (variables a fresh process starts with),
# "attention" (transformers' attention implementation), "host_sync").
NO_CUDNN_ATTENTION = ["flash", "efficient", "math"]
ABLATION_VARIANTS: list[tuple[str, str, dict, dict]] = [
    ("default", "default", {}, {}),
    ("fp32-tf32", "fp32 (no bf16 autocast), TF32 on", {"mixed_precision": "no"}, {}),
    ("fp32", "fp32, TF32 off", {"mixed_precision": "no", "tf32": False}, {}),
    ("eager-attention", "eager attention (no SDPA)", {}, {"attention": "eager"}),
    # cuDNN's attention (PyTorch's choice on Hopper) against the memory-efficient kernel
    ("no-cudnn-attention", "SDPA without cuDNN (training.attention_backends)",
     {"attention_backends": NO_CUDNN_ATTENTION}, {}),
    ("adamw-unfused", "AdamW not fused", {"fused_optimizer": False}, {}),
    ("unpinned", "no pinned memory", {"pin_memory": False}, {}),
    ("loader-workers", "2 loader workers", {"loader_workers": 2}, {}),
    ("host-sync", "loss read back every step", {}, {"host_sync": True}),
    ("compile", "torch.compile (training.compile)", {"compile": True}, {}),
    ("static-shapes", "static shapes (every batch padded to max_length)", {"static_shapes": True}, {}),
    ("compile-static", "torch.compile, static shapes", {"compile": True, "static_shapes": True}, {}),
    ("cuda-graphs", "torch.compile reduce-overhead (CUDA graphs), static shapes",
     {"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True}, {}),
    ("cuda-graphs-no-cudnn-attention", "CUDA graphs, static shapes, SDPA without cuDNN",
     {"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True,
      "attention_backends": NO_CUDNN_ATTENTION}, {}),
    # DeCLUTR's passes keep changing shape, and cuDNN's attention prepares each new shape
    # for ~150 ms (run 5, docs/record/gpu.md): its blocks leave cuDNN out. The default, then
    # PyTorch's choice with free widths (run 4's setting), with widths rounded to 8 and 64,
    # and with PyTorch's opt-in against the recompiles.
    ("declutr-default", "DeCLUTR, conf/paper (free bucket widths, SDPA without cuDNN)", {}, {"method": "declutr"}),
    ("declutr-cudnn-attention", "DeCLUTR, free bucket widths, cuDNN's attention allowed",
     {"attention_backends": None}, {"method": "declutr"}),
    ("declutr-cudnn-attention-pad-8", "DeCLUTR, bucket widths a multiple of 8, cuDNN's attention allowed",
     {"attention_backends": None}, {"method": "declutr", "method_settings": {"pad_to_multiple_of": 8}}),
    ("declutr-cudnn-attention-pad-64", "DeCLUTR, bucket widths a multiple of 64, cuDNN's attention allowed",
     {"attention_backends": None}, {"method": "declutr", "method_settings": {"pad_to_multiple_of": 64}}),
    # PyTorch's opt-in (pytorch/pytorch#155958): cuDNN's attention through its ragged
    # path, one graph for every sequence length (read once a process: a process of its
    # own). Run 5: no faster in torch 2.11.
    ("declutr-cudnn-avoid-recompile", "DeCLUTR, free bucket widths, TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1",
     {"attention_backends": None},
     {"method": "declutr", "environment": {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}}),
    ("declutr-pad-8", "DeCLUTR, bucket widths a multiple of 8", {},
     {"method": "declutr", "method_settings": {"pad_to_multiple_of": 8}}),
    # Fewer, larger passes (2 a step instead of 5, 44% padding instead of 23%:
    # benchmarks/declutr_shapes.py): the lever if each pass's launches bound the step.
    ("declutr-bucket-32768", "DeCLUTR, bucket_tokens 32768", {},
     {"method": "declutr", "method_settings": {"bucket_tokens": 32768}}),
    # One compiled graph for all widths (dynamic shapes): fewer, fused kernel launches.
    ("declutr-compile", "DeCLUTR, torch.compile (dynamic shapes)", {"compile": True}, {"method": "declutr"}),
]
# nothing to measure on a CPU (fp32 and TF32, pinned memory, CUDA graphs, cuDNN's attention)
CUDA_ONLY_VARIANTS = ("fp32-tf32", "fp32", "no-cudnn-attention", "unpinned", "cuda-graphs",
                      "cuda-graphs-no-cudnn-attention", "declutr-cudnn-attention", "declutr-cudnn-attention-pad-8",
                      "declutr-cudnn-attention-pad-64", "declutr-cudnn-avoid-recompile")


def ablation_variants(selection: str, device_type: str) -> list[tuple[str, str, dict, dict]]:
    """The variants ``--ablation`` names, in the order it names them (``all``: every
    variant this device can run, in the table's order). The order is the priority: a run
    cut short keeps the rows it finished, first to last."""
    by_key = {variant[0]: variant for variant in ABLATION_VARIANTS}
    if selection == "all":
        keys = [key for key in by_key if device_type == "cuda" or key not in CUDA_ONLY_VARIANTS]
    else:
        keys = [key.strip() for key in selection.split(",") if key.strip()]
        unknown = [key for key in keys if key not in by_key]
        if unknown:
            raise ValueError(f"unknown ablation variant(s) {unknown}; choose from all, {', '.join(by_key)}")
        if device_type != "cuda" and (cuda_only := [key for key in keys if key in CUDA_ONLY_VARIANTS]):
            raise ValueError(f"ablation variant(s) {cuda_only} measure CUDA-only settings; run them with --device cuda")
    return [by_key[key] for key in dict.fromkeys(keys)]


def ablation_rows(args, inputs, tokenizer, folders, device, rows: list[dict], on_row=None) -> None:
    """Each variant of ``args.ablation`` (its method on ``--encoder-config`` or the
    method's paper encoder), appended to ``rows`` one by one; ``on_row`` is called
    after each (the report is saved there, so a run stopped in the middle keeps the
    rows it measured)."""
    for key, label, settings, extra in ablation_variants(args.ablation, device.type):
        method = extra.get("method", "simcse")
        shape = args.encoder_config or PAPER_ENCODER.get(method, "bert-base-uncased")
        # accelerate holds one precision per process, and variables are read at start: a fresh one
        if "mixed_precision" in settings or extra.get("environment"):
            row = variant_in_subprocess(label, method, shape, args, settings, extra.get("method_settings"),
                                        extra.get("environment"))
        else:
            local = argparse.Namespace(**{**vars(args), "attention": extra.get("attention", args.attention),
                                          "eval_cost": False})
            trainer_module.HOST_SYNC_EVERY_STEP = bool(extra.get("host_sync"))
            try:
                row = run_method(method, shape, local, inputs, tokenizer, folders, device, settings=settings,
                                 method_settings=extra.get("method_settings"))
                row["variant"] = label
            except Exception as error:  # noqa: BLE001 - a variant that fails is a row that says so
                logger.exception("ablation variant %s failed", label)
                row = {"method": method, "variant": label, "error": f"{type(error).__name__}: {error}"[:300]}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            finally:
                trainer_module.HOST_SYNC_EVERY_STEP = False
        row["variant_key"] = key
        rows.append(row)
        if on_row is not None:
            on_row()
        print(f"  {label}: {row.get('examples_per_second', row.get('error'))} examples/s", flush=True)


def in_fresh_process(script: str, arguments: list[str], environment: dict | None = None) -> dict:
    """What ``script`` writes to ``--output`` when run with ``arguments`` in a process of
    its own (``provenance.child_environment``, with ``environment`` added): the parsed
    JSON, or ``{"error": "exit <code>: <the end of its stderr>"}`` when it fails or
    writes nothing. Each benchmark measures its settings that need a fresh process
    (a variable read once, nothing prepared yet) through this."""
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "result.json"
        done = subprocess.run([sys.executable, str(Path(script).resolve()), *arguments, "--output", str(output)],
                              capture_output=True, text=True, env=child_environment(environment))
        if done.returncode or not output.is_file():
            return {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
        return json.loads(output.read_text(encoding="utf-8"))


def variant_in_subprocess(label: str, method: str, shape: str, args, settings: dict,
                          method_settings: dict | None = None, environment: dict | None = None) -> dict:
    """``method`` with ``settings`` (training) and ``method_settings`` measured by this
    script in a process of its own, with ``environment`` added to its variables."""
    method_settings = {**getattr(args, "method_settings", {}), **(method_settings or {})}
    arguments = ["--device", args.device, "--methods", method, "--steps", str(args.steps), "--warmup", str(args.warmup),
                 "--no-peer", "--no-eval-cost", "--encoder-config", shape,
                 *[f"--set={key}={json.dumps(value)}" for key, value in {**args.training_settings, **settings}.items()],
                 *[f"--method-set={key}={json.dumps(value)}" for key, value in method_settings.items()]]
    if args.mirror:
        arguments += ["--mirror", args.mirror]
    if not args.cpu_shortcuts:
        arguments += ["--no-cpu-shortcuts"]
    if args.tokenizer:
        arguments += ["--tokenizer", args.tokenizer]
    child = in_fresh_process(__file__, arguments, environment)
    if "error" in child:
        return {"method": method, "variant": label, **child}
    row = child["rows"][0]
    row["variant"] = label
    if environment:
        row["environment"] = child["environment"]  # what the child recorded it was started with
    return row


def scaling_rows(shape: str, args, inputs, tokenizer, folders, device, batches: list[int]) -> list[dict]:
    """SimCSE at larger batches (the GPU's utilisation against the batch), each also
    through gradient caching at the paper's 64 (``mini_batch_size``)."""
    rows = []
    for batch in batches:
        for mini in (None, 64):
            if mini is not None and mini >= batch:
                continue
            settings = {"batch_size": batch, **({"mini_batch_size": mini} if mini else {})}
            label = f"batch {batch}" + (f", mini-batches of {mini}" if mini else "")
            try:
                row = run_method("simcse", shape, argparse.Namespace(**{**vars(args), "eval_cost": False}), inputs,
                                 tokenizer, folders, device, settings=settings)
            except Exception as error:  # noqa: BLE001 - e.g. out of memory: a row that says so
                logger.exception("%s failed", label)
                row = {"error": f"{type(error).__name__}: {error}"[:300]}
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            row["variant"] = label
            rows.append(row)
            print(f"  {label}: {row.get('examples_per_second', row.get('error'))} examples/s, MFU {row.get('mfu')}",
                  flush=True)
    return rows


# --- report -------------------------------------------------------------------------------


def markdown(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    lines = ["| " + " | ".join(title for title, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = []
        for _, key in columns:
            value = row.get(key)
            if key in ("mfu", "hfu", "padding_share", "dev_eval_share_of_125_steps", "device_busy_share") and isinstance(
                    value, float):
                value = f"{100 * value:.1f}%"
            cells.append("" if value is None else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


MAIN_COLUMNS = [("method", "method"), ("encoder", "encoder_config"), ("batch", "batch_size"),
                ("precision", "precision"), ("examples/s", "examples_per_second"), ("step ms", "step_ms"),
                ("tokens/s", "tokens_per_second"), ("padding", "padding_share"), ("TFLOP/s", "achieved_tflops"),
                ("MFU", "mfu"), ("HFU", "hfu"), ("peak GiB", "peak_memory_gib"),
                ("new shapes/step", "new_pass_shapes_per_timed_step"), ("dev eval s", "dev_eval_seconds"), ("eval share /125 steps", "dev_eval_share_of_125_steps")]
PROFILE_COLUMNS = [("method", "method"), ("encoder", "encoder_config"), ("step ms (profiled)", "step_ms_profiled"),
                   ("batch ms", "batch_ms_per_step"),
                   ("device ms", "device_ms_per_step"), ("device busy", "device_busy_share"),
                   ("kernel launches", "kernel_launches_per_step"), ("device waits", "device_waits_per_step"),
                   ("scalar/size reads", "host_reads_per_step"), ("host reads (model)", "host_reads_outside_batching"),
                   ("error", "error")]


def key_values(parser: argparse.ArgumentParser, flag: str, items: list[str]) -> dict:
    """``KEY=VALUE`` arguments of ``flag`` as a dict, each value typed as Kedro's
    ``--params`` types it (1e-5 a float, an unquoted no false)."""
    settings = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not key or not equals:
            parser.error(f"{flag} {item!r}: expected KEY=VALUE")
        settings[key] = read_parameters_yaml(value)
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--encoder-config", default=None, choices=sorted(ENCODER_CONFIGS),
                        help="one shape for every method (default: each method's paper encoder)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per method (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first; also the timing window")
    parser.add_argument("--attention", default=None, choices=["sdpa", "eager"], help="default: transformers' own")
    parser.add_argument("--no-peer", dest="peer", action="store_false")
    parser.add_argument("--ablation", nargs="?", const="all", default="", metavar="VARIANTS",
                        help="also measure each speed setting on and off (SimCSE's, then DeCLUTR's): all (alone: "
                             "--ablation), or keys in the order to run them, e.g. default,static-shapes,cuda-graphs; keys: "
                             + ", ".join(key for key, *_ in ABLATION_VARIANTS))
    parser.add_argument("--scaling", default="", help="SimCSE batch sizes to add, e.g. 256,1024")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                        help="a training setting for every run, typed as Kedro types conf values (1e-5 a float, "
                             "an unquoted no false, taken as \"no\"), e.g. --set mixed_precision=no")
    parser.add_argument("--method-set", dest="method_set", action="append", default=[], metavar="KEY=VALUE",
                        help="a parameter of the method's own block for every run (typed as --set), e.g. "
                             "--methods declutr --method-set pad_to_multiple_of=64")
    parser.add_argument("--no-eval-cost", dest="eval_cost", action="store_false")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="also profile this many steps of every method (torch.profiler): where a step goes")
    parser.add_argument("--trace-dir", default=None, help="with --profile: write each method's Chrome trace here")
    parser.add_argument("--no-cpu-shortcuts", dest="cpu_shortcuts", action="store_false",
                        help="on CPU, train as on a GPU: no packing of real tokens, torch's dropout masks")
    parser.add_argument("--mirror", default=None)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--output", default=None, help="default: benchmarks/results/training_throughput_<device>.json")
    args = parser.parse_args()
    if args.steps % args.warmup:
        parser.error("--steps must be a multiple of --warmup (the timing window)")
    if args.trace_dir and not args.profile:
        parser.error("--trace-dir needs --profile")
    if args.ablation:
        try:
            ablation_variants(args.ablation, args.device)
        except ValueError as error:
            parser.error(f"--ablation: {error}")
    args.training_settings = key_values(parser, "--set", args.settings)
    args.method_settings = key_values(parser, "--method-set", args.method_set)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    device = chosen_device(parser, args.device)
    from transformers import AutoTokenizer

    from contrastive_sentence_embeddings.data.raw_file import folder_partitions
    from contrastive_sentence_embeddings.evaluation.sts import DevScorer

    mirror = mirror_dir(args.mirror)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir(args.tokenizer), use_fast=True)
    inputs = {"sentences": read_sentences(mirror), "articles": read_articles(mirror),
              "span_settings": paper_spans(mirror),
              "dev_scorer": DevScorer(folder_partitions(mirror / "sts"))}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown method(s) {unknown}; choose from {', '.join(METHODS)}")
    report = {
        **results_header(__file__, device), "peak_bf16_flops": peak_flops(device)[0], "host": platform.node(),
        "cpu": cpu_description(), "cpu_threads": torch.get_num_threads(), "environment": tuning_environment(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "training_settings": args.training_settings, "method_settings": args.method_settings,
        "cpu_shortcuts": args.cpu_shortcuts,
        "rows": [], "peer": [], "ablation": [], "scaling": [], "profiles": [],
    }
    for package in ("transformers", "accelerate", "sentence_transformers"):
        with contextlib.suppress(ImportError):
            report[package] = __import__(package).__version__
    output = Path(args.output) if args.output else RESULTS_DIR / f"training_throughput_{device.type}.json"
    output.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every row: a run cut short keeps what it measured
        write_text_atomically(output, json.dumps(report, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="cse-throughput-") as scratch:
        folders = Path(scratch)
        for name in methods:
            shape = args.encoder_config or PAPER_ENCODER.get(name, "bert-base-uncased")
            print(f"{name} ({shape}) ...", flush=True)
            try:
                row = run_method(name, shape, args, inputs, tokenizer, folders, device)
            except Exception as error:  # noqa: BLE001 - reported in the table, the others still run
                logger.exception("%s failed", name)
                row = {"method": name, "encoder_config": shape, "error": f"{type(error).__name__}: {error}"[:500]}
            report["rows"].append(row)
            save()
            print(f"  {row.get('examples_per_second', row.get('error'))} examples/s, MFU {row.get('mfu')}", flush=True)
        for name in methods if args.profile else []:
            shape = args.encoder_config or PAPER_ENCODER.get(name, "bert-base-uncased")
            print(f"profile: {name} ({shape}) ...", flush=True)
            try:
                report["profiles"].append(profile_method(name, shape, args, inputs, tokenizer, folders, device))
            except Exception as error:  # noqa: BLE001 - reported, the others still run
                logger.exception("profiling %s failed", name)
                report["profiles"].append({"method": name, "encoder_config": shape,
                                           "error": f"{type(error).__name__}: {error}"[:500]})
            save()
        if args.peer:
            shape = args.encoder_config or "bert-base-uncased"
            print("peer: sentence-transformers MNRL ...", flush=True)
            for attempt in range(2):  # ours and the peer alternate: SimCSE again after the peer
                try:
                    report["peer"].append(run_peer(shape, args, inputs, tokenizer, folders, device))
                except Exception as error:  # noqa: BLE001
                    logger.exception("the peer failed")
                    report["peer"].append({"method": "sentence-transformers MNRL", "error": f"{type(error).__name__}: {error}"[:500]})
                    break
                if attempt == 0 and "simcse" in methods:
                    again = run_method("simcse", shape, argparse.Namespace(**{**vars(args), "eval_cost": False}),
                                       inputs, tokenizer, folders, device)
                    again["method"] = "simcse (again, after the peer)"
                    report["rows"].append(again)
                save()
        if args.ablation:
            print("ablation ...", flush=True)
            ablation_rows(args, inputs, tokenizer, folders, device, report["ablation"], on_row=save)
    if args.scaling:
        print("batch scaling (SimCSE) ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="cse-throughput-") as scratch:
            report["scaling"] = scaling_rows(args.encoder_config or "bert-base-uncased", args, inputs, tokenizer,
                                             Path(scratch), device, [int(b) for b in args.scaling.split(",")])
        save()
    ours = [r for r in report["rows"] if r.get("method", "").startswith("simcse") and "examples_per_second" in r]
    peers = [r for r in report["peer"] if "examples_per_second" in r]
    if ours and peers:
        report["simcse_over_peer"] = round(np.mean([r["examples_per_second"] for r in ours])
                                           / np.mean([r["examples_per_second"] for r in peers]), 3)
    save()
    print(f"\n{report['device']}, torch {torch.__version__}, commit {report['git_commit']}\n")
    print(markdown(report["rows"] + report["peer"], MAIN_COLUMNS))
    if report["ablation"]:
        print()
        print(markdown(report["ablation"], [("method", "method"), ("variant", "variant"),
                                            ("examples/s", "examples_per_second"), ("step ms", "step_ms"),
                                            ("MFU", "mfu"), ("new shapes/step", "new_pass_shapes_per_timed_step"),
                                            ("attention kernel", "attention_kernel"),
                                            ("peak GiB", "peak_memory_gib"), ("error", "error")]))
    if report["scaling"]:
        print()
        print(markdown(report["scaling"], [("variant", "variant"), ("examples/s", "examples_per_second"),
                                           ("step ms", "step_ms"), ("MFU", "mfu"), ("peak GiB", "peak_memory_gib"),
                                           ("error", "error")]))
    if report["profiles"]:
        print()
        print(markdown(report["profiles"], PROFILE_COLUMNS))
        for profile in (p for p in report["profiles"] if "error" not in p):
            ops = ", ".join(f"{o['op']} {o['self_ms_per_step']} ms" for o in profile.get("top_host_ops", [])[:5])
            print(f"\n{profile['method']}: host {ops}")
            if profile.get("top_kernels"):
                print("  device " + ", ".join(f"{k['kernel'][:60]} {k['ms_per_step']} ms"
                                            for k in profile["top_kernels"][:5]))
            if isinstance(profile.get("host_read_sites"), list):
                print("  host reads of one step: " + ("none" if not profile["host_read_sites"] else "; ".join(
                    f"{r['count']:g} x {r['kind']} ({r['op']}) at {r['site'].split(' <- ')[0]}"
                    for r in profile["host_read_sites"][:5])))
    if "simcse_over_peer" in report:
        print(f"\nSimCSE / sentence-transformers MNRL examples/s: {report['simcse_over_peer']}x")
    print(f"\nwritten: {output}")


if __name__ == "__main__":
    main()
