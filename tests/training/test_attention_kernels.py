"""training.attention_backends: the SDPA kernels a run may use (training/attention_kernels.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from contrastive_sentence_embeddings.config import ParameterError
from contrastive_sentence_embeddings.training.attention_kernels import allowed_attention
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
