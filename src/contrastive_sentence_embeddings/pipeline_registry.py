"""Project pipelines.

Every folder under ``pipelines/`` is a building block. What a user runs is composed
here so that one command does everything it needs: ``kedro run --pipelines=baseline``
ingests the raw data, scores the encoder and updates the leaderboard. DVC stages run
the single scoring node of a block (``--nodes``), so that each file has one owning
stage.

The blocks are imported explicitly rather than found with ``find_pipelines``: Kedro
1.7 makes ``find_pipelines`` return only the pipelines named on the command line, and
the composed pipelines need their building blocks whatever was asked for.
"""
from __future__ import annotations

from kedro.pipeline import Pipeline

from contrastive_sentence_embeddings.pipelines import (
    baseline,
    clsr_nli,
    clsr_stsb,
    data_processing,
    declutr,
    evaluation,
    imsimcse,
    leaderboard,
    raw_data,
    scd,
    simcse,
)

BLOCKS = {
    "raw_data": raw_data,
    "data_processing": data_processing,
    "baseline": baseline,
    "evaluation": evaluation,
    "simcse": simcse,
    "scd": scd,
    "imsimcse": imsimcse,
    "declutr": declutr,
    "clsr_stsb": clsr_stsb,
    "clsr_nli": clsr_nli,
}
# Block name -> the metrics data set(s) it writes.
METRICS_OUTPUTS = {
    "baseline": ["baseline_metrics"],
    "evaluation": ["evaluated_metrics"],
    "simcse": ["simcse_metrics"],
    "scd": ["scd_metrics"],
    "imsimcse": ["imsimcse_metrics"],
    "declutr": ["declutr_metrics"],
    "clsr_stsb": ["clsr_stsb_metrics"],
    "clsr_nli": ["clsr_nli_metrics"],
}
# Blocks that train on prepared data also run data preparation.
NEEDS_PREPARED_DATA = {"simcse", "scd", "imsimcse", "declutr", "clsr_stsb", "clsr_nli"}


def register_pipelines() -> dict[str, Pipeline]:
    blocks = {name: module.create_pipeline() for name, module in BLOCKS.items()}
    pipelines = dict(blocks)
    pipelines["leaderboard"] = leaderboard.create_pipeline()
    for name, outputs in METRICS_OUTPUTS.items():
        upstream = blocks["raw_data"] + (blocks["data_processing"] if name in NEEDS_PREPARED_DATA else Pipeline([]))
        pipelines[name] = upstream + blocks[name] + leaderboard.create_pipeline(after=outputs)
    every_metrics_output = [output for outputs in METRICS_OUTPUTS.values() for output in outputs]
    pipelines["__default__"] = sum(blocks.values(), Pipeline([])) + leaderboard.create_pipeline(
        after=every_metrics_output
    )
    return pipelines
