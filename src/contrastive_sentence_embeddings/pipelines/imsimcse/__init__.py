"""The ``imsimcse`` pipeline: train on the sampled sentences, save, evaluate."""
from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
