"""Gathering embeddings across processes, so that in-batch-negative losses see the
global batch under multi-process (DDP / accelerate) training.

How the trainer uses it
-----------------------
With W processes each holding a local batch of ``n_r`` sentences::

    z1, z2 = model(local_batch_view_1), model(local_batch_view_2)   # (n_r, d) each
    z1, z2 = gather_embeddings(z1, z2)          # (N, d) each, N = sum_r n_r, rank order
    loss = info_nce(z1, z2)                     # the loss of the *global* batch
    accelerator.backward(scale_loss_for_ddp(loss))   # i.e. loss * W; log `loss`, not this

Every process computes the same global loss ``L`` (same value on every rank), with
every other process's embeddings as extra negatives. In the gathered tensor the
local slice is the process's own tensor (it keeps the autograd graph) and the other
slices are detached copies. Without torch.distributed initialised (or with a single
process) the gathering is the identity and ``scale_loss_for_ddp`` multiplies by 1,
so the same code runs unchanged on one device.

Why the gradient is right, and the factor W
-------------------------------------------
Write ``z_r`` for process r's embeddings and ``theta`` for the (replicated)
parameters. The global loss depends on all of them and, by the chain rule::

    dL/dtheta = sum_r  (dL/dz_r) (dz_r/dtheta)

Process r backpropagates the *same* ``L`` but only through its own slice ``z_r`` (the
other slices are constants for it), so its local gradient is exactly the r-th term
``g_r = (dL/dz_r)(dz_r/dtheta)``: ``dL/dz_r`` is the full partial derivative, since
``L`` - including the terms where ``z_r`` serves as negatives for other processes'
anchors - is computed in full on process r. No term is missing and none is counted
twice: the term of slice r is computed on process r only.

DDP (and therefore accelerate) then all-reduces gradients with an *average*,
leaving ``(1/W) sum_r g_r = (1/W) dL/dtheta`` on every process: W times too small
compared with single-process training on the global batch. Hence the trainer must
backpropagate ``W * L`` (``scale_loss_for_ddp``), after which the gradient equals
the single-process gradient of the mean loss over the global batch exactly, for
equal or unequal local batch sizes (every process uses the same global mean; no
reweighting by ``n_r`` is needed). Log and report the unscaled ``L``.

With plain SGD the missing factor is a W-times smaller learning rate; with
Adam/AdamW it mostly cancels (up to epsilon), but gradient clipping thresholds and
weight decay relative to the gradient would still differ - so scale the loss.
(Equivalently, an autograd-aware all-gather whose backward *sums* the gathered
gradients over processes, like ``torch.distributed.nn.functional.all_gather``,
hands every process ``W * dL/dz_r`` and needs no scaling; the detach trick saves
that extra all-reduce of embedding gradients.)

This holds for losses computed on the full gathered batch (``info_nce``,
``nt_xent``, ``off_dropout_info_nce``, and the batch-statistics losses
``dimension_contrastive_loss`` / ``decorrelation`` when they are meant to use global
batch statistics; SCD here computes its terms per process instead, so its method
says ``gathers_embeddings = False`` and the trainer does not scale it; an objective
mixing both kinds divides each per-process term by W before the scaling, so that it
ends up averaged over processes as usual: ``objective.total_loss``). It does
*not* hold if a process keeps only its local anchors
(rows) against the global negatives: then the gradients of the other processes'
anchors with respect to ``z_r`` are lost.

Notes: ``accelerator.gather`` is not differentiable and cannot replace
``gather_with_grad``. Gradient accumulation (``accelerator.backward`` dividing by the
number of accumulation steps) is orthogonal to this. Every process must call the
gathering functions the same number of times, in the same order (they are
collectives).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["gather_embeddings", "gather_with_grad", "scale_loss_for_ddp", "world_size"]


def _active(group: dist.ProcessGroup | None = None) -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def world_size(group: dist.ProcessGroup | None = None) -> int:
    """The number of processes ``W`` (1 when torch.distributed is not initialised)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(group)
    return 1


def scale_loss_for_ddp(loss: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``loss * W``: what to backpropagate when ``loss`` is the global-batch loss
    computed on gathered embeddings, so that DDP's gradient *averaging* yields the
    single-process gradient of the global batch (see the module docstring). The
    identity without torch.distributed."""
    size = world_size(group)
    return loss if size == 1 else loss * size


def gather_with_grad(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Concatenate every process's ``(n_r, ...)`` tensor along dim 0, in rank order.

    The local slice of the result *is* ``tensor`` (gradients flow back through it);
    the other processes' slices are detached copies. Local sizes ``n_r`` may differ
    (e.g. the last batch): sizes are gathered first and the tensors are padded to the
    largest one for the collective, then trimmed. All other dimensions and the dtype
    must agree across processes; differing trailing shapes raise a ``ValueError`` on
    every process. Returns ``tensor`` itself when torch.distributed is not
    initialised or there is a single process. A collective: every process must call it.
    """
    if not _active(group):
        return tensor
    if tensor.dim() == 0:
        raise ValueError("gather_with_grad: expected a tensor with at least one dimension (rows), got a scalar")
    size = dist.get_world_size(group)
    rank = dist.get_rank(group)

    # Gather every process's shape first (also catches mismatched trailing shapes).
    shape = torch.tensor(tensor.shape, dtype=torch.long, device=tensor.device)
    dims = torch.tensor([tensor.dim()], dtype=torch.long, device=tensor.device)
    all_dims = [torch.empty_like(dims) for _ in range(size)]
    dist.all_gather(all_dims, dims, group=group)
    if any(int(d.item()) != tensor.dim() for d in all_dims):
        raise ValueError(
            "gather_with_grad: the processes' tensors differ in number of dimensions: "
            f"{[int(d.item()) for d in all_dims]}"
        )
    shapes = [torch.empty_like(shape) for _ in range(size)]
    dist.all_gather(shapes, shape, group=group)
    shapes_list = [tuple(int(x) for x in s.tolist()) for s in shapes]
    if any(s[1:] != tuple(tensor.shape[1:]) for s in shapes_list):
        raise ValueError(f"gather_with_grad: the processes' tensors differ beyond dim 0: shapes {shapes_list}")
    rows = [s[0] for s in shapes_list]
    longest = max(rows)
    if longest == 0:
        return tensor

    local = tensor.detach()
    if local.shape[0] < longest:
        padding = local.new_zeros((longest - local.shape[0], *local.shape[1:]))
        local = torch.cat([local, padding], dim=0)
    local = local.contiguous()
    received = [torch.empty_like(local) for _ in range(size)]
    dist.all_gather(received, local, group=group)

    pieces = [piece[:n] for piece, n in zip(received, rows)]
    pieces[rank] = tensor  # the only slice with a graph: see the module docstring
    return torch.cat(pieces, dim=0)


def gather_embeddings(*tensors: torch.Tensor, group: dist.ProcessGroup | None = None) -> tuple[torch.Tensor, ...]:
    """``gather_with_grad`` applied to each tensor (e.g. the two views), in order."""
    return tuple(gather_with_grad(tensor, group=group) for tensor in tensors)
