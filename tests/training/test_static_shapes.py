"""``training.static_shapes`` (every sentence batch padded to ``max_length``) and
``training.compile`` with its ``compile_mode``: what the CUDA-graph path needs (one input
shape, the dev sets outside the compiled forward), checked on CPU, where the losses of a
dropout-free run must be those of eager, dynamically padded training."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train
from tests.helpers import wiki_sentences

ROOT = Path(__file__).resolve().parents[2]
MAX_LENGTH = 48  # longer than most wiki sentences: dynamic padding gives shorter batches


@pytest.fixture(scope="module")
def sentences(mirror_dir):
    return wiki_sentences(mirror_dir, min_words=5, limit=160)


class DevScorer:
    """Records whether the encoder's compiled forward was in place while scoring; each
    evaluation scores higher than the last, so the kept weights are the last step's."""

    def __init__(self, encoder):
        self.encoder, self.compiled_while_scoring = encoder, []

    def __call__(self, encode):
        self.compiled_while_scoring.append("forward" in self.encoder.__dict__)
        encode(["a short one", "a sentence of quite a few more words than the first one has"])
        score = float(len(self.compiled_while_scoring))
        return {"stsb_dev": score, "sickr_dev": score, "dev_avg": score}


def run(encoder, tokenizer, sentences, **settings):
    torch.manual_seed(0)
    model = ContrastiveModel(copy.deepcopy(encoder), "cls_before_pooler", build_method("simcse"))
    lengths, compiled_in_training = [], []

    def record(module, args, kwargs):
        if module.training:
            lengths.append(kwargs["input_ids"].shape[1])
            compiled_in_training.append("forward" in module.__dict__)

    model.encoder.register_forward_pre_hook(record, with_kwargs=True)
    scorer = DevScorer(model.encoder)
    config = TrainingConfig(**{"batch_size": 16, "learning_rate": 1e-3, "device": "cpu", "log_every": 1,
                               "max_length": MAX_LENGTH, "eval_every": 2, "max_steps": 4, **settings})
    result = train(model, tokenizer, tokenize_sentences(tokenizer, sentences, MAX_LENGTH), config, dev_scorer=scorer)
    return result, model, lengths, compiled_in_training, scorer


def losses(result) -> torch.Tensor:
    """The training loss of every step (the curve's rows of dev scores carry none)."""
    rows = result.curve.dropna(subset=["loss"])
    assert rows["step"].tolist() == [1, 2, 3, 4]
    return torch.tensor(rows["loss"].to_list())


def test_static_shapes_pad_every_batch_to_max_length_and_train_as_dynamic_padding(no_dropout_bert, tokenizer,
                                                                                   sentences):
    dynamic, _, dynamic_lengths, _, _ = run(no_dropout_bert, tokenizer, sentences)
    static, _, static_lengths, _, _ = run(no_dropout_bert, tokenizer, sentences, static_shapes=True)
    assert set(static_lengths) == {MAX_LENGTH}
    assert min(dynamic_lengths) < MAX_LENGTH  # the comparison means something: dynamic batches were shorter
    torch.testing.assert_close(losses(static), losses(dynamic), rtol=1e-5, atol=1e-6)
    assert static.best_step == dynamic.best_step == 4
    moved = max(float((value - no_dropout_bert.state_dict()[key]).abs().max()) for key, value in
                static.best_state.items() if key in no_dropout_bert.state_dict())
    assert moved > 1e-3  # it trained
    # The losses above are the sharp check. AdamW divides each gradient by its running
    # RMS, so where an element's gradient is near zero the float rounding in it (the two
    # runs sum over differently padded rows, in an order the CPU's kernels choose) sets a
    # step of up to the learning rate: the weights must agree to 2% of how far training
    # moved them (1.3e-5 against 2.5e-3 on an AVX-512 CPU, where 1e-5 flaked), where a
    # padding fault moves them by whole steps.
    for key, value in dynamic.best_state.items():
        torch.testing.assert_close(static.best_state[key], value, rtol=0, atol=0.02 * moved)


