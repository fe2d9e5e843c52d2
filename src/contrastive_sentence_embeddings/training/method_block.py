"""A method's parameter block parsed once, into what its training run needs.

The training nodes (``pipelines/training/nodes.py``) parse the block they receive
(``params:<method>``) into a :class:`MethodBlock` and hand that object down:
:mod:`.run` builds the model from its :class:`~.methods.Method`, the trainer trains
with its :class:`~.trainer.TrainingConfig`; nothing below the node parses the block
again. The strict check before any node (``parameter_blocks.validate_parameters``)
parses every block the same way, so a block that passes it parses at the node too.

The block's shape (its keys, ``seeds``, own-data sources) is
:class:`~contrastive_sentence_embeddings.configuration.blocks.MethodConfig`'s, in the leaf
``configuration/blocks.py``; what ``kind``, ``method`` and ``training`` take is said here, beside the
code that reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contrastive_sentence_embeddings.configuration.blocks import FANOUT_FAMILIES, MethodConfig
from contrastive_sentence_embeddings.configuration.layering import accepted_if_unknown, named_key
from contrastive_sentence_embeddings.configuration.strict import ParameterError, check_values
from contrastive_sentence_embeddings.encoders.pooling import check_pooling
from contrastive_sentence_embeddings.training.methods import Method, build_method, method_class
from contrastive_sentence_embeddings.training.trainer import TrainingConfig


@dataclass(frozen=True)
class MethodBlock:
    """A method's block, fully parsed: ``config`` (the block as given, its shape
    checked), ``method`` (the recipe ``kind`` names, built from ``method:`` by
    :func:`~.methods.build_method`), ``training`` (``training:``) and ``sources`` (the
    inputs read from the user's own data, parsed)."""

    config: MethodConfig
    method: Method
    training: TrainingConfig
    sources: dict

    @classmethod
    def from_params(cls, params: Mapping, name: str) -> "MethodBlock":
        """``params`` parsed strictly; any problem is a :class:`ParameterError` naming
        the key under ``name`` (the block's name, ``method`` at a node)."""
        config = MethodConfig.from_params(params, name)
        try:
            kind = method_class(config.kind)
            check_pooling(config.pooling)
        except ValueError as error:
            raise ParameterError(f"{name}: {error}") from error
        config.check_inputs(kind.family, name)
        sources = config.sources(name)  # every own-data source parses, or the error names it
        parsed = {}
        for what, parse, schema in (("method", kind.from_params, kind),
                                    ("training", TrainingConfig.from_params, TrainingConfig)):
            check_values(schema, getattr(config, what) or {}, f"{name}.{what}")
            try:
                parsed[what] = parse(dict(getattr(config, what) or {}))
            except ValueError as error:
                key = named_key(error, f"{name}.{what}")
                if key and str(error).startswith(f"{key.rsplit('.', 1)[-1]} must"):  # "x must be ...": say whose x
                    raise ParameterError(f"{name}.{what}.{error}", key=key) from error
                raise ParameterError(f"{name}.{what}: {error}", key=key,
                                     accepted=accepted_if_unknown(error, schema)) from error
        training = parsed["training"]
        # The preset's hyper-parameters are checked above (errors under <name>.method);
        # here its views and terms with the block's added ones (errors name the view or term).
        method = build_method(config.kind, config.method, config.views, config.objective, where=name)
        if method.family not in FANOUT_FAMILIES and training.num_processes != 1:
            raise ParameterError(
                f"{name}.training.num_processes must be 1 for {config.kind}: the {method.family} family trains a "
                "small network on cached embeddings and is not fanned out over processes",
                key=f"{name}.training.num_processes")
        if training.static_shapes and method.family != "sentences":
            raise ParameterError(
                f"{name}.training.static_shapes pads sentence batches to max_length; {config.kind} builds its own "
                f"batches ({method.family}): leave it false", key=f"{name}.training.static_shapes")
        return cls(config, method, training, sources)

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def pooling(self) -> str:
        return self.config.pooling

    @property
    def family(self) -> str:
        """The data family (``config.FAMILIES``): which training pipeline feeds the method."""
        return self.method.family

    @property
    def max_examples(self) -> int | None:
        return self.config.max_examples

    @property
    def seeds(self) -> list | None:
        return self.config.seeds

    def run_names(self, name: str) -> dict[str, int | None]:
        return self.config.run_names(name)

    def inputs(self, name: str | None = None) -> dict[str, str]:
        """The family pipeline's input names -> this method's catalog data sets
        (:meth:`.config.MethodConfig.inputs`)."""
        return self.config.inputs(self.family, name)

    def data_label(self, input_name: str) -> str:
        """What ``input_name`` is read from, as recorded with the model."""
        return self.config.data_label(self.family, input_name)
