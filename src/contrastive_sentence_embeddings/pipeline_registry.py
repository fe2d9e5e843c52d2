"""Kedro looks here for the project's pipelines; the graph they are cut from, and what
each user pipeline is, live in ``pipelines/graph.py``."""

from contrastive_sentence_embeddings.pipelines.graph import register_pipelines

__all__ = ["register_pipelines"]
