"""A method as *views* and an *objective*: the batch recipe that makes named
embeddings, and a list of weighted loss terms computed on them (docs/objectives.md is
the catalogue).

Views (each a strict dataclass of its own settings) run in one fixed order
(:data:`VIEW_ORDER`): first the one view that makes the positive *pair* ``(a, b)``
(and decides the data family), then the extra passes (``off_dropout``'s ``off``).

* ``dropout_pair``: SimCSE's two dropout views, one forward pass of the doubled batch;
* ``two_rates``: SCD's two passes at dropout ``rate_a`` and ``rate_b``;
* ``off_dropout``: one more, dropout-free pass of the batch (ImSimCSE's ``z0``);
* ``spans``: DeCLUTR's anchors and averaged positives, and the anchors' token states
  (handed, bucket by bucket, to the terms that read them: ``mlm``);
* ``pairs``: CLSR's two columns of frozen embeddings through the trained network.

Terms (:data:`TERMS`) each call one pure function of :mod:`.losses` and declare the
views and the head they need, and whether they are computed on embeddings gathered
across processes (in-batch negatives) or per process. :func:`total_loss` sums
``weight * value`` in the objective's order; a per-process term is divided by the
number of processes when the objective also has a gathered term, because the trainer
then scales the whole loss by that number (see :mod:`.distributed`): the gathered
terms get the single-process gradient of the global batch, the per-process ones
DDP's usual average.

Projected embeddings are computed once per forward pass and shared by the terms that
ask for the same head (ImSimCSE's two terms share ``mlp(z1)``), so two terms never
build two graphs through one head.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from contrastive_sentence_embeddings.configuration.strict import ParameterError, integer, number, parse_strict
from contrastive_sentence_embeddings.training import losses
from contrastive_sentence_embeddings.training.declutr import masked_positions, unbucket
from contrastive_sentence_embeddings.training.distributed import gather_with_grad, world_size
from contrastive_sentence_embeddings.training.dropout import dropout_off, dropout_rate
from contrastive_sentence_embeddings.training.heads import decorrelation_projector, mlp_head

PAIR = ("a", "b")


# --- what one forward pass has made ------------------------------------------------------
class Encoded:
    """The named embeddings of one batch (``a``, ``b``: the pair; ``off``: the
    dropout-free pass), plus what terms need beyond them; projections and gathered
    copies are cached so that each is computed once per forward pass."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.joint: torch.Tensor | None = None  # the pair stacked [a; b], when heads see both at once (pairs)
        self.anchor_token_readers: list[Callable] = []  # called with each anchor bucket's outputs (spans)
        self.readers: dict[str, object] = {}  # a term's reader of those outputs, by term name
        self._cache: dict[tuple, torch.Tensor] = {}

    def embeddings(self, model: nn.Module, names: Sequence[str], head: str | None, gathered: bool
                   ) -> list[torch.Tensor]:
        """``names`` through ``head`` (None: as the views made them), each gathered
        across processes when ``gathered``; projected in the order asked, then gathered
        in that order."""
        projected = [self._projected(model, name, head) for name in names]
        if not gathered:
            return projected
        out = []
        for name, tensor in zip(names, projected):
            key = ("gathered", head, name)
            if key not in self._cache:
                self._cache[key] = gather_with_grad(tensor)
            out.append(self._cache[key])
        return out

    def _projected(self, model: nn.Module, name: str, head: str | None) -> torch.Tensor:
        if head is None:
            return self.tensors[name]
        key = ("projected", head, name)
        if key not in self._cache:
            if self.joint is not None and name in PAIR:
                # A pair that went through the network stacked goes through the head
                # stacked too: one matmul over [a; b], then split (CLSR).
                both = model.heads[head](self.joint)
                rows = self.tensors["a"].shape[0]
                self._cache[("projected", head, "a")] = both[:rows]
                self._cache[("projected", head, "b")] = both[rows:]
            else:
                self._cache[key] = model.heads[head](self.tensors[name])
        return self._cache[key]


# --- views -------------------------------------------------------------------------------
@dataclass
class View:
    """A step of the batch recipe. ``pair`` views make ``a`` and ``b`` and fix the
    data ``family``; the others add passes (``makes``)."""

    name: ClassVar[str] = "view"
    family: ClassVar[str | None] = None  # the data family of a pair view; None: any sentence batch
    makes: ClassVar[tuple[str, ...]] = ()

    @property
    def pair(self) -> bool:
        return self.family is not None

    def encode(self, model: nn.Module, batch: Mapping, encoded: Encoded) -> None:
        raise NotImplementedError


