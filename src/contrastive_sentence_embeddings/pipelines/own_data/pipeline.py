"""The ``own_data`` templates: one per template input that can come from the user's
own data, instantiated by the registry for a method whose ``data.<input>`` is a source
(a path or a mapping) rather than a catalog data set name, under the method's
namespace::

    params:source -> prepare_sentences -> own_sentences, report                 (sentences)
    params:source -> prepare_documents -> own_documents, report_documents       (documents)
    own_documents -> sample_spans      -> own_spans, report_spans
    params:source -> prepare_pairs     -> own_pairs, report                     (pairs)

``params:source`` maps to ``params:<method>.data.<input>``; under the method's
namespace the outputs are ``<method>.own_<input>`` (catalog factories,
``conf/base/catalog.yml``), and the registry names the reports
``report_<method>.<input>`` (``data/08_reporting/data_report/<method>.<input>.json``).
"""

from kedro.pipeline import Node, Pipeline

from . import nodes

SOURCE = "params:source"
BAD_INPUT = "params:data_processing.on_bad_input"
NUM_PROC = "params:data_processing.num_proc"
SHARED_PARAMETERS = (BAD_INPUT, NUM_PROC, "params:encoder", "params:data_processing.long_documents",
                     "params:data_processing.declutr_spans")


def create_pipeline(input_name: str = "sentences", method: str = "method", **kwargs) -> Pipeline:
    """The preparation of ``method``'s own ``input_name`` (sentences, documents or pairs)."""
    if input_name == "sentences":
        nodes_ = [Node(nodes.make_prepare_sentences(method), [SOURCE, BAD_INPUT, NUM_PROC],
                       ["own_sentences", "report"], name="prepare_sentences")]
    elif input_name == "documents":
        nodes_ = [
            Node(nodes.make_prepare_documents(method),
                 [SOURCE, "params:data_processing.long_documents", "params:encoder", BAD_INPUT, NUM_PROC],
                 ["own_documents", "report_documents"], name="prepare_documents"),
            Node(nodes.make_sample_spans(method), ["own_documents", "params:data_processing.declutr_spans", NUM_PROC],
                 ["own_spans", "report_spans"], name="sample_spans"),
        ]
    elif input_name == "pairs":
        nodes_ = [Node(nodes.make_prepare_pairs(method), [SOURCE, BAD_INPUT], ["own_pairs", "report"],
                       name="prepare_pairs")]
    else:
        raise ValueError(f"no own-data preparation for {input_name!r}; own data goes in sentences, documents, pairs")
    return Pipeline(nodes_, tags=["own_data", input_name])
