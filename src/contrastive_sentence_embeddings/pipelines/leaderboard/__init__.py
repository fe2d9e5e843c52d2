"""The ``leaderboard`` pipeline: all per-model metrics into one table and one figure,
and the table's summary."""
from .pipeline import create_pipeline, is_metrics

__all__ = ["create_pipeline", "is_metrics"]
