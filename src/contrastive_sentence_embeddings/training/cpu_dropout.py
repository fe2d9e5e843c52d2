"""Dropout masks from uniform draws, for the encoder's training passes on CPU.

torch's CPU dropout draws its mask with ``bernoulli_``, most of the dropout's cost on
the 2-core machine (12.8 of 14.2 ms for a forward and backward over 128 x 32 x 384): a
SimCSE step of the default encoder (19 dropouts: embeddings, 6 x attention
probabilities, attention output, feed-forward output) spent 12% of its time in
``bernoulli_`` (a ``torch.profiler`` trace, docs/record/results.md), which takes about twice
as long as drawing as many uniform 31-bit integers (``random_`` on int32; a float32
``torch.rand`` sits between the two). :func:`dropout_from_uniform_draws` serves the
encoder's dropouts from one such draw per element, of the same generator:

    keep = r >= round(p * 2^31),  r uniform on {0, ..., 2^31 - 1};
    y = x * keep / (1 - p);  dy/dx = keep / (1 - p)

so each element is kept with probability 1 - p (exactly, up to the 2^-31 step of the
threshold) and scaled as torch scales it: the same distribution as torch's dropout,
other masks (another use of the generator's stream, as a change of seed gives). The
mask is saved as booleans (a quarter of torch's float mask).

The attention probabilities' dropout happens inside ``scaled_dot_product_attention``'s
C++ code, out of reach of a Python function; with dropout on, SDPA runs its math path
on CPU, and :func:`attention_with_dropout` computes that same path (scores scaled,
the mask added, softmax, dropout, the product with the values; rows every key of
which is masked give zeros, as SDPA's do) with the mask above, for attention over at
most ``UNIFORM_ATTENTION_MAX_KEYS`` keys. Longer attention (DeCLUTR's spans of up to 512
tokens) stays with torch's SDPA: there the score matrices' own passes outweigh the
cheaper draws, and the Python-level math path is slower per forward and backward
from 192 keys on (``benchmarks/cpu_attention_dropout.py``; docs/record/results.md). Calls this does not cover (causal or
grouped-query attention, in-place dropout, a rate of 0 or 1, tensors off the CPU,
longer attention) go to torch's own function.

The block works as a ``torch.overrides.TorchFunctionMode`` around the encoder's forward
pass: transformers' modules are left as they are (their ``nn.Dropout`` and their SDPA
call reach torch's functions, which the mode serves). Not for activation
checkpointing: a layer recomputed in the backward pass runs outside the block, with
torch's dropout, and would draw other masks than its forward pass did.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


DRAW_LEVELS = 2**31  # int32 random_() draws uniformly from [0, 2^31)
# Attention over more keys than this runs torch's SDPA (the crossover measured by
# benchmarks/cpu_attention_dropout.py on the 2-core machine lies between 128 and 192 keys;
# docs/record/results.md has the table).
UNIFORM_ATTENTION_MAX_KEYS = 128


def keep_mask(shape: torch.Size, p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """Booleans, each True with probability ``1 - round(p * 2^31) / 2^31``."""
    return torch.empty(shape, dtype=torch.int32, device=device).random_() >= round(p * DRAW_LEVELS)


class _UniformDropout(torch.autograd.Function):
    """``x * keep / (1 - p)`` with :func:`keep_mask`; backward: the same mask and
    scale applied to the incoming gradient."""

    @staticmethod
    def forward(ctx, inputs: torch.Tensor, p: float) -> torch.Tensor:
        keep = keep_mask(inputs.shape, p, inputs.device)
        scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return torch.where(keep, inputs, 0.0).mul_(scale)  # one pass fewer than scaling first

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (keep,) = ctx.saved_tensors
        return torch.where(keep, grad, 0.0).mul_(ctx.scale), None


def uniform_dropout(inputs: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout of rate ``p`` (0 < p < 1) with the mask drawn uniformly."""
    return _UniformDropout.apply(inputs, p)


def attention_with_dropout(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attn_mask: torch.Tensor | None, dropout_p: float, scale: float | None) -> torch.Tensor:
    """``dropout(softmax(q k^T * scale + mask)) v``, as SDPA's math path computes it,
    with :func:`uniform_dropout`. A boolean ``attn_mask`` marks the keys attended to
    (True), a float one is added to the scores; rows with every key masked give 0."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    masked_rows = None  # query rows with no key to attend to (read on the mask: heads broadcast)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
            masked_rows = ~attn_mask.any(dim=-1, keepdim=True)
        else:
            scores = scores + attn_mask
            masked_rows = attn_mask.isneginf().all(dim=-1, keepdim=True)
    probabilities = torch.softmax(scores, dim=-1)
    if masked_rows is not None and bool(masked_rows.any()):  # softmax over only -inf is NaN; SDPA gives 0
        probabilities = torch.where(masked_rows, 0.0, probabilities)
    return torch.matmul(uniform_dropout(probabilities, dropout_p), value)


def _arguments(names: tuple[str, ...], defaults: dict, args: tuple, kwargs: dict) -> dict | None:
    """A call's arguments by name (None when it passes some this module does not know)."""
    if len(args) > len(names) or set(kwargs) - set(names):
        return None
    return {**defaults, **dict(zip(names, args)), **kwargs}


_DROPOUT = ("input", "p", "training", "inplace")
_ATTENTION = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


class _UniformDropoutMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            call = _arguments(_DROPOUT, {"p": 0.5, "training": True, "inplace": False}, args, kwargs)
            if (call is not None and call["training"] and not call["inplace"] and 0.0 < call["p"] < 1.0
                    and call["input"].device.type == "cpu"):
                return uniform_dropout(call["input"], float(call["p"]))
        elif func is F.scaled_dot_product_attention:
            call = _arguments(_ATTENTION, {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
                                           "enable_gqa": False}, args, kwargs)
            if (call is not None and 0.0 < call["dropout_p"] < 1.0 and not call["is_causal"] and not call["enable_gqa"]
                    and call["query"].device.type == "cpu" and call["query"].dim() == 4
                    and call["query"].shape[:2] == call["key"].shape[:2] == call["value"].shape[:2]
                    and call["key"].shape[-2] <= UNIFORM_ATTENTION_MAX_KEYS):
                return attention_with_dropout(call["query"], call["key"], call["value"], call["attn_mask"],
                                              float(call["dropout_p"]), call["scale"])
        return func(*args, **kwargs)


@contextlib.contextmanager
def dropout_from_uniform_draws() -> Iterator[None]:
    """Within the block, CPU dropouts (``F.dropout``, SDPA's ``dropout_p``) draw their
    masks as :func:`uniform_dropout` does; every other call runs as it is."""
    with _UniformDropoutMode():
        yield
