"""DeCLUTR's peak memory for a training step at the paper's settings, and what it is made of.

    python benchmarks/declutr_memory.py                                   # CPU, the default encoder, every row
    python benchmarks/declutr_memory.py --device cuda --encoder-config roberta-base
    python benchmarks/declutr_memory.py --rows masked_b16 masked_b16_checkpointing

The paper's batch (Giorgi et al. 2021): 16 documents, A = 2 anchors and P = 2 positives
per anchor, spans of 32-512 tokens drawn as the data pipeline draws them (Beta(4, 2)
anchor lengths, Beta(2, 4) positive lengths, the released sampler's cells,
``data.spans.sample_spans``), BERT's 15% MLM on the anchors. The documents are
synthetic token ids (2,048 tokens each, the paper's minimum): memory does not depend
on which tokens they are. Each row is ``--steps`` optimiser steps of the library's own
trainer (``trainer.train``: AdamW 5e-5, weight decay 0.1, slanted triangular schedule,
gradient norm 1.0; bf16 autocast on CUDA) in a fresh process, so that its peak is its
own:

* CPU: the child's peak resident memory (``ru_maxrss``, what the trainer logs as
  ``peak_memory_gib``), and its resident memory before training (the weights, the
  libraries);
* CUDA: ``torch.cuda.max_memory_allocated`` over the training (the trainer resets it
  when training starts; the weights count, the CUDA context does not).

Rows: ``full_logits``, the reference "before": vocabulary logits at every anchor
position, as the MLM head ran before it was restricted to the masked positions (kept
here only, as a reference); ``masked``, the library's head on the masked positions
only; then what remains: MLM off, other ``bucket_tokens``, batch 4, and
``training.gradient_checkpointing``. Each row also reports the bytes the forward pass
saves for the backward pass (autograd's saved tensors, counted once per storage,
weights excluded), split into the encoder's and the MLM head's, and the analytic size
of the parameters, their gradients and AdamW's two moments.

The encoder: the default (all-MiniLM-L6-v2 with a new MLM head, as the CPU
configuration trains), or ``--encoder-config`` one of :data:`ENCODER_CONFIGS`, built
with random weights from the configuration written below (no Hub: memory does not
depend on the weights). The tokenizer is the default encoder's (bert-base-uncased's
30,522-token vocabulary) or the folder ``--tokenizer`` / ``$CSE_TOKENIZER_DIR``.
Imports only torch, transformers, accelerate and the library's core (no Kedro,
datasets, spaCy or DVC). Results go to ``benchmarks/results/declutr_memory.json``
(one entry per device and encoder, replaced when rerun) and print as Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark's parameter blocks
import training_throughput as throughput  # noqa: E402

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.data.report import StepReport  # noqa: E402
from contrastive_sentence_embeddings.data.spans import SpanConfig, sample_spans  # noqa: E402
from contrastive_sentence_embeddings.encoders.encoding import max_sequence_length  # noqa: E402
from contrastive_sentence_embeddings.runs.project_paths import recorded_command  # noqa: E402
from contrastive_sentence_embeddings.records.provenance import results_commit  # noqa: E402
from contrastive_sentence_embeddings.training.declutr import IGNORE_INDEX, DeclutrCollate, spans_by_document  # noqa: E402
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method  # noqa: E402
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, train  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "declutr_memory.json"
PAPER_SPANS = SpanConfig(num_anchors=2, num_positives=2, min_length=32, max_length=512, anchor_gap=512,
                         anchor_placement="reference")
MACHINE_RESERVE_GIB = 1.5  # CPU rows stop when the machine's available memory falls below this
DOCUMENT_TOKENS = 2048  # the paper's shortest document; enough for the reference sampler's 2 x 2 cells of 512

# Paper-size encoders, by the name of the checkpoint whose configuration they copy
# (the published config.json values that decide the cost); random weights.
ENCODER_CONFIGS = {
    "all-MiniLM-L6-v2": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
                         "num_attention_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512},
    "bert-base-uncased": {"model_type": "bert", "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512},
    # RoBERTa's positions start after its padding index (1): 514 positions for 512 tokens.
    "roberta-base": {"model_type": "roberta", "vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12,
                     "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514,
                     "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "bos_token_id": 0,
                     "eos_token_id": 2},
}


@dataclass(frozen=True)
class Row:
    """One measured setting."""

    name: str
    documents: int = 16
    mlm_head: str = "masked"  # masked: the library's head; full: logits at every anchor position; off: no MLM
    bucket_tokens: int = 4096
    gradient_checkpointing: bool = False
    what: str = ""


ROWS = {row.name: row for row in (
    Row("full_logits_b16", mlm_head="full", what="before: vocabulary logits at every anchor position"),
    Row("masked_b16", what="the library: MLM head on the masked positions only"),
    Row("masked_b16_checkpointing", gradient_checkpointing=True, what="training.gradient_checkpointing: true"),
    Row("masked_b16_no_mlm", mlm_head="off", what="MLM off (method.mlm: false)"),
    Row("masked_b16_bucket1024", bucket_tokens=1024, what="bucket_tokens 1024"),
    Row("masked_b16_bucket16384", bucket_tokens=16384, what="bucket_tokens 16384"),
    Row("full_logits_b4", documents=4, mlm_head="full", what="before"),
    Row("masked_b4", documents=4, what="the library"),
    Row("masked_b4_checkpointing", documents=4, gradient_checkpointing=True,
        what="training.gradient_checkpointing: true"),
    Row("masked_b4_no_mlm", documents=4, mlm_head="off", what="MLM off"),
    Row("masked_b4_bucket1024", documents=4, bucket_tokens=1024, what="bucket_tokens 1024"),
)}


# --- the reference "before": logits over the vocabulary at every anchor position ---------
@dataclass
class FullVocabularyLogits:
    """The MLM reader as it was before the head ran on the masked positions only: the
    head on every position of every anchor ([rows, length, vocabulary] logits), the
    cross-entropy summed over the masked ones. Same ``total`` / ``count`` as the
    library's reader, so the ``mlm`` term reads it unchanged."""

    total: torch.Tensor
    count: int = 0

    def __call__(self, model, outputs, bucket) -> None:
        labels = bucket.get("mlm_labels")
        if labels is None or "mlm" not in model.heads:
            return
        logits = model.heads["mlm"](outputs.last_hidden_state)
        self.total = self.total + F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(),
                                                  ignore_index=IGNORE_INDEX, reduction="sum")
        self.count += int((labels != IGNORE_INDEX).sum())


