"""The ``raw_data`` pipeline: one node per raw source, each writing ``raw_<source>``."""

from kedro.pipeline import Node, Pipeline

from contrastive_sentence_embeddings.data.raw_sources import RAW_SOURCES

from .nodes import make_ingest


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(make_ingest(source), "params:raw_data", f"raw_{source}", name=f"ingest_{source}")
            for source in RAW_SOURCES
        ],
        tags="raw_data",
    )
