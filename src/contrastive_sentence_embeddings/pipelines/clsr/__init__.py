"""CLSR's pipelines (``clsr_stsb``, ``clsr_nli``): frozen embeddings of the pairs
(cached), the encoder network trained on them, the saved model scored."""
from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
