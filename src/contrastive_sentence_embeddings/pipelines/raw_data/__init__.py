"""``raw_data``: bring every raw source into ``data/01_raw`` from the offline mirror or the Hub."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
