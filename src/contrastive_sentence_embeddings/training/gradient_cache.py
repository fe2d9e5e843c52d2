"""Exact large batches in the memory of a small one: gradient caching
(``training.mini_batch_size``).

An in-batch-negative loss needs every embedding of the batch at once, but the encoder's
graph, which is what fills memory, is only needed one piece at a time. A step with
``mini_batch_size = m`` splits the batch into ``batch_size / m`` mini-batches
(:func:`split_batch`; the trainer's loader does it as it builds the batch, on the host,
:data:`MINI_BATCHES`) and runs in three parts (:meth:`GradientCache.step`):

1. each mini-batch's views (:meth:`.methods.ComposedMethod.encode`) run without a graph
   (``torch.no_grad``); the random-number state (CPU, and the CUDA device's) is recorded
   before each, and its named embeddings (``a``, ``b``, ``off``) are kept;
2. the kept embeddings of all mini-batches, joined in batch order, become leaves that
   require a gradient; the objective's terms (:func:`.objective.total_loss`) run on
   them as on a whole batch (heads on top of the embeddings, such as SimCSE's MLP and
   SCD's BatchNorm projector, run here, once, on the whole batch: their gradients and
   batch statistics are the whole batch's), and backpropagating the loss gives the
   heads' gradients and ``d loss / d embedding`` for every kept embedding;
3. each mini-batch runs again with its recorded random state restored, so that its
   dropout masks are the ones of part 1, now with a graph, and backpropagates its
   embeddings with their slices of those gradients
   (``torch.autograd.backward(embeddings, grad_tensors=...)``). The encoder's gradient
   is the sum over the mini-batches: by the chain rule, exactly the gradient of the
   whole-batch loss for the masks drawn.

Terms that read token states rather than embeddings (DeCLUTR's ``mlm``: a sum of
cross-entropies over the batch's masked anchor tokens divided by their count) are
computed on each mini-batch in part 3 instead: each adds its share, the mini-batch's
sum over the whole batch's count (counted in part 1, whose no-graph value is also what
is logged). Such a term's value is ``reader.total / max(reader.count, 1)``
(:class:`.objective.MLM`).

Memory is then that of one mini-batch's graph plus the batch's embeddings; compute is
one more forward pass per step. The masks a mini-batch draws differ from those of one
pass over the whole batch (they depend on the shapes drawn for), so a run with a
mini-batch size is not the same run, number for number, as one without: it is the same
loss and gradient for the masks it drew (tests/training/test_gradient_cache.py).

Several processes: each runs the three parts on its own batch. The loss of part 2 is
the same global loss :mod:`.distributed` describes (embeddings gathered with the
gradient on the local slice), scaled by the number of processes as the trainer scales
it, and the gradients are averaged across processes after part 3 (the averaging
DistributedDataParallel does at a backward through its own forward, which the passes
here do not go through), so the scaling rule of :mod:`.distributed` holds unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from contrastive_sentence_embeddings.training.declutr import masked_positions
from contrastive_sentence_embeddings.training.objective import Encoded, process_divisor, total_loss

Batch = Mapping[str, object]


# --- splitting a batch into mini-batches ---------------------------------------------------
def chunk_count(batch_size: int, mini_batch_size: int) -> int:
    """How many mini-batches a batch is split into; ``mini_batch_size`` must divide
    ``batch_size`` (every mini-batch the same size, the loss's normalisation unchanged)."""
    if mini_batch_size < 1 or batch_size % mini_batch_size:
        raise ValueError(f"mini_batch_size must be a divisor of batch_size ({batch_size}), got {mini_batch_size}")
    return batch_size // mini_batch_size


def row_ranges(rows: int, chunks: int) -> list[tuple[int, int]]:
    """``[begin, end)`` of ``chunks`` consecutive ranges over ``rows`` rows, sizes as
    ``torch.tensor_split`` gives them (the first ``rows % chunks`` one longer), empty
    ranges left out. Plain integers: bounds read from a tensor would each be a host
    read (:mod:`.host_reads`), however small."""
    size, longer = divmod(rows, chunks)
    ranges, begin = [], 0
    for chunk in range(chunks):
        end = begin + size + (chunk < longer)
        if end > begin:
            ranges.append((begin, end))
        begin = end
    return ranges


def _trimmed(attention_mask: torch.Tensor) -> slice:
    """The columns that hold a token of some row: rows are right-padded, so the padding
    past a mini-batch's own longest row is dropped (it changes no embedding)."""
    longest = int(attention_mask.sum(dim=1).max()) if attention_mask.numel() else 0
    return slice(0, max(longest, 1))


def split_rows(batch: Batch, chunks: int) -> list[dict]:
    """A batch of row-aligned tensors (padded sentences: ``input_ids``,
    ``attention_mask``; CLSR's ``first``, ``second``) in ``chunks`` consecutive row
    ranges; token tensors are cut to the range's longest row."""
    tensors = dict(batch)
    rows = {value.shape[0] for value in tensors.values()}
    if len(rows) != 1:
        raise ValueError(f"cannot split a batch whose tensors have different row counts: {sorted(rows)}")
    pieces = []
    for begin, end in row_ranges(rows.pop(), chunks):
        piece = {name: value[begin:end] for name, value in tensors.items()}
        if "attention_mask" in piece:
            columns = _trimmed(piece["attention_mask"])
            piece["input_ids"], piece["attention_mask"] = piece["input_ids"][:, columns], \
                piece["attention_mask"][:, columns]
        pieces.append(piece)
    return pieces


def _bucket_rows(buckets: Sequence[Mapping], begin: int, end: int) -> list[dict]:
    """The members of length buckets (:class:`.declutr.DeclutrCollate`) whose batch row
    is in ``[begin, end)``, renumbered from 0, each bucket cut to its longest member."""
    kept = []
    for bucket in buckets:
        chosen = (bucket["rows"] >= begin) & (bucket["rows"] < end)
        if not bool(chosen.any()):
            continue
        # Every per-row tensor is cut; the masked positions index the whole bucket's
        # tokens, so they are found again in the piece.
        piece = {name: value[chosen] for name, value in bucket.items() if name != "mlm_positions"}
        piece["rows"] = piece["rows"] - begin
        columns = _trimmed(piece["attention_mask"])
        for name in ("input_ids", "attention_mask", "mlm_labels"):
            if name in piece:
                piece[name] = piece[name][:, columns]
        if "mlm_positions" in bucket:
            piece["mlm_positions"] = masked_positions(piece["mlm_labels"])
        kept.append(piece)
    return kept


def split_documents(batch: Batch, chunks: int) -> list[dict]:
    """A DeCLUTR batch (length buckets of anchors and of positives, every anchor's
    ``P`` positives at rows ``P * anchor ...``) in ``chunks`` consecutive anchor
    ranges, each with its anchors' positives. The anchors are in document order, so
    with every document of the batch present a range is ``mini_batch_size`` documents."""
    anchors, positives = batch["anchors"], batch["positives"]
    anchor_count = sum(len(bucket["rows"]) for bucket in anchors)
    per_anchor = sum(len(bucket["rows"]) for bucket in positives) // anchor_count
    pieces = []
    for begin, end in row_ranges(anchor_count, chunks):
        pieces.append({"anchors": _bucket_rows(anchors, begin, end),
                       "positives": _bucket_rows(positives, begin * per_anchor, end * per_anchor)})
    return pieces


SPLITTERS: dict[str, Callable[[Batch, int], list[dict]]] = {
    "sentences": split_rows, "pairs": split_rows, "documents": split_documents}


def split_batch(batch: Batch, family: str, chunks: int) -> list[dict]:
    """``batch`` (what the ``family``'s collate function made) as ``chunks``
    mini-batches in batch order (fewer when it has fewer rows than that)."""
    return SPLITTERS[family](batch, chunks)


# The key of a batch that comes split already: the trainer's loader splits each batch
# on the host as it builds it, where cutting rows and padding reads no device tensor,
# so a step on a GPU never waits for the device to learn where to cut.
MINI_BATCHES = "mini_batches"


def presplit_batch(batch: Batch, family: str, chunks: int) -> dict:
    """``{MINI_BATCHES: split_batch(batch, family, chunks)}``: what
    :meth:`GradientCache.step` takes as it is."""
    return {MINI_BATCHES: split_batch(batch, family, chunks)}


# --- random state --------------------------------------------------------------------------
def random_state(device: torch.device) -> tuple:
    """The generator state that dropout on ``device`` draws from (and the CPU's)."""
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def restore_random_state(state: tuple, device: torch.device) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)


