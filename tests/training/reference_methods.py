"""The five methods as they were implemented before issue 21 (each a class hard-wiring
its views and loss), kept as a test-only *oracle*: tests/training/test_composition.py
checks that every preset of :mod:`contrastive_sentence_embeddings.training.methods`
gives bit-identical losses, logged terms and gradients. Only the loss code is kept
(building models, saving and describing them moved on with the presets); do not
change it, it is what "equal to today" means."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn

from contrastive_sentence_embeddings.training import losses
from contrastive_sentence_embeddings.training.declutr import IGNORE_INDEX, unbucket
from contrastive_sentence_embeddings.training.distributed import gather_embeddings, world_size
from contrastive_sentence_embeddings.training.dropout import dropout_off, dropout_rate
from contrastive_sentence_embeddings.training.heads import decorrelation_projector, mlp_head
from contrastive_sentence_embeddings.training.methods import clsr_encoder_network, load_mlm_head

Logs = dict[str, torch.Tensor]
ContrastiveModel = nn.Module  # the model the loss reads: methods.ContrastiveModel or clsr.CLSRModel


@dataclass
class Method:
    """Base of the recipes; subclasses are dataclasses of their hyper-parameters."""

    name = "method"
    # The data family: which training pipeline feeds it (config.FAMILIES): sentences,
    # documents (DeCLUTR) or pairs (CLSR).
    family = "sentences"
    # True when the loss is computed on embeddings gathered across processes (the
    # trainer then scales it by the number of processes; see distributed.py).
    gathers_embeddings = True

    def describe(self, model: nn.Module) -> dict:
        """The hyper-parameters as recorded in the model's metadata."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        """Training-only heads built from scratch."""
        return nn.ModuleDict()

    def pretrained_heads(self, source: str, encoder: nn.Module) -> dict[str, nn.Module]:
        """Training-only heads loaded with the encoder (DeCLUTR's MLM head)."""
        return {}

    def loss(self, model: ContrastiveModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Logs:
        raise NotImplementedError

    @classmethod
    def from_params(cls, params: Mapping) -> "Method":
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"{cls.name}: unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**params)


def _two_dropout_views(model: ContrastiveModel, input_ids, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sentence encoded twice in one forward pass of the doubled batch: the two
    copies get independent dropout masks (SimCSE's augmentation)."""
    pooled = model.embed(torch.cat([input_ids, input_ids]), torch.cat([attention_mask, attention_mask]))
    return pooled.chunk(2)


@dataclass
class SimCSE(Method):
    """Unsupervised SimCSE (Gao et al., 2021): two dropout views, the MLP in training
    only, InfoNCE with in-batch negatives (``losses.info_nce``)."""

    name = "simcse"
    temperature: float = 0.05
    use_mlp: bool = True

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        return nn.ModuleDict({"mlp": mlp_head(hidden_size)} if self.use_mlp else {})

    def project(self, model: ContrastiveModel, pooled: torch.Tensor) -> torch.Tensor:
        return model.heads["mlp"](pooled) if "mlp" in model.heads else pooled

    def loss(self, model, input_ids, attention_mask) -> Logs:
        view1, view2 = _two_dropout_views(model, input_ids, attention_mask)
        z1, z2 = gather_embeddings(self.project(model, view1), self.project(model, view2))
        value = losses.info_nce(z1, z2, self.temperature)
        return {"loss": value, "info_nce": value.detach()}


@dataclass
class SCD(Method):
    """SCD (Klein and Nabi, 2022): view A at dropout ``rate_a``, view B at ``rate_b``;
    ``self_contrast_weight * self_contrast(h_a, h_b)`` (mean cosine, minimised: pushes
    the views apart) plus ``decorrelation_weight * decorrelation(p_a, p_b,
    off_diagonal_weight)`` on the projector outputs (pulls features together and
    decorrelates them); the projector outputs are batch-normalised once, inside the
    decorrelation loss, as the reference code's ``bn(projector(.))``. Defaults are the reference code's BERT settings (see
    ``conf/base/parameters_scd.yml`` for the paper's notation)."""

    name = "scd"
    gathers_embeddings = False  # per-pair and per-process batch-statistics terms
    rate_a: float = 0.05
    rate_b: float = 0.155
    self_contrast_weight: float = 20.0   # reference code: alpha 1 / temperature 0.05
    decorrelation_weight: float = 0.005225
    off_diagonal_weight: float = 0.012
    projector_widths: Sequence[int] = field(default_factory=lambda: [4096, 4096, 4096])

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        return nn.ModuleDict({"projector": decorrelation_projector(hidden_size, self.projector_widths)})

    def loss(self, model, input_ids, attention_mask) -> Logs:
        with dropout_rate(model.encoder, self.rate_a):
            h_a = model.embed(input_ids, attention_mask)
        with dropout_rate(model.encoder, self.rate_b):
            h_b = model.embed(input_ids, attention_mask)
        # Per-pair and batch-statistics terms: no gathering (BatchNorm is per process).
        return self.objective(h_a, h_b, model.heads["projector"])

    def objective(self, h_a: torch.Tensor, h_b: torch.Tensor, projector: nn.Module) -> Logs:
        """The SCD loss of two views of a batch, with ``bn`` = standardisation over the
        batch applied once, inside ``losses.decorrelation`` (the projector ends with
        its last Linear)::

            loss = self_contrast_weight * mean_i cos(h_a_i, h_b_i)
                 + decorrelation_weight * decorrelation(projector(h_a), projector(h_b), off_diagonal_weight)
        """
        contrast = losses.self_contrast(h_a, h_b)
        decorrelation = losses.decorrelation(projector(h_a), projector(h_b), self.off_diagonal_weight)
        value = self.self_contrast_weight * contrast + self.decorrelation_weight * decorrelation
        return {"loss": value, "self_contrast": contrast.detach(), "decorrelation": decorrelation.detach()}


@dataclass
class ImSimCSE(Method):
    """ImSimCSE / SimCSE++ (Xu et al., 2023): SimCSE's two dropout views (through the
    MLP) as the positive, negatives from a third, dropout-free pass weighted as in
    ``losses.off_dropout_info_nce`` (``m``), plus ``dcl_weight`` times the
    dimension-wise contrastive loss on the two views.

    Follows the authors' code of September 2022 (Jiahao004/SimCSE-plus-plus at
    899e49b, ``models_re_vicreg.py``; defaults of ``train_re_vicreg.py`` at 24b0c5b:
    ``m = pos_ratio = 0.9``, DCL weight 0.1, DCL temperature 5), the only released
    version in which the README's SimCSE++ script trains both terms. From 2022-11
    both terms default off and at the repository's head (c171daa, 2022-12; read at
    51d2db5, 2024-01) the DCL term is commented out, so the head's script trains
    plain InfoNCE; see the module docstring of :mod:`.losses` for the versions read.
    That script passes ``pos_ratio 1`` for the full model; ``m = 0.9`` is the
    scripts' Python default (set ``m: 1`` to match ``run_re_vicreg.sh``)."""

    name = "imsimcse"
    temperature: float = 0.05
    m: float = 0.9
    dcl_weight: float = 0.1
    dcl_temperature: float = 5.0

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        return nn.ModuleDict({"mlp": mlp_head(hidden_size)})

    def loss(self, model, input_ids, attention_mask) -> Logs:
        view1, view2 = _two_dropout_views(model, input_ids, attention_mask)
        with dropout_off(model.encoder):
            view0 = model.embed(input_ids, attention_mask)
        mlp = model.heads["mlp"]
        z1, z2, z0 = gather_embeddings(mlp(view1), mlp(view2), mlp(view0))
        contrastive = losses.off_dropout_info_nce(z1, z2, z0, self.m, self.temperature)
        dcl = losses.dimension_contrastive_loss(z1, z2, self.dcl_temperature)
        value = contrastive + self.dcl_weight * dcl
        return {"loss": value, "off_dropout_info_nce": contrastive.detach(), "dcl": dcl.detach()}


@dataclass
class DeCLUTR(Method):
    """DeCLUTR (Giorgi et al., 2021): anchors and positives are spans of the same
    documents (batches from :class:`.declutr.DeclutrCollate`). The ``P`` positives of
    an anchor are embedded and averaged into one; ``losses.nt_xent`` over the anchors
    and averaged positives (every other anchor and positive of the batch, including
    those of the same document, is a negative) plus, when ``mlm`` is on, the masked-LM
    loss of the anchors, computed from the same forward pass that embeds the masked
    anchor::

        loss = nt_xent(anchors, mean_p(positives), temperature) + mlm_cross_entropy

    ``mlm_cross_entropy`` is the mean over every masked anchor token of the batch."""

    name = "declutr"
    family = "documents"
    temperature: float = 0.05
    mlm: bool = True
    mlm_probability: float = 0.15
    bucket_tokens: int = 4096   # padded tokens per forward pass when bucketing spans by length

    def pretrained_heads(self, source: str, encoder: nn.Module) -> dict[str, nn.Module]:
        return {"mlm": load_mlm_head(source, encoder)} if self.mlm else {}

    def describe(self, model: nn.Module) -> dict:
        """The hyper-parameters, without ``mlm_probability`` when ``mlm`` is off (no
        token is masked then: the setting has no effect)."""
        described = super().describe(model)
        if not self.mlm:
            described.pop("mlm_probability")
        return described

    def loss(self, model, anchors: list[dict], positives: list[dict]) -> Logs:
        pieces, rows = [], []
        mlm_sum = torch.zeros((), device=anchors[0]["input_ids"].device)
        mlm_tokens = 0
        for bucket in anchors:
            pooled, outputs = model.encode_tokens(bucket["input_ids"], bucket["attention_mask"])
            pieces.append(pooled)
            rows.append(bucket["rows"])
            labels = bucket.get("mlm_labels")
            if labels is not None and "mlm" in model.heads:
                chosen = labels != IGNORE_INDEX
                if chosen.any():  # the head only on the masked positions: no logits for the rest
                    logits = model.heads["mlm"](outputs.last_hidden_state[chosen])
                    mlm_sum = mlm_sum + F.cross_entropy(logits.float(), labels[chosen], reduction="sum")
                    mlm_tokens += int(chosen.sum())
        anchor_embeddings = unbucket(pieces, rows, sum(len(r) for r in rows))
        positive_rows = [bucket["rows"] for bucket in positives]
        positive_embeddings = unbucket([model.embed(b["input_ids"], b["attention_mask"]) for b in positives],
                                       positive_rows, sum(len(r) for r in positive_rows))
        per_anchor = positive_embeddings.shape[0] // anchor_embeddings.shape[0]
        averaged = positive_embeddings.view(anchor_embeddings.shape[0], per_anchor, -1).mean(dim=1)
        contrastive = losses.nt_xent(*gather_embeddings(anchor_embeddings, averaged), self.temperature)
        logs = {"nt_xent": contrastive.detach()}
        value = contrastive
        if self.mlm:
            mlm = mlm_sum / max(mlm_tokens, 1)
            # The trainer multiplies the loss by the number of processes to undo DDP's
            # averaging of the gathered term; the per-process MLM term is divided here
            # so that it ends up averaged over processes as usual.
            value = value + mlm / world_size()
            logs["mlm"] = mlm.detach()
        return {"loss": value, **logs}


@dataclass
class CLSR(Method):
    """CLSR: a frozen encoder's pooled embeddings, an encoder network ``f`` and a
    projection head ``g`` trained with ``losses.clsr_loss`` (NT-Xent at
    ``temperature``) on positive pairs. ``hidden_width`` is ``f``'s hidden layer
    (None: the encoder's hidden size). The model is :class:`.clsr.CLSRModel`: only
    ``f`` and ``g`` train, on cached embeddings (:mod:`.clsr`)."""

    name = "clsr"
    family = "pairs"
    temperature: float = 0.1
    hidden_width: int | None = None

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"clsr: temperature must be positive, got {self.temperature}")
        if self.hidden_width is not None and int(self.hidden_width) < 1:
            raise ValueError(f"clsr: hidden_width must be a positive integer or null, got {self.hidden_width}")

    def width(self, hidden_size: int) -> int:
        return int(self.hidden_width or hidden_size)

    def build_network(self, hidden_size: int) -> nn.Sequential:
        return clsr_encoder_network(hidden_size, self.width(hidden_size))

    def build_heads(self, hidden_size: int) -> nn.ModuleDict:
        return nn.ModuleDict({"projection": nn.Linear(hidden_size, hidden_size)})

    def describe(self, model) -> dict:
        hidden_size = model.encoder[0].in_features
        return {"temperature": self.temperature, "hidden_width": self.width(hidden_size)}

    def loss(self, model, first: torch.Tensor, second: torch.Tensor) -> Logs:  # type: ignore[override]
        value = losses.clsr_loss(model.encoder, model.heads["projection"], first, second, self.temperature,
                                 gather=gather_embeddings)
        return {"loss": value, "nt_xent": value.detach()}


REFERENCE: dict[str, type[Method]] = {cls.name: cls for cls in (SimCSE, SCD, ImSimCSE, DeCLUTR, CLSR)}