# --- what a step's forward pass keeps for the backward pass ------------------------------
class SavedTensors:
    """Bytes autograd saves for the backward pass during a forward, counted once per
    storage and without the parameters' storages, attributed to the phase under way
    (``encoder`` or ``mlm_head``)."""

    def __init__(self, model: torch.nn.Module):
        self.parameter_storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.phase = "encoder"
        self.seen: set[int] = set()
        self.bytes = {"encoder": 0, "mlm_head": 0}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a tensor without a storage of its own
            return tensor
        pointer = storage.data_ptr()
        if pointer not in self.parameter_storages and pointer not in self.seen:
            self.seen.add(pointer)
            self.bytes[self.phase] += storage.nbytes()
        return tensor


class InPhase:
    """An anchor-token reader whose work is counted as ``phase`` by ``saved``; reads
    its ``total`` and ``count`` through to the wrapped reader."""

    def __init__(self, reader, saved: SavedTensors, phase: str):
        self.__dict__.update(reader=reader, saved=saved, phase=phase)

    def __call__(self, model, outputs, bucket) -> None:
        self.saved.phase = self.phase
        try:
            self.reader(model, outputs, bucket)
        finally:
            self.saved.phase = "encoder"

    def __getattr__(self, name):
        return getattr(self.reader, name)


def instrument(model: ContrastiveModel, row: Row, steps: list[dict]) -> None:
    """Wrap the method's loss so that each step records its saved-tensor bytes and the
    sizes of its batch; put the reference reader in place for ``full`` rows."""
    method = model.method
    term = method.term("mlm")
    saved_holder: dict[str, SavedTensors] = {}
    if term is not None:
        library_reader = term.reader

        def reader(batch):
            base = library_reader(batch)
            if row.mlm_head == "full":
                base = FullVocabularyLogits(base.total)
            return InPhase(base, saved_holder["saved"], "mlm_head")

        term.reader = reader  # this instance only
    library_loss = method.loss

    def loss(core, **batch):
        saved = saved_holder["saved"] = SavedTensors(core)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
            out = library_loss(core, **batch)
        steps.append({"saved_bytes": dict(saved.bytes), **batch_sizes(batch)})
        return out

    method.loss = loss


