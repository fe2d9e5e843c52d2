"""The methods: each a *preset* (a method block's ``kind``, with today's ``method:``
hyper-parameters) that expands to views and an objective (:mod:`.objective`), to which
a block may add views and terms (``views:``, ``objective:``). A batch (of sentences,
DeCLUTR's documents or CLSR's pairs) becomes named embeddings through the views, the
terms of the objective are computed on them and summed. The training loop
(:mod:`.trainer`) is the same for all of them.

A method is called inside the model's single ``forward`` (so that DistributedDataParallel
sees one forward per step however many encoder passes the recipe makes). Embeddings
entering an in-batch loss are gathered across processes first
(:func:`.distributed.gather_embeddings`), so every process sees every negative.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar

import torch
from torch import nn

from contrastive_sentence_embeddings.configuration.strict import ParameterError, check_values, flag, integer, number
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder
from contrastive_sentence_embeddings.runs.library_messages import held_messages
from contrastive_sentence_embeddings.encoders.pooling import needs_hidden_states, pool_outputs
from contrastive_sentence_embeddings.training import objective as objective_module
from contrastive_sentence_embeddings.training.objective import (
    DCL, MLM, VIEW_ORDER, DropoutPair, Encoded, InfoNCE, NTXent, OffDropout, OffDropoutInfoNCE, Pairs,
    SelfContrast, Spans, Term, TwoRates, View, Decorrelation,
)
from contrastive_sentence_embeddings.training.cpu_dropout import dropout_from_uniform_draws
from contrastive_sentence_embeddings.training.real_tokens import linears_on_real_tokens, recomputes_in_backward

logger = logging.getLogger(__name__)

Logs = dict[str, torch.Tensor]


class ContrastiveModel(nn.Module):
    """The encoder being trained, its pooling, the method's training-only heads, and
    the method's loss as ``forward``. Only ``encoder`` is saved at the end."""

    def __init__(self, encoder: nn.Module, pooling: str, method: "Method",
                 pretrained_heads: Mapping[str, nn.Module] | None = None, real_tokens_only: bool = True,
                 uniform_dropout: bool = True):
        super().__init__()
        self.encoder = encoder
        # Training passes on CPU run the linear layers on real tokens only (.real_tokens):
        # the same loss and gradients up to float rounding, a third less work on wiki
        # batches; and draw the encoder's dropout masks uniformly (.cpu_dropout): the
        # same distribution as torch's dropout, cheaper to draw.
        self.real_tokens_only = real_tokens_only
        self.uniform_dropout = uniform_dropout
        self.pooling = pooling
        self.method = method
        self.heads = method.build_heads(encoder.config.hidden_size)
        self.heads.update(dict(pretrained_heads or {}))

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """``(pooled embeddings, the encoder's outputs)``: for recipes that also need
        the token states (DeCLUTR's MLM)."""
        # CPU only: on CUDA the packing's host synchronisations (the mask's count, the
        # real rows' indices) would stall the queue, and dropout is one fused kernel.
        training_on_cpu = self.encoder.training and input_ids.device.type == "cpu"
        with contextlib.ExitStack() as stack:
            if training_on_cpu and self.real_tokens_only:
                stack.enter_context(linears_on_real_tokens(self.encoder, attention_mask))
            # Not under activation checkpointing: its recomputation runs outside this block.
            if training_on_cpu and self.uniform_dropout and not recomputes_in_backward(self.encoder):
                stack.enter_context(dropout_from_uniform_draws())
            outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                   output_hidden_states=needs_hidden_states([self.pooling]), return_dict=True)
        return pool_outputs(self.pooling, outputs, attention_mask), outputs

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encode_tokens(input_ids, attention_mask)[0]

    def forward(self, **batch: torch.Tensor) -> Logs:
        """``{"loss": scalar to minimise, <term>: detached scalars to log}``; the batch
        is what the method's collate function made (padded token ids by default)."""
        return self.method.loss(self, **batch)

    def sentence_encoder(self, tokenizer, device=None) -> SentenceEncoder:
        """The encoder as it will be saved (no heads), for scoring during training."""
        return SentenceEncoder(self.encoder, tokenizer, self.pooling, batch_size=128, device=device)

    def encoding_key(self) -> str:
        """sha256 over what :meth:`sentence_encoder`'s embeddings depend on: the encoder's
        class, the pooling, and every tensor of the encoder's state (name, dtype, shape,
        values). The heads are left out: they are dropped before any sentence is encoded,
        so two seeds whose heads differ but whose encoder starts the same share a key."""
        digest = hashlib.sha256(f"{type(self.encoder).__module__}.{type(self.encoder).__qualname__}:{self.pooling}"
                                .encode())
        for name, tensor in sorted(self.encoder.state_dict().items()):
            value = tensor.detach().cpu().contiguous()
            digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
            digest.update(value.view(torch.uint8).numpy().tobytes() if value.numel() else b"")
        return digest.hexdigest()



