"""Gradient caching (training/gradient_cache.py, ``training.mini_batch_size``): for every
preset, the gradients of every parameter equal the whole-batch gradients (fp32 CPU,
dropout on, relative error 1e-6), the logged terms are the plain forward's, and a bad
setting is a clear error.

With dropout on, a mini-batch draws other masks than one pass over the whole batch
(the masks depend on the shapes drawn for), so the reference there is the whole-batch
loss built from the same mini-batch forward passes with their graphs kept (what
gradient caching must reproduce without keeping them); with dropout off, or a single
mini-batch, the reference is the plain forward itself (``model(**batch)``)."""

from __future__ import annotations

import copy

import pytest
import torch

from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.training.clsr import CLSRModel
from contrastive_sentence_embeddings.training.dropout import dropout_rate
from contrastive_sentence_embeddings.training.gradient_cache import GradientCache, row_ranges, split_batch
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method
from contrastive_sentence_embeddings.training.objective import Encoded, total_loss
from contrastive_sentence_embeddings.training.trainer import TrainingConfig, tokenize_sentences, train
from tests.training.test_declutr import documents, make_collate, span_table  # noqa: F401 - fixtures

SENTENCES = [
    "the cat sat on the mat", "a dog barked at the mailman", "stock markets fell sharply today",
    "she plays the violin beautifully", "rain is expected over the weekend", "the committee approved the budget",
    "a short one", "the train to the city was late again this morning",
]
RTOL = 1e-6
# Mini-batches against the plain forward (dropout off): the encoder then sees other
# shapes (fewer rows, padding cut to a mini-batch's longest row), whose float32 sums
# round differently: seen up to 1.4e-5 of the global norm (through InfoNCE's 1 / 0.05 and
# SCD's weight 20), and more on a single tensor whose gradient is a near-cancelling sum
# over every token (the token-type embedding). So only the global norm is compared here;
# the exactness of the cache itself is the per-tensor 1e-6 of the tests above.
RTOL_RESHAPED = 1e-4
# With dropout off SimCSE's two views are equal and the gradient is a small remainder of
# large opposite contributions (global norm ~5e-3 on the tiny BERT): there the round-off
# of the sums, not the cache, sets the floor, and it differs between CPUs' kernels (seen:
# 6.7e-6 on a Xeon with AMX, 4.0e-4 on an AMD EPYC). The floor is measured on the machine
# running the test, as the difference between two plain steps that are equal in exact
# arithmetic: the same batch with its rows in reverse order (every loss here is a mean over
# rows, equivariant to their order). A splitting or reassembly fault is an O(1) error.
FLOOR_FACTOR = 10
# A small projector for SCD; DeCLUTR with several length buckets and MLM on.
PRESETS = {"simcse": {}, "imsimcse": {}, "scd": {"projector_widths": [24, 16]},
           "declutr": {"bucket_tokens": 300, "mlm": True}, "clsr": {"hidden_width": 20}}
# Batch sizes in the collate's unit (sentences, documents, pairs) and the mini-batch size.
BATCH = {"simcse": (8, 2), "imsimcse": (8, 2), "scd": (8, 4), "declutr": (4, 2), "clsr": (8, 2)}


@pytest.fixture
def make(tokenizer, tiny_bert, tiny_bert_dir, documents, span_table):  # noqa: F811 - fixtures
    """``make(kind, **params) -> (model, batch)``: a fresh model (same seed every time)
    and a fixed batch of its family, dropout on (the tiny BERT's 0.1)."""
    def build(kind: str, **params):
        method = build_method(kind, {**PRESETS[kind], **params})
        torch.manual_seed(0)
        if kind == "clsr":
            model = CLSRModel(16, method, frozen=lambda s: None)
            generator = torch.Generator().manual_seed(3)
            batch = {"first": torch.randn(8, 16, generator=generator), "second": torch.randn(8, 16, generator=generator)}
            return model, batch
        encoder = copy.deepcopy(tiny_bert)
        model = ContrastiveModel(encoder, "mean" if kind == "declutr" else "cls_before_pooler", method,
                                 method.pretrained_heads(str(tiny_bert_dir), encoder))
        model.train()
        if kind == "declutr":
            batch = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=300)(
                documents["doc_id"].tolist()[:4])
        else:
            batch = pad_batch(tokenizer(SENTENCES)["input_ids"], tokenizer.pad_token_id)
        return model, batch

    return build