def test_a_compiled_static_run_trains_as_eager_and_scores_outside_the_graph(no_dropout_bert, tokenizer, sentences):
    eager, _, _, _, _ = run(no_dropout_bert, tokenizer, sentences, static_shapes=True)
    compiled, model, lengths, compiled_in_training, scorer = run(no_dropout_bert, tokenizer, sentences,
                                                                 static_shapes=True, compile=True)
    assert all(compiled_in_training) and len(compiled_in_training) == 4
    assert scorer.compiled_while_scoring == [False, False, False]  # steps 0, 2, 4: the class's own forward
    torch.testing.assert_close(losses(compiled), losses(eager), rtol=1e-4, atol=1e-5)
    # after training: the class's forward and the CPU shortcuts as they were
    assert "forward" not in model.encoder.__dict__
    assert model.uniform_dropout and model.real_tokens_only


def test_pad_batch_to_a_fixed_length():
    batch = pad_batch([[5, 6], [7]], pad_token_id=0, length=4)
    assert batch["input_ids"].tolist() == [[5, 6, 0, 0], [7, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]
    with pytest.raises(ValueError, match="3 tokens does not fit the padded length 2"):
        pad_batch([[1, 2, 3]], pad_token_id=0, length=2)


@pytest.mark.parametrize("settings, message", [
    ({"compile": True, "compile_mode": "fastest"}, "unknown compile_mode 'fastest'"),
    ({"compile_mode": "max-autotune-no-cudagraphs"}, "read only with compile: true"),
    ({"compile": True, "compile_mode": "reduce-overhead"}, "need one input shape: set static_shapes: true"),
    ({"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True, "mini_batch_size": 8},
     "gradient caching runs the encoder several times"),
])
def test_settings_that_cannot_work_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig.from_params({"batch_size": 16, **settings})


def test_cuda_graphs_with_static_shapes_parse():
    config = TrainingConfig.from_params({"compile": True, "compile_mode": "reduce-overhead", "static_shapes": True})
    assert config.compile_mode == "reduce-overhead"


def test_a_method_that_builds_its_own_batches_refuses_static_shapes():
    block = yaml.safe_load((ROOT / "conf" / "base" / "parameters_declutr.yml").read_text(encoding="utf-8"))["declutr"]
    block["training"]["seed"] = 42  # null in the file: the shared seed, filled in before a node parses it
    MethodBlock.from_params(block, "declutr")  # the block as shipped parses
    block["training"]["static_shapes"] = True
    with pytest.raises(ParameterError, match=r"declutr\.training\.static_shapes pads sentence batches") as error:
        MethodBlock.from_params(block, "declutr")
    assert error.value.key == "declutr.training.static_shapes"


class FailingScorer(DevScorer):
    """Scores step 0, then fails at the next evaluation (as a dev set that cannot be read would)."""

    def __call__(self, encode):
        if self.compiled_while_scoring:
            raise OSError("dev set unreadable")
        return super().__call__(encode)


def test_a_compiled_run_that_fails_leaves_the_model_as_it_was(no_dropout_bert, tokenizer, sentences):
    """The compiled forward and the CPU shortcuts' switch-off last only while training:
    a run that raises leaves the class's own forward and the shortcuts on, so the caller
    can still score or save the model."""
    model = ContrastiveModel(copy.deepcopy(no_dropout_bert), "cls_before_pooler", build_method("simcse"))
    compiled_in_training = []
    model.encoder.register_forward_pre_hook(
        lambda module, args: compiled_in_training.append("forward" in module.__dict__) if module.training else None)
    config = TrainingConfig(batch_size=16, learning_rate=1e-3, device="cpu", log_every=1, max_length=MAX_LENGTH,
                            eval_every=2, max_steps=4, static_shapes=True, compile=True)
    with pytest.raises(OSError, match="dev set unreadable"):
        train(model, tokenizer, tokenize_sentences(tokenizer, sentences, MAX_LENGTH), config,
              dev_scorer=FailingScorer(model.encoder))
    assert compiled_in_training == [True, True]  # two compiled steps ran before the failing evaluation
    assert "forward" not in model.encoder.__dict__
    assert model.uniform_dropout and model.real_tokens_only