class Method:
    """What the trainer and the training runs use of a method (:class:`ComposedMethod`
    is the one implementation): its data ``family``, whether its loss is computed on
    embeddings gathered across processes (``gathers_embeddings``: the trainer then
    scales it by the number of processes; see distributed.py), the model it trains,
    its heads, its loss and its description for the metadata."""

    name = "method"
    family = "sentences"
    gathers_embeddings = True

    def build_model(self, encoder: nn.Module, tokenizer, pooling: str, source: str, **options) -> nn.Module:
        """The module the trainer trains: the encoder, its pooling and this method's
        heads (``options`` are family-specific, e.g. CLSR's embedding cache)."""
        return ContrastiveModel(encoder, pooling, self, self.pretrained_heads(source, encoder))

    def trained_encoder(self, model: nn.Module, encoder: nn.Module, tokenizer, pooling: str, metadata: dict):
        """What is saved once training is over (heads dropped): the encoder holding
        the kept weights."""
        from contrastive_sentence_embeddings.training.trained_encoder import TrainedEncoder

        return TrainedEncoder(encoder.cpu(), tokenizer, pooling, metadata)

    def describe(self, model: nn.Module) -> dict:
        raise NotImplementedError

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        """Training-only heads built from scratch."""
        return nn.ModuleDict()

    def pretrained_heads(self, source: str, encoder: nn.Module) -> dict[str, nn.Module]:
        """Training-only heads loaded with the encoder (DeCLUTR's MLM head)."""
        return {}

    def loss(self, model: nn.Module, **batch) -> Logs:
        raise NotImplementedError


# --- presets: the five published methods -------------------------------------------------
@dataclass
class Preset:
    """A published method as a ``kind``: a strict dataclass of its block's ``method:``
    hyper-parameters (today's keys), which :meth:`expand` turns into views and terms."""

    name: ClassVar[str] = "preset"
    family: ClassVar[str] = "sentences"

    def expand(self) -> tuple[list[View], list[Term]]:
        raise NotImplementedError

    def describe(self, model: nn.Module) -> dict:
        """The hyper-parameters as recorded in the model's metadata."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_params(cls, params: Mapping) -> "Preset":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"{cls.name}: unknown parameter(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(names))}")
        check_values(cls, params, cls.name)
        return cls(**params)


_TEMPERATURE = number(0, low_open=True)


@dataclass
class SimCSE(Preset):
    """Unsupervised SimCSE (Gao et al., 2021): ``dropout_pair`` views, ``info_nce``
    through the MLP (training only)."""

    name: ClassVar[str] = "simcse"
    temperature: float = field(default=0.05, metadata=_TEMPERATURE)
    use_mlp: bool = field(default=True, metadata=flag())

    def expand(self):
        return [DropoutPair()], [InfoNCE(temperature=self.temperature, head="mlp" if self.use_mlp else "none")]


@dataclass
class SCD(Preset):
    """SCD (Klein and Nabi, 2022): ``two_rates`` views (``rate_a``, ``rate_b``);
    ``self_contrast_weight * self_contrast + decorrelation_weight * decorrelation``
    (its projector of ``projector_widths``; ``off_diagonal_weight``), both per process.
    The decorrelation standardises the projector outputs once, as the reference code's
    ``bn(projector(.))``. Defaults are the reference code's BERT settings (see
    ``conf/base/parameters_scd.yml`` for the paper's notation)."""

    name: ClassVar[str] = "scd"
    rate_a: float = field(default=0.05, metadata=number(0, 1, high_open=True))
    rate_b: float = field(default=0.155, metadata=number(0, 1, high_open=True))
    self_contrast_weight: float = field(default=20.0, metadata=number(0))  # reference code: alpha 1 / temperature 0.05
    decorrelation_weight: float = field(default=0.005225, metadata=number(0))
    off_diagonal_weight: float = field(default=0.012, metadata=number(0))
    projector_widths: Sequence[int] = field(default_factory=lambda: [4096, 4096, 4096],
                                            metadata=integer(1, each=True))

    def expand(self):
        return [TwoRates(rate_a=self.rate_a, rate_b=self.rate_b)], [
            SelfContrast(weight=self.self_contrast_weight),
            Decorrelation(weight=self.decorrelation_weight, off_diagonal_weight=self.off_diagonal_weight,
                          projector_widths=self.projector_widths)]


