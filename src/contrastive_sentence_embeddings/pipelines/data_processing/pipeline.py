"""The ``data_processing`` pipeline: from ``data/01_raw`` to model inputs, each step
with its own data-report file (``report_<step>``, a DVC metric)::

    raw_wiki, raw_longdocs -> collect_sentence_candidates -> sentence_candidates
    sentence_candidates    -> sample_sentences            -> wiki_sentences (rows counted by raw input)
    raw_longdocs, raw_openwebtext -> build_long_documents -> long_documents
    long_documents         -> sample_declutr_spans        -> declutr_spans
    raw_sts                -> extract_stsb_pairs          -> stsb_pairs
    raw_nli                -> extract_nli_pairs           -> nli_pairs

A method's pipeline runs only the steps its inputs need (``pipelines/graph.py``).
"""

from kedro.pipeline import Node, Pipeline

from . import nodes

BAD_INPUT = "params:data_processing.on_bad_input"
NUM_PROC = "params:data_processing.num_proc"


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.collect_sentence_candidates,
                ["raw_wiki", "raw_longdocs", "params:data_processing.wiki_sentences", BAD_INPUT, NUM_PROC],
                ["sentence_candidates", "report_sentence_candidates"],
                name="collect_sentence_candidates",
                tags=["sentences"],
            ),
            Node(
                nodes.sample_sentences,
                # the raw inputs only name the files each input read, for the per-input counts
                ["sentence_candidates", "params:data_processing.wiki_sentences", NUM_PROC, "raw_wiki", "raw_longdocs"],
                ["wiki_sentences", "report_wiki_sentences"],
                name="sample_sentences",
                tags=["sentences"],
            ),
            Node(
                nodes.build_long_documents,
                ["raw_longdocs", "raw_openwebtext", "params:data_processing.long_documents", "params:encoder", BAD_INPUT,
                 NUM_PROC],
                ["long_documents", "report_long_documents"],
                name="build_long_documents",
                tags=["documents"],
            ),
            Node(
                nodes.sample_declutr_spans,
                ["long_documents", "params:data_processing.declutr_spans", NUM_PROC],
                ["declutr_spans", "report_declutr_spans"],
                name="sample_declutr_spans",
                tags=["documents"],
            ),
            Node(
                nodes.extract_stsb_pairs,
                ["raw_sts", "params:data_processing.stsb_pairs", BAD_INPUT],
                ["stsb_pairs", "report_stsb_pairs"],
                name="extract_stsb_pairs",
                tags=["pairs"],
            ),
            Node(
                nodes.extract_nli_pairs,
                ["raw_nli", "params:data_processing.nli_pairs", BAD_INPUT],
                ["nli_pairs", "report_nli_pairs"],
                name="extract_nli_pairs",
                tags=["pairs"],
            ),
        ],
        tags="data_processing",
    )


# The prepared data sets, the outputs a method's training pipeline may read.
PREPARED = ("wiki_sentences", "long_documents", "declutr_spans", "stsb_pairs", "nli_pairs")
