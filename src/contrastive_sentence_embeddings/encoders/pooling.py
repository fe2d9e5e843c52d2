"""From token states to one sentence embedding.

The pooling methods the papers compare (names as in SimCSE's evaluation code, where
they exist):

* ``cls``: the [CLS] state passed through the model's pooler (BERT's pretrained
  dense + tanh, or a trained MLP saved in its place).
* ``cls_before_pooler``: the raw [CLS] state of the last layer. Unsupervised SimCSE
  and SCD evaluate this way, because their MLP is used in training only.
* ``mean``: the average of the last layer's token states over the real (unpadded)
  tokens; what sentence-transformers, DeCLUTR and CLSR use.
* ``last_avg``: the same thing under the name the whitening / PromptBERT papers use;
  kept as an alias so their tables can be reproduced by name.
* ``first_last_avg``: the average of the first transformer layer's output and the
  last layer's output, then the token average. "First layer" is
  ``hidden_states[1]``, not the embedding layer ``hidden_states[0]`` (SimCSE's
  original code averaged the embedding layer, a bug its authors later fixed).

Every function here is pure: tensors in, tensors out, padding masked everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

POOLING_METHODS = ("cls", "cls_before_pooler", "mean", "last_avg", "first_last_avg")


def check_pooling(method: str) -> str:
    if method not in POOLING_METHODS:
        raise ValueError(f"unknown pooling {method!r}; choose one of {', '.join(POOLING_METHODS)}")
    return method


def needs_hidden_states(methods: Sequence[str]) -> bool:
    """Whether the forward pass must return every layer's states."""
    return any(method == "first_last_avg" for method in methods)


def masked_mean(token_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of ``token_states`` (batch, tokens, dim) over the positions where
    ``attention_mask`` (batch, tokens) is 1. Summed in float32 so that fp16 states of
    long sequences do not overflow."""
    mask = attention_mask.unsqueeze(-1).to(torch.float32)
    summed = (token_states.to(torch.float32) * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp(min=1.0)
    return summed / counts


def pool(
    method: str,
    attention_mask: torch.Tensor,
    last_hidden_state: torch.Tensor,
    pooler_output: torch.Tensor | None = None,
    hidden_states: Sequence[torch.Tensor] | None = None,
) -> torch.Tensor:
    """One embedding per sentence, shape (batch, dim), by ``method``."""
    check_pooling(method)
    if method == "cls":
        if pooler_output is None:
            raise ValueError("pooling 'cls' needs the model's pooler output, and this model has no pooler; "
                             "use 'cls_before_pooler'")
        return pooler_output
    if method == "cls_before_pooler":
        return last_hidden_state[:, 0]
    if method in ("mean", "last_avg"):
        return masked_mean(last_hidden_state, attention_mask)
    # first_last_avg
    if hidden_states is None or len(hidden_states) < 2:
        raise ValueError("pooling 'first_last_avg' needs every layer's states (output_hidden_states=True)")
    first_layer = hidden_states[1].to(torch.float32)
    last_layer = hidden_states[-1].to(torch.float32)
    return masked_mean((first_layer + last_layer) / 2.0, attention_mask)


def pool_outputs(method: str, outputs, attention_mask: torch.Tensor) -> torch.Tensor:
    """:func:`pool` on a Hugging Face model output object."""
    return pool(
        method,
        attention_mask,
        outputs.last_hidden_state,
        getattr(outputs, "pooler_output", None),
        getattr(outputs, "hidden_states", None),
    )