@dataclass
class ImSimCSE(Preset):
    """ImSimCSE / SimCSE++ (Xu et al., 2023): ``dropout_pair`` and ``off_dropout``
    views through the MLP; ``off_dropout_info_nce`` (``m``, ``temperature``) plus
    ``dcl_weight`` times ``dcl`` (``dcl_temperature``) on the two dropout views.

    Follows the authors' code of September 2022 (Jiahao004/SimCSE-plus-plus at
    899e49b, ``models_re_vicreg.py``; defaults of ``train_re_vicreg.py`` at 24b0c5b:
    ``m = pos_ratio = 0.9``, DCL weight 0.1, DCL temperature 5), the only released
    version in which the README's SimCSE++ script trains both terms. From 2022-11
    both terms default off and at the repository's head (c171daa, 2022-12; read at
    51d2db5, 2024-01) the DCL term is commented out, so the head's script trains
    plain InfoNCE; see the module docstring of :mod:`.losses` for the versions read.
    That script passes ``pos_ratio 1`` for the full model; ``m = 0.9`` is the
    scripts' Python default (set ``m: 1`` to match ``run_re_vicreg.sh``)."""

    name: ClassVar[str] = "imsimcse"
    temperature: float = field(default=0.05, metadata=_TEMPERATURE)
    m: float = field(default=0.9, metadata=number(0, 1))
    dcl_weight: float = field(default=0.1, metadata=number(0))
    dcl_temperature: float = field(default=5.0, metadata=_TEMPERATURE)

    def expand(self):
        return [DropoutPair(), OffDropout()], [
            OffDropoutInfoNCE(m=self.m, temperature=self.temperature, head="mlp"),
            DCL(weight=self.dcl_weight, temperature=self.dcl_temperature, head="mlp")]


@dataclass
class DeCLUTR(Preset):
    """DeCLUTR (Giorgi et al., 2021): ``spans`` views (anchors and the average of each
    anchor's ``P`` positives, from :class:`.declutr.DeclutrCollate`'s batches);
    ``nt_xent`` over them (every other anchor and positive of the batch, including
    those of the same document, is a negative) plus, when ``mlm`` is on, the ``mlm``
    term on the anchors, computed from the same forward pass that embeds the masked
    anchor::

        loss = nt_xent(anchors, mean_p(positives), temperature) + mlm_cross_entropy

    ``mlm_cross_entropy`` is the mean over every masked anchor token of the batch."""

    name: ClassVar[str] = "declutr"
    family: ClassVar[str] = "documents"
    temperature: float = field(default=0.05, metadata=_TEMPERATURE)
    mlm: bool = field(default=True, metadata=flag())
    mlm_probability: float = field(default=0.15, metadata=number(0, 1, low_open=True, high_open=True))
    bucket_tokens: int = field(default=4096, metadata=integer(1))  # padded tokens per pass when bucketing spans
    pad_to_multiple_of: int = field(default=1, metadata=integer(1))  # bucket widths rounded up to a multiple of this

    def expand(self):
        terms: list[Term] = [NTXent(temperature=self.temperature)]
        if self.mlm:
            terms.append(MLM(probability=self.mlm_probability))
        return [Spans(bucket_tokens=self.bucket_tokens, pad_to_multiple_of=self.pad_to_multiple_of)], terms

    def describe(self, model: nn.Module) -> dict:
        """The hyper-parameters, without ``mlm_probability`` when ``mlm`` is off (no
        token is masked then: the setting has no effect)."""
        described = super().describe(model)
        if not self.mlm:
            described.pop("mlm_probability")
        return described


