"""DeCLUTR's batches and loss on real WikiText documents: spans line up with their
documents, MLM masks what BERT masks, bucketing changes nothing but the padding, and
the averaged-positive NT-Xent equals a computation by hand."""

from __future__ import annotations

import copy
import logging
import math

import pandas as pd
import pytest
import torch

from contrastive_sentence_embeddings.data import documents as docs
from contrastive_sentence_embeddings.data import wikipedia
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.data.spans import SpanConfig, sample_spans
from contrastive_sentence_embeddings.training.declutr import (
    IGNORE_INDEX,
    DeclutrCollate,
    length_buckets,
    mask_tokens,
    special_token_template,
    spans_by_document,
    training_documents,
    unbucket,
)
from contrastive_sentence_embeddings.training.methods import ContrastiveModel, build_method, load_mlm_head

SPANS = SpanConfig(num_anchors=2, num_positives=2, min_length=16, max_length=64, anchor_gap=16)


@pytest.fixture(scope="module")
def documents(mirror_dir, tokenizer) -> pd.DataFrame:
    """Eight real WikiText-2 articles, tokenised like the data_processing pipeline does."""
    raw = RawFile(mirror_dir / "longdocs" / "wikitext-2.valid.txt")
    articles = wikipedia.parse_wikitext(raw, StepReport("test"))[:8]
    table = docs.wikitext_documents(articles, "wikitext-2.valid.txt", tokenizer.unk_token)
    table["input_ids"] = docs.tokenize_documents(table["text"].tolist(), tokenizer)
    table["n_tokens"] = table["input_ids"].map(len)
    return table


@pytest.fixture(scope="module")
def span_table(documents) -> pd.DataFrame:
    return sample_spans(documents["doc_id"].tolist(), documents["n_tokens"].tolist(), SPANS, seed=3, epochs=2,
                        report=StepReport("spans")).to_pandas()


def make_collate(documents, span_table, tokenizer, **settings) -> DeclutrCollate:
    spans = spans_by_document(span_table)
    settings.setdefault("max_span_tokens", 126)
    return DeclutrCollate(training_documents(documents, spans, len(tokenizer)), spans, tokenizer, **settings)


def sequences(buckets: list[dict], key: str = "input_ids") -> list[list[int]]:
    """The batch's sequences back in document order, padding removed."""
    rows = {}
    for bucket in buckets:
        for row, index in enumerate(bucket["rows"].tolist()):
            length = int(bucket["attention_mask"][row].sum())
            rows[index] = bucket[key][row, :length].tolist()
    return [rows[i] for i in range(len(rows))]


def test_anchors_and_positives_line_up_with_their_documents(documents, span_table, tokenizer):
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=None, bucket_tokens=256)
    collate.set_epoch(1)
    doc_ids = documents["doc_id"].tolist()[:4]
    batch = collate(doc_ids)
    anchors, positives = sequences(batch["anchors"]), sequences(batch["positives"])
    assert len(anchors) == 4 * 2 and len(positives) == 4 * 2 * 2
    assert len(batch["anchors"]) > 1  # spans of 16-64 tokens with 256 padded tokens a bucket: several buckets
    tokens = dict(zip(documents["doc_id"], documents["input_ids"]))
    epoch_rows = span_table[span_table["epoch"] == 1].set_index(["doc_id", "anchor"])
    for d, doc_id in enumerate(doc_ids):
        for a in range(2):
            row = epoch_rows.loc[(doc_id, a)]
            anchor = anchors[2 * d + a]
            assert anchor[0] == tokenizer.cls_token_id and anchor[-1] == tokenizer.sep_token_id
            assert anchor[1:-1] == list(tokens[doc_id][row["anchor_start"] : row["anchor_end"]])
            for p, (start, end) in enumerate(zip(row["positive_starts"], row["positive_ends"])):
                assert positives[(2 * d + a) * 2 + p][1:-1] == list(tokens[doc_id][start:end])


