"""Every parameter block turned into its typed, fully checked object.

``configuration/blocks.py`` is a leaf (it imports nothing of the training, data, evaluation or
pipelines packages): it parses each block's shape and the values a block checks
alone. The checks that need the code a block configures (a method's ``kind`` and
hyper-parameters, the training settings, the span sampler's, the raw sources', the
evaluation's) belong to that code; this module composes the two:

* :func:`method_configs`: each listed method's block as a
  :class:`~.training.method_block.MethodBlock` (what a training node parses its
  block into);
* :class:`DataProcessingConfig`: the data preparation's block;
* :func:`validate_parameters`: every block of a parameter set, which
  ``pipelines.hooks.StrictParametersHook`` runs before any node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from contrastive_sentence_embeddings.configuration.blocks import (
    BaselineConfig,
    DvcStagesConfig,
    ExternalConfig,
    LeaderboardConfig,
    LongDocumentsConfig,
    NliPairsConfig,
    StsbPairsConfig,
    TransferEvaluationConfig,
    WikiSentencesConfig,
    method_names,
)
from contrastive_sentence_embeddings.configuration.layering import TOP_LEVEL_VALUES, check_shared_values
from contrastive_sentence_embeddings.configuration.strict import (
    ParameterError,
    ParameterValueError,
    check_keys,
    check_on_bad_input,
    check_values,
    integer,
    parse_strict,
)
from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig
from contrastive_sentence_embeddings.data.spans import SpansParams
from contrastive_sentence_embeddings.evaluation.evaluator import evaluation_settings
from contrastive_sentence_embeddings.encoders.pooling import POOLING_METHODS
from contrastive_sentence_embeddings.training.method_block import MethodBlock


@dataclass(frozen=True)
class DataProcessingConfig:
    """``data_processing``: the data preparation's settings, each sub-block parsed
    strictly (``declutr_spans`` by :class:`~.data.spans.SpansParams`, which checks its
    span settings with the sampler's own ``SpanConfig``)."""

    on_bad_input: str = "skip"
    # Worker processes of the data preparation (tokenising, filtering, splitting,
    # sampling): None takes the cores this process may use (data.parallel).
    num_proc: int | None = field(default=None, metadata=integer(1, null=True))
    wiki_sentences: WikiSentencesConfig = field(default_factory=WikiSentencesConfig)
    long_documents: LongDocumentsConfig = field(default_factory=LongDocumentsConfig)
    declutr_spans: SpansParams = field(default_factory=SpansParams)
    stsb_pairs: StsbPairsConfig = field(default_factory=StsbPairsConfig)
    nli_pairs: NliPairsConfig = field(default_factory=NliPairsConfig)

    @classmethod
    def from_params(cls, params: Mapping, where: str = "data_processing") -> "DataProcessingConfig":
        check_keys(cls, params, where)
        check_values(cls, params, where)
        nested = {"wiki_sentences": WikiSentencesConfig, "long_documents": LongDocumentsConfig,
                  "declutr_spans": SpansParams, "stsb_pairs": StsbPairsConfig, "nli_pairs": NliPairsConfig}
        values = {key: parse_strict(kind, params.get(key), f"{where}.{key}") for key, kind in nested.items()
                  if key != "declutr_spans"}
        values["declutr_spans"] = SpansParams.from_params(params.get("declutr_spans") or {}, f"{where}.declutr_spans")
        values["on_bad_input"] = check_on_bad_input(params.get("on_bad_input", "skip"), f"{where}.on_bad_input")
        values["num_proc"] = params.get("num_proc")  # null: the cores available
        return cls(**values)


def method_configs(params: Mapping) -> dict[str, MethodBlock]:
    """The blocks of the ``methods`` list, by name, each fully parsed."""
    check_shared_values(params)  # a method's null training.seed holds the shared seed: name that one if bad
    return {name: MethodBlock.from_params(params[name], name) for name in method_names(params)}


def external_block(params: Mapping | None) -> ExternalConfig:
    """The ``external`` block, parsed strictly, its pooling one the library has."""
    config = parse_strict(ExternalConfig, params or {}, "external")
    if config.pooling not in POOLING_METHODS:
        raise ParameterValueError("external.pooling", config.pooling, f"must be one of {', '.join(POOLING_METHODS)}")
    return config


def validate_parameters(params: Mapping) -> None:
    """Parse every block of the merged parameters; raise :class:`ParameterError` on the
    first problem. A top-level key that is neither a shared value, a known block nor a
    listed method is an error too (a misspelt block name would otherwise be unused)."""
    check_shared_values(params)
    names = method_names(params)
    blocks = {
        "raw_data": lambda p: parse_strict(RawDataConfig, p, "raw_data"),
        "data_processing": DataProcessingConfig.from_params,
        "evaluation": lambda p: evaluation_settings(p, where="evaluation"),
        "baseline": lambda p: parse_strict(BaselineConfig, p, "baseline"),
        "transfer_evaluation": lambda p: parse_strict(TransferEvaluationConfig, p, "transfer_evaluation"),
        "leaderboard": lambda p: parse_strict(LeaderboardConfig, p, "leaderboard"),
        "external": external_block,
        "dvc": lambda p: parse_strict(DvcStagesConfig, p, "dvc").check(names),
    }
    unknown = sorted(set(params) - set(TOP_LEVEL_VALUES) - set(blocks) - set(names))
    if unknown:
        raise ParameterError(
            f"unknown top-level parameter(s) {', '.join(unknown)}: not a shared value ({', '.join(TOP_LEVEL_VALUES)}), "
            f"a block ({', '.join(blocks)}) or a method listed in `methods` ({', '.join(names)})",
            key=unknown[0], accepted=[*TOP_LEVEL_VALUES, *blocks, *names],
        )
    for key, parse in blocks.items():
        if key in params:
            parse(params[key])
    check_on_bad_input(params.get("on_bad_input", "skip"), "on_bad_input")
    blocks = method_configs(params)
    evaluation = params.get("evaluation", {})
    for name, block in blocks.items():
        evaluation_settings(evaluation, block.config.evaluation, where=f"{name}.evaluation")
    # The baseline's and the transfer instances' own overrides of the evaluation.
    if "baseline" in params:
        evaluation_settings(evaluation, (params["baseline"] or {}).get("overrides"), where="baseline.overrides")
    if "transfer_evaluation" in params:
        evaluation_settings(evaluation, (params["transfer_evaluation"] or {}).get("evaluation"),
                            where="transfer_evaluation.evaluation")