def gradients(model) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def assert_same_gradients(got: dict, want: dict, rtol: float = RTOL, each: bool = True) -> None:
    """The global difference within ``rtol`` of the global norm and, when ``each``,
    every parameter's gradient within ``rtol`` of the reference (relative to its own
    norm, or to a thousandth of the global norm for a near-zero one)."""
    assert got.keys() == want.keys() and want
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in want.values()))
    difference = torch.sqrt(sum(((got[n].double() - g.double()) ** 2).sum() for n, g in want.items()))
    assert total > 0 and difference <= rtol * total, (float(difference), float(total))
    for name, g in want.items() if each else ():
        error = torch.linalg.vector_norm(got[name].double() - g.double())
        assert error <= rtol * max(torch.linalg.vector_norm(g.double()), 1e-3 * total), (name, float(error))


def cached_step(model, batch, batch_size, mini_batch_size, seed=1):
    torch.manual_seed(seed)
    logs = GradientCache(model, batch_size, mini_batch_size).step(batch)
    return logs, gradients(model)


def plain_step(model, batch, seed=1):
    torch.manual_seed(seed)
    logs = model(**batch)
    logs["loss"].backward()
    return {k: v.detach() for k, v in logs.items()}, gradients(model)


def kept_graph_step(model, batch, chunks, seed=1):
    """The whole-batch loss of the same mini-batch forward passes (same masks: same seed,
    same order) with every graph kept, back-propagated once: the reference."""
    method = model.method
    torch.manual_seed(seed)
    pieces = [method.encode(model, **piece) for piece in split_batch(batch, method.family, chunks)]
    whole = Encoded()
    whole.tensors = {name: torch.cat([p.tensors[name] for p in pieces]) for name in pieces[0].tensors}
    if pieces[0].joint is not None:
        whole.joint = torch.cat([whole.tensors["a"], whole.tensors["b"]])
    for name in pieces[0].readers:
        summed = copy.copy(pieces[0].readers[name])
        summed.total = sum(p.readers[name].total for p in pieces)
        summed.count = sum(p.readers[name].count for p in pieces)
        whole.readers[name] = summed
    logs = total_loss(method.terms, model, whole)
    logs["loss"].backward()
    return {k: v.detach() for k, v in logs.items()}, gradients(model)