def test_each_epoch_uses_its_own_spans_and_training_past_them_is_an_error(documents, span_table, tokenizer):
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=None)
    doc_ids = documents["doc_id"].tolist()[:2]
    collate.set_epoch(0)
    first = sequences(collate(doc_ids)["anchors"])
    collate.set_epoch(1)
    assert sequences(collate(doc_ids)["anchors"]) != first
    with pytest.raises(ValueError, match="raise data_processing.declutr_spans.epochs"):
        collate.set_epoch(2)


def test_the_resume_fingerprint_covers_the_spans_not_just_the_document_ids(documents, span_table, tokenizer):
    same = make_collate(documents, span_table, tokenizer).fingerprint()
    assert make_collate(documents, span_table, tokenizer).fingerprint() == same
    shifted = span_table.assign(anchor_end=span_table["anchor_end"] - 1)
    assert make_collate(documents, shifted, tokenizer).fingerprint() != same
    assert make_collate(documents, span_table, tokenizer, mlm_probability=0.3).fingerprint() != same


def test_spans_are_clipped_to_the_model_length(documents, span_table, tokenizer):
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=None, max_span_tokens=20)
    batch = collate(documents["doc_id"].tolist()[:3])
    assert max(len(s) for s in sequences(batch["anchors"]) + sequences(batch["positives"])) == 22


def test_special_token_template_is_what_the_tokenizer_adds(tokenizer):
    assert special_token_template(tokenizer) == ([tokenizer.cls_token_id], [tokenizer.sep_token_id])


def test_mask_tokens_follows_bert_15_percent_and_80_10_10():
    generator = torch.Generator().manual_seed(0)
    vocab, shape = 1000, (400, 500)  # 200,000 positions
    input_ids = torch.randint(5, vocab, shape, generator=generator)
    maskable = torch.ones(shape, dtype=torch.bool)
    maskable[:, 0] = False  # e.g. [CLS]
    masked, labels = mask_tokens(input_ids, maskable, mask_token_id=3, vocab_size=vocab, generator=generator)
    chosen = labels != IGNORE_INDEX
    assert not chosen[:, 0].any()
    assert torch.equal(labels[chosen], input_ids[chosen])  # labels are the original tokens
    assert torch.equal(masked[~chosen], input_ids[~chosen])  # nothing else changes
    n = int(maskable.sum())
    # Binomial standard deviations: sqrt(0.15 * 0.85 / n) ~ 0.0008; tolerances are ~6 sigma.
    assert abs(int(chosen.sum()) / n - 0.15) < 0.005
    k = int(chosen.sum())
    as_mask = int((masked[chosen] == 3).sum()) / k
    changed = int(((masked[chosen] != 3) & (masked[chosen] != input_ids[chosen])).sum()) / k
    kept = int((masked[chosen] == input_ids[chosen]).sum()) / k
    assert abs(as_mask - 0.8) < 0.015 and abs(changed - 0.1) < 0.012 and abs(kept - 0.1) < 0.012