@dataclass
class CLSR(Preset):
    """CLSR: a frozen encoder's pooled embeddings, an encoder network ``f`` (the
    ``pairs`` view; ``hidden_width`` is its hidden layer, None: the encoder's hidden
    size) and a projection head ``g`` trained with ``nt_xent`` at ``temperature`` on
    positive pairs (``losses.clsr_loss`` written as a view and a term). The model is
    :class:`.clsr.CLSRModel`: only ``f`` and ``g`` train, on cached embeddings
    (:mod:`.clsr`)."""

    name: ClassVar[str] = "clsr"
    family: ClassVar[str] = "pairs"
    temperature: float = field(default=0.1, metadata=_TEMPERATURE)
    hidden_width: int | None = field(default=None, metadata=integer(1, null=True))
    # The frozen encoder cut to its first layers (0: its token embeddings; null: all, the paper).
    frozen_layers: int | None = field(default=None, metadata=integer(0, null=True))

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"clsr: temperature must be positive, got {self.temperature}")
        if self.hidden_width is not None and int(self.hidden_width) < 1:
            raise ValueError(f"clsr: hidden_width must be a positive integer or null, got {self.hidden_width}")
        if self.frozen_layers is not None and int(self.frozen_layers) < 0:
            raise ValueError(f"clsr: frozen_layers must be a non-negative integer or null, got {self.frozen_layers}")

    def expand(self):
        return ([Pairs(hidden_width=self.hidden_width, frozen_layers=self.frozen_layers)],
                [NTXent(temperature=self.temperature, head="projection")])

    def describe(self, model) -> dict:
        hidden_size = model.encoder[0].in_features
        return {"temperature": self.temperature, "hidden_width": Pairs(self.hidden_width).width(hidden_size),
                "frozen_layers": self.frozen_layers}