def batch_sizes(batch: dict) -> dict:
    """Tokens of a DeCLUTR batch: real and padded, anchors and positives; masked anchor tokens."""
    sizes = {}
    for side in ("anchors", "positives"):
        buckets = batch[side]
        sizes[f"{side}"] = sum(int(b["input_ids"].shape[0]) for b in buckets)
        sizes[f"{side}_tokens"] = sum(int(b["attention_mask"].sum()) for b in buckets)
        sizes[f"{side}_padded_tokens"] = sum(int(b["input_ids"].numel()) for b in buckets)
        sizes[f"{side}_buckets"] = len(buckets)
    sizes["masked_tokens"] = sum(int((b["mlm_labels"] != IGNORE_INDEX).sum()) for b in batch["anchors"]
                                 if "mlm_labels" in b)
    return sizes


# --- building the model and the data -----------------------------------------------------
def load_tokenizer_for_benchmark(folder: str | None):
    from transformers import AutoTokenizer

    from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, load_tokenizer

    if folder:
        return AutoTokenizer.from_pretrained(folder, use_fast=True)
    return load_tokenizer(DEFAULT_ENCODER)


def build_model(encoder_config: str | None, tokenizer, row: Row) -> ContrastiveModel:
    """The encoder with DeCLUTR's heads: the default encoder (pretrained, a new MLM head,
    as training loads it) or a random one from :data:`ENCODER_CONFIGS`."""
    params = {"mlm": row.mlm_head != "off", "bucket_tokens": row.bucket_tokens}
    method = build_method("declutr", params)
    if encoder_config is None:
        from contrastive_sentence_embeddings.encoders.loading import DEFAULT_ENCODER, resolve_encoder
        from contrastive_sentence_embeddings.training.run import load_pretrained

        encoder, _ = load_pretrained(DEFAULT_ENCODER)
        return ContrastiveModel(encoder, "mean", method, method.pretrained_heads(resolve_encoder(DEFAULT_ENCODER),
                                                                                  encoder))
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    settings = dict(ENCODER_CONFIGS[encoder_config])
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    encoder = AutoModel.from_config(config, add_pooling_layer=False)
    heads = {}
    if method.mlm:  # the masked-LM head of that architecture, its decoder tied to the word embeddings
        masked_lm = AutoModelForMaskedLM.from_config(config)
        [(_, head)] = [(n, m) for n, m in masked_lm.named_children() if m is not masked_lm.base_model]
        masked_lm.get_output_embeddings().weight = encoder.get_input_embeddings().weight
        heads["mlm"] = head
    return ContrastiveModel(encoder, "mean", method, heads)


def synthetic_documents(count: int, tokenizer, seed: int) -> dict[str, list[int]]:
    """``count`` documents of :data:`DOCUMENT_TOKENS` random ordinary token ids."""
    special = set(tokenizer.all_special_ids)
    generator = torch.Generator().manual_seed(seed)
    low = max(special) + 1 if max(special) < 1000 else 1000  # ordinary ids: past the special ones (BERT: 0-103)
    documents = {}
    for index in range(count):
        ids = torch.randint(low, len(tokenizer), (DOCUMENT_TOKENS,), generator=generator)
        documents[f"doc{index:04d}"] = ids.tolist()
    return documents


def declutr_attention_backends() -> list[str] | None:
    """The attention kernels DeCLUTR's block trains with (conf/base merged with
    conf/paper, parsed as the training node parses it): the kernels decide part of the
    activation memory."""
    return throughput.method_block("declutr", {"training": {"seed": 0}}).training.attention_backends


