"""attention_backends: the SDPA kernels a training run or an evaluation may use (encoders/attention_kernels.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from contrastive_sentence_embeddings.encoders.attention_kernels import allowed_attention
from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.evaluation import evaluator
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, run_fingerprint, tokenize_sentences, train
from tests.helpers import wiki_sentences

NO_CUDNN = ["flash", "efficient", "math"]


@pytest.fixture(scope="module")
def sentences(mirror_dir):
    return wiki_sentences(mirror_dir, min_words=5, limit=96)


def flags() -> dict[str, bool]:
    backends = torch.backends.cuda
    return {"cudnn": backends.cudnn_sdp_enabled(), "flash": backends.flash_sdp_enabled(),
            "efficient": backends.mem_efficient_sdp_enabled(), "math": backends.math_sdp_enabled()}


def run(encoder, tokenizer, sentences, **settings):
    """Four SimCSE steps along the GPU's path (SDPA in every pass, no CPU packing), with
    the SDPA switches seen by each training pass and each dev scoring."""
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(encoder), "cls", build_method("simcse"), real_tokens_only=False,
                             uniform_dropout=False)
    seen = {"training": [], "scoring": []}
    model.encoder.register_forward_pre_hook(
        lambda module, args: seen["training" if module.training else "scoring"].append(flags()))

    def scorer(encode):
        encode(["a short one", "a sentence of a few more words than the first one"])
        return {"stsb_dev": 0.0, "sickr_dev": 0.0, "dev_avg": 0.0}

    config = TrainingConfig.from_params({"batch_size": 16, "learning_rate": 1e-3, "device": "cpu", "log_every": 1,
                                         "max_length": 32, "eval_every": 2, "max_steps": 4, **settings})
    result = train(model, tokenizer, tokenize_sentences(tokenizer, sentences, 32), config, dev_scorer=scorer)
    return torch.tensor(result.curve.dropna(subset=["loss"])["loss"].to_list()), seen


def test_the_backends_allowed_hold_while_training_and_scoring_and_are_put_back(no_dropout_bert, tokenizer,
                                                                                sentences):
    before = flags()
    _, seen = run(no_dropout_bert, tokenizer, sentences, attention_backends=NO_CUDNN)
    assert seen["training"] and seen["scoring"]
    allowed = {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert all(state == allowed for state in seen["training"] + seen["scoring"])
    assert flags() == before  # the process's own switches again
    _, seen = run(no_dropout_bert, tokenizer, sentences)  # null: PyTorch's choice, nothing switched
    assert all(state == before for state in seen["training"] + seen["scoring"])


def test_leaving_cudnn_out_changes_nothing_on_a_cpu_and_math_alone_only_the_rounding(no_dropout_bert, tokenizer,
                                                                                       sentences):
    """DeCLUTR's blocks leave cuDNN out (conf/base): on a CPU, where cuDNN's attention does
    not exist, its runs are PyTorch's choice to the last bit. Allowing only the math
    backend replaces the fused CPU kernel with matrix products and a softmax: the same
    attention, other rounding."""
    pytorch_choice, _ = run(no_dropout_bert, tokenizer, sentences)
    without_cudnn, _ = run(no_dropout_bert, tokenizer, sentences, attention_backends=NO_CUDNN)
    assert torch.equal(without_cudnn, pytorch_choice)
    math_only, _ = run(no_dropout_bert, tokenizer, sentences, attention_backends=["math"])
    torch.testing.assert_close(math_only, pytorch_choice, rtol=1e-4, atol=1e-5)


def test_the_context_allows_what_it_names_and_nothing_with_null():
    before = flags()
    with allowed_attention(["efficient", "math"]):
        assert flags() == {"cudnn": False, "flash": False, "efficient": True, "math": True}
    assert flags() == before
    with allowed_attention(None):
        assert flags() == before


@pytest.mark.parametrize("value, message", [
    ("cudnn", "must be null or a list"),  # a bare word, not a list
    ([], "must be null or a list"),
    (["flash", "fast"], r"must be backends of cudnn, flash, efficient, math; unknown: \['fast'\]"),
    (["math", "math"], "must be distinct backends"),
    ([1], "must be null or a list"),
])
def test_a_wrong_value_is_refused_when_the_settings_are_parsed(value, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig.from_params({"attention_backends": value})
    # in a parameter block: the message and the key name the setting
    with pytest.raises(ParameterError, match=r"^declutr\.training\.attention_backends must") as error:
        MethodBlock.from_params({"kind": "declutr", "pooling": "mean",
                                 "training": {"seed": 42, "attention_backends": value}}, "declutr")
    assert error.value.key == "declutr.training.attention_backends"


def test_a_checkpoint_resumes_under_other_attention_backends(tiny_bert):
    """The backends change speed and rounding, not what is computed: like the other speed
    settings, they are not part of what a checkpoint must match."""
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls", build_method("simcse"))
    fingerprints = {run_fingerprint(TrainingConfig.from_params({"attention_backends": value}), "data", model)
                    for value in (None, NO_CUDNN, ["math"])}
    assert len(fingerprints) == 1
    assert run_fingerprint(TrainingConfig.from_params({"learning_rate": 1e-4}), "data", model) not in fingerprints


# --- evaluation.attention_backends: every encoding of an evaluation ------------------------
def encoder_seeing_flags(encoder, tokenizer, **settings):
    """A SentenceEncoder over ``encoder`` and the switches each of its forward passes saw."""
    seen = []
    encoder = copy.deepcopy(encoder)
    encoder.register_forward_pre_hook(lambda module, args: seen.append(flags()))
    return SentenceEncoder(encoder, tokenizer, "mean", batch_size=8, device=torch.device("cpu"), **settings), seen


def test_an_encoding_runs_under_the_backends_allowed_and_puts_the_process_switches_back(no_dropout_bert, tokenizer,
                                                                                       sentences):
    before = flags()
    encoder, seen = encoder_seeing_flags(no_dropout_bert, tokenizer, attention_backends=NO_CUDNN)
    encoder.encode(sentences[:20])
    assert len(seen) == 3  # 20 sentences in batches of 8
    assert all(state == {"cudnn": False, "flash": True, "efficient": True, "math": True} for state in seen)
    assert flags() == before
    encoder, seen = encoder_seeing_flags(no_dropout_bert, tokenizer)
    encoder.encode(sentences[:20])
    assert seen and all(state == before for state in seen)


def test_leaving_cudnn_out_of_an_encoding_changes_no_embedding_on_a_cpu(no_dropout_bert, tokenizer, sentences):
    """evaluation.attention_backends in conf/base leaves cuDNN out: on a CPU the
    embeddings, hence every score, are PyTorch's choice to the last bit; math alone only
    rounds otherwise. (The encoder uses SDPA: the math-only result differs.)"""
    assert no_dropout_bert.config._attn_implementation == "sdpa"
    pytorch_choice = encoder_seeing_flags(no_dropout_bert, tokenizer)[0].encode(sentences)
    without_cudnn = encoder_seeing_flags(no_dropout_bert, tokenizer, attention_backends=NO_CUDNN)[0].encode(sentences)
    math_only = encoder_seeing_flags(no_dropout_bert, tokenizer, attention_backends=["math"])[0].encode(sentences)
    np.testing.assert_array_equal(without_cudnn, pytorch_choice)
    assert not np.array_equal(math_only, pytorch_choice)
    np.testing.assert_allclose(math_only, pytorch_choice, rtol=1e-4, atol=1e-5)


@pytest.fixture
def loaded_backends(monkeypatch) -> list:
    """The attention_backends of every encoder ``SentenceEncoder.load`` returns, in order."""
    loaded = []
    real_load = SentenceEncoder.load

    def load(*args, **kwargs):
        encoder = real_load(*args, **kwargs)
        loaded.append(encoder.attention_backends)
        return encoder

    monkeypatch.setattr(SentenceEncoder, "load", load)
    return loaded


def test_the_evaluation_loads_its_encoder_with_the_backends_of_its_settings(tiny_bert_dir, loaded_backends):
    spec = evaluator.ModelSpec(name="tiny", path=str(tiny_bert_dir), pooling="mean")
    for value in (NO_CUDNN, None):
        settings = evaluator.EvaluationSettings(sts=False, alignment=False, device="cpu", attention_backends=value)
        evaluator.evaluate_encoder([spec], evaluator.EvaluationData(), settings)
    assert loaded_backends == [NO_CUDNN, None]


@pytest.mark.parametrize("value, message", [
    ("efficient", "must be null or a list"),
    (["efficient", "cudnn-v2"], r"unknown: \['cudnn-v2'\]"),
])
def test_a_wrong_evaluation_value_names_its_key(value, message):
    with pytest.raises(ParameterError, match=r"^evaluation: attention_backends .*" + message) as error:
        evaluator.evaluation_settings({"attention_backends": value})
    assert error.value.key == "evaluation.attention_backends"
    # a pipeline's overrides: the same check, under the pipeline's name
    with pytest.raises(ParameterError) as error:
        evaluator.evaluation_settings({}, {"attention_backends": value}, where="transfer_evaluation.evaluation")
    assert error.value.key == "transfer_evaluation.evaluation.attention_backends"


def test_the_project_evaluates_without_cudnn_attention():
    """conf/base's value, as the project's configuration gives it to the evaluation nodes."""
    from contrastive_sentence_embeddings.configuration.loader import project_parameters
    from tests.helpers import PROJECT_ROOT

    for env in (None, "paper"):  # conf/paper's block merges into conf/base's, keeping the list
        block = project_parameters(PROJECT_ROOT, env)["evaluation"]
        assert evaluator.evaluation_settings(block).attention_backends == NO_CUDNN, env


def test_the_backends_change_no_status_and_are_recorded_with_the_scores(tiny_bert_dir):
    """Like batch_size and device, the kernels change only the rounding: scores computed
    under other kernels stay current (same settings_hash), and each record says which ran."""
    from contrastive_sentence_embeddings.records import provenance

    records = [provenance.evaluation_settings_record(evaluator.EvaluationSettings(attention_backends=value))
               for value in (None, NO_CUDNN)]
    assert records[0] == records[1]
    spec = evaluator.ModelSpec(name="tiny", path=str(tiny_bert_dir), pooling="mean")
    settings = evaluator.EvaluationSettings(sts=False, alignment=False, device="cpu", batch_size=16,
                                            attention_backends=NO_CUDNN)
    scoring = evaluator.evaluate_encoder([spec], evaluator.EvaluationData(), settings)["tiny"]["provenance"]["evaluation"]
    assert scoring["execution"] == {"device": "cpu", "precision": "cpu-fp32", "batch_size": 16,
                                    "attention_backends": NO_CUDNN}


def test_clsrs_frozen_embeddings_are_encoded_with_its_blocks_kernels(tiny_bert_dir, tmp_path, loaded_backends):
    """CLSR's training node encodes its pairs' sentences before training (its dev sets'
    frozen embeddings are encoded inside training, under the same setting)."""
    import pandas as pd

    from contrastive_sentence_embeddings.pipelines.training.nodes import embed_pair_sentences
    from tests.helpers import base_parameters

    pairs = pd.DataFrame({"sentence1": ["a man plays a guitar", "two dogs run"],
                          "sentence2": ["someone plays music", "dogs are running"]})
    for index, value in enumerate((["efficient", "math"], None)):
        block = base_parameters("clsr_stsb", device="cpu", attention_backends=value)
        data = embed_pair_sentences(pairs, str(tmp_path / f"cache{index}"), str(tiny_bert_dir), block)
        assert data.embeddings.shape[0] == 4
    assert loaded_backends == [["efficient", "math"], None]
