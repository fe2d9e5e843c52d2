"""``kedro run --pipelines=clsr_nli``: CLSR on the NLI entailment pairs
(``nli_pairs``); see :mod:`contrastive_sentence_embeddings.pipelines.clsr`."""
from kedro.pipeline import Pipeline

from contrastive_sentence_embeddings.pipelines import clsr


def create_pipeline(**kwargs) -> Pipeline:
    return clsr.create_pipeline("clsr_nli")
