"""What a run records about itself, on real (tiny) trainings: the training settings it
never read (the model card leaves them out), and that they indeed change nothing; what
its memory figure measures; and that training, checkpointing, saving and loading print
none of the library messages that are benign there (transformers' load report and
"checkpoint seem corrupted" for a masked-LM head the encoder does not ship,
accelerate's "Removed shared tensor" for the head's tied weights)."""

from __future__ import annotations

import logging

import pytest
import torch

from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.data.spans import SpanConfig, sample_spans
from contrastive_sentence_embeddings.publishing.model_card import render_model_card, split_front_matter
from contrastive_sentence_embeddings.training import run
from contrastive_sentence_embeddings.training.trainer import MEMORY_MEASURES, SettingsRead, TrainingConfig
from tests.helpers import base_parameters, wiki_sentences

BENIGN = ("LOAD REPORT", "seem corrupted", "Removed shared tensor", "MISSING", "UNEXPECTED")


@pytest.fixture(scope="module")
def documents(mirror_dir, tokenizer):
    """Eight real WikiText-2 articles, tokenised as the data preparation does."""
    from contrastive_sentence_embeddings.data import documents as docs
    from contrastive_sentence_embeddings.data import wikipedia
    from contrastive_sentence_embeddings.data.raw_file import RawFile

    articles = wikipedia.parse_wikitext(RawFile(mirror_dir / "longdocs" / "wikitext-2.valid.txt"),
                                        StepReport("test"))[:8]
    table = docs.wikitext_documents(articles, "wikitext-2.valid.txt", tokenizer.unk_token)
    table["input_ids"] = docs.tokenize_documents(table["text"].tolist(), tokenizer)
    table["n_tokens"] = table["input_ids"].map(len)
    spans = sample_spans(table["doc_id"].tolist(), table["n_tokens"].tolist(),
                         SpanConfig(num_anchors=2, num_positives=2, min_length=16, max_length=64, anchor_gap=16),
                         seed=3, epochs=1, report=StepReport("spans")).to_pandas()
    return table[["doc_id", "input_ids", "n_tokens"]], spans


@pytest.fixture(scope="module")
def sentences(mirror_dir):
    return wiki_sentences(mirror_dir, min_words=12, limit=64)


def declutr(documents, tiny_bert_dir, **training):
    block = base_parameters("declutr", **{"batch_size": 4, "max_steps": 2, "epochs": 1, "eval_every": 0,
                                          "log_every": 1, "checkpoint_dir": None, **training})
    block["seeds"] = None
    trained, result = run.train_on_documents(*documents, str(tiny_bert_dir), block)
    return trained, result


def simcse(sentences, tiny_bert_dir, **training):
    block = base_parameters("simcse", **{"batch_size": 16, "max_steps": 2, "eval_every": 0, "log_every": 1,
                                         "checkpoint_dir": None, "device": "cpu", **training})
    block["seeds"] = None
    return run.train_on_sentences(sentences, str(tiny_bert_dir), block)


def same_weights(first, second) -> bool:
    return all(torch.equal(value, second.best_state[key]) for key, value in first.best_state.items())


def test_the_recorder_notes_reads_and_never_lets_a_setting_change():
    settings = SettingsRead(TrainingConfig())
    assert settings.max_length == 32 and settings.settings.momentum == 0.9  # .settings reads without noting
    assert "max_length" not in settings.unread() and "momentum" in settings.unread()
    with pytest.raises(AttributeError, match="read-only"):
        settings.max_length = 64


