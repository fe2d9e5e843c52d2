"""One training run from parameters to a saved model: the glue the methods'
pipelines call. Everything here delegates to the library (methods, trainer, saving);
it only reads the parameter block of a method:

```yaml
<method>:
  run_name: simcse            # the folder under data/06_models and the leaderboard row
  pooling: cls_before_pooler
  method: {...}               # the method's hyper-parameters (see training.methods)
  training: {...}             # optimisation (see training.trainer.TrainingConfig)
```
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from contrastive_sentence_embeddings.encoders import resolve_encoder
from contrastive_sentence_embeddings.pooling import check_pooling
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, TrainingResult, tokenize_sentences, train

logger = logging.getLogger(__name__)


@dataclass
class TrainedEncoder:
    """What a training node hands to the model data set: the bare encoder (heads
    dropped), its tokenizer, pooling and the metadata saved next to it."""

    encoder: torch.nn.Module
    tokenizer: object
    pooling: str
    metadata: dict = field(default_factory=dict)


def load_pretrained(name: str):
    from transformers import AutoModel, AutoTokenizer

    source = resolve_encoder(name)
    return AutoModel.from_pretrained(source), AutoTokenizer.from_pretrained(source, use_fast=True)


def train_on_sentences(
    sentences: Sequence[str], encoder_name: str, method_name: str, params: Mapping, dev_scorer=None
) -> tuple[TrainedEncoder, TrainingResult]:
    """Train ``method_name`` from the pretrained ``encoder_name`` on ``sentences``."""
    from accelerate.utils import set_seed

    config = TrainingConfig.from_params(dict(params.get("training", {})))
    pooling = check_pooling(params["pooling"])
    set_seed(config.seed)  # before the heads are initialised
    encoder, tokenizer = load_pretrained(encoder_name)
    method = build_method(method_name, params.get("method", {}))
    model = ContrastiveModel(encoder, pooling, method)
    logger.info("%s: %s on %d sentences, %s pooling, heads (training only): %s", params.get("run_name", method_name),
                encoder_name, len(sentences), pooling, ", ".join(model.heads.keys()) or "none")
    token_ids = tokenize_sentences(tokenizer, sentences, config.max_length)
    result = train(model, tokenizer, token_ids, config, dev_scorer)
    encoder.load_state_dict(result.best_state)
    metadata = {
        "name": params.get("run_name", method_name),
        "method": method_name,
        "base_encoder": encoder_name,
        "pooling": pooling,
        "seed": config.seed,
        "method_params": dict(params.get("method", {})),
        "training": result.extra.get("config", {}),
        "best_step": result.best_step,
        "best_dev": result.best_scores,
        "steps": result.steps,
        "train_sentences": len(sentences),
        "examples_per_second": round(result.examples_per_second, 2),
        "train_seconds": round(result.seconds, 1),
    }
    return TrainedEncoder(encoder.cpu(), tokenizer, pooling, metadata), result
