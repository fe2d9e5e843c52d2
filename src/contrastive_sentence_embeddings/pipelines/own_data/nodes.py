"""Nodes of the ``own_data`` pipeline: a method's own sentences, documents (and their
spans) or pairs, read from the source in ``params:<method>.data.<input>``. They call
the library (``data.own_data`` for reading, then the built-in sources' cleaning,
filtering and span sampling) and return the data and a data report, as the
``data_processing`` nodes do. Each node function is made for one method, so that its
report is named after it (``<method>.<input>``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from contrastive_sentence_embeddings.configuration.blocks import LongDocumentsConfig, parse_source
from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.data import own_data
from contrastive_sentence_embeddings.data.documents import tokenized_long_documents
from contrastive_sentence_embeddings.data.parallel import worker_count
from contrastive_sentence_embeddings.data.report import EmptyInputError, StepReport, carry_report
from contrastive_sentence_embeddings.data.wikipedia import clean_and_filter_sentences
from contrastive_sentence_embeddings.encoders.integrity import load_checked_tokenizer
from contrastive_sentence_embeddings.pipelines.data_processing.nodes import sample_declutr_spans

logger = logging.getLogger(__name__)

# (the prepared table: a DataFrame, a datasets.Dataset or a pyarrow.Table, as the
# catalog's data set for it takes; its data report)
Result = tuple[Any, dict[str, Any]]


def _named(function: Callable, name: str, doc: str) -> Callable:
    function.__name__ = function.__qualname__ = name
    function.__doc__ = doc
    return function


@contextmanager
def _report_when_stopped(report: StepReport, label: str) -> Iterator[None]:
    """A source (``label``) that is not text, or of which nothing is left, stops the
    node: its counts so far go with the error, for the project's hook to write as the
    step's data report (``data.report.carry_report``)."""
    try:
        yield
    except (EmptyInputError, own_data.NotTextError) as error:
        report.extra["source"] = label
        raise carry_report(error, report)


def _finish(report: StepReport, table, label: str) -> Result:
    report.rows_out = len(table)
    report.extra["source"] = label
    report.log(logger)
    return table, {report.step: report.to_dict()}


def make_prepare_sentences(method: str) -> Callable[..., Result]:
    """The node reading ``method``'s own sentences: read, clean, length-filter and
    de-duplicate them as the built-in sentences are (``<unk>`` is not special here)."""
    step, where = f"{method}.sentences", f"{method}.data.sentences"

    def prepare_sentences(source: Any, on_bad_input: str, num_proc: int | None = None) -> Result:
        spec = parse_source("sentences", source, where)
        report = StepReport(step)
        with _report_when_stopped(report, spec.origin):
            records = own_data.table_records(spec.path, spec.hub, spec.subset, spec.split, spec.format,
                                             [spec.column], spec.FORMATS, report, on_bad_input, spec.max_rows,
                                             spec.encoding, spec.quoting)
            candidates = own_data.sentence_candidates(records, spec.column, report, on_bad_input, spec.max_chars,
                                                      spec.origin)
            kept = clean_and_filter_sentences(candidates, report, spec.min_words, spec.max_words, drop_unk=False,
                                              what=f"{spec.origin} ({step})", workers=worker_count(num_proc))
        return _finish(report, kept, spec.origin)

    return _named(prepare_sentences, "prepare_sentences", f"{method}'s own sentences, cleaned and counted.")


def make_prepare_documents(method: str) -> Callable[..., Result]:
    """The node reading ``method``'s own documents, streamed, tokenised and filtered as
    the built-in long documents are (``data_processing.long_documents``, on
    ``data_processing.num_proc`` workers; the source's ``min_tokens`` replaces
    ``min_doc_tokens`` when set): the same memory-mapped ``datasets.Dataset``."""
    step, where = f"{method}.documents", f"{method}.data.documents"

    def prepare_documents(source: Any, long_documents: dict[str, Any], encoder: str, on_bad_input: str,
                          num_proc: int | None = None) -> Result:
        spec = parse_source("documents", source, where)
        settings = parse_strict(LongDocumentsConfig, long_documents, "data_processing.long_documents")
        report = StepReport(step)
        with _report_when_stopped(report, spec.origin):
            documents = own_data.own_documents(
                own_data.document_records(spec.path, spec.hub, spec.subset, spec.split, spec.format, spec.column,
                                          spec.FORMATS, report, on_bad_input, spec.max_rows, spec.encoding),
                report, spec.origin)
            kept = tokenized_long_documents(documents, load_checked_tokenizer(encoder),
                                            spec.min_tokens or settings.min_doc_tokens, report,
                                            settings.tokenize_batch_size, settings.max_unk_fraction,
                                            what=f"{spec.origin} ({step})", num_proc=num_proc)
        report.extra["encoder"] = encoder
        return _finish(report, kept, spec.origin)

    return _named(prepare_documents, "prepare_documents", f"{method}'s own documents, tokenised and filtered.")


def make_sample_spans(method: str) -> Callable[..., Result]:
    """The node sampling DeCLUTR's spans of ``method``'s own documents
    (``data_processing.declutr_spans``), reported as ``<method>.spans``."""

    def sample_spans(documents: Any, params: dict[str, Any], num_proc: int | None = None) -> Result:
        return sample_declutr_spans(documents, params, num_proc, step=f"{method}.spans")

    return _named(sample_spans, "sample_spans", f"DeCLUTR spans of {method}'s own documents.")


def make_prepare_pairs(method: str) -> Callable[..., Result]:
    """The node reading ``method``'s own positive pairs: two text columns, then the
    optional score and label filters, then de-duplication."""
    step, where = f"{method}.pairs", f"{method}.data.pairs"

    def prepare_pairs(source: Any, on_bad_input: str) -> Result:
        spec = parse_source("pairs", source, where)
        report = StepReport(step)
        columns = [spec.column1, spec.column2] + [c for c in (spec.score, spec.label) if c is not None]
        with _report_when_stopped(report, spec.origin):
            records = own_data.table_records(spec.path, spec.hub, spec.subset, spec.split, spec.format, columns,
                                             spec.FORMATS, report, on_bad_input, spec.max_rows, spec.encoding,
                                             spec.quoting)
            pairs = own_data.own_pairs(records, columns, report, on_bad_input, spec.max_chars, spec.origin,
                                       spec.min_score, spec.kept_labels)
        return _finish(report, pairs, spec.origin)

    return _named(prepare_pairs, "prepare_pairs", f"{method}'s own sentence pairs, checked, filtered and counted.")