# --- a method: a preset's views and terms, and those its block adds ------------------------
class ComposedMethod(Method):
    """The views (run in :data:`.objective.VIEW_ORDER`) and terms (summed in order: the
    preset's, then the block's) of one method; ``extra_views`` and ``extra_terms`` are
    what the block added to its preset (recorded in the metadata)."""

    def __init__(self, preset: Preset, extra_views: Sequence[View] = (), extra_terms: Sequence[Term] = ()):
        views, terms = preset.expand()
        self.preset = preset
        self.extra_views = list(extra_views)
        self.extra_terms = list(extra_terms)
        self.views = sorted([*views, *self.extra_views], key=lambda view: VIEW_ORDER.index(view.name))
        self.terms = [*terms, *self.extra_terms]

    def __repr__(self) -> str:
        return (f"ComposedMethod({self.preset!r}, views={[v.name for v in self.views]}, "
                f"terms={[t.name for t in self.terms]})")

    @property
    def name(self) -> str:
        return self.preset.name

    @property
    def pair_view(self) -> View:
        return next(view for view in self.views if view.pair)

    @property
    def family(self) -> str:
        return self.pair_view.family

    @property
    def gathers_embeddings(self) -> bool:
        return any(term.gathered for term in self.terms)

    def term(self, name: str) -> Term | None:
        return next((term for term in self.terms if term.name == name), None)

    # What DeCLUTR's collate function reads (training.run.train_on_documents).
    @property
    def mlm(self) -> bool:
        return self.term("mlm") is not None

    @property
    def mlm_probability(self) -> float | None:
        term = self.term("mlm")
        return term.probability if term is not None else None

    @property
    def bucket_tokens(self) -> int:
        return self.pair_view.bucket_tokens

    @property
    def pad_to_multiple_of(self) -> int:
        return self.pair_view.pad_to_multiple_of

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        """Each head the terms read, built once, in the order the terms first name it
        (a head several terms name is shared)."""
        heads = nn.ModuleDict()
        for term in self.terms:
            for name, build in term.heads(hidden_size).items():
                if name not in heads:
                    heads[name] = build()
        return heads

    def pretrained_heads(self, source: str, encoder: nn.Module) -> dict[str, nn.Module]:
        return {"mlm": load_mlm_head(source, encoder)} if self.mlm else {}

    def build_model(self, encoder, tokenizer, pooling, source, *, cache_dir=None, device=None, seed=None,
                    encoder_name=None, **options):
        if self.family != "pairs":
            return super().build_model(encoder, tokenizer, pooling, source)
        from contrastive_sentence_embeddings.training.clsr import build_clsr_model

        return build_clsr_model(self, encoder, tokenizer, pooling, cache_dir=cache_dir, device=device, seed=seed,
                                encoder_name=encoder_name or source)

    def build_network(self, hidden_size: int) -> nn.Sequential:
        """CLSR's encoder network ``f`` (the ``pairs`` view's)."""
        return clsr_encoder_network(hidden_size, self.pair_view.width(hidden_size))

    def trained_encoder(self, model, encoder, tokenizer, pooling, metadata):
        if self.family != "pairs":
            return super().trained_encoder(model, encoder, tokenizer, pooling, metadata)
        from contrastive_sentence_embeddings.training.clsr import TrainedCLSR

        return TrainedCLSR(encoder.cpu(), tokenizer, pooling, metadata, head=model.encoder.cpu().eval())

    def describe(self, model: nn.Module) -> dict:
        """The preset's hyper-parameters as recorded in the model's metadata, plus the
        views and terms the block added (only when it added some)."""
        described = self.preset.describe(model)
        if self.extra_views:
            described["views"] = [{"view": view.name, **{f.name: getattr(view, f.name) for f in fields(view)}}
                                  for view in self.extra_views]
        if self.extra_terms:
            described["objective"] = [term.describe() for term in self.extra_terms]
        return described

    def encode(self, model: nn.Module, **batch) -> Encoded:
        """The views in order on ``batch``: its named embeddings, and the readers of
        the terms that read token states, filled as the views ran."""
        encoded = Encoded()
        for term in self.terms:
            if hasattr(term, "reader"):
                reader = term.reader(batch)
                encoded.readers[term.name] = reader
                encoded.anchor_token_readers.append(reader)
        for view in self.views:
            view.encode(model, batch, encoded)
        return encoded

    def loss(self, model: nn.Module, **batch) -> Logs:
        """The views in order, then ``objective.total_loss`` of the terms."""
        return objective_module.total_loss(self.terms, model, self.encode(model, **batch))


