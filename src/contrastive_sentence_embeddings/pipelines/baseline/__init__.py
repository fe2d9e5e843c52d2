"""The ``baseline`` pipeline: the untrained encoder with each pooling method."""
from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