def test_collate_masks_15_percent_of_anchor_tokens_never_specials_nor_positives(documents, span_table, tokenizer):
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=0.15)
    plain = make_collate(documents, span_table, tokenizer, mlm_probability=None)
    doc_ids = documents["doc_id"].tolist()
    batch, reference = collate(doc_ids), plain(doc_ids)
    labels = sequences(batch["anchors"], "mlm_labels")
    originals = sequences(reference["anchors"])
    masked = sequences(batch["anchors"])
    chosen = sum(sum(label != IGNORE_INDEX for label in row) for row in labels)
    candidates = sum(len(row) - 2 for row in originals)
    assert 0.10 < chosen / candidates < 0.20  # ~16 anchors of ~50 tokens: a loose statistical bound
    for label, original, ids in zip(labels, originals, masked):
        assert label[0] == label[-1] == IGNORE_INDEX and ids[0] == original[0] and ids[-1] == original[-1]
        assert all(l in (IGNORE_INDEX, o) for l, o in zip(label, original))
    assert sequences(batch["positives"]) == sequences(reference["positives"])
    assert "mlm_labels" not in batch["positives"][0]
    # Masks are seeded per (seed, epoch, document, anchor) and drawn before padding: the
    # same in another batch, in a bucket of another width, under another bucketing.
    shortest = min(range(len(doc_ids)), key=lambda k: max(map(len, originals[2 * k: 2 * k + 2])))
    alone = collate(doc_ids[shortest: shortest + 1])["anchors"]
    assert max(b["input_ids"].shape[1] for b in alone) < max(b["input_ids"].shape[1] for b in batch["anchors"])
    pair = slice(2 * shortest, 2 * shortest + 2)
    assert sequences(alone, "mlm_labels") == labels[pair] and sequences(alone) == masked[pair]
    rebucketed = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=200)(doc_ids)
    assert len(rebucketed["anchors"]) > len(batch["anchors"])
    assert sequences(rebucketed["anchors"]) == masked and sequences(rebucketed["anchors"], "mlm_labels") == labels


@pytest.mark.parametrize("cpu_shortcuts", [True, False], ids=["cpu-path", "gpu-path"])
def test_pad_to_multiple_of_rounds_bucket_widths_and_changes_nothing_but_padding(
        documents, span_table, tokenizer, tiny_bert, tiny_bert_dir, cpu_shortcuts):
    doc_ids = documents["doc_id"].tolist()[:6]
    settings = {"mlm_probability": 0.15, "bucket_tokens": 300}
    plain = make_collate(documents, span_table, tokenizer, **settings)(doc_ids)
    rounded = make_collate(documents, span_table, tokenizer, pad_to_multiple_of=24, **settings)(doc_ids)
    widths = [b["input_ids"].shape[1] for part in ("anchors", "positives") for b in rounded[part]]
    assert all(width % 24 == 0 for width in widths)
    assert widths != [b["input_ids"].shape[1] for part in ("anchors", "positives") for b in plain[part]]
    for part in ("anchors", "positives"):  # the budget counts the rounded width
        assert all(len(b["rows"]) == 1 or b["input_ids"].numel() <= 300 for b in rounded[part])
        assert sequences(rounded[part]) == sequences(plain[part])
    assert sequences(rounded["anchors"], "mlm_labels") == sequences(plain["anchors"], "mlm_labels")
    encoder = copy.deepcopy(tiny_bert)
    method = build_method("declutr")
    model = ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder),
                             real_tokens_only=cpu_shortcuts, uniform_dropout=cpu_shortcuts).eval()
    with torch.no_grad():
        logs_plain, logs_rounded = model(**plain), model(**rounded)
    for term in ("nt_xent", "mlm", "loss"):
        assert float(logs_rounded[term]) == pytest.approx(float(logs_plain[term]), rel=1e-5)


def test_rounded_widths_stop_at_the_longest_sequence_the_model_takes(documents, span_table, tokenizer):
    # spans clipped to 40 tokens: sequences of at most 42 with [CLS] and [SEP]; 48 would
    # be past the model's positions, so the widest buckets stay at 42
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, max_span_tokens=40,
                           pad_to_multiple_of=24)
    batch = collate(documents["doc_id"].tolist())
    widths = {b["input_ids"].shape[1] for part in ("anchors", "positives") for b in batch[part]}
    assert 42 in widths and widths <= {24, 42}


def test_pad_to_multiple_of_must_be_a_positive_integer(documents, span_table, tokenizer):
    from contrastive_sentence_embeddings.configuration.strict import ParameterValueError

    with pytest.raises(ValueError, match="pad_to_multiple_of must be a positive integer"):
        make_collate(documents, span_table, tokenizer, pad_to_multiple_of=0)
    with pytest.raises(ParameterValueError, match="pad_to_multiple_of"):
        build_method("declutr", {"pad_to_multiple_of": 0})
    assert build_method("declutr", {"pad_to_multiple_of": 8}).pad_to_multiple_of == 8


