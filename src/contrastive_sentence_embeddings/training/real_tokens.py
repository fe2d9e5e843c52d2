"""The encoder's linear layers on real tokens only, during training.

A batch is padded to its longest sentence; with wiki sentences cut at 32 tokens a
third of the positions are padding (mean length 21 of 32), and the linear layers
(query, key, value, attention output, feed-forward) are most of a training step's
time on CPU. :func:`linears_on_real_tokens` runs each of them on the real tokens
alone and puts zeros at the padded positions of its output.

What this leaves unchanged: a padded position is read by a real one only as an
attention key or value, where the attention mask gives it probability exactly 0 (so
its value, zero now instead of the bias, contributes exactly 0), and the pooling
and the masked-LM term read real positions only. Every other operation (dropout
above all) still runs on the padded tensors, so the dropout masks, drawn from the
same generator in the same order and shapes, are the same. The loss and gradients
are therefore those of the padded computation up to float rounding (a matrix product
over fewer rows may sum in another order); tests/training/test_real_tokens.py checks
both. Only encoders whose layers mix tokens by masked attention alone are handled
(:data:`MASKED_ATTENTION_ONLY`); any other runs padded, as before. An encoder
with activation checkpointing on (``training.gradient_checkpointing``) also runs
padded: its layers are recomputed during the backward pass, after this block has
removed its hooks, and a recomputation that differs from the original pass is an
error (torch.utils.checkpoint counts the tensors each saves).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

# Model types whose padded positions reach real ones only through masked attention.
MASKED_ATTENTION_ONLY = frozenset({"bert", "roberta", "xlm-roberta"})


def handles_padding(encoder: nn.Module) -> bool:
    """Whether :func:`linears_on_real_tokens` may skip the padding of ``encoder``."""
    return (getattr(getattr(encoder, "config", None), "model_type", None) in MASKED_ATTENTION_ONLY
            and not recomputes_in_backward(encoder))


def recomputes_in_backward(encoder: nn.Module) -> bool:
    """Whether ``encoder`` has activation checkpointing on (transformers 5 names the flag
    ``is_activation_checkpointing``; 4.x ``is_gradient_checkpointing``)."""
    for flag in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(encoder), flag):  # properties of transformers' PreTrainedModel
            return bool(getattr(encoder, flag))
    return False


@contextlib.contextmanager
def linears_on_real_tokens(encoder: nn.Module, attention_mask: torch.Tensor) -> Iterator[None]:
    """Within the block, each ``nn.Linear`` of ``encoder`` given a ``(batch, length, .)``
    input computes the rows of real tokens (``attention_mask`` 1) only; its output has
    the usual shape, zero at the padded positions. A batch without padding, or an
    encoder not in :data:`MASKED_ATTENTION_ONLY`, runs as it is."""
    rows, length = attention_mask.shape
    if bool(attention_mask.all()) or not handles_padding(encoder):
        yield
        return
    real = attention_mask.reshape(-1).nonzero().squeeze(1)
    packed: set[nn.Module] = set()  # the layers whose input this call took the real rows of
    # The last input packed and its real rows: query, key and value read one tensor in
    # turn, and packing it once lets autograd keep one copy of the real rows for the
    # three (packing it three times kept three, more than the one padded input they
    # replace: measured by benchmarks/declutr_memory.py).
    last: list = [None, None]

    def keep_real_rows(module, args):
        states = args[0]
        if states.dim() == 3 and states.shape[:2] == (rows, length):  # not e.g. the pooler's [CLS] rows
            packed.add(module)
            if last[0] is not states:
                last[:] = [states, states.reshape(rows * length, states.shape[2]).index_select(0, real)]
            return (last[1], *args[1:])
        return None

    def restore_padding(module, args, output):
        if module not in packed:
            return None
        packed.discard(module)
        # index_put, not index_copy: autograd keeps only the indices for it, where
        # index_copy would keep the whole packed output alive until the backward pass.
        # In place into the fresh zeros (no gradient of its own): the out-of-place call
        # copies them first, ~40% of the restore's time.
        padded = output.new_zeros(rows * length, output.shape[1]).index_put_((real,), output)
        return padded.view(rows, length, output.shape[1])

    handles = []
    try:
        for module in encoder.modules():
            if isinstance(module, nn.Linear):
                handles.append(module.register_forward_pre_hook(keep_real_rows))
                handles.append(module.register_forward_hook(restore_padding))
        yield
    finally:
        last.clear()
        for handle in handles:
            handle.remove()
