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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch

from contrastive_sentence_embeddings.encoders import resolve_encoder
from contrastive_sentence_embeddings.encoding import max_sequence_length
from contrastive_sentence_embeddings.training.declutr import DeclutrCollate, spans_by_document, training_documents
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

    def examples(tokenizer, model, config):
        return tokenize_sentences(tokenizer, sentences, config.max_length), None, {"train_sentences": len(sentences)}

    return train_method(encoder_name, method_name, params, examples, dev_scorer)


def train_on_documents(
    long_documents: pd.DataFrame, declutr_spans: pd.DataFrame, encoder_name: str, params: Mapping, dev_scorer=None
) -> tuple[TrainedEncoder, TrainingResult]:
    """Train DeCLUTR from ``encoder_name`` on the sampled spans of the documents; a
    training example is a document, a batch ``batch_size`` documents."""

    def examples(tokenizer, model, config):
        method = model.method
        spans = spans_by_document(declutr_spans)
        token_ids = training_documents(long_documents, spans, len(tokenizer))
        # Span lengths come from data_processing.declutr_spans; only the model's own limit clips them.
        limit = max_sequence_length(tokenizer, model.encoder.config) - tokenizer.num_special_tokens_to_add()
        collate = DeclutrCollate(token_ids, spans, tokenizer, max_span_tokens=limit,
                                 mlm_probability=method.mlm_probability if method.mlm else None,
                                 bucket_tokens=method.bucket_tokens, seed=config.seed)
        epochs = sorted({epoch for epoch, _ in spans})
        return sorted(token_ids), collate, {"train_documents": len(token_ids), "span_epochs": len(epochs),
                                             "anchor_spans": int(len(declutr_spans))}

    return train_method(encoder_name, "declutr", params, examples, dev_scorer)


def train_method(
    encoder_name: str, method_name: str, params: Mapping, make_examples: Callable, dev_scorer=None
) -> tuple[TrainedEncoder, TrainingResult]:
    """Load ``encoder_name``, build the method and its heads, train on what
    ``make_examples(tokenizer, model, config)`` returns (``(examples, collate or None,
    a description of the data for the metadata)``) and return the best encoder."""
    from accelerate.utils import set_seed

    config = TrainingConfig.from_params(dict(params.get("training", {})))
    pooling = check_pooling(params["pooling"])
    set_seed(config.seed)  # before the heads are initialised
    encoder, tokenizer = load_pretrained(encoder_name)
    method = build_method(method_name, params.get("method", {}))
    model = ContrastiveModel(encoder, pooling, method, method.pretrained_heads(resolve_encoder(encoder_name), encoder))
    examples, collate, data_description = make_examples(tokenizer, model, config)
    logger.info("%s: %s, %s, %s pooling, heads (training only): %s", params.get("run_name", method_name),
                encoder_name, ", ".join(f"{k} {v}" for k, v in data_description.items()), pooling,
                ", ".join(model.heads.keys()) or "none")
    result = train(model, tokenizer, examples, config, dev_scorer, collate=collate)
    encoder.load_state_dict(result.best_state)
    metadata = run_metadata(params.get("run_name", method_name), method_name, encoder_name, pooling, config.seed,
                            dict(params.get("method", {})), result, data_description)
    return TrainedEncoder(encoder.cpu(), tokenizer, pooling, metadata), result


def run_metadata(name: str, method_name: str, encoder_name: str, pooling: str, seed: int, method_params: Mapping,
                 result: TrainingResult, data_description: Mapping) -> dict:
    """What a trained model records about its run (``cse_metadata.json``): every method
    writes the same keys, plus its own description of the data."""
    return {
        "name": name,
        "method": method_name,
        "base_encoder": encoder_name,
        "pooling": pooling,
        "seed": seed,
        "method_params": dict(method_params),
        "training": result.extra.get("config", {}),
        "best_step": result.best_step,
        "best_dev": result.best_scores,
        "steps": result.steps,
        **data_description,
        "examples_per_second": round(result.examples_per_second, 2),
        "peak_memory_gib": result.extra.get("peak_memory_gib"),
        "train_seconds": round(result.seconds, 1),
    }