def test_length_buckets_respect_the_token_budget_and_cover_everything():
    lengths = [30, 5, 100, 7, 64, 64, 12, 300]
    buckets = length_buckets(lengths, max_tokens=128)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for bucket in buckets:
        assert len(bucket) == 1 or len(bucket) * max(lengths[i] for i in bucket) <= 128
    assert [7] in buckets  # longer than the budget: alone
    rounded = length_buckets(lengths, max_tokens=128, multiple=32)  # widths 32, 32, 128, ...: the budget counts them
    assert sorted(i for b in rounded for i in b) == list(range(len(lengths)))
    assert all(len(b) == 1 or len(b) * -(-max(lengths[i] for i in b) // 32) * 32 <= 128 for b in rounded)
    # three 33-token sequences: 99 padded tokens as they are, 3 x 64 = 192 > 128 rounded up to 32s
    assert length_buckets([33, 33, 33], 128) == [[0, 1, 2]]
    assert length_buckets([33, 33, 33], 128, multiple=32) == [[0, 1], [2]]
    assert length_buckets([33, 33, 33], 128, multiple=32, cap=40) == [[0, 1, 2]]  # widths 40: 120 tokens
    pieces = [torch.tensor([[float(i)] for i in b]) for b in buckets]
    assert unbucket(pieces, [torch.tensor(b) for b in buckets], len(lengths)).flatten().tolist() == list(range(8))


def nt_xent_by_hand(a: list[torch.Tensor], b: list[torch.Tensor], tau: float) -> float:
    both = a + b
    n = len(a)
    total = 0.0
    for k, e in enumerate(both):
        partner = (k + n) % (2 * n)
        sims = {l: float(torch.dot(e, f) / (e.norm() * f.norm())) / tau for l, f in enumerate(both) if l != k}
        total += -sims[partner] + math.log(sum(math.exp(s) for s in sims.values()))
    return total / (2 * n)


def test_averaged_positive_nt_xent_equals_a_hand_computation(documents, span_table, tokenizer, tiny_bert):
    model = ContrastiveModel(copy.deepcopy(tiny_bert), "mean", build_method("declutr", {"mlm": False}))
    model.eval()  # no dropout: embeddings of single, unpadded sequences must match
    collate = make_collate(documents, span_table, tokenizer, mlm_probability=None, bucket_tokens=200)
    batch = collate(documents["doc_id"].tolist()[:3])
    with torch.no_grad():
        logs = model(**batch)
        embed = lambda ids: model.embed(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0]  # noqa: E731
        anchors = [embed(ids) for ids in sequences(batch["anchors"])]
        positives = [embed(ids) for ids in sequences(batch["positives"])]
    averaged = [(positives[2 * i] + positives[2 * i + 1]) / 2 for i in range(len(anchors))]
    assert float(logs["nt_xent"]) == pytest.approx(nt_xent_by_hand(anchors, averaged, 0.05), rel=1e-4)
    assert float(logs["loss"]) == float(logs["nt_xent"]) and "mlm" not in logs


def test_mlm_head_is_initialised_for_an_encoder_without_one_and_tied(tiny_bert_dir, tiny_bert, caplog):
    encoder = copy.deepcopy(tiny_bert)
    with caplog.at_level(logging.WARNING):
        head = load_mlm_head(str(tiny_bert_dir), encoder)
    assert "ships no masked-LM head" in caplog.text
    assert head.predictions.decoder.weight is encoder.get_input_embeddings().weight


def test_declutr_loss_with_mlm_decreases_on_a_fixed_batch(documents, span_table, tokenizer, tiny_bert, tiny_bert_dir):
    encoder = copy.deepcopy(tiny_bert)
    torch.manual_seed(0)
    method = build_method("declutr")
    model = ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder))
    batch = make_collate(documents, span_table, tokenizer, mlm_probability=0.15)(documents["doc_id"].tolist()[:4])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    history = []
    for _ in range(10):
        torch.manual_seed(1)
        logs = model(**batch)
        optimizer.zero_grad()
        logs["loss"].backward()
        optimizer.step()
        history.append({k: float(v.detach()) for k, v in logs.items()})
    assert history[0]["mlm"] > math.log(100)  # a fresh head over a 30k vocabulary: near log(30522)
    assert history[-1]["mlm"] < history[0]["mlm"] and history[-1]["nt_xent"] < history[0]["nt_xent"]
    assert history[0]["loss"] == pytest.approx(history[0]["nt_xent"] + history[0]["mlm"], rel=1e-6)


