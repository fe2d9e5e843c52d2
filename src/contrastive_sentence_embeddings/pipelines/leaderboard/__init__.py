"""The ``leaderboard`` pipeline: all per-model metrics into one table and one figure."""
from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