def run_row(row: Row, args) -> dict:
    """One row in this process: ``args.steps`` trainer steps; its measurements."""
    torch.manual_seed(0)
    tokenizer = load_tokenizer_for_benchmark(args.tokenizer)
    model = build_model(args.encoder_config, tokenizer, row)
    documents = synthetic_documents(row.documents * args.steps, tokenizer, seed=0)
    spans = spans_by_document(sample_spans(list(documents), [len(d) for d in documents.values()], PAPER_SPANS,
                                           seed=0, epochs=1, report=StepReport("benchmark spans")))
    limit = max_sequence_length(tokenizer, model.encoder.config) - tokenizer.num_special_tokens_to_add()
    collate = DeclutrCollate(documents, spans, tokenizer, max_span_tokens=limit,
                             mlm_probability=0.15 if row.mlm_head != "off" else None,
                             bucket_tokens=row.bucket_tokens, seed=0)
    steps: list[dict] = []
    instrument(model, row, steps)
    device = torch.device(args.device)
    setup_rss = resident_gib()
    config = TrainingConfig(learning_rate=5e-5, batch_size=row.documents, max_steps=args.steps,
                            weight_decay=0.1, schedule="slanted_triangular", max_grad_norm=1.0, eval_every=0,
                            log_every=1, device="cpu" if device.type == "cpu" else None,
                            gradient_checkpointing=row.gradient_checkpointing,
                            attention_backends=declutr_attention_backends())
    start = time.perf_counter()
    result = train(model, tokenizer, sorted(documents), config, collate=collate)
    seconds = time.perf_counter() - start
    parameters = {id(p): p for p in model.parameters() if p.requires_grad}
    parameter_bytes = sum(p.numel() * p.element_size() for p in parameters.values())
    vocabulary = model.encoder.config.vocab_size
    last = steps[-1]
    logit_positions = (last["anchors_padded_tokens"] if row.mlm_head == "full" else
                       last["masked_tokens"] if row.mlm_head == "masked" else 0)
    gib = 2 ** 30
    return {
        "row": row.name, "what": row.what, "documents": row.documents, "mlm_head": row.mlm_head,
        "bucket_tokens": row.bucket_tokens, "gradient_checkpointing": row.gradient_checkpointing,
        "attention_backends": config.attention_backends or "any",
        "peak_gib": round(result.extra["peak_memory_gib"], 3),
        "peak_measure": result.extra["peak_memory_measure"],
        "rss_before_training_gib": round(setup_rss, 3) if device.type == "cpu" else None,
        "saved_for_backward_gib": {phase: round(max(s["saved_bytes"][phase] for s in steps) / gib, 3)
                                   for phase in ("encoder", "mlm_head")},
        "logits_fp32_gib": round(logit_positions * vocabulary * 4 / gib, 3),  # one copy (its gradient: another)
        "parameters_gib": round(parameter_bytes / gib, 3),
        "gradients_gib": round(parameter_bytes / gib, 3),
        "adamw_moments_gib": round(2 * parameter_bytes / gib, 3),
        "seconds_per_step": round(seconds / result.steps, 1),
        "batch": {k: v for k, v in last.items() if k != "saved_bytes"},
        "loss": {k: round(float(v), 4) for k, v in result.curve.iloc[-1].items()
                 if k in ("loss", "nt_xent", "mlm")},
    }


def proc_gib(path: str, field: str, missing: float) -> float:
    """A kibibyte figure of a Linux ``/proc`` file (``VmRSS:`` of a process's status,
    ``MemAvailable:`` of meminfo) in GiB; ``missing`` where there is none to read."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return missing


def resident_gib() -> float:
    """This process's resident memory now (Linux), GiB."""
    return proc_gib("/proc/self/status", "VmRSS:", float("nan"))


# --- the parent: one child process per row -----------------------------------------------
def child_rss_gib(pid: int) -> float:
    return proc_gib(f"/proc/{pid}/status", "VmRSS:", 0.0)  # 0 once the child is gone


def available_gib() -> float:
    return proc_gib("/proc/meminfo", "MemAvailable:", float("inf"))


def measure_in_child(row: Row, args, limit_gib: float | None) -> dict:
    """Run ``row`` in a fresh process; on CPU stop it when its resident memory passes
    ``limit_gib`` (the machine is shared: a row that would exhaust it is reported as
    above the limit instead)."""
    command = [sys.executable, __file__, "--child", row.name, "--device", args.device, "--steps", str(args.steps)]
    if args.encoder_config:
        command += ["--encoder-config", args.encoder_config]
    if args.tokenizer:
        command += ["--tokenizer", args.tokenizer]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped: list[float] = []  # the child's resident GiB when it was stopped
    if limit_gib is not None:
        def watch():  # also stops the row before the machine itself runs short (other work shares it)
            while process.poll() is None:
                resident = child_rss_gib(process.pid)
                if resident > limit_gib or available_gib() < MACHINE_RESERVE_GIB:
                    stopped.append(resident)
                    process.kill()
                    return
                time.sleep(0.2)
        threading.Thread(target=watch, daemon=True).start()
    out, err = process.communicate()
    if stopped:
        return {"row": row.name, "what": row.what, "documents": row.documents, "peak_gib_at_least": round(stopped[0], 2),
                "error": f"stopped at {stopped[0]:.1f} GiB resident, still growing (limit: {limit_gib:.1f} GiB, "
                         f"or the machine down to {MACHINE_RESERVE_GIB} GiB available)"}
    if process.returncode != 0:
        tail = [line for line in err.strip().splitlines() if line.strip()][-3:]
        return {"row": row.name, "what": row.what, "documents": row.documents,
                "error": f"exit {process.returncode}: " + " | ".join(tail)}
    return json.loads(out.strip().splitlines()[-1])


