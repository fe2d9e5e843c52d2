"""``own_data``: a method's training data read from the user's own files or a Hub data set."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
