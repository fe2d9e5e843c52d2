"""A method's block is parsed once, at the training node: the node turns
``params:<method>`` into a ``MethodBlock`` and hands that object to ``training.run``
and on to the trainer; nothing below it parses the block (or its ``training`` settings)
again."""

from __future__ import annotations

import pandas as pd
import pytest

from contrastive_sentence_embeddings.configuration.blocks import MethodConfig
from contrastive_sentence_embeddings.pipelines.training import nodes
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.training.trainer import TrainingConfig
from tests.helpers import base_parameters, wiki_sentences


def count_calls(monkeypatch, cls: type, counts: dict) -> None:
    """Count the calls of classmethod ``cls.from_params`` in ``counts[cls.__name__]``."""
    parse = cls.from_params.__func__
    counts[cls.__name__] = 0

    def counted(klass, *args, **kwargs):
        counts[cls.__name__] += 1
        return parse(klass, *args, **kwargs)

    monkeypatch.setattr(cls, "from_params", classmethod(counted))


@pytest.fixture
def parse_counts(monkeypatch):
    counts: dict[str, int] = {}
    for cls in (MethodBlock, MethodConfig, TrainingConfig):
        count_calls(monkeypatch, cls, counts)
    return counts


def test_the_sentence_node_parses_its_block_once_and_trains_with_it(parse_counts, mirror_dir, sts_partitions,
                                                                     tiny_bert_dir):
    block = base_parameters("simcse", batch_size=8, max_steps=2, eval_every=0, log_every=1, checkpoint_dir=None,
                            device="cpu")
    block["seeds"] = None
    lines = wiki_sentences(mirror_dir, limit=32)
    trained, curve = nodes.train_on_sentences(pd.DataFrame({"sentence": lines}), sts_partitions, str(tiny_bert_dir),
                                              block)
    assert trained.metadata["steps"] == 2 and trained.metadata["method"] == "simcse"  # it really trained
    assert parse_counts == {"MethodBlock": 1, "MethodConfig": 1, "TrainingConfig": 1}, parse_counts
