"""``training``: one modular pipeline per data family (sentences, documents, pairs);
each method is a namespaced instance of one of them (``pipelines/graph.py``)."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
