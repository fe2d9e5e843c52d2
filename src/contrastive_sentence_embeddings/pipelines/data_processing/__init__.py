"""``data_processing``: sentences, long documents and DeCLUTR spans, STS-B and NLI pairs."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
