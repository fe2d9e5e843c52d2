"""What DeCLUTR's memory savings must not change: the MLM loss computed on the masked
positions only is the cross-entropy of the full vocabulary logits over those positions
(value and gradients), and activation checkpointing (``training.gradient_checkpointing``)
gives the gradients and weights of a run without it, dropout on. The memory itself is
measured by benchmarks/declutr_memory.py, not here."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from contrastive_sentence_embeddings.training.declutr import IGNORE_INDEX
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.objective import Encoded
from contrastive_sentence_embeddings.training.trainer import (
    TrainingConfig, enable_gradient_checkpointing, run_fingerprint, train,
)


def declutr_model(tiny_bert, tiny_bert_dir) -> ContrastiveModel:
    encoder = copy.deepcopy(tiny_bert)
    torch.manual_seed(0)
    method = build_method("declutr")
    return ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder))


def bucket(lengths: list[int], rows: list[int], generator: torch.Generator, masked_share: float | None) -> dict:
    """A padded bucket of random ordinary token ids; with ``masked_share``, MLM labels on
    that share of the real tokens (never on padding)."""
    longest = max(lengths)
    ids = torch.randint(1000, 30000, (len(lengths), longest), generator=generator)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    ids[mask == 0] = 0
    out = {"input_ids": ids, "attention_mask": mask, "rows": torch.as_tensor(rows)}
    if masked_share is not None:
        chosen = (torch.rand(ids.shape, generator=generator) < masked_share) & mask.bool()
        chosen[0, 1] = True  # every bucket has a masked token
        out["mlm_labels"] = torch.where(chosen, torch.randint(1000, 30000, ids.shape, generator=generator),
                                        torch.full_like(ids, IGNORE_INDEX))
    return out


def spans_batch(seed: int = 0) -> dict:
    """Three anchors in two buckets of different lengths and masked counts, two positives each."""
    generator = torch.Generator().manual_seed(seed)
    return {"anchors": [bucket([7, 12], [2, 0], generator, 0.3), bucket([30], [1], generator, 0.15)],
            "positives": [bucket([5, 9, 6], [0, 3, 5], generator, None), bucket([20, 18, 25], [1, 2, 4], generator,
                                                                              None)]}


def full_logits_cross_entropy(model: ContrastiveModel, batch: dict) -> torch.Tensor:
    """Computed here, not by the library: the head on every anchor position, log-softmax
    over the vocabulary, minus the mean log-probability of the label over every masked
    token of the batch."""
    log_likelihood, masked = 0.0, 0
    for anchors in batch["anchors"]:
        hidden = model.encoder(input_ids=anchors["input_ids"], attention_mask=anchors["attention_mask"]
                               ).last_hidden_state
        log_probs = torch.log_softmax(model.heads["mlm"](hidden), dim=-1)  # [rows, length, vocabulary]
        for row, position in (anchors["mlm_labels"] != IGNORE_INDEX).nonzero().tolist():
            log_likelihood = log_likelihood + log_probs[row, position, anchors["mlm_labels"][row, position]]
            masked += 1
    return -log_likelihood / masked


def mlm_term_with_graph(model: ContrastiveModel, batch: dict) -> torch.Tensor:
    """The library's ``mlm`` term alone, not detached (the model's logs are): the spans
    view with the term's reader, as ``ComposedMethod.loss`` wires them."""
    term = model.method.term("mlm")
    encoded = Encoded()
    encoded.readers[term.name] = reader = term.reader(batch)
    encoded.anchor_token_readers.append(reader)
    model.method.pair_view.encode(model, batch, encoded)
    return term.value(model, encoded)


def assert_close_to_scale(actual: dict, expected: dict, rel: float = 1e-5) -> None:
    """Each tensor within ``rel`` of its own largest magnitude: sums taken in another
    order (all positions' logits, or a recomputed layer) differ in the last bits. The
    floor is for gradients that are zero but for rounding (attention's key bias)."""
    assert actual.keys() == expected.keys()
    for name, reference in expected.items():
        torch.testing.assert_close(actual[name], reference, rtol=rel, atol=rel * float(reference.abs().max()) + 1e-10,
                                   msg=lambda message, name=name: f"{name}: {message}")


