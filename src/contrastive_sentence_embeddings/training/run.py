"""One training run from a method's parameter block to the model to save: the glue
the training pipelines' nodes call. Every method goes through :func:`train_method`
(load the encoder, build the method's model, the shared trainer, keep the best
weights); the ``train_on_*`` functions only turn a data family's prepared data into
examples and a collate function:

* :func:`train_on_sentences`: SimCSE, SCD, ImSimCSE (tokenised sentences);
* :func:`train_on_documents`: DeCLUTR (documents whose spans make the batches);
* :func:`train_on_pairs`: CLSR (frozen embeddings of positive pairs).

Each takes the method's block parsed once, by the caller (a training node), into a
:class:`~.method_block.MethodBlock`: the recipe it builds (``method``), the training
settings (``training``), ``pooling`` and ``max_examples``. A plain mapping (a caller
outside the pipelines) is parsed once at the entry; nothing below parses it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contrastive_sentence_embeddings.configuration.blocks import FANOUT_FAMILIES
from contrastive_sentence_embeddings.encoders.loading import explained_encoder_failure, resolve_encoder
from contrastive_sentence_embeddings.training.curves import with_selection
from contrastive_sentence_embeddings.training.run_name import current_run
from contrastive_sentence_embeddings.encoders.encoding import max_sequence_length
from contrastive_sentence_embeddings.training.declutr import DeclutrCollate, spans_by_document, training_documents
from contrastive_sentence_embeddings.encoders.pooling import check_pooling
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.training.trained_encoder import TrainedEncoder  # also named here by callers
from contrastive_sentence_embeddings.encoders.integrity import check_loaded_model, check_recorded_files
from contrastive_sentence_embeddings.training.trainer import SettingsRead, TrainingResult, tokenize_sentences, train


logger = logging.getLogger(__name__)


def sentence_texts(sentences) -> list[str]:
    """The ``sentence`` column of the prepared sentences as a list (a ``datasets.Dataset``
    from the catalog, or a DataFrame): the trainer tokenises every sentence up front, and
    a million of them are small enough to hold; only that column is read."""
    if hasattr(sentences, "with_format"):
        return sentences.with_format("arrow")["sentence"].to_pylist()
    return sentences["sentence"].tolist()


def load_pretrained(name: str):
    from transformers import AutoModel, AutoTokenizer

    source = resolve_encoder(name)
    check_recorded_files(source)
    with explained_encoder_failure(name, source):
        model, tokenizer = AutoModel.from_pretrained(source), AutoTokenizer.from_pretrained(source, use_fast=True)
    check_loaded_model(source, tokenizer, model)
    return model, tokenizer


def method_block(block: Mapping | MethodBlock, where: str = "method") -> MethodBlock:
    """A method's parameter block (``kind``, ``pooling``, ``method``, ``training``, ...),
    parsed strictly; an already parsed one (what the training nodes pass) is returned
    as it is. Only the ``train_on_*`` entry points call it."""
    return block if isinstance(block, MethodBlock) else MethodBlock.from_params(block, where)


def first_examples(items: Sequence, config: MethodBlock) -> Sequence:
    """The first ``max_examples`` training examples (all when it is null)."""
    return items[: config.max_examples] if config.max_examples else items


def train_on_sentences(
    sentences: Sequence[str], encoder_name: str, block: Mapping | MethodBlock, dev_scorer=None
) -> tuple[TrainedEncoder, TrainingResult]:
    """Train a sentence method (SimCSE, SCD, ImSimCSE: ``block.kind``) from the
    pretrained ``encoder_name`` on ``sentences``."""
    config = method_block(block)
    sentences = list(first_examples(list(sentences), config))

    def examples(tokenizer, model, training):
        return tokenize_sentences(tokenizer, sentences, training.max_length), None, {"train_sentences": len(sentences)}

    return train_method(encoder_name, config, examples, dev_scorer)


def train_on_documents(
    long_documents, declutr_spans, encoder_name: str, block: Mapping | MethodBlock,
    dev_scorer=None,
) -> tuple[TrainedEncoder, TrainingResult]:
    """Train a document method (DeCLUTR) from ``encoder_name`` on the sampled spans of
    the documents; a training example is a document, a batch ``batch_size`` documents.
    ``long_documents`` is the catalog's memory-mapped ``datasets.Dataset`` (or an Arrow
    or pandas table): a document's token ids are read when a batch needs them
    (:class:`.declutr.DocumentTokens`), never all turned into Python ints up front."""
    config = method_block(block)

    def examples(tokenizer, model, training):
        method = model.method
        spans = spans_by_document(declutr_spans)
        token_ids = training_documents(long_documents, spans, len(tokenizer))
        documents = first_examples(sorted(token_ids), config)
        # Span lengths come from data_processing.declutr_spans; only the model's own limit clips them.
        limit = max_sequence_length(tokenizer, model.encoder.config) - tokenizer.num_special_tokens_to_add()
        collate = DeclutrCollate(token_ids, spans, tokenizer, max_span_tokens=limit,
                                 mlm_probability=method.mlm_probability if method.mlm else None,
                                 bucket_tokens=method.bucket_tokens, pad_to_multiple_of=method.pad_to_multiple_of,
                                 seed=training.seed)
        epochs = sorted({epoch for epoch, _ in spans})
        return documents, collate, {"train_documents": len(documents), "span_epochs": len(epochs),
                                    "anchor_spans": int(len(declutr_spans))}

    return train_method(encoder_name, config, examples, dev_scorer)


def train_on_pairs(
    data, encoder_name: str, block: Mapping | MethodBlock, dev_scorer=None, cache_dir=None
) -> tuple[TrainedEncoder, TrainingResult]:
    """Train a pair method (CLSR) on the frozen embeddings of positive pairs
    (:class:`.clsr.PairEmbeddings`); the dev sentences' frozen embeddings go through
    the cache in ``cache_dir`` too."""
    from contrastive_sentence_embeddings.training.clsr import PairCollate, check_pair_embeddings

    config = method_block(block)

    def examples(tokenizer, model, training):
        check_pair_embeddings(data, encoder_name, config.pooling, model.encoder[0].in_features,
                              config.method.pair_view.frozen_layers)
        pairs = first_examples(data.examples(), config)
        return pairs, PairCollate(data.embeddings, data.fingerprint), {
            "train_pairs": len(pairs), "train_sentences": len(data.sentences), "pairs_dataset": data.dataset,
            "frozen_encoder": True, "embedding_cache": {"key": data.cache_key, "hit": data.cache_hit}}

    options = {"cache_dir": cache_dir, "device": config.training.device, "encoder_name": encoder_name}
    return train_method(encoder_name, config, examples, dev_scorer, model_options=options)


def train_method(
    encoder_name: str, config: MethodBlock, make_examples: Callable, dev_scorer=None,
    model_options: Mapping | None = None,
) -> tuple[TrainedEncoder, TrainingResult]:
    """The one way every method trains: load ``encoder_name``, build the model the
    parsed block's method (``config.method``) trains (:meth:`.methods.Method.build_model`),
    train on what ``make_examples(tokenizer, model, training_config)`` returns
    (``(examples, collate or None, a description of the data for the metadata)``)
    with the shared trainer, and return what is to be saved: the encoder with the
    kept weights (:meth:`.methods.Method.trained_encoder`)."""
    from accelerate.utils import set_seed

    training, method = config.training, config.method
    pooling = check_pooling(config.pooling)
    set_seed(training.seed)  # before the heads are initialised
    encoder, tokenizer = load_pretrained(encoder_name)
    model = method.build_model(encoder, tokenizer, pooling, resolve_encoder(encoder_name), seed=training.seed,
                               **dict(model_options or {}))
    # The examples builder and the trainer see the settings through one recorder: what
    # neither reads had no effect on this run, and the model card leaves it out.
    settings = SettingsRead(training)
    if method.family in FANOUT_FAMILIES:
        settings.num_processes  # noqa: B018 - read by the training node, which started this run's processes
    examples, collate, data_description = make_examples(tokenizer, model, settings)
    logger.info("%s: %s, %s, %s pooling, heads (training only): %s", current_run(config.kind), encoder_name,
                ", ".join(f"{k} {v}" for k, v in data_description.items()), pooling,
                ", ".join(model.heads.keys()) or "none")
    result = train(model, tokenizer, examples, settings, dev_scorer, collate=collate)
    result.curve.insert(0, "seed", training.seed)  # runs over seeds share one curve file per method
    result.curve = with_selection(result.curve, training.select_by, result.best_step)  # what the dev chart shows
    model.encoder.load_state_dict(result.best_state)
    metadata = run_metadata(config.kind, encoder_name, pooling, training.seed, method.describe(model), result,
                            data_description)
    return method.trained_encoder(model, encoder, tokenizer, pooling, metadata), result


def run_metadata(method_name: str, encoder_name: str, pooling: str, seed: int, method_params: Mapping,
                 result: TrainingResult, data_description: Mapping) -> dict:
    """What a trained model records about its run (``cse_metadata.json``): every method
    writes the same keys, plus its own description of the data. The model's ``name``
    is its folder's, added when it is saved (``datasets.SentenceEncoderDataset``)."""
    return {
        "method": method_name,
        "base_encoder": encoder_name,
        "pooling": pooling,
        "seed": seed,
        "method_params": dict(method_params),
        "training": result.extra.get("config", {}),
        # The training settings the run never read: they had no effect (trainer.SettingsRead).
        "training_unused": result.extra.get("settings_unread", []),
        "best_step": result.best_step,
        "best_dev": result.best_scores,
        "steps": result.steps,
        # Examples (sentences, documents or pairs) over all processes: the budget to compare runs at.
        "examples_seen": result.extra.get("examples_seen"),
        "num_processes": result.extra.get("num_processes"),  # batch_size is per process
        **data_description,
        "examples_per_second": round(result.examples_per_second, 2),
        "peak_memory_gib": result.extra.get("peak_memory_gib"),
        "peak_memory_measure": result.extra.get("peak_memory_measure"),  # trainer.MEMORY_MEASURES
        "device": result.extra.get("device"),  # e.g. cuda:0 or cpu
        "mixed_precision": result.extra.get("mixed_precision"),  # accelerate's: bf16, fp16 or no
        "train_seconds": round(result.seconds, 1),
    }