def test_bad_span_tables_are_refused_clearly(documents, span_table, tokenizer):
    with pytest.raises(ValueError, match="declutr_spans lacks column"):
        spans_by_document(span_table.drop(columns=["positive_ends"]))
    spans = spans_by_document(span_table)
    with pytest.raises(ValueError, match="not in long_documents"):
        training_documents(documents.iloc[:2], spans, len(tokenizer))
    with pytest.raises(ValueError, match="tokenised with another encoder"):
        training_documents(documents, spans, vocab_size=1000)


@pytest.mark.integration
def test_trainer_under_ddp_keeps_processes_in_step(documents, span_table, tiny_bert_dir, mirror_dir, tmp_path):
    """The real trainer in two CPU processes (torchrun, gloo, accelerate's DDP): SimCSE
    (gathered loss), SCD (per-process loss) and DeCLUTR with MLM (gathered loss plus a
    per-process term, and unused pooler weights that plain DDP refuses) all train, and
    both processes end with identical weights that moved away from the start."""
    from pathlib import Path

    from tests.training.torchrun import run_two_processes, write_worker_data

    data = write_worker_data(tmp_path, mirror_dir, documents, span_table)
    ranks = run_two_processes(Path(__file__).with_name("ddp_worker.py"), tiny_bert_dir, data, out=tmp_path / "out",
                              port=29517)
    for method in ("simcse", "scd", "declutr"):
        first, second = ranks[0][method], ranks[1][method]
        assert first["processes"] == 2 and first["steps"] == 3
        assert first["weights"] == second["weights"], method  # DDP kept the replicas identical
        assert first["weights"] != ranks[0]["initial"], method  # and they trained
        assert all(math.isfinite(x) for x in first["loss"])