@pytest.mark.parametrize("kind", list(PRESETS))
def test_cached_gradients_equal_the_whole_batch_gradients_with_dropout_on(make, kind):
    batch_size, mini = BATCH[kind]
    model, batch = make(kind)
    want_logs, want = kept_graph_step(model, batch, batch_size // mini)
    logs, got = cached_step(model, batch, batch_size, mini)
    assert_same_gradients(got, want)
    assert list(logs) == list(want_logs)
    for key in logs:
        torch.testing.assert_close(logs[key], want_logs[key], rtol=RTOL, atol=0)
    if kind == "declutr":  # the MLM term reached the encoder: its share was added per mini-batch
        assert logs["mlm"] > 0
        model_without_mlm, _ = make(kind, mlm=False)
        _, without = cached_step(model_without_mlm, batch, batch_size, mini)
        word_embeddings = "encoder.embeddings.word_embeddings.weight"
        assert not torch.allclose(without[word_embeddings], got[word_embeddings], rtol=1e-3)


@pytest.mark.parametrize("kind", list(PRESETS))
def test_one_mini_batch_is_the_plain_forward_with_dropout_on(make, kind):
    """mini_batch_size = batch_size: the replayed masks are the plain forward's own."""
    batch_size, _ = BATCH[kind]
    model, batch = make(kind)
    want_logs, want = plain_step(model, batch)
    logs, got = cached_step(model, batch, batch_size, batch_size)
    assert_same_gradients(got, want)
    for key in want_logs:
        torch.testing.assert_close(logs[key], want_logs[key], rtol=RTOL, atol=0)


@pytest.mark.parametrize("kind", list(PRESETS))
def test_mini_batches_without_dropout_are_the_plain_forward(make, kind):
    """Dropout off: a step in mini-batches is the plain forward's step, logs included
    (the splitting, trimming of padding and reassembly change nothing)."""
    batch_size, mini = BATCH[kind]
    model, batch = make(kind, **({"rate_a": 0.0, "rate_b": 0.0} if kind == "scd" else {}))
    with dropout_rate(model, 0.0):
        want_logs, want = plain_step(model, batch)
        logs, got = cached_step(model, batch, batch_size, mini, seed=7)
        floor = round_off_floor(model, batch, want)
    assert_same_gradients(got, want, max(RTOL_RESHAPED, FLOOR_FACTOR * floor), each=False)
    assert list(logs) == list(want_logs)
    for key in want_logs:
        torch.testing.assert_close(logs[key], want_logs[key], rtol=RTOL_RESHAPED, atol=0)


def round_off_floor(model, batch, want: dict) -> float:
    """The relative difference (global norm) between ``want``, the plain step's gradients,
    and the plain step's on the batch with its rows reversed: this machine's round-off for
    a change of summation order. 0 for a batch that is not rows of sentences."""
    if "input_ids" not in batch:
        return 0.0
    rows = batch["input_ids"].shape[0]
    reversed_batch = {key: value.flip(0) if torch.is_tensor(value) and value.dim() and value.shape[0] == rows else value
                      for key, value in batch.items()}
    _, flipped = plain_step(model, reversed_batch)
    total = torch.sqrt(sum((g.double() ** 2).sum() for g in want.values()))
    return float(torch.sqrt(sum(((flipped[n].double() - g.double()) ** 2).sum() for n, g in want.items())) / total)


def test_the_round_off_floor_is_a_change_of_order_only(make):
    """The floor's reversed batch is the same step in exact arithmetic: its loss equals the
    plain step's to float32 round-off, and a batch whose rows were not all kept is not."""
    model, batch = make("simcse")
    with dropout_rate(model, 0.0):
        want_logs, want = plain_step(model, batch)
        floor = round_off_floor(model, batch, want)
        reversed_logs, _ = plain_step(model, {key: value.flip(0) for key, value in batch.items()})
        fewer_logs, _ = plain_step(model, {key: value[:-1] for key, value in batch.items()})
    torch.testing.assert_close(reversed_logs["loss"], want_logs["loss"], rtol=1e-5, atol=0)
    assert not torch.isclose(fewer_logs["loss"], want_logs["loss"], rtol=1e-3)
    assert 0 <= floor < 0.1


def test_replay_is_needed_and_the_random_state_goes_on_as_after_one_pass(make):
    """Without the recorded state, the second pass would draw new masks: the gradients
    would differ by far more than round-off. After the step the generator is where the
    first pass left it."""
    model, batch = make("simcse")
    _, want = kept_graph_step(model, batch, 4)
    torch.manual_seed(1)
    GradientCache(model, 8, 2).step(batch)
    after = torch.get_rng_state()
    got = gradients(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for piece in split_batch(batch, "sentences", 4):
            model.method.encode(model, **piece)
    assert torch.equal(after, torch.get_rng_state())
    # The same step whose second pass does not restore the state (a broken replay):
    import contrastive_sentence_embeddings.training.gradient_cache as module

    original = module.restore_random_state
    module.restore_random_state = lambda state, device: None
    try:
        torch.manual_seed(1)
        GradientCache(model, 8, 2).step(batch)
    finally:
        module.restore_random_state = original
    broken = gradients(model)
    assert_same_gradients(got, want)
    with pytest.raises(AssertionError):
        assert_same_gradients(broken, want)


def test_split_documents_keeps_each_anchor_with_its_positives(make):
    model, batch = make("declutr")
    pieces = split_batch(batch, "documents", 2)
    anchors = sum(len(b["rows"]) for b in batch["anchors"])
    positives = sum(len(b["rows"]) for b in batch["positives"])
    assert [sum(len(b["rows"]) for b in p["anchors"]) for p in pieces] == [anchors // 2] * 2

    def rows_in_order(buckets, key="input_ids"):
        total = sum(len(b["rows"]) for b in buckets)
        out = [None] * total
        for bucket in buckets:
            for row, index in enumerate(bucket["rows"].tolist()):
                out[index] = bucket[key][row][bucket["attention_mask"][row].bool()].tolist()
        return out

    assert sum((rows_in_order(p["anchors"]) for p in pieces), []) == rows_in_order(batch["anchors"])
    assert sum((rows_in_order(p["positives"]) for p in pieces), []) == rows_in_order(batch["positives"])
    assert sum((rows_in_order(p["anchors"], "mlm_labels") for p in pieces), []) == \
        rows_in_order(batch["anchors"], "mlm_labels")
    assert sum(sum(len(b["rows"]) for b in p["positives"]) for p in pieces) == positives
    # each cut bucket's masked positions index its own (trimmed) tokens
    for bucket in (b for p in pieces for b in p["anchors"]):
        labels = bucket["mlm_labels"].flatten().tolist()
        assert bucket["mlm_positions"].tolist() == [i for i, label in enumerate(labels) if label != -100]


@pytest.mark.parametrize(("rows", "chunks"), [(64, 4), (10, 3), (3, 5), (1, 1), (0, 2)])
def test_row_ranges_are_tensor_splits_bounds_as_plain_integers(rows, chunks):
    expected = [(int(i[0]), int(i[-1]) + 1) for i in torch.tensor_split(torch.arange(rows), chunks) if len(i)]
    assert row_ranges(rows, chunks) == expected


@pytest.mark.parametrize(("training", "message"), [
    ({"batch_size": 64, "mini_batch_size": 48},
     "simcse.training.mini_batch_size must be a divisor of batch_size (64), got 48"),
    ({"batch_size": 64, "mini_batch_size": 0}, "simcse.training.mini_batch_size"),
    ({"batch_size": 64, "mini_batch_size": True}, "simcse.training.mini_batch_size"),
    ({"batch_size": 64, "mini_batch_size": "16"}, "simcse.training.mini_batch_size"),
])
def test_a_bad_mini_batch_size_is_a_one_line_error_naming_the_key(training, message):
    with pytest.raises(ParameterError) as error:
        MethodBlock.from_params({"kind": "simcse", "pooling": "cls", "training": training}, "simcse")
    assert str(error.value).startswith(message) and len(str(error.value).splitlines()) == 1


def test_the_setting_parses_and_null_is_off():
    assert TrainingConfig.from_params({"batch_size": 64, "mini_batch_size": 16}).mini_batch_size == 16
    assert TrainingConfig.from_params({}).mini_batch_size is None


def test_the_trainer_logs_and_trains_the_same_with_mini_batches(tokenizer, tiny_bert):
    """The real loop, dropout off: three steps in mini-batches of 2 give the curve and
    the weights of three plain steps (SGD: AdamW would turn the round-off of a
    near-zero gradient entry into a full-size step of either sign)."""
    ids = tokenize_sentences(tokenizer, SENTENCES * 3, 32)
    results = {}
    for mini in (None, 2):
        torch.manual_seed(0)
        encoder = copy.deepcopy(tiny_bert)
        model = ContrastiveModel(encoder, "cls_before_pooler", build_method("simcse"))
        config = TrainingConfig(batch_size=8, mini_batch_size=mini, max_steps=3, learning_rate=0.5, eval_every=0,
                                log_every=1, device="cpu", optimizer="sgd")
        with dropout_rate(encoder, 0.0):
            results[mini] = train(model, tokenizer, ids, config)
    plain, cached = results[None], results[2]
    assert cached.steps == plain.steps == 3
    for column in ("loss", "info_nce"):
        torch.testing.assert_close(torch.tensor(cached.curve[column].to_numpy()),
                                   torch.tensor(plain.curve[column].to_numpy()), rtol=1e-5, atol=0)
    assert plain.curve["loss"].iloc[-1] < plain.curve["loss"].iloc[0]  # the steps did train
    # What the steps changed, the same up to the round-off of the reshaped forward passes,
    # carried through three steps at a large learning rate (seen: 2.2e-4 of the change).
    start = tiny_bert.state_dict()
    moved = {name: value - start[name] for name, value in plain.best_state.items() if value.is_floating_point()}
    total = torch.sqrt(sum((d.double() ** 2).sum() for d in moved.values()))
    difference = torch.sqrt(sum(((cached.best_state[n] - start[n] - d).double() ** 2).sum() for n, d in moved.items()))
    assert total > 0 and difference <= 10 * RTOL_RESHAPED * total, (float(difference), float(total))
    assert cached.extra["config"]["mini_batch_size"] == 2


def test_a_loader_worker_cutting_mini_batches_trains_as_the_loop_alone_does(tokenizer, tiny_bert):
    """``loader_workers`` is a speed setting: with the batch built and cut into its
    mini-batches in a worker process, SimCSE (dropout on) trains to the same losses, to
    the last bit, as with everything in the training process, across an epoch's end."""
    ids = tokenize_sentences(tokenizer, SENTENCES * 3, 32)
    curves = {}
    for workers in (0, 1):
        torch.manual_seed(0)
        model = ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler", build_method("simcse"))
        config = TrainingConfig(batch_size=8, mini_batch_size=4, epochs=2, max_steps=len(ids) // 8 + 1, eval_every=0,
                                log_every=1, device="cpu", loader_workers=workers)
        curves[workers] = train(model, tokenizer, ids, config).curve
    assert len(curves[0]) == len(ids) // 8 + 1  # into the second epoch
    assert curves[1]["loss"].tolist() == curves[0]["loss"].tolist()


def test_the_trainer_cuts_mini_batches_as_it_builds_batches_and_a_step_reads_nothing_back(
        tokenizer, tiny_bert, tiny_bert_dir, documents, span_table):  # noqa: F811 - fixtures
    """DeCLUTR in mini-batches through the real loop, along the GPU's path (no CPU
    shortcuts): the loader hands the step its batch already cut (on the host, where
    cutting length buckets reads no device tensor), so neither the cutting nor the
    MLM term makes the host wait for the device during training."""
    from contrastive_sentence_embeddings.training.gradient_cache import MINI_BATCHES
    from contrastive_sentence_embeddings.training.host_reads import HostReads

    method = build_method("declutr", PRESETS["declutr"])
    encoder = copy.deepcopy(tiny_bert)
    torch.manual_seed(0)
    model = ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder),
                             real_tokens_only=False, uniform_dropout=False)
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=300)
    seen = []
    step = GradientCache.step

    def recording(self, batch, loss_scale=1.0):
        seen.append(sorted(batch))
        return step(self, batch, loss_scale)

    config = TrainingConfig(batch_size=4, mini_batch_size=2, max_steps=2, eval_every=0, device="cpu",
                            learning_rate=1e-4)
    patch = pytest.MonkeyPatch()
    patch.setattr(GradientCache, "step", recording)
    try:
        with HostReads() as reads:
            result = train(model, tokenizer, documents["doc_id"].tolist(), config, collate=collate)
    finally:
        patch.undo()
    assert result.steps == 2 and seen == [[MINI_BATCHES]] * 2
    stepping = [row for row in reads.table() if any(f"training/{name}.py" in row["site"].split(" <- ")[0]
                                                    for name in ("gradient_cache", "objective", "declutr"))]
    assert stepping == []


