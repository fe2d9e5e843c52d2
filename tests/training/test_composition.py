"""Methods as views + objective (training/objective.py): each preset trains exactly as
the pre-refactor class did (the oracle in reference_methods.py: the same loss, logged
terms and gradients, to the last bit), every term matches a hand computation, and an
impossible combination is a clear error naming the term and what is missing."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from contrastive_sentence_embeddings.configuration.layering import explain_parameter_error
from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.encoders.encoding import pad_batch
from contrastive_sentence_embeddings.training import objective
from contrastive_sentence_embeddings.training.clsr import CLSRModel
from contrastive_sentence_embeddings.training.methods import PRESETS, ContrastiveModel, build_method
from tests.training import reference_methods
from tests.training.test_declutr import documents, make_collate, span_table  # noqa: F401 - fixtures

SENTENCES = [
    "the cat sat on the mat", "a dog barked at the mailman", "stock markets fell sharply today",
    "she plays the violin beautifully", "rain is expected over the weekend", "the committee approved the budget",
]

# Small projector and a non-default value for every setting a preset has, so each reaches its term.
PARAMS = {
    "simcse": [{}, {"use_mlp": False, "temperature": 0.07}],
    "scd": [{"projector_widths": [24, 16], "rate_a": 0.1, "rate_b": 0.3, "self_contrast_weight": 3.0,
             "decorrelation_weight": 0.02, "off_diagonal_weight": 0.5}],
    "imsimcse": [{}, {"m": 1.0, "dcl_weight": 0.3, "dcl_temperature": 2.0, "temperature": 0.1}],
    "declutr": [{"bucket_tokens": 300}, {"mlm": False, "temperature": 0.1}],
    "clsr": [{}, {"hidden_width": 20, "temperature": 0.2}],
}


@pytest.fixture
def sentence_batch(tokenizer):
    return pad_batch(tokenizer(SENTENCES)["input_ids"], tokenizer.pad_token_id)


def _twins(kind, params, make):
    """The same model built twice, the preset's and the oracle's, from the same seed."""
    torch.manual_seed(0)
    new = make(build_method(kind, params))
    torch.manual_seed(0)
    old = make(reference_methods.REFERENCE[kind](**params))
    old.load_state_dict(new.state_dict())  # both were initialised from seed 0: this must change nothing
    return new, old


def _assert_same_step(new, old, batch, steps=2):
    """Same seed before each forward; every output and every gradient bit-identical,
    for ``steps`` AdamW steps (BatchNorm statistics, weights and heads moving too)."""
    optimizers = [torch.optim.AdamW(model.parameters(), lr=1e-3) for model in (new, old)]
    for _ in range(steps):
        outputs = []
        for model, optimizer in zip((new, old), optimizers):
            torch.manual_seed(1)
            output = model(**batch)
            optimizer.zero_grad()
            output["loss"].backward()
            outputs.append(output)
        assert list(outputs[0]) == list(outputs[1])  # the same log keys, in the same order
        for key in outputs[0]:
            assert torch.equal(outputs[0][key], outputs[1][key]), (key, outputs[0][key], outputs[1][key])
        grads_new = {name: p.grad for name, p in new.named_parameters() if p.grad is not None}
        grads_old = {name: p.grad for name, p in old.named_parameters() if p.grad is not None}
        assert grads_new.keys() == grads_old.keys() and grads_new
        for name in grads_new:
            assert torch.equal(grads_new[name], grads_old[name]), name
        for optimizer in optimizers:
            optimizer.step()
    for (name, a), b in zip(new.state_dict().items(), old.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("kind, params", [(k, p) for k in ("simcse", "scd", "imsimcse") for p in PARAMS[k]])
def test_sentence_presets_equal_the_pre_refactor_methods_bit_for_bit(tiny_bert, sentence_batch, kind, params):
    new, old = _twins(kind, params, lambda method: ContrastiveModel(copy.deepcopy(tiny_bert), "cls_before_pooler",
                                                                    method).train())
    assert list(new.heads) == list(old.heads)
    _assert_same_step(new, old, sentence_batch)


@pytest.mark.parametrize("params", PARAMS["declutr"])
def test_declutr_preset_equals_the_pre_refactor_method_bit_for_bit(
        tiny_bert, tiny_bert_dir, tokenizer, documents, span_table, params):  # noqa: F811
    def make(method):
        encoder = copy.deepcopy(tiny_bert)
        return ContrastiveModel(encoder, "mean", method, method.pretrained_heads(str(tiny_bert_dir), encoder)).train()

    new, old = _twins("declutr", params, make)
    assert ("mlm" in new.heads) == params.get("mlm", True)
    mlm = 0.15 if params.get("mlm", True) else None
    batch = make_collate(documents, span_table, tokenizer, mlm_probability=mlm,
                         bucket_tokens=params.get("bucket_tokens", 4096))(documents["doc_id"].tolist()[:4])
    assert len(batch["anchors"]) > 1 or "bucket_tokens" not in params  # several buckets: the order matters
    _assert_same_step(new, old, batch)


@pytest.mark.parametrize("params", PARAMS["clsr"])
def test_clsr_preset_equals_the_pre_refactor_method_bit_for_bit(params):
    new, old = _twins("clsr", params, lambda method: CLSRModel(32, method, frozen=None).train())
    generator = torch.Generator().manual_seed(5)
    batch = {"first": torch.randn(10, 32, generator=generator), "second": torch.randn(10, 32, generator=generator)}
    _assert_same_step(new, old, batch)


# Settings added to a preset after the oracle was frozen, with the default that keeps
# the method as it was (pad_to_multiple_of 1: bucket widths not rounded; frozen_layers null:
# the whole frozen encoder).
ADDED_SINCE_THE_ORACLE = {"declutr": {"pad_to_multiple_of": 1}, "clsr": {"frozen_layers": None}}


def test_presets_describe_themselves_as_before(tiny_bert):
    for kind in PRESETS:
        method, reference = build_method(kind), reference_methods.REFERENCE[kind]()
        model = CLSRModel(32, method, frozen=None) if kind == "clsr" else None
        described, added = method.describe(model), ADDED_SINCE_THE_ORACLE.get(kind, {})
        assert {key: described[key] for key in added} == added, kind
        assert {k: v for k, v in described.items() if k not in added} == reference.describe(model), kind
        assert method.family == reference.family and method.gathers_embeddings == reference.gathers_embeddings
    declutr = build_method("declutr", {"mlm": False})
    assert declutr.describe(None) == {**reference_methods.DeCLUTR(mlm=False).describe(None),
                                      **ADDED_SINCE_THE_ORACLE["declutr"]}
    assert (declutr.mlm, declutr.mlm_probability, declutr.bucket_tokens) == (False, None, 4096)


def test_added_views_and_terms_are_recorded_with_the_preset():
    method = build_method("scd", {"projector_widths": [8]}, ["off_dropout"],
                          [{"term": "off_dropout_info_nce", "weight": 0.5, "m": 1.0}], where="scd_offdrop")
    described = method.describe(None)
    assert described["views"] == [{"view": "off_dropout"}]
    assert described["objective"] == [{"term": "off_dropout_info_nce", "weight": 0.5, "m": 1.0,
                                       "temperature": 0.05, "head": "none"}]
    assert [view.name for view in method.views] == ["two_rates", "off_dropout"]
    assert [term.name for term in method.terms] == ["self_contrast", "decorrelation", "off_dropout_info_nce"]
    assert method.gathers_embeddings  # a gathered term joined two per-process ones


# --- the DDP rule: per-process terms are divided by W when some term is gathered --------
def _fixed_terms_loss(terms, world, monkeypatch):
    monkeypatch.setattr(objective, "world_size", lambda: world)
    encoded = objective.Encoded()
    generator = torch.Generator().manual_seed(2)
    encoded.tensors = {name: torch.randn(6, 8, generator=generator) for name in ("a", "b", "off")}
    return objective.total_loss(terms, torch.nn.Module(), encoded)


def test_per_process_terms_are_averaged_over_processes_next_to_gathered_ones(monkeypatch):
    gathered = objective.InfoNCE(weight=1.0)
    per_process = objective.SelfContrast(weight=2.0)
    alone = _fixed_terms_loss([per_process], 4, monkeypatch)
    assert float(alone["loss"]) == pytest.approx(2.0 * float(alone["self_contrast"]))  # not scaled: no division
    mixed = _fixed_terms_loss([gathered, per_process], 4, monkeypatch)
    # The trainer multiplies by W = 4: InfoNCE's gradient is the global batch's, self-contrast's DDP's average.
    assert float(mixed["loss"]) == pytest.approx(float(mixed["info_nce"]) + 2.0 * float(mixed["self_contrast"]) / 4)


# --- every term against a hand computation ----------------------------------------------
def _cos(u, v):
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def _bn(x):
    return (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)


def test_each_term_is_its_weight_times_its_formula(monkeypatch):
    generator = torch.Generator().manual_seed(3)
    a, b, off = (torch.randn(5, 4, generator=generator, dtype=torch.float64).float() for _ in range(3))
    A, B, O = (t.double().numpy() for t in (a, b, off))  # noqa: N806
    encoded = objective.Encoded()
    encoded.tensors = {"a": a, "b": b, "off": off}
    tau, m = 0.5, 0.8
    n = len(A)

    def ce(logits, k):
        return -logits[k] + math.log(sum(math.exp(x) for x in logits))

    info = np.mean([ce([_cos(A[i], B[j]) / tau for j in range(n)], i) for i in range(n)])
    both = np.concatenate([A, B])
    nt = np.mean([ce([_cos(both[k], both[j]) / tau for j in range(2 * n) if j != k],
                     [j for j in range(2 * n) if j != k].index((k + n) % (2 * n))) for k in range(2 * n)])
    off_nce = np.mean([ce([m * _cos(A[i], B[i]) / tau] + [_cos(O[i], O[j]) / tau for j in range(n) if j != i], 0)
                       for i in range(n)])
    d = _bn(A).T @ _bn(B) / n
    dcl = np.mean([ce(list(d[k] / tau), k) for k in range(4)])
    self_contrast = np.mean([_cos(A[i], B[i]) for i in range(n)])
    expected = {"info_nce": info, "nt_xent": nt, "off_dropout_info_nce": off_nce, "dcl": dcl,
                "self_contrast": self_contrast}
    terms = [objective.InfoNCE(weight=3.0, temperature=tau), objective.NTXent(weight=3.0, temperature=tau),
             objective.OffDropoutInfoNCE(weight=3.0, temperature=tau, m=m),
             objective.DCL(weight=3.0, temperature=tau), objective.SelfContrast(weight=3.0)]
    for term in terms:
        got = objective.total_loss([term], torch.nn.Module(), encoded)
        assert float(got[term.name]) == pytest.approx(expected[term.name], rel=1e-5), term.name
        assert float(got["loss"]) == pytest.approx(3.0 * expected[term.name], rel=1e-5), term.name


def test_decorrelation_and_mlm_terms_by_hand():
    generator = torch.Generator().manual_seed(4)
    model = torch.nn.Module()
    model.heads = torch.nn.ModuleDict({"projector": torch.nn.Linear(4, 3, bias=False)})
    with torch.no_grad():
        model.heads["projector"].weight.copy_(torch.randn(3, 4, generator=generator))
    encoded = objective.Encoded()
    encoded.tensors = {"a": torch.randn(6, 4, generator=generator), "b": torch.randn(6, 4, generator=generator)}
    W = model.heads["projector"].weight.detach().double().numpy()  # noqa: N806
    c = _bn(encoded.tensors["a"].double().numpy() @ W.T).T @ _bn(encoded.tensors["b"].double().numpy() @ W.T) / 6
    lam = 0.25
    expected = ((1 - np.diag(c)) ** 2).sum() + lam * ((c ** 2).sum() - (np.diag(c) ** 2).sum())
    term = objective.Decorrelation(weight=0.5, off_diagonal_weight=lam, projector_widths=[3])
    got = objective.total_loss([term], model, encoded)
    assert float(got["decorrelation"]) == pytest.approx(expected, rel=1e-5)
    assert float(got["loss"].detach()) == pytest.approx(0.5 * expected, rel=1e-5)

    # MLM: the cross-entropy summed over the masked tokens of every anchor bucket, over their count.
    vocab = 7
    model.heads["mlm"] = torch.nn.Linear(4, vocab)
    mlm = objective.MLM(weight=2.0)
    reader = mlm.reader({"anchors": [{"input_ids": torch.zeros(1)}]})
    states = [torch.randn(2, 3, 4, generator=generator), torch.randn(1, 5, 4, generator=generator)]
    labels = [torch.tensor([[-100, 3, -100], [1, -100, -100]]), torch.tensor([[-100, -100, 6, -100, -100]])]
    for state, label in zip(states, labels):
        reader(model, type("Outputs", (), {"last_hidden_state": state})(), {"mlm_labels": label})
    encoded.readers["mlm"] = reader
    logits = [model.heads["mlm"](state[label != -100]).detach().double().numpy()
              for state, label in zip(states, labels)]
    targets = [label[label != -100].tolist() for label in labels]
    total = sum(-row[t] + math.log(np.exp(row).sum()) for rows, ts in zip(logits, targets) for row, t in zip(rows, ts))
    got = objective.total_loss([mlm], model, encoded)
    assert reader.count == 3
    assert float(got["mlm"]) == pytest.approx(total / 3, rel=1e-5)
    assert float(got["loss"]) == pytest.approx(2 * total / 3, rel=1e-5)


# --- impossible combinations and misspellings -------------------------------------------
@pytest.mark.parametrize("kind, views, terms, message", [
    ("scd", None, [{"term": "off_dropout_info_nce"}],
     "scd_offdrop.objective[0] (off_dropout_info_nce) needs the view 'off_dropout'; scd_offdrop has: two_rates; "
     "add it to scd_offdrop.views"),
    ("simcse", None, [{"term": "mlm"}], "scd_offdrop.objective[0] (mlm) needs the view 'spans'"),
    ("simcse", ["spans"], None, "a method needs exactly one view that makes the pair"),
    ("declutr", ["off_dropout"], None, "off_dropout re-encodes a sentence batch"),
    ("simcse", None, [{"term": "info_nce"}], "scd_offdrop.objective[0] (info_nce): the objective already has"),
    ("simcse", None, [{"term": "info_nse"}],
     "scd_offdrop.objective[0].term: unknown term 'info_nse'; did you mean info_nce?"),
    ("simcse", ["of_dropout"], None, "scd_offdrop.views[0]: unknown view 'of_dropout'; did you mean off_dropout?"),
    ("simcse", None, [{"term": "dcl", "head": "projector"}], "head must be one of none, mlp, projection"),
    ("simcse", None, [{"weight": 1}], "expected a mapping with a 'term' key"),
    ("simcse", None, {"term": "dcl"}, "scd_offdrop.objective: expected a list of terms"),
])
def test_impossible_combinations_are_clear_errors(kind, views, terms, message):
    with pytest.raises(ParameterError) as error:
        build_method(kind, {}, views, terms, where="scd_offdrop")
    # What the user reads names the key once, at the start of the line.
    explained = explain_parameter_error(error.value, [])
    assert message in explained and explained.startswith("scd_offdrop")


def test_a_misspelt_term_setting_gets_did_you_mean_and_a_bad_value_its_range():
    with pytest.raises(ParameterError) as error:
        build_method("simcse", {}, None, [{"term": "dcl", "wieght": 0.1}], where="simcse_dcl")
    assert explain_parameter_error(error.value, ["conf/local/parameters.yml"]) == (
        "unknown parameter simcse_dcl.objective[0].wieght (set in conf/local/parameters.yml): did you mean weight?")
    with pytest.raises(ParameterError, match=r"simcse_dcl.objective\[0\].temperature = 0: must be a number > 0"):
        build_method("simcse", {}, None, [{"term": "dcl", "temperature": 0}], where="simcse_dcl")


def test_the_combinations_in_docs_objectives_parse_as_method_blocks():
    """The three copy-paste blocks of docs/objectives.md are valid blocks with the
    terms and views they say."""
    import re
    from pathlib import Path

    import yaml

    from contrastive_sentence_embeddings.training.method_block import MethodBlock

    text = (Path(__file__).resolve().parents[2] / "docs" / "objectives.md").read_text(encoding="utf-8")
    blocks = {}
    for snippet in re.findall(r"```yaml\n(.*?)```", text, flags=re.S):
        blocks.update({name: block for name, block in yaml.safe_load(snippet).items() if name != "<name>"})
    assert set(blocks) == {"declutr_dcl", "simcse_decorrelation", "scd_offdrop"}
    for name, block in blocks.items():
        method = MethodBlock.from_params(block, name).method
        assert [term["term"] for term in block["objective"]] == [term.name for term in method.extra_terms]
    assert build_method("scd", {}, ["off_dropout"], blocks["scd_offdrop"]["objective"]).gathers_embeddings
