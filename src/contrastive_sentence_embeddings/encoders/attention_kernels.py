"""Which kernels ``scaled_dot_product_attention`` may run while a model trains or encodes.

PyTorch picks one of its SDPA backends for each call: on Hopper GPUs with a recent
cuDNN (torch >= 2.10) that is cuDNN's attention, which builds an execution graph, forward
and backward, for every input shape it has not met before. On an H100 such a first call
cost ~150 ms against ~1 ms for the next one on the same shape, while the memory-efficient
kernel pays nothing per shape (``benchmarks/sdpa_shapes.py``, docs/record/gpu.md run 5). A
method whose batches keep changing shape, as DeCLUTR's length buckets do, loses most of
its step to those builds; sentence batches (width <= max_length) meet all their shapes
in the first few steps. Encoding for evaluation sorts sentences by length and pads each
batch to its own longest, so nearly every batch of a fresh process is a new shape.

Two settings name the backends allowed (PyTorch's ``torch.nn.attention.sdpa_kernel``):
``training.attention_backends`` for a training run and its dev scoring, and
``evaluation.attention_backends`` for every encoding of the evaluation
(``SentenceEncoder.attention_backends``). Null leaves the choice to PyTorch. Each
backend computes the same attention; the choice changes speed, float rounding and, on a
GPU, which attention-dropout masks are drawn (each fused kernel draws its own, as a
compiled run's do): another equally valid run, as another seed gives, not another
method. On a CPU, leaving cuDNN out changes nothing (it is a CUDA backend).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

# The names a parameter file uses, and PyTorch's SDPBackend member for each.
ATTENTION_BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                      "math": "MATH"}


def check_attention_backends(value) -> list[str] | None:
    """``attention_backends`` (training's or evaluation's): null, or a non-empty list of distinct names from
    :data:`ATTENTION_BACKENDS` (a bare string is refused: ``cudnn`` alone would be read
    as its letters)."""
    if value is None:
        return None
    names = list(value) if isinstance(value, (list, tuple)) else None
    if not names or not all(isinstance(name, str) for name in names):
        raise ValueError(f"attention_backends must be null or a list of some of {', '.join(ATTENTION_BACKENDS)}, "
                         f"got {value!r}")
    unknown = [name for name in names if name not in ATTENTION_BACKENDS]
    if unknown:
        raise ValueError(f"attention_backends must be backends of {', '.join(ATTENTION_BACKENDS)}; unknown: {unknown}")
    if len(set(names)) != len(names):
        raise ValueError(f"attention_backends must be distinct backends, got {names}")
    return names


def allowed_attention(names: Sequence[str] | None) -> contextlib.AbstractContextManager:
    """A context in which ``scaled_dot_product_attention`` may run only the backends
    ``names`` (keys of :data:`ATTENTION_BACKENDS`), restoring the process's own settings
    when it ends; None: PyTorch's own choice (nothing changes)."""
    if not names:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, ATTENTION_BACKENDS[name]) for name in check_attention_backends(names)])
