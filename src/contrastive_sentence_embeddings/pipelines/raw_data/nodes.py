"""Nodes of the ``raw_data`` pipeline: one ingestion node per raw source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig, materialise_raw_source


def make_ingest(source: str) -> Callable[[dict[str, Any]], dict[str, RawFile]]:
    """A node function that materialises raw source ``source`` (its files, keyed by
    relative path, are written by the catalog's partitioned dataset)."""

    def ingest(raw_data: dict[str, Any]) -> dict[str, RawFile]:
        config = parse_strict(RawDataConfig, raw_data, "raw_data")
        return materialise_raw_source(
            source,
            mirror_dir=config.mirror_dir,
            mode=config.mode_for(source),
            hub_options=(config.hub or {}).get(source),
        )

    ingest.__name__ = ingest.__qualname__ = f"ingest_{source}"
    ingest.__doc__ = f"Bring raw source '{source}' into data/01_raw/{source}."
    return ingest