def load_mlm_head(source: str, encoder: nn.Module) -> nn.Module:
    """The masked-LM head of ``source`` (e.g. BERT's ``cls``, RoBERTa's ``lm_head``),
    with its output embedding tied to ``encoder``'s input embedding as in the
    pretrained model. An encoder that ships no head (all-MiniLM-L6-v2) gets a newly
    initialised one, which is logged. Only models whose head is one module next to the
    base model are supported (BERT, RoBERTa, DistilRoBERTa, XLM-R, ...)."""
    from transformers import AutoModelForMaskedLM

    # transformers reports, as warnings, every weight the masked-LM model and the
    # checkpoint do not share: the head's weights when the checkpoint has none (a load
    # report table, and "This checkpoint seem corrupted" because the head's tied bias is
    # absent too), the pooler and a next-sentence head it does not use. Here that is the
    # expected difference between an encoder checkpoint and a masked-LM model, not a
    # fault, and the lines below log what matters: whether the head is new. Only those
    # two messages are held, and only for this call (library_messages.held_messages).
    with held_messages("transformers.modeling_utils", r"LOAD REPORT", r"^This checkpoint seem corrupted"):
        masked_lm, info = AutoModelForMaskedLM.from_pretrained(source, output_loading_info=True)
    base = masked_lm.base_model
    children = [(name, module) for name, module in masked_lm.named_children() if module is not base]
    if len(children) != 1:
        raise ValueError(f"{source}: {type(masked_lm).__name__} has no single masked-LM head module "
                         f"({[name for name, _ in children]}); turn MLM off (method.mlm: false)")
    name, head = children[0]
    if getattr(masked_lm.config, "tie_word_embeddings", False):
        masked_lm.get_output_embeddings().weight = encoder.get_input_embeddings().weight
    new = sorted(key for key in info.get("missing_keys", ()) if key.startswith(f"{name}."))
    if new:
        logger.warning("%s ships no masked-LM head: DeCLUTR's MLM uses a newly initialised one (%d weights, "
                       "e.g. %s)%s", source, len(new), new[0],
                       "; its decoder is tied to the word embeddings" if masked_lm.config.tie_word_embeddings else "")
    else:
        logger.info("DeCLUTR's MLM uses the pretrained masked-LM head of %s (%s)", source, type(head).__name__)
    unused = sorted(info.get("unexpected_keys", ()))
    if unused:
        logger.info("%s: %d checkpoint weight(s) the masked-LM model does not use (e.g. %s)", source, len(unused),
                    ", ".join(unused[:3]))
    return head


def clsr_encoder_network(hidden_size: int, hidden_width: int) -> nn.Sequential:
    """CLSR's encoder network ``f``: ``Linear(h, w) -> ReLU -> Linear(w, h)``."""
    return nn.Sequential(nn.Linear(hidden_size, hidden_width), nn.ReLU(), nn.Linear(hidden_width, hidden_size))


PRESETS: dict[str, type[Preset]] = {cls.name: cls for cls in (SimCSE, SCD, ImSimCSE, DeCLUTR, CLSR)}
METHODS = PRESETS  # the name the rest of the project knows them by: a block's ``kind``


def method_class(name: str) -> type[Preset]:
    """The preset called ``name`` (a method block's ``kind``)."""
    if name not in PRESETS:
        close = difflib.get_close_matches(str(name), list(PRESETS), n=1, cutoff=0.6)
        raise ValueError(f"unknown method kind {name!r}; {f'did you mean {close[0]}? ' if close else ''}"
                         f"choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def build_method(kind: str, params: Mapping | None = None, views: Sequence | None = None,
                 objective: Sequence | None = None, where: str | None = None) -> ComposedMethod:
    """The method of a block: preset ``kind`` with its ``method:`` ``params``, plus the
    block's extra ``views`` (names or ``{view: <name>, ...}``) and ``objective`` terms
    (``{term: <name>, weight: ..., ...}``), added after the preset's. ``where`` is the
    block's name, for errors (``scd_offdrop.objective[0] (off_dropout_info_nce) needs
    the view 'off_dropout'; ...``)."""
    where = where or kind
    preset = method_class(kind).from_params(dict(params or {}))
    if views is not None and not isinstance(views, list):
        raise ParameterError(f"{where}.views: expected a list of views, got {views!r}", key=f"{where}.views")
    if objective is not None and not isinstance(objective, list):
        raise ParameterError(f"{where}.objective: expected a list of terms, got {objective!r}",
                             key=f"{where}.objective")
    extra_views = [objective_module.parse_view(entry, f"{where}.views[{i}]")
                   for i, entry in enumerate(views or [])]
    extra_terms = [objective_module.parse_term(entry, f"{where}.objective[{i}]")
                   for i, entry in enumerate(objective or [])]
    method = ComposedMethod(preset, extra_views, extra_terms)
    preset_terms = len(method.terms) - len(extra_terms)
    entries = [f"{where} ({kind} preset)"] * preset_terms + [f"{where}.objective[{i}]" for i in range(len(extra_terms))]
    objective_module.check_composition(method.views, method.terms, where, entries)
    return method
