"""The ``evaluation`` pipeline: every trained model, scored on STS and the transfer tasks."""
from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