def machine(device: str) -> dict:
    described = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                 "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads()}
    if device == "cuda":
        described["gpu"] = torch.cuda.get_device_name(0)
        described["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return described


def markdown(rows: list[dict]) -> str:
    lines = ["| row | documents | peak GiB | saved for backward: encoder / MLM head GiB | one fp32 logits copy GiB "
             "| params + grads + AdamW GiB | s/step |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['row']} ({r['what']}) | {r['documents']} | {r['error']} | | | | |")
            continue
        saved = r["saved_for_backward_gib"]
        state = r["parameters_gib"] + r["gradients_gib"] + r["adamw_moments_gib"]
        lines.append(f"| {r['row']} ({r['what']}) | {r['documents']} | {r['peak_gib']:.2f} | "
                     f"{saved['encoder']:.2f} / {saved['mlm_head']:.2f} | {r['logits_fp32_gib']:.2f} | "
                     f"{state:.2f} | {r['seconds_per_step']} |")
    return "\n".join(lines)


def save(entry: dict, path: Path) -> None:
    """Put ``entry`` into the results file: one entry per device and encoder, whose rows
    measured again are replaced and the others kept (each row names the command and
    commit that measured it)."""
    runs = json.loads(path.read_text())["runs"] if path.is_file() else []
    key = (entry["device"], entry["encoder"])
    previous = next((run for run in runs if (run["device"], run["encoder"]) == key), None)
    if previous is not None:
        measured = {row["row"] for row in entry["rows"]}
        kept = [row for row in previous["rows"] if row["row"] not in measured]
        entry = {**entry, "rows": kept + entry["rows"]}
    runs = [run for run in runs if (run["device"], run["encoder"]) != key] + [entry]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(path, json.dumps({"runs": runs}, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--encoder-config", choices=sorted(ENCODER_CONFIGS), default=None,
                        help="a random-weight encoder of this configuration (default: the pretrained default encoder)")
    parser.add_argument("--tokenizer", default=os.environ.get("CSE_TOKENIZER_DIR"),
                        help="a tokenizer folder (default: $CSE_TOKENIZER_DIR, else the default encoder's)")
    parser.add_argument("--steps", type=int, default=2, help="optimiser steps per row (AdamW's state exists from "
                                                              "the second)")
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--max-rss-gib", type=float, default=None,
                        help="CPU: stop a row whose resident memory passes this (default: 90%% of the memory "
                             "available when the benchmark starts)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")

    if args.child:
        print(json.dumps(run_row(ROWS[args.child], args)))
        return

    limit = None
    if args.device == "cpu":
        limit = args.max_rss_gib or round(0.9 * available_gib(), 1)
    import transformers

    rows: list[dict] = []
    command = recorded_command(__file__, sys.argv[1:], Path(__file__).resolve().parents[1])
    commit = results_commit(Path(__file__).resolve().parents[1])
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    entry = {
        "command": command, "device": args.device, "encoder": args.encoder_config or "all-MiniLM-L6-v2 (pretrained, new MLM head)",
        "machine": machine(args.device), "torch": torch.__version__, "transformers": transformers.__version__,
        "git_commit": commit, "date": started,
        "steps_per_row": args.steps, "cpu_stop_limit_gib": limit,
        "spans": {"anchors": PAPER_SPANS.num_anchors, "positives": PAPER_SPANS.num_positives,
                  "lengths": [PAPER_SPANS.min_length, PAPER_SPANS.max_length], "document_tokens": DOCUMENT_TOKENS},
        "rows": rows,
    }
    for name in args.rows:  # the file is rewritten after each row: a long run interrupted keeps what it measured
        rows.append({**measure_in_child(ROWS[name], args, limit), "command": command, "git_commit": commit,
                     "date": started})
        print(f"{name}: {rows[-1].get('peak_gib', rows[-1].get('error'))}", flush=True)
        save(entry, args.output)
    print(markdown(rows))


if __name__ == "__main__":
    main()