def gradients(model: nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def test_the_mlm_loss_on_masked_positions_is_the_full_logits_cross_entropy(tiny_bert, tiny_bert_dir):
    model = declutr_model(tiny_bert, tiny_bert_dir).eval()  # dropout off: both computations see one network
    batch = spans_batch()
    expected = full_logits_cross_entropy(model, batch)
    assert float(model(**batch)["mlm"]) == pytest.approx(float(expected.detach()), rel=1e-6)
    library = mlm_term_with_graph(model, batch)
    assert float(library.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    ours, reference = gradients(model, library), gradients(model, expected)
    assert ours.keys() == reference.keys() and "heads.mlm.predictions.transform.dense.weight" in ours
    assert_close_to_scale(ours, reference)


def count_layer_calls(encoder: nn.Module) -> list[int]:
    """How many times the inside of the encoder's first layer runs (its feed-forward
    block): twice per pass under checkpointing, once in the pass and once recomputed.
    (A hook on the layer itself would not tell: transformers checkpoints the layer's
    ``forward``, inside its hooks.)"""
    calls = [0]
    encoder.encoder.layer[0].intermediate.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_gradient_checkpointing_recomputes_with_the_same_dropout_and_gives_the_same_gradients(tiny_bert,
                                                                                              tiny_bert_dir):
    plain = declutr_model(tiny_bert, tiny_bert_dir).train()
    # Checkpointed layers keep torch's own dropout (training/cpu_dropout.py stands aside):
    # the plain pass must draw its masks the same way to be comparable.
    plain.uniform_dropout = False
    checkpointed = copy.deepcopy(plain)
    enable_gradient_checkpointing(checkpointed.encoder)
    plain_calls, checkpointed_calls = count_layer_calls(plain.encoder), count_layer_calls(checkpointed.encoder)
    batch = spans_batch(seed=1)
    torch.manual_seed(7)
    plain_grads = gradients(plain, plain(**batch)["loss"])
    torch.manual_seed(7)
    checkpointed_grads = gradients(checkpointed, checkpointed(**batch)["loss"])
    assert checkpointed_calls[0] == 2 * plain_calls[0] == 8  # 4 buckets, each recomputed in the backward pass
    assert_close_to_scale(checkpointed_grads, plain_grads)
    torch.manual_seed(8)  # another dropout draw: the equality above is not an accident of dropout
    other = gradients(plain, plain(**batch)["loss"])
    assert not torch.allclose(other["encoder.embeddings.word_embeddings.weight"],
                              plain_grads["encoder.embeddings.word_embeddings.weight"])


@pytest.mark.parametrize("mini_batch_size", [None, 2])  # alone, and under gradient caching's replayed passes
def test_the_trainer_checkpoints_when_asked_and_trains_the_same_weights(tiny_bert, tokenizer, mini_batch_size):
    sentences = [f"sentence number {i} is about {'cats' if i % 2 else 'dogs'} and more" for i in range(8)]
    ids = tokenizer(sentences)["input_ids"]
    trained, calls = {}, {}
    for checkpointing in (False, True):
        encoder = copy.deepcopy(tiny_bert)
        calls[checkpointing] = count_layer_calls(encoder)
        torch.manual_seed(0)  # the same MLP head in both runs
        # torch's own dropout in both: checkpointed layers keep it (training/cpu_dropout.py).
        model = ContrastiveModel(encoder, "cls", build_method("simcse"), uniform_dropout=False)
        config = TrainingConfig(batch_size=4, max_steps=2, eval_every=0, device="cpu", learning_rate=1e-3,
                                gradient_checkpointing=checkpointing, seed=3, mini_batch_size=mini_batch_size)
        trained[checkpointing] = train(model, tokenizer, ids, config).best_state
    # Without caching: one pass a step, recomputed once. With it: a no-graph pass (never
    # recomputed) and a replayed pass with a graph for each of 2 mini-batches a step.
    assert calls[True][0] - calls[False][0] == (2 if mini_batch_size is None else 4)
    assert_close_to_scale(trained[True], trained[False])


def test_gradient_checkpointing_of_a_network_that_cannot_is_refused_by_name():
    with pytest.raises(ValueError, match=r"training.gradient_checkpointing: the trained Sequential does not support"):
        enable_gradient_checkpointing(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))


def test_a_run_resumes_across_turning_gradient_checkpointing_on(tiny_bert):
    """It changes memory, not the arithmetic: a run that ran out of memory may resume
    from its checkpoint with it on (the checkpoint fingerprint ignores it)."""
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls", build_method("simcse"))
    fingerprints = {run_fingerprint(TrainingConfig(gradient_checkpointing=on), "data", model) for on in (False, True)}
    assert len(fingerprints) == 1
    assert run_fingerprint(TrainingConfig(max_grad_norm=2.0), "data", model) not in fingerprints
