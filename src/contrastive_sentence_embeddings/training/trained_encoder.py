"""What a training run hands over to be saved: the bare encoder and what goes with it.

Its own module, importing nothing of the package, because both sides of a run name it:
the method recipes (:meth:`.methods.Method.trained_encoder`, :mod:`.clsr`) build it and
the run glue (:mod:`.run`) and the fan-out (:mod:`.fanout`) return it; kept in
:mod:`.run` it made the recipes import the glue that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class TrainedEncoder:
    """What a training node hands to the model data set: the bare encoder (heads
    dropped), its tokenizer, pooling and the metadata saved next to it."""

    encoder: torch.nn.Module
    tokenizer: object
    pooling: str
    metadata: dict = field(default_factory=dict)