@dataclass
class DropoutPair(View):
    """Each sentence encoded twice in one forward pass of the doubled batch; the two
    copies get independent dropout masks (SimCSE, Gao et al. 2021)."""

    name: ClassVar[str] = "dropout_pair"
    family: ClassVar[str | None] = "sentences"
    makes: ClassVar[tuple[str, ...]] = PAIR

    def encode(self, model, batch, encoded):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        pooled = model.embed(torch.cat([ids, ids]), torch.cat([mask, mask]))
        encoded.tensors["a"], encoded.tensors["b"] = pooled.chunk(2)


@dataclass
class TwoRates(View):
    """Two passes of the batch, at dropout ``rate_a`` then ``rate_b`` (SCD, Klein and
    Nabi 2022; every dropout rate of the encoder, :func:`.dropout.dropout_rate`)."""

    name: ClassVar[str] = "two_rates"
    family: ClassVar[str | None] = "sentences"
    makes: ClassVar[tuple[str, ...]] = PAIR
    rate_a: float = field(default=0.05, metadata=number(0, 1, high_open=True))
    rate_b: float = field(default=0.155, metadata=number(0, 1, high_open=True))

    def encode(self, model, batch, encoded):
        ids, mask = batch["input_ids"], batch["attention_mask"]
        with dropout_rate(model.encoder, self.rate_a):
            encoded.tensors["a"] = model.embed(ids, mask)
        with dropout_rate(model.encoder, self.rate_b):
            encoded.tensors["b"] = model.embed(ids, mask)


@dataclass
class OffDropout(View):
    """One more pass of the batch with every dropout off, the model otherwise in train
    mode (ImSimCSE's ``z0``, Xu et al. 2023; :func:`.dropout.dropout_off`). Made after
    the pair."""

    name: ClassVar[str] = "off_dropout"
    makes: ClassVar[tuple[str, ...]] = ("off",)

    def encode(self, model, batch, encoded):
        with dropout_off(model.encoder):
            encoded.tensors["off"] = model.embed(batch["input_ids"], batch["attention_mask"])


@dataclass
class Spans(View):
    """DeCLUTR's anchors ``a`` and averaged positives ``b`` (Giorgi et al. 2021) from
    the length buckets of :class:`.declutr.DeclutrCollate`; each anchor bucket's
    encoder outputs go to the terms that read token states (``mlm``) right after
    that bucket's forward pass. ``bucket_tokens`` is the padded size of one pass;
    ``pad_to_multiple_of`` rounds each bucket's width up (fewer distinct shapes for
    the kernels a GPU prepares per shape; :mod:`.declutr`)."""

    name: ClassVar[str] = "spans"
    family: ClassVar[str | None] = "documents"
    makes: ClassVar[tuple[str, ...]] = PAIR
    bucket_tokens: int = field(default=4096, metadata=integer(1))
    pad_to_multiple_of: int = field(default=1, metadata=integer(1))

    def encode(self, model, batch, encoded):
        anchors, positives = batch["anchors"], batch["positives"]
        pieces, rows = [], []
        for bucket in anchors:
            pooled, outputs = model.encode_tokens(bucket["input_ids"], bucket["attention_mask"])
            pieces.append(pooled)
            rows.append(bucket["rows"])
            for read in encoded.anchor_token_readers:
                read(model, outputs, bucket)
        anchor_embeddings = unbucket(pieces, rows, sum(len(r) for r in rows))
        positive_rows = [bucket["rows"] for bucket in positives]
        positive_embeddings = unbucket([model.embed(b["input_ids"], b["attention_mask"]) for b in positives],
                                       positive_rows, sum(len(r) for r in positive_rows))
        per_anchor = positive_embeddings.shape[0] // anchor_embeddings.shape[0]
        encoded.tensors["a"] = anchor_embeddings
        encoded.tensors["b"] = positive_embeddings.view(anchor_embeddings.shape[0], per_anchor, -1).mean(dim=1)


