"""CLSR: the pairs table becomes distinct sentences and index pairs (bad tables are
refused by name), the frozen embeddings are cached and the cache is reused or
rebuilt as it should be, the loss is NT-Xent of the projected encoder-network
outputs, and the saved model (frozen encoder + mean pooling + the trained network as
Dense modules) embeds raw text exactly like the model in training, through
``SentenceEncoder.load`` and ``SentenceTransformer`` alike."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from contrastive_sentence_embeddings.pipelines.datasets import SentenceEncoderDataset
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder, dense_layers, load_dense_head
from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.pipelines.data_processing.nodes import extract_stsb_pairs
from contrastive_sentence_embeddings.training import losses
from contrastive_sentence_embeddings.training.clsr import (
    CLSRModel,
    FrozenEmbeddings,
    PairCollate,
    PairEmbeddings,
    embed_pairs,
    frozen_model_key,
    pair_sentences,
)
from contrastive_sentence_embeddings.training.methods import CLSR, build_method
from contrastive_sentence_embeddings.training.run import train_on_pairs
from contrastive_sentence_embeddings.training.saving import save_sentence_encoder
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, train

SENTENCES = ["A man is playing a guitar.", "x", "Two dogs run across a field of very green grass in the sun.",
             "the weather is nice today"]


@pytest.fixture(scope="module")
def stsb_pairs(sts_partitions) -> pd.DataFrame:
    """The real STS-B training pairs scored above 4 (what the catalog's stsb_pairs holds)."""
    table, _ = extract_stsb_pairs(sts_partitions, {"splits": ["train"], "min_score": 4.0}, "skip")
    return table.to_pandas()  # the node's Arrow table, as the training node reads the loaded data set


@pytest.fixture
def encode_calls(monkeypatch):
    """Counts every encoder forward pass batch run (``SentenceEncoder.encode_poolings``)."""
    calls = []
    original = SentenceEncoder.encode_poolings

    def counting(self, sentences, *args, **kwargs):
        calls.append(len(sentences))
        return original(self, sentences, *args, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "encode_poolings", counting)
    return calls


def embed(pairs, encoder, cache_dir) -> PairEmbeddings:
    return embed_pairs(pairs, "sentence1", "sentence2", "stsb_pairs", str(encoder), cache_dir, device="cpu")


# --- the pairs table ---------------------------------------------------------------------
def test_pairs_become_distinct_sentences_and_row_indices():
    table = pd.DataFrame({"premise": ["a", "b", "a"], "hypothesis": ["c", "a", "d"]})
    sentences, rows = pair_sentences(table, "premise", "hypothesis", "nli_pairs")
    assert sentences == ["a", "c", "b", "d"]
    assert rows.tolist() == [[0, 1], [2, 0], [0, 3]]
    assert [(sentences[i], sentences[j]) for i, j in rows] == list(zip(table["premise"], table["hypothesis"]))


@pytest.mark.parametrize("table, message", [
    (pd.DataFrame({"sentence1": [], "sentence2": []}), "stsb_pairs: the table has no pairs"),
    (pd.DataFrame({"sentence1": ["a"], "score": [4.5]}), "stsb_pairs: missing column\\(s\\) sentence2"),
    (pd.DataFrame({"sentence1": ["a", "b"], "sentence2": ["c", "  "]}), "stsb_pairs: 1 of 2 row\\(s\\) lack"),
    (pd.DataFrame({"sentence1": ["a", None], "sentence2": ["c", "d"]}), "first at row 1"),
])
def test_bad_pairs_tables_are_refused_by_name(table, message):
    with pytest.raises(ValueError, match=message):
        pair_sentences(table, "sentence1", "sentence2", "stsb_pairs")


# --- the embedding cache ---------------------------------------------------------------------
def test_the_cache_is_reused_and_rebuilt_when_the_encoder_or_the_data_change(
    stsb_pairs, tiny_bert_dir, tmp_path, encode_calls
):
    from transformers import BertModel

    pairs = stsb_pairs.head(40)
    encoder_dir = tmp_path / "encoder"
    shutil.copytree(tiny_bert_dir, encoder_dir)
    cache = tmp_path / "cache"

    first = embed(pairs, encoder_dir, cache)
    assert not first.cache_hit and len(encode_calls) == 1
    assert first.embeddings.shape == (len(first.sentences), 32) and len(first.pairs) == 40
    assert len(list(cache.glob("*.npy"))) == 1

    # A second run: the same encoder and data are read back; the encoder never runs.
    again = embed(pairs, encoder_dir, cache)
    assert again.cache_hit and len(encode_calls) == 1
    assert again.cache_key == first.cache_key
    np.testing.assert_array_equal(again.embeddings, first.embeddings)

    # The encoder's weights change in place (same folder, same name): encoded anew.
    changed = BertModel.from_pretrained(encoder_dir)
    with torch.no_grad():
        changed.embeddings.word_embeddings.weight.mul_(2.0)
    changed.save_pretrained(encoder_dir)
    rebuilt = embed(pairs, encoder_dir, cache)
    assert not rebuilt.cache_hit and len(encode_calls) == 2
    assert rebuilt.cache_key != first.cache_key
    assert np.abs(rebuilt.embeddings - first.embeddings).max() > 1e-4

    # One sentence of the data changes: encoded anew as well.
    edited = pairs.copy()
    edited.iloc[3, edited.columns.get_loc("sentence2")] = "an entirely new sentence ."
    new_data = embed(edited, encoder_dir, cache)
    assert not new_data.cache_hit and len(encode_calls) == 3
    assert new_data.cache_key not in (first.cache_key, rebuilt.cache_key)
    # ... and the cached embeddings are those the encoder gives now.
    direct = SentenceEncoder.load(str(encoder_dir), "mean", device="cpu").encode(new_data.sentences)
    np.testing.assert_allclose(new_data.embeddings, direct, rtol=0, atol=1e-6)
    assert len(list(cache.glob("*.npy"))) == 3


def test_the_model_key_names_encoder_weights_pooling_and_precision(tiny_bert_dir):
    cpu = torch.device("cpu")
    key = frozen_model_key(str(tiny_bert_dir), "mean", cpu)
    assert key == frozen_model_key(str(tiny_bert_dir), "mean", cpu)
    assert key != frozen_model_key(str(tiny_bert_dir), "cls_before_pooler", cpu)
    assert key != frozen_model_key(str(tiny_bert_dir), "mean", cpu, fingerprint="other-weights")
    assert key.endswith("|mean|cpu-fp32")


def test_dev_sentences_are_encoded_once_across_evaluations():
    seen = []

    def encode(sentences):
        seen.append(list(sentences))
        return np.arange(len(sentences) * 3, dtype=np.float32).reshape(len(sentences), 3) + len(seen)

    frozen = FrozenEmbeddings(encode)
    first = frozen(["a", "b", "a"])
    np.testing.assert_array_equal(first[0], first[2])
    np.testing.assert_array_equal(frozen(["b", "a"]), first[[1, 0]])
    assert seen == [["a", "b"]] and frozen.calls == 1
    frozen(["c", "a"])
    assert seen[-1] == ["c"] and frozen.calls == 2


# --- the loss -------------------------------------------------------------------------------
def test_the_loss_is_nt_xent_of_the_projected_network_outputs():
    torch.manual_seed(0)
    method = build_method("clsr", {"temperature": 0.1, "hidden_width": 24})
    model = CLSRModel(16, method, frozen=lambda s: None)
    assert [type(m).__name__ for m in model.encoder] == ["Linear", "ReLU", "Linear"]
    assert (model.encoder[0].in_features, model.encoder[0].out_features, model.encoder[2].out_features) == (16, 24, 16)
    first, second = torch.randn(8, 16), torch.randn(8, 16)
    out = model(first=first, second=second)

    network, projection = model.encoder, model.heads["projection"]
    expected = losses.nt_xent(projection(network(first)), projection(network(second)), 0.1)
    torch.testing.assert_close(out["loss"], expected, rtol=0, atol=1e-6)
    assert out["nt_xent"].item() == pytest.approx(out["loss"].item())
    # ... and not the loss of the unprojected representations, nor at another temperature.
    assert abs(out["loss"].item() - losses.nt_xent(network(first), network(second), 0.1).item()) > 1e-3
    assert abs(out["loss"].item() - losses.nt_xent(projection(network(first)), projection(network(second)),
                                                    0.05).item()) > 1e-3
    # By hand: pairs (a_i, b_i) over 2m rows, self excluded, mean over the 2m rows.
    z = torch.nn.functional.normalize(torch.cat([projection(network(first)), projection(network(second))]), dim=1)
    logits = z @ z.T / 0.1
    logits.fill_diagonal_(float("-inf"))
    partner = torch.cat([torch.arange(8, 16), torch.arange(0, 8)])
    by_hand = -(logits[torch.arange(16), partner] - torch.logsumexp(logits, dim=1)).mean()
    torch.testing.assert_close(out["loss"], by_hand, rtol=0, atol=1e-5)
    out["loss"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_method_parameters_are_checked():
    with pytest.raises(ValueError, match="unknown parameter"):
        CLSR.from_params({"temperature": 0.1, "width": 3})
    with pytest.raises(ValueError, match="temperature must be positive"):
        CLSR(temperature=0.0)
    assert CLSR().temperature == 0.1 and build_method("clsr").pair_view.width(384) == 384


def test_collate_gathers_the_rows_of_each_pair():
    embeddings = np.arange(12, dtype=np.float32).reshape(4, 3)
    batch = PairCollate(embeddings)([(0, 3), (2, 1)])
    assert batch["first"].tolist() == [embeddings[0].tolist(), embeddings[2].tolist()]
    assert batch["second"].tolist() == [embeddings[3].tolist(), embeddings[1].tolist()]


# --- training and the saved model -----------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(stsb_pairs, tiny_bert_dir, sts_partitions, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    data = embed_pairs(stsb_pairs, "sentence1", "sentence2", "stsb_pairs", str(tiny_bert_dir), cache, device="cpu")
    params = {"kind": "clsr", "pooling": "mean", "method": {"temperature": 0.1, "hidden_width": 48},
              "training": {"optimizer": "sgd", "momentum": 0.9, "learning_rate": 0.5, "batch_size": 128,
                           "epochs": 3, "warmup_ratio": 0.1, "schedule": "cosine", "eval_every": 8,
                           "device": "cpu", "log_every": 4}}
    trainer_calls = []
    import contrastive_sentence_embeddings.training.run as run_module

    original_train = run_module.train

    def spy(model, *args, **kwargs):  # keep the model in training, to compare with the saved one
        trainer_calls.append(model)
        return original_train(model, *args, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(run_module, "train", spy)
    try:
        model, result = train_on_pairs(data, str(tiny_bert_dir), params, DevScorer(sts_partitions), cache)
    finally:
        patch.undo()
    path = tmp_path_factory.mktemp("models") / "clsr_test"
    SentenceEncoderDataset(str(path)).save(model)
    return {"data": data, "model": model, "result": result, "path": path, "in_training": trainer_calls[0],
            "cache": cache}


def test_training_keeps_the_best_network_and_scores_frozen_dev_embeddings_once(trained):
    result, in_training, model = trained["result"], trained["in_training"], trained["model"]
    assert result.steps == 3 * (len(trained["data"].pairs) // 128)
    dev_rows = result.curve.dropna(subset=["dev/dev_avg"])
    assert dev_rows["step"].tolist()[0] == 0 and dev_rows["step"].tolist()[-1] == result.steps
    assert in_training.frozen.calls == 1  # the dev sentences: encoded once for every evaluation
    assert set(result.best_state) == set(model.head.state_dict())  # the network's weights, not the encoder's
    for key, value in model.head.state_dict().items():
        torch.testing.assert_close(value, result.best_state[key])
    assert result.curve["loss"].notna().any() and np.isfinite(result.curve["loss"].dropna()).all()
    # The dev sentences' frozen embeddings went to the disk cache beside the training pairs'.
    assert len(list(trained["cache"].glob("*.npy"))) == 2


def test_saved_model_embeds_like_the_model_in_training(trained):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    path, in_training = trained["path"], trained["in_training"]
    in_training.encoder.load_state_dict(trained["result"].best_state)
    expected = in_training.sentence_encoder(device=torch.device("cpu")).encode(SENTENCES)
    assert expected.shape == (4, 32)

    ours = SentenceEncoder.load(str(path), device="cpu")
    assert ours.pooling == "mean" and ours.head is not None and ours.dimension == 32
    np.testing.assert_allclose(ours.encode(SENTENCES), expected, rtol=0, atol=1e-5)
    theirs = SentenceTransformer(str(path), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    np.testing.assert_allclose(theirs, expected, rtol=0, atol=1e-5)

    # Not the frozen encoder alone: the network really is applied.
    frozen = SentenceEncoder(AutoModel.from_pretrained(path), ours.tokenizer, "mean", device=torch.device("cpu"))
    assert np.abs(frozen.encode(SENTENCES) - expected).max() > 1e-3
    modules = json.loads((path / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == ["Transformer", "Pooling", "Dense", "Dense"]
    configs = [json.loads((path / m["path"] / "config.json").read_text()) for m in modules[2:]]
    assert [(c["in_features"], c["out_features"], c["activation_function"].rsplit(".", 1)[-1]) for c in configs] == \
        [(32, 48, "ReLU"), (48, 32, "Identity")]
    metadata = json.loads((path / "cse_metadata.json").read_text())
    assert metadata["method"] == "clsr" and metadata["frozen_encoder"] and metadata["train_pairs"] == 1036
    assert metadata["embedding_cache"] == {"key": trained["data"].cache_key, "hit": False}


def test_a_head_is_saved_only_if_dense_modules_can_express_it(tmp_path, tiny_bert, tokenizer):
    with pytest.raises(ValueError, match="head takes 16 inputs"):
        save_sentence_encoder(tmp_path / "a", tiny_bert, tokenizer, "mean", {}, head=torch.nn.Linear(16, 8))
    with pytest.raises(ValueError, match="cannot express"):
        dense_layers(torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.LayerNorm(8)))
    with pytest.raises(ValueError, match="cannot express"):  # its slope would not survive reloading
        dense_layers(torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.LeakyReLU(0.2)))
    with pytest.raises(ValueError, match="followed by one of 9 inputs"):
        dense_layers(torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.Linear(9, 2)))
    assert not (tmp_path / "a").exists()
    # A single Linear + Tanh, with normalisation on the sentence-transformers side.
    torch.manual_seed(3)
    head = torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.Tanh())
    path = save_sentence_encoder(tmp_path / "b", tiny_bert, tokenizer, "cls_before_pooler", {}, normalize=True,
                                 head=head)
    loaded = load_dense_head(path)
    assert [type(m).__name__ for m in loaded] == ["Linear", "Tanh"]
    reference = SentenceEncoder(tiny_bert, tokenizer, "cls_before_pooler", device=torch.device("cpu"), head=head)
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(path), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    ours = SentenceEncoder.load(str(path), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(ours, reference.encode(SENTENCES), rtol=0, atol=1e-6)
    np.testing.assert_allclose(theirs, ours / np.linalg.norm(ours, axis=1, keepdims=True), rtol=0, atol=1e-5)


def test_a_saved_model_without_dense_modules_has_no_head(tmp_path, tiny_bert, tokenizer):
    path = save_sentence_encoder(tmp_path / "plain", tiny_bert, tokenizer, "mean", {})
    assert load_dense_head(path) is None and SentenceEncoder.load(str(path), device="cpu").head is None
    assert SentenceEncoder.load("sentence-transformers/all-MiniLM-L6-v2", device="cpu").head is None


def test_training_refuses_embeddings_of_another_encoder(trained, tiny_bert_dir):
    data = trained["data"]
    with pytest.raises(ValueError, match="cached embeddings are"):
        train_on_pairs(data, "sentence-transformers/all-MiniLM-L6-v2", {"kind": "clsr", "pooling": "mean"})
    with pytest.raises(ValueError, match="cached embeddings are"):
        train_on_pairs(data, str(tiny_bert_dir), {"kind": "clsr", "pooling": "cls"})


def test_trainer_resume_fingerprint_depends_on_the_pairs(trained):
    data = trained["data"]
    swapped = PairEmbeddings(data.dataset, data.encoder, data.pooling, data.sentences, data.embeddings,
                             data.pairs[:, ::-1].copy(), data.cache_key, data.cache_hit)
    assert swapped.fingerprint != data.fingerprint


def test_the_shared_trainer_runs_clsr_with_sgd(trained):
    """A few steps of the paper's optimiser straight through ``trainer.train``: the
    loss falls on the real pairs."""
    data = trained["data"]
    torch.manual_seed(0)
    model = CLSRModel(32, build_method("clsr"), frozen=lambda s: None)
    config = TrainingConfig(optimizer="sgd", momentum=0.9, learning_rate=0.5, batch_size=128, epochs=6,
                            schedule="cosine", warmup_ratio=0.1, device="cpu", log_every=8, eval_every=0)
    result = train(model, None, data.examples(), config, collate=PairCollate(data.embeddings),
                   data_fingerprint=data.fingerprint)
    losses_logged = result.curve["loss"].dropna().tolist()
    assert losses_logged[-1] < losses_logged[0] - 0.5, losses_logged


def test_the_run_records_the_settings_clsr_never_reads(trained):
    """CLSR trains on cached embeddings (no truncation length), with SGD and a cosine
    schedule, in the Kedro process: its card lists momentum and the warm-up, not
    max_length, cut_fraction or num_processes (trainer.SettingsRead)."""
    unused = set(trained["model"].metadata["training_unused"])
    assert {"max_length", "cut_fraction", "num_processes"} <= unused
    assert not unused & {"momentum", "warmup_ratio", "optimizer", "schedule", "learning_rate", "select_by"}


# --- a frozen encoder cut to its first layers (method.frozen_layers) -----------------------
def test_cutting_the_encoder_to_its_token_embeddings_keeps_their_weights_and_says_so(tiny_bert, tokenizer):
    import copy

    from contrastive_sentence_embeddings.training.clsr import keep_first_layers

    whole = copy.deepcopy(tiny_bert).eval()  # no dropout: the two passes must be the same computation
    cut = keep_first_layers(copy.deepcopy(tiny_bert).eval(), 0)
    assert cut.config.num_hidden_layers == 0 and len(cut.encoder.layer) == 0
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = cut(**batch).last_hidden_state
        embedded = whole.embeddings(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
    torch.testing.assert_close(states, embedded)  # the LayerNorm'd token embeddings, nothing more
    one = keep_first_layers(copy.deepcopy(tiny_bert), 1)
    assert one.config.num_hidden_layers == 1
    torch.testing.assert_close(one.encoder.layer[0].attention.self.query.weight,
                               whole.encoder.layer[0].attention.self.query.weight)
    assert keep_first_layers(whole, None) is whole and len(whole.encoder.layer) == tiny_bert.config.num_hidden_layers
    with pytest.raises(ValueError, match="frozen_layers is 9, but the encoder has"):
        keep_first_layers(copy.deepcopy(tiny_bert), 9)


def test_the_cache_key_and_the_pair_check_name_the_layers_kept(stsb_pairs, tiny_bert_dir, tmp_path):
    from contrastive_sentence_embeddings.training.clsr import check_pair_embeddings

    cpu = torch.device("cpu")
    assert frozen_model_key("enc", "mean", cpu, "f", layers=0) != frozen_model_key("enc", "mean", cpu, "f")
    assert frozen_model_key("enc", "mean", cpu, "f") == "clsr-frozen|enc|f|mean|cpu-fp32"  # older keys unchanged
    data = embed_pairs(stsb_pairs.head(20), "sentence1", "sentence2", "stsb_pairs", str(tiny_bert_dir), tmp_path,
                       device="cpu", frozen_layers=0)
    whole = embed_pairs(stsb_pairs.head(20), "sentence1", "sentence2", "stsb_pairs", str(tiny_bert_dir), tmp_path,
                        device="cpu")
    assert data.frozen_layers == 0 and data.cache_key != whole.cache_key
    assert np.abs(data.embeddings - whole.embeddings).max() > 1e-3
    with pytest.raises(ValueError, match="first 0 layers, but the run asks for .* mean pooling$"):
        check_pair_embeddings(data, str(tiny_bert_dir), "mean", data.embeddings.shape[1])


def test_a_run_on_the_token_embeddings_saves_the_cut_encoder_that_loads_everywhere(
        stsb_pairs, tiny_bert_dir, sts_partitions, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    data = embed_pairs(stsb_pairs, "sentence1", "sentence2", "stsb_pairs", str(tiny_bert_dir), tmp_path,
                       device="cpu", frozen_layers=0)
    params = {"kind": "clsr", "pooling": "mean", "method": {"hidden_width": 48, "frozen_layers": 0},
              "training": {"optimizer": "sgd", "momentum": 0.9, "learning_rate": 0.5, "batch_size": 128,
                           "epochs": 2, "eval_every": 8, "device": "cpu", "log_every": 4}}
    model, result = train_on_pairs(data, str(tiny_bert_dir), params, DevScorer(sts_partitions), tmp_path)
    path = tmp_path / "model"
    SentenceEncoderDataset(str(path)).save(model)
    assert json.loads((path / "config.json").read_text())["num_hidden_layers"] == 0
    assert AutoModel.from_pretrained(path).config.num_hidden_layers == 0
    assert json.loads((path / "cse_metadata.json").read_text())["method_params"]["frozen_layers"] == 0
    ours = SentenceEncoder.load(str(path), device="cpu").encode(SENTENCES)
    theirs = SentenceTransformer(str(path), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)
    # The frozen input of the saved model is the cached training input (the token embeddings, mean-pooled).
    index = {sentence: row for row, sentence in enumerate(data.sentences)}
    first = data.sentences[0]
    frozen = SentenceEncoder(AutoModel.from_pretrained(path), SentenceEncoder.load(str(path)).tokenizer, "mean",
                             device=torch.device("cpu")).encode([first])
    np.testing.assert_allclose(frozen[0], data.embeddings[index[first]], rtol=0, atol=1e-5)