def test_declutr_never_reads_max_length_momentum_or_warmup_and_they_change_nothing(documents, tiny_bert_dir):
    trained, result = declutr(documents, tiny_bert_dir)
    unused = set(trained.metadata["training_unused"])
    # Spans come from data preparation; AdamW has no momentum; the slanted triangular
    # schedule has its own rise. Settings DeCLUTR's run does read are not in the list.
    assert {"max_length", "momentum", "warmup_ratio"} <= unused
    assert not unused & {"learning_rate", "batch_size", "cut_fraction", "schedule", "weight_decay", "seed",
                         "num_processes"}
    assert set(trained.metadata["training"]) > unused  # the record keeps every setting, read or not
    changed = declutr(documents, tiny_bert_dir, max_length=8, momentum=0.1, warmup_ratio=0.3)[1]
    assert same_weights(result, changed)
    # ... while a setting it reads does change the weights (the comparison can fail).
    assert not same_weights(result, declutr(documents, tiny_bert_dir, learning_rate=1e-3)[1])

    card = render_model_card(folder_of(trained.metadata), {}, {}, [])
    block = card.split("Training parameters", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    import yaml

    listed = yaml.safe_load(block)
    assert set(listed) == set(trained.metadata["training"]) - unused and "max_length" not in listed
    assert listed["cut_fraction"] == trained.metadata["training"]["cut_fraction"]


def test_simcse_reads_max_length_and_it_changes_the_weights(sentences, tiny_bert_dir):
    trained, result = simcse(sentences, tiny_bert_dir)
    unused = set(trained.metadata["training_unused"])
    assert "max_length" not in unused and {"momentum", "cut_fraction"} <= unused
    assert not same_weights(result, simcse(sentences, tiny_bert_dir, max_length=8)[1])


def test_the_memory_figure_says_what_it_measured(sentences, tiny_bert_dir):
    trained, result = simcse(sentences, tiny_bert_dir)
    metadata = trained.metadata
    assert metadata["peak_memory_measure"] == "process_peak_rss" and metadata["peak_memory_gib"] > 0
    assert (metadata["device"], metadata["mixed_precision"]) == ("cpu", "no")  # no GPU here: fp32 on the CPU
    assert "resident memory (RSS)" in MEMORY_MEASURES["process_peak_rss"]
    _, body = split_front_matter(render_model_card(folder_of(metadata), {}, {}, []))
    assert f"| peak memory of the training process (RSS, GiB) | {metadata['peak_memory_gib']:.4g} |" in body
    assert "accelerator" not in body
    gpu = {**metadata, "peak_memory_measure": "cuda_max_allocated"}
    assert "| peak GPU memory allocated by PyTorch (GiB) |" in render_model_card(folder_of(gpu), {}, {}, [])
    assert result.curve["peak_memory_gib"].notna().any()


def folder_of(metadata):
    from contrastive_sentence_embeddings.publishing.model_card import ModelFolder

    return ModelFolder(path="data/06_models/x", metadata=metadata, modules=("Transformer", "Pooling"),
                       embedding_dimension=32, max_seq_length=None)


def test_declutr_training_checkpoints_save_and_load_print_no_benign_library_message(
        documents, tiny_bert_dir, tmp_path, caplog, capfd):
    """A checkpointed DeCLUTR run on an encoder without a masked-LM head (the offline
    default is one), resumed, saved and loaded: none of the messages, neither in the
    log (transformers' records propagated to it) nor on the terminal; and the resumed
    masked-LM decoder is still the word embeddings, which is why "Removed shared
    tensor" was benign."""
    import transformers
    from sentence_transformers import SentenceTransformer

    from contrastive_sentence_embeddings.pipelines.datasets import SentenceEncoderDataset
    from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
    from contrastive_sentence_embeddings.training import trainer

    checkpoint = tmp_path / "checkpoint"
    resumed_models = []
    original_train = trainer.train

    def keep_model(model, *args, **kwargs):
        resumed_models.append(model)
        return original_train(model, *args, **kwargs)

    transformers.logging.enable_propagation()
    try:
        with caplog.at_level(logging.INFO):
            first, _ = declutr(documents, tiny_bert_dir, eval_every=1, checkpoint_dir=str(checkpoint))
            assert (checkpoint / "step-2").is_dir()  # kept until the model is saved
            patch = pytest.MonkeyPatch()
            patch.setattr(run, "train", keep_model)
            try:  # the same run again resumes from its last checkpoint
                second, _ = declutr(documents, tiny_bert_dir, eval_every=1, checkpoint_dir=str(checkpoint))
            finally:
                patch.undo()
            SentenceEncoderDataset(str(tmp_path / "model"), name="declutr").save(second)
            SentenceTransformer(str(tmp_path / "model"), device="cpu").encode(["a sentence"])
            SentenceEncoder.load(str(tmp_path / "model"), device="cpu").encode(["a sentence"])
    finally:
        transformers.logging.disable_propagation()
    assert "resumed from" in caplog.text and "ships no masked-LM head" in caplog.text
    printed = capfd.readouterr()
    for message in BENIGN:
        assert message not in caplog.text, message
        assert message not in printed.err + printed.out, message
    model = resumed_models[0]
    decoder = model.heads["mlm"].predictions.decoder.weight
    assert decoder is model.encoder.get_input_embeddings().weight


def test_a_failing_call_still_shows_the_held_messages(caplog):
    from contrastive_sentence_embeddings.runs.library_messages import held_messages

    library = logging.getLogger("some.library")
    with caplog.at_level(logging.INFO):
        with held_messages("some.library", r"^benign"):
            library.warning("benign here")
            library.warning("something else")
        assert [r.getMessage() for r in caplog.records] == ["something else"]
        caplog.clear()
        with pytest.raises(RuntimeError), held_messages("some.library", r"^benign"):
            library.warning("benign here")
            raise RuntimeError("the call failed")
    assert [r.getMessage() for r in caplog.records] == ["benign here"]
    assert not library.filters  # nothing stays on the logger