@dataclass
class Pairs(View):
    """CLSR's positive pairs of frozen embeddings ``(first, second)`` through the
    trained network ``f`` (``Linear(h, w) -> ReLU -> Linear(w, h)``, ``w =
    hidden_width``, null: the encoder's hidden size), stacked into one pass; heads
    see the pair stacked too."""

    name: ClassVar[str] = "pairs"
    family: ClassVar[str | None] = "pairs"
    makes: ClassVar[tuple[str, ...]] = PAIR
    hidden_width: int | None = field(default=None, metadata=integer(1, null=True))
    # The frozen encoder's first layers whose pooled states are embedded (0: its token
    # embeddings; null: every layer): clsr.keep_first_layers.
    frozen_layers: int | None = field(default=None, metadata=integer(0, null=True))

    def width(self, hidden_size: int) -> int:
        return int(self.hidden_width or hidden_size)

    def encode(self, model, batch, encoded):
        first, second = batch["first"], batch["second"]
        rows = first.shape[0]
        encoded.joint = model.encoder(torch.cat([first, second]))
        encoded.tensors["a"], encoded.tensors["b"] = encoded.joint[:rows], encoded.joint[rows:]


VIEWS: dict[str, type[View]] = {cls.name: cls for cls in (DropoutPair, TwoRates, OffDropout, Spans, Pairs)}
# The order views run in, whatever order a block lists them in: the pair, then the extra passes.
VIEW_ORDER = ("dropout_pair", "two_rates", "spans", "pairs", "off_dropout")


# --- terms -------------------------------------------------------------------------------
HEADS = ("none", "mlp", "projection")


