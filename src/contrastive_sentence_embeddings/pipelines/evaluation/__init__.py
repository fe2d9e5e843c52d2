"""``evaluation``: the scoring sub-pipeline every model goes through (STS and
alignment/uniformity; the transfer tasks in the ``transfer`` instances), the
baseline's scoring of the untrained encoder and the scoring of any other encoder as
its own row (``external``)."""

from .pipeline import baseline_pipeline, create_pipeline, external_pipeline, model_card_pipeline, seeds_pipeline

__all__ = ["baseline_pipeline", "create_pipeline", "external_pipeline", "model_card_pipeline", "seeds_pipeline"]
