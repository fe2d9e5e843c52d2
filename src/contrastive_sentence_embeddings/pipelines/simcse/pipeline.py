"""``kedro run --pipelines=simcse``: see :mod:`contrastive_sentence_embeddings.pipelines.sentence_methods`."""

from kedro.pipeline import Pipeline

from contrastive_sentence_embeddings.pipelines.sentence_methods import create_sentence_method_pipeline


def create_pipeline(**kwargs) -> Pipeline:
    return create_sentence_method_pipeline("simcse")
