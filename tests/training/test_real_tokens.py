"""Training passes on real tokens only (training/real_tokens.py): the linear layers
see fewer rows, and the loss and every gradient are the padded computation's (same
dropout masks) up to float rounding, for each sentence method and each pooling that
reads token states."""

import copy

import pytest
import torch
from torch import nn

from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.training.methods import METHODS, ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.real_tokens import handles_padding, linears_on_real_tokens

# Lengths from 3 to 12 tokens: most positions of the padded batch are padding.
SENTENCES = [
    "the cat sat", "a dog barked at the mailman across the quiet street", "markets fell",
    "she plays the violin beautifully every evening", "rain", "the committee approved the budget",
]


@pytest.fixture
def batch(tokenizer):
    return pad_batch(tokenizer(SENTENCES)["input_ids"], tokenizer.pad_token_id)


def loss_and_gradients(tiny_bert, method, pooling, batch, real_tokens_only):
    torch.manual_seed(0)
    params = {"projector_widths": [32, 32]} if method == "scd" else {}
    model = ContrastiveModel(copy.deepcopy(tiny_bert), pooling, build_method(method, params),
                             real_tokens_only=real_tokens_only)
    model.train()
    torch.manual_seed(1)  # the same dropout masks in both runs
    loss = model(**batch)["loss"]
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("method", sorted(name for name, recipe in METHODS.items() if recipe.family == "sentences"))
@pytest.mark.parametrize("pooling", ["mean", "cls_before_pooler", "first_last_avg"])
def test_loss_and_gradients_are_the_padded_ones(tiny_bert, batch, method, pooling):
    assert not bool(batch["attention_mask"].all())  # the batch has padding to skip
    padded_loss, padded_grads = loss_and_gradients(tiny_bert, method, pooling, batch, real_tokens_only=False)
    loss, grads = loss_and_gradients(tiny_bert, method, pooling, batch, real_tokens_only=True)
    torch.testing.assert_close(loss, padded_loss, rtol=1e-6, atol=1e-6)
    assert grads.keys() == padded_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, padded_grads[name], rtol=1e-5, atol=1e-6, msg=name)


def test_the_linear_layers_compute_real_tokens_only(tiny_bert, batch):
    # Registered after the real-tokens hooks (hooks run in registration order): rows as computed.
    encoder = copy.deepcopy(tiny_bert).train()
    real, positions = int(batch["attention_mask"].sum()), batch["attention_mask"].numel()
    counted = []

    def count(module, args):
        counted.append(args[0].shape[:-1].numel())

    with linears_on_real_tokens(encoder, batch["attention_mask"]):
        handles = [module.register_forward_pre_hook(count) for module in encoder.modules()
                   if isinstance(module, nn.Linear)]
        try:
            outputs = encoder(**batch)
        finally:
            for handle in handles:
                handle.remove()
    per_layer = 6  # query, key, value, attention output, intermediate, output
    token_linears = per_layer * encoder.config.num_hidden_layers
    # Every token-level layer saw the real rows; the pooler its [CLS] row per sentence.
    assert counted[:token_linears] == [real] * token_linears
    assert counted[token_linears:] == [len(SENTENCES)]
    assert real < positions
    assert outputs.last_hidden_state.shape == (*batch["attention_mask"].shape, encoder.config.hidden_size)


def test_without_padding_or_for_other_encoders_nothing_changes(tiny_bert, batch):
    full = {key: value[:, :3] for key, value in batch.items()}  # every sentence has 3 tokens or more
    assert bool(full["attention_mask"].all())
    encoder = copy.deepcopy(tiny_bert).eval()
    with torch.no_grad():
        plain = encoder(**full).last_hidden_state
        with linears_on_real_tokens(encoder, full["attention_mask"]):
            assert bool(torch.equal(encoder(**full).last_hidden_state, plain))
    assert handles_padding(encoder)
    assert not handles_padding(nn.Linear(2, 2))  # no config: not known to mix tokens by masked attention only


def test_an_encoder_with_activation_checkpointing_runs_padded(tiny_bert, batch):
    """Its layers are recomputed in the backward pass, after the hooks are gone: packing
    the original pass only would make the recomputation differ (an error in torch)."""
    from contrastive_sentence_embeddings.training.trainer import enable_gradient_checkpointing

    encoder = copy.deepcopy(tiny_bert).train()
    assert handles_padding(encoder)
    enable_gradient_checkpointing(encoder)
    assert not handles_padding(encoder)
    torch.manual_seed(3)
    with linears_on_real_tokens(encoder, batch["attention_mask"]):
        loss = encoder(**batch).last_hidden_state.pow(2).mean()
    loss.backward()  # raised torch.utils.checkpoint.CheckpointError before the guard
    assert encoder.embeddings.word_embeddings.weight.grad is not None


def test_query_key_and_value_share_one_packed_input(tiny_bert, batch):
    """One packed copy of a layer's input for its three projections: autograd keeps what
    each linear layer reads, and three packed copies outweigh the one padded input."""
    encoder = copy.deepcopy(tiny_bert).train()
    seen = {}
    attention = encoder.encoder.layer[0].attention.self
    projections = {"query": attention.query, "key": attention.key, "value": attention.value}
    with linears_on_real_tokens(encoder, batch["attention_mask"]):
        handles = [module.register_forward_pre_hook(lambda module, args, name=name: seen.__setitem__(name, args[0]))
                   for name, module in projections.items()]
        try:
            encoder(**batch)
        finally:
            for handle in handles:
                handle.remove()
    assert seen["query"].shape[0] == int(batch["attention_mask"].sum())  # packed
    assert seen["key"] is seen["query"] and seen["value"] is seen["query"]


def saved_for_backward_bytes(encoder: nn.Module, batch: dict, packed: bool) -> int:
    """The bytes autograd keeps for the backward pass of one forward, each storage once,
    the parameters' left out."""
    import contextlib

    parameters = {p.untyped_storage().data_ptr() for p in encoder.parameters()}
    kept: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        with linears_on_real_tokens(encoder, batch["attention_mask"]) if packed else contextlib.nullcontext():
            encoder(**batch)
    return sum(kept.values())


def test_packing_keeps_less_for_the_backward_pass_than_padding(tiny_bert, batch):
    """What the linear layers keep is their packed input, smaller than the padded one;
    nothing else may add copies (packing a shared input per layer, or restoring the
    padding with an operation that keeps its packed source, did)."""
    encoder = copy.deepcopy(tiny_bert).train()
    padded = saved_for_backward_bytes(encoder, batch, packed=False)
    packed = saved_for_backward_bytes(encoder, batch, packed=True)
    assert packed < padded, (packed, padded)
