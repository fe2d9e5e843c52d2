"""The ``data_processing`` pipeline: from ``data/01_raw`` to model inputs and one data report."""

from kedro.pipeline import Node, Pipeline

from . import nodes

BAD_INPUT = "params:data_processing.on_bad_input"


def create_pipeline(**kwargs) -> Pipeline:
    return Pipeline(
        [
            Node(
                nodes.collect_sentence_candidates,
                ["raw_wiki", "raw_longdocs", "params:data_processing.wiki_sentences", BAD_INPUT],
                ["sentence_candidates", "report_sentence_candidates"],
                name="collect_sentence_candidates",
            ),
            Node(
                nodes.sample_sentences,
                ["sentence_candidates", "params:data_processing.wiki_sentences"],
                ["wiki_sentences", "report_wiki_sentences"],
                name="sample_sentences",
            ),
            Node(
                nodes.build_long_documents,
                ["raw_longdocs", "raw_openwebtext", "params:data_processing.long_documents", "params:encoder", BAD_INPUT],
                ["long_documents", "report_long_documents"],
                name="build_long_documents",
            ),
            Node(
                nodes.sample_declutr_spans,
                ["long_documents", "params:data_processing.declutr_spans"],
                ["declutr_spans", "report_declutr_spans"],
                name="sample_declutr_spans",
            ),
            Node(
                nodes.extract_stsb_pairs,
                ["raw_sts", "params:data_processing.stsb_pairs", BAD_INPUT],
                ["stsb_pairs", "report_stsb_pairs"],
                name="extract_stsb_pairs",
            ),
            Node(
                nodes.extract_nli_pairs,
                ["raw_nli", "params:data_processing.nli_pairs", BAD_INPUT],
                ["nli_pairs", "report_nli_pairs"],
                name="extract_nli_pairs",
            ),
            Node(
                nodes.write_data_report,
                [
                    "report_sentence_candidates",
                    "report_wiki_sentences",
                    "report_long_documents",
                    "report_declutr_spans",
                    "report_stsb_pairs",
                    "report_nli_pairs",
                ],
                "data_report",
                name="write_data_report",
            ),
        ],
        tags="data_processing",
    )
