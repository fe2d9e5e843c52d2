"""The training pipelines, one per data family. Each is a template with generic data
set names, instantiated once per method under the method's namespace
(``pipelines.graph.method_pipeline``)::

    sentences           -> train -> model, training_curve                  (sentences)
    documents, spans    -> train -> model, training_curve                  (documents)
    pairs -> embed -> pair_embeddings -> train -> model, training_curve   (pairs)

Free inputs shared by every method (``raw_sts``, the embedding cache) and the
parameters (``params:encoder``, ``params:block`` = the method's block) are mapped by
the registry; ``sentences``, ``documents``, ``spans`` and ``pairs`` map to the
catalog data sets of ``config.FAMILIES`` or of the method's ``data`` block.
"""

from kedro.pipeline import Node, Pipeline

from . import nodes

BLOCK = "params:block"
ENCODER = "params:encoder"
SHARED_INPUTS = {"raw_sts", "clsr_embedding_cache"}


def sentences_pipeline() -> Pipeline:
    return Pipeline([
        Node(nodes.train_on_sentences, ["sentences", "raw_sts", ENCODER, BLOCK], ["model", "training_curve"],
             name="train", tags=["training"]),
    ])


def documents_pipeline() -> Pipeline:
    return Pipeline([
        Node(nodes.train_on_documents, ["documents", "spans", "raw_sts", ENCODER, BLOCK], ["model", "training_curve"],
             name="train", tags=["training"]),
    ])


def pairs_pipeline() -> Pipeline:
    return Pipeline([
        Node(nodes.embed_pair_sentences, ["pairs", "clsr_embedding_cache", ENCODER, BLOCK], "pair_embeddings",
             name="embed_pairs", tags=["training"]),
        Node(nodes.train_on_pairs, ["pair_embeddings", "raw_sts", "clsr_embedding_cache", ENCODER, BLOCK],
             ["model", "training_curve"], name="train", tags=["training"]),
    ])


FAMILY_PIPELINES = {"sentences": sentences_pipeline, "documents": documents_pipeline, "pairs": pairs_pipeline}


def create_pipeline(family: str = "sentences", **kwargs) -> Pipeline:
    """The template of one data family (``sentences``, ``documents`` or ``pairs``)."""
    if family not in FAMILY_PIPELINES:
        raise ValueError(f"no training pipeline for data family {family!r}; choose one of {', '.join(FAMILY_PIPELINES)}")
    return FAMILY_PIPELINES[family]()
