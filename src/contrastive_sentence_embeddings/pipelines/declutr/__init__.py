"""The ``declutr`` pipeline: train on span-sampled long documents, save, evaluate."""
from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
