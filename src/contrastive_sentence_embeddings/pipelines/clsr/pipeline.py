"""A CLSR pipeline (``variant``: ``clsr_stsb`` or ``clsr_nli``)::

    <pairs>, clsr_embedding_cache -> embed_<variant>_pairs -> <variant>_pair_embeddings (memory)
    <variant>_pair_embeddings, raw_sts -> train_<variant> -> <variant>_model (data/06_models/<variant>)
                                                         -> <variant>_training_curve
    <variant>_model -> evaluate_<variant> -> <variant>_metrics (data/08_reporting/metrics)

``<pairs>`` is ``stsb_pairs`` or ``nli_pairs`` (``data_processing``). The frozen
embeddings live in ``clsr_embedding_cache`` (content-addressed, reused by later runs).
"""

from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.pipelines.sentence_methods import evaluate_trained_model

from .nodes import embed_pairs_node, pair_source, train_node

CACHE = "clsr_embedding_cache"


def create_pipeline(variant: str = "clsr_stsb", **kwargs) -> Pipeline:
    source = pair_source(variant)
    params = f"params:{variant}"
    return Pipeline(
        [
            Node(embed_pairs_node(variant), [source.dataset, CACHE, "params:encoder", params],
                 f"{variant}_pair_embeddings", name=f"embed_{variant}_pairs"),
            Node(train_node(variant), [f"{variant}_pair_embeddings", "raw_sts", CACHE, "params:encoder", params],
                 [f"{variant}_model", f"{variant}_training_curve"], name=f"train_{variant}"),
            Node(evaluate_trained_model, [f"{variant}_model", "raw_sts", "raw_transfer", "params:evaluation", params],
                 f"{variant}_metrics", name=f"evaluate_{variant}"),
        ],
        tags=["clsr", variant],
    )