@pytest.mark.integration
def test_gradient_caching_under_two_processes_is_the_plain_fan_out(tiny_bert, tokenizer, documents, span_table,  # noqa: F811
                                                                    mirror_dir, tmp_path):
    """Two real CPU processes (torchrun, gloo, accelerate's DDP), dropout off: SimCSE
    (the loss on embeddings gathered from both processes), SCD (a per-process loss on
    the process's batch statistics) and DeCLUTR with MLM (gathered NT-Xent plus a
    per-process token term) train three steps in mini-batches and on whole batches;
    the mini-batch runs end where the whole-batch runs end, with the same curve, and
    both processes hold the same weights (the cache's gradients averaged after the
    step as DDP averages the plain ones)."""
    import math
    from pathlib import Path

    from tests.training.torchrun import run_two_processes, write_worker_data

    encoder_dir = tmp_path / "encoder"
    encoder = copy.deepcopy(tiny_bert)
    encoder.config.hidden_dropout_prob = encoder.config.attention_probs_dropout_prob = 0.0
    encoder.save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    data = write_worker_data(tmp_path, mirror_dir, documents, span_table)
    out = tmp_path / "out"
    ranks = run_two_processes(Path(__file__).with_name("gradient_cache_worker.py"), encoder_dir, data, out=out,
                              port=29523, timeout=600)
    start = encoder.state_dict()
    for method in ("simcse", "scd", "declutr"):
        whole, mini = ranks[0][f"{method}_whole"], ranks[0][f"{method}_mini"]
        assert whole["processes"] == mini["processes"] == 2 and whole["steps"] == mini["steps"] == 3, method
        assert whole["mini_batch_size"] is None and mini["mini_batch_size"] is not None
        assert all(math.isfinite(x) for x in whole["loss"])
        torch.testing.assert_close(torch.tensor(mini["loss"]), torch.tensor(whole["loss"]), rtol=1e-5, atol=0,
                                   msg=lambda m, method=method: f"{method} curve: {m}")
        weights = {(label, r): torch.load(out / f"{method}_{label}_rank{r}.pt") for label in ("whole", "mini")
                   for r in range(2)}
        for label in ("whole", "mini"):  # the processes stayed in step
            for name, value in weights[(label, 0)].items():
                assert torch.equal(value, weights[(label, 1)][name]), (method, label, name)
        # What the steps changed, the same up to the round-off of the reshaped passes
        # (as in the one-process test above).
        moved = {name: value - start[name] for name, value in weights[("whole", 0)].items()
                 if value.is_floating_point()}
        total = torch.sqrt(sum((d.double() ** 2).sum() for d in moved.values()))
        difference = torch.sqrt(sum(((weights[("mini", 0)][n] - start[n] - d).double() ** 2).sum()
                                    for n, d in moved.items()))
        assert total > 0 and difference <= 10 * RTOL_RESHAPED * total, (method, float(difference), float(total))
