"""The training nodes, one per data family. Each reads its prepared data and the
method's block (``params:<method>``), parses the block once into a
:class:`~.training.method_block.MethodBlock` (the built method, the training settings,
the sources) and hands that object to :mod:`contrastive_sentence_embeddings.training.run`; the model and its training curve
go to ``<method>.model`` and ``<method>.training_curve``. The model's metadata gets the
run's ``provenance`` (:func:`.provenance.training_provenance`: the block as received,
its hashes, the code and the data read), which every metrics record of it copies."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from contrastive_sentence_embeddings.records import provenance
from contrastive_sentence_embeddings.evaluation.sts import STARTING_SCORES_DIR, DevScorer
from contrastive_sentence_embeddings.training import fanout, run
from contrastive_sentence_embeddings.training.clsr import PairEmbeddings, embed_pairs, pair_columns
from contrastive_sentence_embeddings.training.method_block import MethodBlock


def _dev_scorer(raw_sts: Mapping) -> DevScorer:
    """The dev sets that pick the kept weights; a run's step-0 scores are remembered
    per starting point (every seed, every method on the same encoder starts alike)."""
    return DevScorer(raw_sts, memo_dir=STARTING_SCORES_DIR)


def _processes(config: MethodBlock) -> int:
    return fanout.resolve_num_processes(config.training.num_processes)


def _with_provenance(trained, block: Mapping, encoder: str, data: Mapping[str, Mapping]):
    """``trained`` with the run's provenance in its metadata (saved with the model)."""
    trained.metadata = {**trained.metadata, "provenance": provenance.training_provenance(block, encoder, data)}
    return trained


def _spans_label(config: MethodBlock) -> str:
    """What the spans were read from: the catalog data set, or (own documents) their sampling."""
    if "documents" in config.sources:
        return f"spans sampled from {config.data_label('documents')}"
    return config.data_label("spans")


def train_on_sentences(sentences, raw_sts: Mapping, encoder: str, block: Mapping):
    """A sentence method (SimCSE, SCD, ImSimCSE) on the ``sentence`` column of the
    prepared sentences (a memory-mapped ``datasets.Dataset``, or a DataFrame); the kept
    weights are the best by the dev scores of ``raw_sts``. With ``training.num_processes``
    above 1, in that many worker processes (``training.fanout``)."""
    config = MethodBlock.from_params(block, "method")
    data = {"sentences": provenance.data_fingerprint(sentences, config.data_label("sentences"))}
    texts = run.sentence_texts(sentences)
    if (processes := _processes(config)) > 1:
        # The workers receive the block as plain data (another process) and parse it once there.
        trained, curve = fanout.train_in_processes("sentences", encoder, block,
                                                   {"sentences": pd.DataFrame({"sentence": texts})}, raw_sts, processes)
        return _with_provenance(trained, block, encoder, data), curve
    trained, result = run.train_on_sentences(texts, encoder, config, _dev_scorer(raw_sts))
    return _with_provenance(trained, block, encoder, data), result.curve


def train_on_documents(documents, spans, raw_sts: Mapping, encoder: str, block: Mapping):
    """A document method (DeCLUTR) on the sampled spans of the tokenised documents
    (memory-mapped Arrow data sets; in ``training.num_processes`` worker processes,
    which map the same files, when that is above 1)."""
    config = MethodBlock.from_params(block, "method")
    data = {"documents": provenance.data_fingerprint(documents, config.data_label("documents")),
            "spans": provenance.data_fingerprint(spans, _spans_label(config))}
    if (processes := _processes(config)) > 1:
        tables = {"documents": documents, "spans": spans}
        # The workers receive the block as plain data (another process) and parse it once there.
        trained, curve = fanout.train_in_processes("documents", encoder, block, tables, raw_sts, processes)
        return _with_provenance(trained, block, encoder, data), curve
    trained, result = run.train_on_documents(documents, spans, encoder, config, _dev_scorer(raw_sts))
    return _with_provenance(trained, block, encoder, data), result.curve


def embed_pair_sentences(pairs, embedding_cache: str, encoder: str, block: Mapping) -> PairEmbeddings:
    """Frozen embeddings of every sentence of the pairs (the first ``max_examples``
    pairs only, when set), from the embedding cache when it holds them. The prepared
    pairs (a ``datasets.Dataset``) are read as a DataFrame: pair sets are small by
    nature (at most ~1M NLI pairs), and CLSR embeds all their sentences anyway."""
    config = MethodBlock.from_params(block, "method")
    if not isinstance(pairs, pd.DataFrame):
        pairs = pairs.to_pandas()
    if config.max_examples:
        pairs = pairs.head(config.max_examples)
    dataset = config.data_label("pairs")
    first, second = pair_columns(pairs, dataset)
    return embed_pairs(pairs, first, second, dataset, encoder, embedding_cache, config.pooling,
                       device=config.training.device, attention_backends=config.training.attention_backends,
                       frozen_layers=config.method.pair_view.frozen_layers)


def train_on_pairs(pair_embeddings: PairEmbeddings, raw_sts: Mapping, embedding_cache: str, encoder: str,
                   block: Mapping):
    """A pair method (CLSR) on the frozen embeddings of the pairs."""
    trained, result = run.train_on_pairs(pair_embeddings, encoder, MethodBlock.from_params(block, "method"),
                                         _dev_scorer(raw_sts), embedding_cache)
    data = {"pairs": {"dataset": pair_embeddings.dataset, "fingerprint": pair_embeddings.fingerprint,
                      "rows": len(pair_embeddings.pairs)}}
    return _with_provenance(trained, block, encoder, data), result.curve
