"""Nodes of the ``data_processing`` pipeline. Each parses its parameter block
strictly (``config``), wires library functions together, logs rows in / out /
dropped, and returns its counts: one data-report file per step
(``data/08_reporting/data_report/<step>.json``), so a run that prepares only what one
method needs still reports every step it ran."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import datasets
import pyarrow as pa

from contrastive_sentence_embeddings.configuration.blocks import (
    LongDocumentsConfig,
    NliPairsConfig,
    StsbPairsConfig,
    WikiSentencesConfig,
)
from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.data import documents as docs
from contrastive_sentence_embeddings.data import pairs, wikipedia
from contrastive_sentence_embeddings.data.arrow_rows import rows_to_table
from contrastive_sentence_embeddings.data.parallel import worker_count
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import StepReport, rows_by_input
from contrastive_sentence_embeddings.data.spans import SpansParams, document_lengths, sample_spans
from contrastive_sentence_embeddings.encoders.integrity import load_checked_tokenizer

logger = logging.getLogger(__name__)

Partitions = Mapping[str, Callable[[], RawFile]]

SENTENCE_INPUTS = ("wikitext", "sentence_per_line")
DOCUMENT_INPUTS = ("wikitext", "openwebtext")


def _text_files(partitions: Partitions, what: str) -> dict[str, RawFile]:
    """The ``.txt`` partitions; anything else (LICENSE files, notes) is logged and left."""
    chosen = {pid: load() for pid, load in sorted(partitions.items()) if pid.endswith(".txt")}
    others = sorted(set(partitions) - set(chosen))
    if others:
        logger.info("%s: not text input, left alone: %s", what, ", ".join(others))
    return chosen


def _check_choices(chosen: list[str], allowed: tuple[str, ...], parameter: str) -> None:
    unknown = set(chosen) - set(allowed)
    if unknown or not chosen:
        raise ValueError(f"{parameter} must be a non-empty subset of {list(allowed)}, got {chosen}")


def _no_text_input(what: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"no .txt input files for {what} in data/01_raw: run `kedro run --pipeline=raw_data` "
        "or check the raw_data mirror"
    )


def collect_sentence_candidates(
    raw_wiki: Partitions, raw_longdocs: Partitions, params: dict[str, Any], on_bad_input: str,
    num_proc: int | None = None,
) -> tuple[datasets.Dataset, dict[str, Any]]:
    """Every candidate sentence with its ``file:line``: spaCy-split, detokenised
    WikiText paragraphs and/or one-sentence-per-line files (``params['inputs']``),
    streamed from the files and split on ``num_proc`` worker processes (the same
    sentences, in the same order, whatever ``num_proc`` is)."""
    params = asdict(parse_strict(WikiSentencesConfig, params, "data_processing.wiki_sentences"))
    _check_choices(params["inputs"], SENTENCE_INPUTS, "wiki_sentences.inputs")
    report = StepReport("sentence_candidates")
    units = []
    files = _sentence_input_files(raw_wiki, raw_longdocs, params["inputs"])
    for raw in files.get("sentence_per_line", ()):
        units.append(wikipedia.line_sentence_candidates(raw, report, on_bad_input))
    for raw in files.get("wikitext", ()):
        units.append(wikipedia.wikitext_paragraph_units(raw, report, on_bad_input))
    if not units:
        raise _no_text_input(f"wiki_sentences.inputs {params['inputs']}")
    candidates = wikipedia.sentence_candidates(itertools.chain.from_iterable(units), worker_count(num_proc))
    report.rows_out = len(candidates)
    report.extra["note"] = "rows in are input lines; rows out are sentences after splitting"
    # The rows each input gave: the model card names a data set only when its rows
    # reached the training data (sample_sentences counts again, after the sample).
    report.extra["rows_out_by_input"] = _rows_by_input(candidates, _labels(files))
    report.log(logger)
    return candidates, {report.step: report.to_dict()}


def _sentence_input_files(raw_wiki: Partitions, raw_longdocs: Partitions, inputs) -> dict[str, list[RawFile]]:
    """The text files each chosen input of the sentences reads, in reading order."""
    files: dict[str, list[RawFile]] = {}
    if "sentence_per_line" in inputs:
        files["sentence_per_line"] = list(_text_files(raw_wiki, "raw_wiki").values())
    if "wikitext" in inputs:
        files["wikitext"] = list(_text_files(raw_longdocs, "raw_longdocs").values())
    return files


def _labels(files: Mapping[str, list[RawFile]]) -> dict[str, list[str]]:
    return {name: [raw.label for raw in raws] for name, raws in files.items()}


def sample_sentences(
    candidates: datasets.Dataset, params: dict[str, Any], num_proc: int | None = None,
    raw_wiki: Partitions | None = None, raw_longdocs: Partitions | None = None,
) -> tuple[datasets.Dataset, dict[str, Any]]:
    """Clean, length-filter and de-duplicate the candidates (on ``num_proc`` worker
    processes), then draw the seeded sample. Given the raw inputs the candidates were
    read from, the report counts the sampled rows of each input too."""
    params = asdict(parse_strict(WikiSentencesConfig, params, "data_processing.wiki_sentences"))
    report = StepReport("wiki_sentences", rows_in=len(candidates))
    kept = wikipedia.clean_and_filter_sentences(
        candidates, report, params["min_words"], params["max_words"], params.get("drop_unk", True),
        workers=worker_count(num_proc),
    )
    sample = wikipedia.sample_rows(kept, params.get("n_sentences"), params["seed"], report)
    report.rows_out = len(sample)
    if raw_wiki is not None and raw_longdocs is not None:
        files = _sentence_input_files(raw_wiki, raw_longdocs, params["inputs"])
        report.extra["rows_out_by_input"] = _rows_by_input(sample, _labels(files))
    report.log(logger)
    return sample, {report.step: report.to_dict()}


def build_long_documents(
    raw_longdocs: Partitions,
    raw_openwebtext: Partitions,
    params: dict[str, Any],
    encoder: str,
    on_bad_input: str,
    num_proc: int | None = None,
) -> tuple[Any, dict[str, Any]]:
    """WikiText articles and OpenWebText documents, read lazily, tokenised once with
    the encoder's tokenizer on ``num_proc`` workers, keeping those of at least
    ``min_doc_tokens`` tokens: a memory-mapped ``datasets.Dataset`` (token ids as
    ``int32`` lists, no text) for the ``ArrowDataset`` catalog entry."""
    params = asdict(parse_strict(LongDocumentsConfig, params, "data_processing.long_documents"))
    _check_choices(params["inputs"], DOCUMENT_INPUTS, "long_documents.inputs")
    report = StepReport("long_documents")
    tokenizer = load_checked_tokenizer(encoder)
    files = []
    if "wikitext" in params["inputs"]:
        files += [("wikitext", pid, raw) for pid, raw in _text_files(raw_longdocs, "raw_longdocs").items()]
    if "openwebtext" in params["inputs"]:
        files += [("openwebtext", pid, raw) for pid, raw in _text_files(raw_openwebtext, "raw_openwebtext").items()]
    if not files:
        raise _no_text_input(f"long_documents.inputs {params['inputs']}")
    files_by_input: dict[str, list[str]] = {}
    for kind, _, raw in files:
        files_by_input.setdefault(kind, []).append(raw.label)
    read = {"documents": 0, "dropped": 0}
    kept = docs.tokenized_long_documents(
        _counted(_raw_documents(files, tokenizer.unk_token, report, on_bad_input), read, report),
        tokenizer, params["min_doc_tokens"], report, params.get("tokenize_batch_size", 64),
        params["max_unk_fraction"], num_proc=num_proc)
    # rows in: the documents read plus what was dropped while reading them (bad lines,
    # empty documents), as before the documents were streamed
    report.rows_in = read["documents"] + read["dropped"]
    report.extra["encoder"] = encoder
    # The documents kept from each input: the model card names a data set only when
    # some of its documents were kept (1024 tokens drop every OpenWebText sample).
    report.extra["rows_out_by_input"] = _rows_by_input(kept, files_by_input)
    report.log(logger)
    return kept, {report.step: report.to_dict()}


def _rows_by_input(rows: datasets.Dataset, files_by_input: Mapping[str, list[str]],
                   batch_rows: int = 65_536) -> dict[str, int]:
    """:func:`~..data.report.rows_by_input` of a prepared data set's ``source`` column,
    read a batch at a time (a column of 8M locations is never held whole)."""
    counts = dict.fromkeys(files_by_input, 0)
    for batch in rows.select_columns(["source"]).with_format("arrow").iter(batch_size=batch_rows):
        for name, count in rows_by_input(batch.column("source"), files_by_input).items():
            counts[name] += count
    return counts


def _raw_documents(files, unk_token: str, report: StepReport, on_bad_input: str):
    """The documents of ``files`` (``(kind, partition, RawFile)``), one at a time, in
    file order: WikiText articles, then one-document-per-line files."""
    for kind, pid, raw in files:
        if kind == "wikitext":
            scratch = StepReport("wikitext lines")  # line counts are not document counts
            articles = wikipedia.parse_wikitext(raw, scratch, on_bad_input)
            # only undecodable lines concern documents; headings and blanks do not
            report.absorb(scratch, prefix="line ", keep=lambda reason: reason.startswith("not "))
            yield from docs.iter_wikitext_documents(articles, pid, unk_token)
        else:
            yield from docs.iter_line_documents(raw, pid, report, on_bad_input, normalize=False)


def _counted(documents, counts: dict, report: StepReport):
    """``documents`` passed through, counted; once they are all read, ``counts`` also
    holds what ``report`` dropped while reading them."""
    for document in documents:
        counts["documents"] += 1
        yield document
    counts["dropped"] = report.rows_dropped


def sample_declutr_spans(
    long_documents: Any, params: dict[str, Any], num_proc: int | None = None, step: str = "declutr_spans"
) -> tuple[pa.Table, dict[str, Any]]:
    """Anchor and positive spans for every document and epoch (see ``data.spans``),
    sampled on ``num_proc`` workers (the same spans for any number); only the
    ``doc_id`` and ``n_tokens`` columns of the documents are read, never their token
    ids. ``step`` names the report (own documents' spans are ``<method>.spans``)."""
    settings = SpansParams.from_params(params)
    report = StepReport(step)
    columns = document_lengths(long_documents)
    spans = sample_spans(
        columns["doc_id"],
        columns["n_tokens"],
        settings.span_config(),
        seed=settings.seed,
        epochs=settings.epochs,
        report=report,
        what=step,
        num_proc=num_proc,
    )
    report.log(logger)
    return spans, {report.step: report.to_dict()}


_STSB_FILE = re.compile(r"(?:^|/)sts-(\w+)\.csv$")


def extract_stsb_pairs(
    raw_sts: Partitions, params: dict[str, Any], on_bad_input: str
) -> tuple[pa.Table, dict[str, Any]]:
    """STS-B pairs of the chosen splits with a gold score strictly above ``min_score``
    (the files streamed into an Arrow table)."""
    params = asdict(parse_strict(StsbPairsConfig, params, "data_processing.stsb_pairs"))
    report = StepReport("stsb_pairs")
    files = {
        match.group(1): load
        for pid, load in sorted(raw_sts.items())
        if pid.startswith("STSBenchmark/") and (match := _STSB_FILE.search(pid))
    }
    missing = set(params["splits"]) - set(files)
    if missing:
        raise FileNotFoundError(
            f"STS-B split(s) {sorted(missing)} not found in raw_sts/STSBenchmark "
            f"(found {sorted(files)})"
        )
    rows = (row for split in params["splits"] for row in pairs.stsb_rows(files[split](), split, report, on_bad_input))
    scored = rows_to_table(rows, pairs.PAIR_SCHEMA)
    positive = pairs.stsb_positive_pairs(scored, params["min_score"], report)
    report.rows_out = len(positive)
    report.log(logger)
    return positive, {report.step: report.to_dict()}


def extract_nli_pairs(
    raw_nli: Partitions, params: dict[str, Any], on_bad_input: str
) -> tuple[pa.Table, dict[str, Any]]:
    """(premise, hypothesis) entailment pairs from SentEval-layout files
    (``<corpus>/s1.<split>``, ``s2.<split>``, ``labels.<split>``) and Hub-layout
    Parquet files (``<corpus>/<split>.parquet``), streamed into an Arrow table;
    ``splits: null`` takes every split."""
    params = asdict(parse_strict(NliPairsConfig, params, "data_processing.nli_pairs"))
    report = StepReport("nli_pairs")
    splits = pairs.nli_partition_rows(raw_nli, params.get("splits"), report, on_bad_input)
    labelled = rows_to_table(itertools.chain.from_iterable(splits), pairs.NLI_SCHEMA)
    entailment = pairs.entailment_pairs([labelled], report)
    report.log(logger)
    return entailment, {report.step: report.to_dict()}