# --- the step ------------------------------------------------------------------------------
@dataclass
class _SummedReader:
    """A token-reading term's reader for the whole batch, summed over the mini-batches
    (no graph: its value is logged, its gradient comes from part 3)."""

    total: torch.Tensor
    count: int


class GradientCache:
    """One optimisation step's forward and backward passes for ``model`` (a model with
    a ``method`` of views and terms: :class:`.methods.ContrastiveModel`,
    :class:`.clsr.CLSRModel`) in mini-batches of ``mini_batch_size`` (module
    docstring). ``autocast`` makes the mixed-precision context of the plain forward
    (accelerate's ``accelerator.autocast``), ``scaler`` is fp16's gradient scaler
    (None otherwise) and ``average_gradients`` averages the gradients across processes
    after the step (several processes)."""

    def __init__(self, model: nn.Module, batch_size: int, mini_batch_size: int, *,
                 autocast: Callable[[], object] = nullcontext, scaler=None, average_gradients: bool = False):
        self.model = model
        self.chunks = chunk_count(batch_size, mini_batch_size)
        self.autocast = autocast
        self.scaler = scaler
        self.average_gradients = average_gradients

    def _scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scale(loss) if self.scaler is not None else loss

    def embed_without_graph(self, pieces: list[Batch], device: torch.device) -> tuple[list, list[Encoded]]:
        """Part 1 of :meth:`step`: each mini-batch's random state and its embeddings,
        computed without a graph. Part 3 computes them again (the same masks) to
        back-propagate, so this pass is recomputation: work the device does that a
        whole-batch step would not (benchmarks count it as hardware, not model, FLOPs)."""
        states, kept = [], []
        with torch.no_grad():
            for piece in pieces:
                states.append(random_state(device))
                with self.autocast():
                    kept.append(self.model.method.encode(self.model, **piece))
        return states, kept

    def step(self, batch: Batch, loss_scale: float = 1.0) -> dict[str, torch.Tensor]:
        """Accumulate the whole batch's gradient of ``loss * loss_scale`` into the
        parameters' ``.grad`` and return the logs the plain forward returns (``loss``
        and every term's value, detached, in float32)."""
        model, method = self.model, self.model.method
        device = next(model.parameters()).device
        pieces = batch[MINI_BATCHES] if MINI_BATCHES in batch else split_batch(batch, method.family, self.chunks)

        # Part 1: every mini-batch's embeddings without a graph, and its random state.
        states, kept = self.embed_without_graph(pieces, device)
        state_after = random_state(device)

        # Part 2: the whole batch's loss on the kept embeddings, as leaves.
        names = list(kept[0].tensors)
        rows = [encoded.tensors[names[0]].shape[0] for encoded in kept]
        leaves = {name: torch.cat([encoded.tensors[name] for encoded in kept]).detach().requires_grad_(True)
                  for name in names}
        whole = Encoded()
        whole.tensors = dict(leaves)
        if kept[0].joint is not None:  # the pair went through the network stacked: the heads see it stacked
            whole.joint = torch.cat([leaves["a"], leaves["b"]])
        token_terms = [term for term in method.terms if term.name in kept[0].readers]
        for term in token_terms:
            whole.readers[term.name] = _SummedReader(sum(encoded.readers[term.name].total for encoded in kept),
                                                     sum(encoded.readers[term.name].count for encoded in kept))
        with self.autocast():
            logs = total_loss(method.terms, model, whole)
        if logs["loss"].requires_grad:
            self._scaled(logs["loss"] * loss_scale).backward()
        gradients = {name: leaf.grad for name, leaf in leaves.items() if leaf.grad is not None}

        # Part 3: each mini-batch again, its masks replayed, back-propagated with its gradients.
        begin = 0
        for piece, state, count in zip(pieces, states, rows):
            restore_random_state(state, device)
            with self.autocast():
                encoded = method.encode(model, **piece)
                outputs, grad_outputs = [], []
                for name, gradient in gradients.items():
                    outputs.append(encoded.tensors[name])
                    grad_outputs.append(gradient[begin:begin + count])
                for term in token_terms:
                    share = encoded.readers[term.name].total
                    if share.requires_grad:
                        factor = term.weight / process_divisor(method.terms, term) / max(
                            whole.readers[term.name].count, 1)
                        outputs.append(self._scaled(share * (factor * loss_scale)))
                        grad_outputs.append(torch.ones_like(outputs[-1]))
            if outputs:
                torch.autograd.backward(outputs, grad_tensors=grad_outputs)
            begin += count
        restore_random_state(state_after, device)  # the run goes on from where one pass over the batch left it
        if self.average_gradients:
            average_gradients(model)
        return {key: value.detach().float() for key, value in logs.items()}


def average_gradients(model: nn.Module, bucket_elements: int = 2 ** 24) -> None:
    """Every trainable parameter's gradient averaged across the processes (a parameter
    without a gradient counts as zero, on every process alike), in flat buckets of
    about ``bucket_elements`` values per dtype: what DistributedDataParallel's
    all-reduce does at a backward through its own forward."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    size = dist.get_world_size()
    parameters = [p for p in model.parameters() if p.requires_grad]
    for parameter in parameters:
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for parameter in parameters:
        by_dtype.setdefault(parameter.grad.dtype, []).append(parameter.grad)
    for grads in by_dtype.values():
        bucket, elements = [], 0
        for grad in [*grads, None]:
            if grad is not None:
                bucket.append(grad)
                elements += grad.numel()
            if bucket and (grad is None or elements >= bucket_elements):
                flat = torch.cat([g.reshape(-1) for g in bucket])
                dist.all_reduce(flat)
                flat /= size
                offset = 0
                for g in bucket:
                    g.copy_(flat[offset:offset + g.numel()].view_as(g))
                    offset += g.numel()
                bucket, elements = [], 0