def test_memory_mapped_documents_give_the_same_batches_as_token_lists(documents, span_table, tokenizer, tmp_path):
    """The trainer's documents read from the saved Arrow data set (several shards,
    memory-mapped) make exactly the batches that Python lists of token ids make."""
    import numpy as np

    from contrastive_sentence_embeddings.pipelines.datasets import ArrowDataset

    saved = ArrowDataset(str(tmp_path / "long_documents"), max_shard_size=20_000)
    saved.save(documents[["doc_id", "source", "title", "input_ids", "n_tokens"]])
    assert len(list((tmp_path / "long_documents").glob("*.arrow"))) > 1
    spans = spans_by_document(span_table)
    mapped = training_documents(saved.load(), spans, len(tokenizer))
    as_lists = {doc_id: [int(i) for i in ids] for doc_id, ids in zip(documents["doc_id"], documents["input_ids"])}
    assert isinstance(mapped[documents["doc_id"][0]], np.ndarray)
    settings = {"max_span_tokens": 40, "mlm_probability": 0.15, "bucket_tokens": 256, "seed": 9}
    from_arrow = DeclutrCollate(mapped, spans, tokenizer, **settings)
    from_lists = DeclutrCollate(as_lists, spans, tokenizer, **settings)
    assert from_arrow.fingerprint() == from_lists.fingerprint()
    doc_ids = documents["doc_id"].tolist()
    for epoch in (0, 1):
        from_arrow.set_epoch(epoch)
        from_lists.set_epoch(epoch)
        for step in range(0, len(doc_ids), 3):
            a, b = from_arrow(doc_ids[step : step + 3]), from_lists(doc_ids[step : step + 3])
            for kind in ("anchors", "positives"):
                assert len(a[kind]) == len(b[kind])
                for x, y in zip(a[kind], b[kind]):
                    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_mlm_loss_reads_nothing_back_from_the_device(documents, span_table, tokenizer, tiny_bert, tiny_bert_dir):
    """The MLM term gathers the masked tokens by the positions the collate function
    found on the host: the step makes no host read of its own (on a GPU each would be
    a wait for the device at every anchor bucket), and the loss is the cross-entropy
    over exactly the labelled positions, as boolean indexing would select them."""
    from contrastive_sentence_embeddings.training.host_reads import HostReads

    encoder = copy.deepcopy(tiny_bert)
    method = build_method("declutr")
    model = ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder),
                             real_tokens_only=False, uniform_dropout=False).eval()
    batch = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=200)(
        documents["doc_id"].tolist()[:4])
    assert len(batch["anchors"]) > 1  # several anchor buckets, each read after its pass
    for bucket in batch["anchors"]:
        labels = bucket["mlm_labels"].flatten()
        assert bucket["mlm_positions"].tolist() == [i for i, label in enumerate(labels.tolist()) if label != IGNORE_INDEX]
    with torch.no_grad(), HostReads() as reads:
        logs = model(**batch)
    ours = [row for row in reads.table() if row["site"].startswith("contrastive_sentence_embeddings/")]
    assert ours == []
    with torch.no_grad():  # by hand: every anchor bucket's states at its labelled positions
        total, count = 0.0, 0
        for bucket in batch["anchors"]:
            states = model.encoder(input_ids=bucket["input_ids"], attention_mask=bucket["attention_mask"]).last_hidden_state
            chosen = bucket["mlm_labels"] != IGNORE_INDEX
            logits = model.heads["mlm"](states[chosen]).double()
            total += float(torch.nn.functional.cross_entropy(logits, bucket["mlm_labels"][chosen], reduction="sum"))
            count += int(chosen.sum())
    assert count > 0 and float(logs["mlm"]) == pytest.approx(total / count, rel=1e-5)


def test_loader_workers_build_each_epoch_from_its_own_spans(documents, span_table, tokenizer, tiny_bert,
                                                             tiny_bert_dir):
    """``training.loader_workers`` moves batch building into worker processes, which
    hold copies of the collate: the epoch the trainer sets in its own process must
    still pick each epoch's spans and masks there. Two epochs (2 steps each) train to
    the same losses with one worker as without, and the second epoch's batches are
    not the first's again."""
    from contrastive_sentence_embeddings.training.trainer import TrainingConfig, train

    doc_ids = documents["doc_id"].tolist()
    losses = {}
    for workers in (0, 1):
        encoder = copy.deepcopy(tiny_bert)
        torch.manual_seed(0)
        method = build_method("declutr")
        model = ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder))
        collate = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=300)
        config = TrainingConfig(batch_size=4, epochs=2, eval_every=0, log_every=1, device="cpu", seed=5,
                                learning_rate=1e-4, loader_workers=workers)
        result = train(model, tokenizer, doc_ids, config, collate=collate)
        assert result.steps == 4
        losses[workers] = result.curve["loss"].tolist()
    assert losses[1] == losses[0]
    # Each epoch's batches differ from the last (their own spans): not one epoch's again.
    first_epoch = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=300)
    second_epoch = make_collate(documents, span_table, tokenizer, mlm_probability=0.15, bucket_tokens=300)
    second_epoch.set_epoch(1)
    assert sequences(first_epoch(doc_ids[:4])["anchors"]) != sequences(second_epoch(doc_ids[:4])["anchors"])
