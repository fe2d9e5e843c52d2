"""Dropout control for an encoder without patching transformers.

Two context managers:

* ``dropout_rate(model, p)``: every dropout rate in the model becomes ``p`` (SCD's
  low/high-rate views, or a dropout rate different from the checkpoint's for
  SimCSE); every original rate is restored on exit, also when the block raises.
* ``dropout_off(model)``: a dropout-free forward pass while the model stays in
  train mode for everything else (BatchNorm in a projector keeps using batch
  statistics, the model's own ``training`` flags are untouched); the previous rates
  and the dropout modules' train/eval flags are restored exactly on exit (ImSimCSE's
  off-dropout negatives).

What counts as "a dropout rate" (found generically by walking the model, nothing
BERT-specific):

1. every ``torch.nn`` dropout module (``nn.Dropout``, ``Dropout1d/2d/3d``,
   ``AlphaDropout``, ``FeatureAlphaDropout``; all subclass ``_DropoutNd``): its
   ``p``;
2. every float attribute of any submodule whose name says it is a dropout rate:
   it contains ``dropout`` (``dropout``, ``dropout_prob``, ``dropout_p``,
   ``attention_dropout``, ``activation_dropout``, ``hidden_dropout``, ...) or ends in
   ``drop`` / ``drop_p`` / ``drop_prob`` / ``drop_rate`` after an underscore or at the
   start (``attn_drop``, ``drop_prob``); stochastic depth / LayerDrop names
   (``layerdrop``, ``drop_path*``) are excluded. Only ``float`` values count (not
   ints, bools, modules or None);
3. the same float attributes on the transformers configuration objects the
   submodules hold (``module.config``), for the few models whose forward reads
   ``self.config.<...>_dropout`` (Falcon, GPT-Neo, Persimmon, BLT, Data2Vec-vision in
   transformers 5.x).

How transformers 5.x applies dropout in BERT and RoBERTa (``modeling_bert`` /
``modeling_roberta``, checked on 5.23): the embedding, attention-output and FFN
dropouts are ``nn.Dropout`` modules. The *attention-probability* dropout is not
called as a module: ``BertSelfAttention.forward`` passes
``dropout=0.0 if not self.training else self.dropout.p`` to the attention function
(eager, SDPA or flash), which calls ``F.dropout`` / ``scaled_dot_product_attention``
itself. So its rate is read from the ``nn.Dropout`` module's ``p`` at every forward
(setting ``p`` works), but it is switched on by the *attention module's* training
flag, not the dropout module's: putting only the ``nn.Dropout`` modules in eval mode
(what the ImSimCSE reference code did on transformers 4.x) leaves attention dropout
active. ``dropout_off`` therefore sets every rate to 0 as well as putting the
dropout modules in eval mode. DistilBERT works the same way; transformers 4.x's
``BertSdpaSelfAttention`` kept the rate in a float ``self.dropout_prob`` and many
decoder models keep ``self.attention_dropout`` floats (Llama, Mistral, Gemma,
ModernBERT, ...): those are rule 2. ``torch.nn.MultiheadAttention.dropout`` and
RNN ``dropout`` floats are also rule 2.

Not covered: a rate hard-coded in a forward, read from some other object, or a
dropout layer that a model replaced by ``nn.Identity`` at construction because its
configured rate was 0 (ModernBERT does this), which no rate change can bring back.
``dropout_rate`` leaves the train/eval flags alone: in eval mode nothing drops
whatever the rate.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.nn.modules.dropout import _DropoutNd

__all__ = ["dropout_modules", "dropout_off", "dropout_rate", "dropout_rates"]

_RATE_NAME = re.compile(r"dropout|(?:^|_)drop(?:_?p|_prob|_rate)?$", re.IGNORECASE)
_NOT_A_RATE = re.compile(r"layer_?drop|drop_?path|path_?drop", re.IGNORECASE)


@dataclass(frozen=True)
class _RateSlot:
    """One place a dropout rate lives: ``getattr(owner, attribute)``."""

    label: str
    owner: Any
    attribute: str


def _is_rate_attribute(name: str, value: object) -> bool:
    return (
        isinstance(value, float)
        and bool(_RATE_NAME.search(name))
        and not _NOT_A_RATE.search(name)
    )


def _is_transformers_config(value: object) -> bool:
    try:
        from transformers import PretrainedConfig
    except ImportError:  # transformers is a dependency, but keep this module usable without it
        return False
    return isinstance(value, PretrainedConfig)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _rate_slots(model: nn.Module) -> list[_RateSlot]:
    slots: list[_RateSlot] = []
    seen_configs: set[int] = set()
    for name, module in model.named_modules():
        if isinstance(module, _DropoutNd):
            slots.append(_RateSlot(_join(name, "p"), module, "p"))
            continue
        for attribute, value in vars(module).items():
            if _is_rate_attribute(attribute, value):
                slots.append(_RateSlot(_join(name, attribute), module, attribute))
        config = vars(module).get("config")
        if config is not None and id(config) not in seen_configs and _is_transformers_config(config):
            seen_configs.add(id(config))
            for attribute, value in vars(config).items():
                if _is_rate_attribute(attribute, value):
                    slots.append(_RateSlot(_join(_join(name, "config"), attribute), config, attribute))
    return slots


def dropout_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``torch.nn`` dropout modules of ``model`` (any ``_DropoutNd``), by name."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, _DropoutNd)]


def dropout_rates(model: nn.Module) -> dict[str, float]:
    """Every dropout rate ``dropout_rate`` and ``dropout_off`` control, by label:
    ``"<module path>.p"`` for dropout modules, ``"<module path>.<attribute>"`` for
    rate attributes, ``"<module path>.config.<attribute>"`` for configuration
    fields."""
    return {slot.label: getattr(slot.owner, slot.attribute) for slot in _rate_slots(model)}


def _check_rate(p: float) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a dropout rate must lie in [0, 1], got {p}")
    return p


@contextmanager
def dropout_rate(model: nn.Module, p: float) -> Iterator[nn.Module]:
    """Set every dropout rate of ``model`` (see the module docstring for what is
    covered) to ``p`` inside the block, and put every original rate back on exit,
    also when the block raises. Train/eval flags are not touched, so the new rate
    only acts in train mode. Yields ``model``."""
    p = _check_rate(p)
    slots = _rate_slots(model)
    saved = [(slot, getattr(slot.owner, slot.attribute)) for slot in slots]
    try:
        for slot in slots:
            setattr(slot.owner, slot.attribute, p)
        yield model
    finally:
        for slot, value in reversed(saved):
            setattr(slot.owner, slot.attribute, value)


@contextmanager
def dropout_off(model: nn.Module) -> Iterator[nn.Module]:
    """A dropout-free forward pass that leaves the rest of ``model`` in the mode it is
    in (typically train: BatchNorm keeps batch statistics, ``model.training`` stays
    True). Inside the block every dropout rate is 0 and every dropout module is in
    eval mode; on exit, also when the block raises, every rate and every dropout
    module's own ``training`` flag are restored exactly (flags are set per module,
    not through ``.train()``, so nothing else is touched). Yields ``model``."""
    modules = [module for _, module in dropout_modules(model)]
    flags = [(module, module.training) for module in modules]
    try:
        with dropout_rate(model, 0.0):
            for module in modules:
                module.training = False
            yield model
    finally:
        for module, flag in flags:
            module.training = flag