@dataclass
class Term:
    """One weighted loss term: ``weight * value``, ``value`` from :mod:`.losses`."""

    name: ClassVar[str] = "term"
    needs: ClassVar[tuple[str, ...]] = ()       # views besides the pair
    gathered: ClassVar[bool] = True             # on embeddings gathered across processes
    takes_head: ClassVar[bool] = True           # has the ``head`` setting
    weight: float = field(default=1.0, metadata=number(0))

    def head_name(self) -> str | None:
        head = getattr(self, "head", "none")
        return None if head == "none" else head

    def heads(self, hidden_size: int) -> dict[str, Callable[[], nn.Module]]:
        """The training-only heads this term reads, by name, with how to build each."""
        head = self.head_name()
        if head == "mlp":
            return {"mlp": lambda: mlp_head(hidden_size)}
        if head == "projection":
            return {"projection": lambda: nn.Linear(hidden_size, hidden_size)}
        return {}

    def describe(self) -> dict:
        return {"term": self.name, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def value(self, model: nn.Module, encoded: Encoded) -> torch.Tensor:
        raise NotImplementedError

    def __post_init__(self) -> None:
        if self.takes_head and getattr(self, "head", "none") not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, got {getattr(self, 'head')!r}")


def _head_field():
    """A term's ``head``: ``none``, ``mlp`` (SimCSE's) or ``projection`` (CLSR's);
    terms naming the same head share it."""
    return field(default="none")


@dataclass
class InfoNCE(Term):
    """SimCSE's InfoNCE (Gao et al. 2021), :func:`.losses.info_nce` on the gathered pair."""

    name: ClassVar[str] = "info_nce"
    temperature: float = field(default=0.05, metadata=number(0, low_open=True))
    head: str = _head_field()

    def value(self, model, encoded):
        z1, z2 = encoded.embeddings(model, PAIR, self.head_name(), gathered=True)
        return losses.info_nce(z1, z2, self.temperature)


@dataclass
class NTXent(Term):
    """Symmetric NT-Xent (SimCLR; DeCLUTR, CLSR), :func:`.losses.nt_xent` on the gathered pair."""

    name: ClassVar[str] = "nt_xent"
    temperature: float = field(default=0.05, metadata=number(0, low_open=True))
    head: str = _head_field()

    def value(self, model, encoded):
        a, b = encoded.embeddings(model, PAIR, self.head_name(), gathered=True)
        return losses.nt_xent(a, b, self.temperature)


@dataclass
class OffDropoutInfoNCE(Term):
    """ImSimCSE's off-dropout InfoNCE (Xu et al. 2023), :func:`.losses.off_dropout_info_nce`:
    the pair as positive, negatives among the dropout-free ``off`` pass."""

    name: ClassVar[str] = "off_dropout_info_nce"
    needs: ClassVar[tuple[str, ...]] = ("off_dropout",)
    m: float = field(default=0.9, metadata=number(0, 1))
    temperature: float = field(default=0.05, metadata=number(0, low_open=True))
    head: str = _head_field()

    def value(self, model, encoded):
        z1, z2, z0 = encoded.embeddings(model, (*PAIR, "off"), self.head_name(), gathered=True)
        return losses.off_dropout_info_nce(z1, z2, z0, self.m, self.temperature)


@dataclass
class DCL(Term):
    """ImSimCSE's dimension-wise contrastive loss (Xu et al. 2023),
    :func:`.losses.dimension_contrastive_loss` on the gathered pair."""

    name: ClassVar[str] = "dcl"
    temperature: float = field(default=5.0, metadata=number(0, low_open=True))
    head: str = _head_field()

    def value(self, model, encoded):
        z1, z2 = encoded.embeddings(model, PAIR, self.head_name(), gathered=True)
        return losses.dimension_contrastive_loss(z1, z2, self.temperature)


@dataclass
class SelfContrast(Term):
    """SCD's self-contrast (Klein and Nabi 2022), :func:`.losses.self_contrast`: the
    pair's mean cosine, minimised; per process."""

    name: ClassVar[str] = "self_contrast"
    gathered: ClassVar[bool] = False
    head: str = _head_field()

    def value(self, model, encoded):
        h_a, h_b = encoded.embeddings(model, PAIR, self.head_name(), gathered=False)
        return losses.self_contrast(h_a, h_b)


@dataclass
class Decorrelation(Term):
    """SCD's feature decorrelation (Klein and Nabi 2022; Barlow Twins),
    :func:`.losses.decorrelation` on the pair through its own projector
    (``heads.decorrelation_projector``, ``projector_widths``); per process (batch
    statistics of the process's batch)."""

    name: ClassVar[str] = "decorrelation"
    gathered: ClassVar[bool] = False
    takes_head: ClassVar[bool] = False
    off_diagonal_weight: float = field(default=0.012, metadata=number(0))
    projector_widths: Sequence[int] = field(default_factory=lambda: [4096, 4096, 4096], metadata=integer(1, each=True))

    def head_name(self) -> str | None:
        return "projector"

    def heads(self, hidden_size):
        return {"projector": lambda: decorrelation_projector(hidden_size, self.projector_widths)}

    def value(self, model, encoded):
        projector = model.heads["projector"]
        h_a, h_b = encoded.tensors["a"], encoded.tensors["b"]
        return losses.decorrelation(projector(h_a), projector(h_b), self.off_diagonal_weight)


@dataclass
class MLM(Term):
    """DeCLUTR's masked-LM loss on the anchors (Giorgi et al. 2021): the cross-entropy
    of the pretrained masked-LM head at every masked anchor token, mean over the masked
    tokens of the batch; per process. ``probability`` is the share of anchor tokens
    the collate function masks (BERT's 80/10/10)."""

    name: ClassVar[str] = "mlm"
    needs: ClassVar[tuple[str, ...]] = ("spans",)
    gathered: ClassVar[bool] = False
    takes_head: ClassVar[bool] = False
    probability: float = field(default=0.15, metadata=number(0, 1, low_open=True, high_open=True))

    def head_name(self) -> str | None:
        return "mlm"

    def heads(self, hidden_size):
        return {}  # loaded with the encoder (ComposedMethod.pretrained_heads)

    def reader(self, batch: Mapping) -> "_MaskedTokens":
        """What sums the loss as the spans view encodes each anchor bucket."""
        return _MaskedTokens(torch.zeros((), device=batch["anchors"][0]["input_ids"].device))

    def value(self, model, encoded):
        masked = encoded.readers[self.name]
        return masked.total / max(masked.count, 1)


@dataclass
class _MaskedTokens:
    """The running sum of the MLM cross-entropy over the masked anchor tokens, added
    bucket by bucket right after each anchor pass (the head only on the masked
    positions: no logits for the rest). The positions come with the bucket
    (``mlm_positions``, found by the collate function on the host), so neither the
    gathering nor the count makes the host wait for the device; a bucket without
    them (built by other code) has them found here, at one such wait."""

    total: torch.Tensor
    count: int = 0

    def __call__(self, model: nn.Module, outputs, bucket: Mapping) -> None:
        labels = bucket.get("mlm_labels")
        if labels is None or "mlm" not in model.heads:
            return
        positions = bucket.get("mlm_positions")
        if positions is None:
            positions = masked_positions(labels)
        if positions.numel():  # a shape: known on the host
            states = outputs.last_hidden_state.flatten(0, 1).index_select(0, positions)
            targets = labels.flatten().index_select(0, positions)
            logits = model.heads["mlm"](states)
            self.total = self.total + F.cross_entropy(logits.float(), targets, reduction="sum")
            self.count += positions.numel()


TERMS: dict[str, type[Term]] = {cls.name: cls for cls in
                                (InfoNCE, NTXent, OffDropoutInfoNCE, DCL, SelfContrast, Decorrelation, MLM)}


# --- parsing and checking a composition --------------------------------------------------
def _did_you_mean(name, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


def parse_view(entry, where: str) -> View:
    """A view entry: its name (``off_dropout``) or a mapping ``{view: <name>, <setting>: ...}``."""
    # The key an error names is where the name was written: the entry itself when it
    # is a bare name, its `view` key when it is a mapping.
    key = where if isinstance(entry, str) else f"{where}.view"
    if isinstance(entry, str):
        entry = {"view": entry}
    if not isinstance(entry, Mapping) or "view" not in entry:
        raise ParameterError(f"{where}: expected a view name or a mapping with a 'view' key, got {entry!r}", key=where)
    name = entry["view"]
    if name not in VIEWS:
        raise ParameterError(f"{key}: unknown view {name!r}; {_did_you_mean(name, list(VIEWS))}"
                             f"views: {', '.join(VIEWS)}", key=key)
    return parse_strict(VIEWS[name], {k: v for k, v in entry.items() if k != "view"}, where)


def parse_term(entry, where: str) -> Term:
    """A term entry: a mapping ``{term: <name>, weight: ..., <hyper-parameter>: ...}``."""
    if not isinstance(entry, Mapping) or "term" not in entry:
        raise ParameterError(f"{where}: expected a mapping with a 'term' key ({{term: dcl, weight: 0.1}}), "
                             f"got {entry!r}", key=where)
    name = entry["term"]
    if name not in TERMS:
        raise ParameterError(f"{where}.term: unknown term {name!r}; {_did_you_mean(name, list(TERMS))}"
                             f"terms: {', '.join(TERMS)}", key=f"{where}.term")
    return parse_strict(TERMS[name], {k: v for k, v in entry.items() if k != "term"}, where)


def check_composition(views: Sequence[View], terms: Sequence[Term], where: str,
                      entries: Sequence[str] | None = None) -> None:
    """Exactly one pair view, no view twice, no term twice (their logs would collide),
    and every term's views present: else a :class:`ParameterError` naming the term and
    what is missing. ``entries`` are the terms' places (``scd_offdrop.objective[0]``)."""
    names = [view.name for view in views]
    pair_views = [name for name in names if VIEWS[name].family is not None]
    if len(pair_views) != 1:
        raise ParameterError(f"{where}.views: a method needs exactly one view that makes the pair "
                             f"({', '.join(n for n in VIEWS if VIEWS[n].family)}); it has "
                             f"{', '.join(pair_views) or 'none'}", key=f"{where}.views")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ParameterError(f"{where}.views: view(s) {', '.join(twice)} given twice", key=f"{where}.views")
    family = VIEWS[pair_views[0]].family
    term_names = [term.name for term in terms]
    entries = list(entries or [f"{where}.objective[{i}]" for i in range(len(terms))])
    for index, (entry, term) in enumerate(zip(entries, terms)):
        if term.name in term_names[:index]:
            raise ParameterError(f"{entry} ({term.name}): the objective already has a {term.name} term (the "
                                 f"preset's, or another entry); change its settings in {where}.method instead",
                                 key=entry)
        for needed in term.needs:
            if needed not in names:
                raise ParameterError(f"{entry} ({term.name}) needs the view {needed!r}; {where} has: "
                                     f"{', '.join(names)}; add it to {where}.views", key=entry)
    if "off_dropout" in names and family != "sentences":
        raise ParameterError(f"{where}.views: off_dropout re-encodes a sentence batch, but {where}'s pair view "
                             f"{pair_views[0]} reads {family}", key=f"{where}.views")


def process_divisor(terms: Sequence[Term], term: Term) -> int:
    """What ``term``'s weighted value is divided by in the loss: the number of
    processes when it is per process and some term of ``terms`` is gathered, else 1
    (:func:`total_loss`; the gradient cache adds the MLM term's shares by it too)."""
    if not term.gathered and any(other.gathered for other in terms):
        return world_size()
    return 1


def total_loss(terms: Sequence[Term], model: nn.Module, encoded: Encoded) -> dict[str, torch.Tensor]:
    """``{"loss": sum of weight * value, <term>: value detached}`` in the objective's
    order. A per-process term is divided by the number of processes when some term is
    gathered (the trainer then multiplies the loss by that number; module docstring)."""
    total = None
    logs = {}
    for term in terms:
        value = term.value(model, encoded)
        contribution = term.weight * value
        divisor = process_divisor(terms, term)
        if divisor != 1:
            contribution = contribution / divisor
        total = contribution if total is None else total + contribution
        logs[term.name] = value.detach()
    return {"loss": total, **logs}
