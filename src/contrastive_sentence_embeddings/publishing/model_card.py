"""The model card of a trained model: ``README.md`` in its folder, in the
sentence-transformers / Hugging Face Hub convention.

The card is written after the model is scored (the ``model_card`` node of each run,
``pipelines/evaluation``), because its numbers are the scores: YAML front matter
(``library_name``, ``pipeline_tag``, ``tags``, ``base_model``, ``datasets``,
``license`` where the base model's own card says it, and a ``model-index`` holding
every STS score in the Hub's schema), then the method and its citation, the model's
modules, the training parameters and budget, the data report of the steps that
prepared the training data, the STS table and how to load the model.

:func:`read_model_folder` and :func:`training_sources` gather the facts (files,
configuration); :func:`render_model_card` is pure: the same facts always give the
same text, and every number in it is the metrics file's.

sentence-transformers keeps a ``README.md`` it finds when it loads a folder and writes
it back unchanged when that model is saved again (it only generates a card of its own
for a model it trained, tagged ``generated_from_trainer``, a tag this card never has).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from contrastive_sentence_embeddings.encoders.encoding import METADATA_FILE

logger = logging.getLogger(__name__)

CARD_FILE = "README.md"


@dataclass(frozen=True)
class MethodReference:
    """What the card says about a recipe (a method block's ``kind``): its name, what
    it does in one paragraph, whom to cite, and the BibTeX (None when the project has
    not checked a citation)."""

    title: str
    summary: str
    cited_as: str
    bibtex: str | None = None


METHOD_REFERENCES: dict[str, MethodReference] = {
    "simcse": MethodReference(
        "Unsupervised SimCSE",
        "Each sentence is encoded twice with different dropout masks; the two views are a positive pair and "
        "the other sentences of the batch are negatives (InfoNCE). An MLP over the embedding is used during "
        "training only.",
        "Gao, Yao and Chen, EMNLP 2021",
        """@inproceedings{gao2021simcse,
  title     = {{SimCSE}: Simple Contrastive Learning of Sentence Embeddings},
  author    = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  year      = {2021}
}""",
    ),
    "scd": MethodReference(
        "SCD (self-contrastive decorrelation)",
        "Two views of each sentence at different dropout rates: a self-contrast term pushes them apart and a "
        "decorrelation term on a projector's outputs pulls their features together and decorrelates them. "
        "The projector is used during training only.",
        "Klein and Nabi, ACL 2022",
        """@inproceedings{klein2022scd,
  title     = {{SCD}: Self-Contrastive Decorrelation of Sentence Embeddings},
  author    = {Klein, Tassilo and Nabi, Moin},
  booktitle = {Proceedings of the 60th Annual Meeting of the Association for Computational Linguistics (Volume 2: Short Papers)},
  year      = {2022}
}""",
    ),
    "imsimcse": MethodReference(
        "ImSimCSE / SimCSE++",
        "SimCSE's two dropout views as the positive pair, negatives from a third, dropout-free pass, plus a "
        "dimension-wise contrastive loss. The MLP is used during training only.",
        "Xu, Shao, Chen and Liu, EMNLP 2023",
        """@inproceedings{xu2023simcsepp,
  title     = {{SimCSE++}: Improving Contrastive Learning for Sentence Embeddings from Two Perspectives},
  author    = {Xu, Jiahao and Shao, Wei and Chen, Lihui and Liu, Lemao},
  booktitle = {Proceedings of the 2023 Conference on Empirical Methods in Natural Language Processing},
  pages     = {12028--12040},
  year      = {2023}
}""",
    ),
    "declutr": MethodReference(
        "DeCLUTR",
        "Anchor spans and nearby positive spans sampled from the same long documents; the averaged positives "
        "are contrasted with every other span of the batch (NT-Xent), with a masked-language-model loss on "
        "the anchors. The masked-LM head is used during training only.",
        "Giorgi, Nitski, Wang and Bader, ACL-IJCNLP 2021",
        """@inproceedings{giorgi2021declutr,
  title     = {{DeCLUTR}: Deep Contrastive Learning for Unsupervised Textual Representations},
  author    = {Giorgi, John and Nitski, Osvald and Wang, Bo and Bader, Gary},
  booktitle = {Proceedings of the 59th Annual Meeting of the Association for Computational Linguistics and the 11th International Joint Conference on Natural Language Processing (Volume 1: Long Papers)},
  year      = {2021}
}""",
    ),
    "clsr": MethodReference(
        "CLSR",
        "The pretrained encoder stays frozen; a small network over its mean-pooled embeddings is trained with "
        "NT-Xent on positive sentence pairs, through a projection head used during training only. The saved "
        "model is the frozen encoder followed by that network.",
        "the recipe as this project specifies it (no published citation checked)",
        None,
    ),
}

# The STS tasks in the order of the papers' tables: metrics key, name, Hub data set.
STS_BENCHMARKS: tuple[tuple[str, str, str], ...] = (
    ("sts12", "STS12", "mteb/sts12-sts"),
    ("sts13", "STS13", "mteb/sts13-sts"),
    ("sts14", "STS14", "mteb/sts14-sts"),
    ("sts15", "STS15", "mteb/sts15-sts"),
    ("sts16", "STS16", "mteb/sts16-sts"),
    ("stsb", "STS-B", "mteb/stsbenchmark-sts"),
    ("sickr", "SICK-R", "mteb/sickr-sts"),
)
STS_METRIC_TYPE = "spearman_cosine"
STS_METRIC_NAME = "Spearman correlation of cosine similarities x 100 (all pairs of a task pooled)"

# Which raw sources a data-preparation step reads, by the value of its ``inputs``
# parameter (data_processing.<block>.inputs); steps that read only other steps' output
# add none.
STEP_SOURCES: dict[str, tuple[str, dict[str, str]]] = {
    "sentence_candidates": ("wiki_sentences", {"sentence_per_line": "wiki", "wikitext": "longdocs"}),
    "long_documents": ("long_documents", {"wikitext": "longdocs", "openwebtext": "openwebtext"}),
}
FIXED_STEP_SOURCES: dict[str, tuple[str, ...]] = {"stsb_pairs": ("sts",), "nli_pairs": ("nli",)}
# The parameter block whose ``inputs`` each step's ``rows_out_by_input`` counts are keyed
# by: an input with no row left in any of them gave the training data nothing.
STEP_BLOCKS = {"sentence_candidates": "wiki_sentences", "wiki_sentences": "wiki_sentences",
               "long_documents": "long_documents"}

POOLING_DESCRIPTIONS = {
    "cls": "the [CLS] token's state through the model's pooler (`pooler_output`)",
    "cls_before_pooler": "the [CLS] token's last-layer state, before the pooler",
    "mean": "the mean of the last layer's token states over the real (unpadded) tokens",
    "last_avg": "the mean of the last layer's token states over the real (unpadded) tokens",
    "first_last_avg": "the mean over the real tokens of the average of the first transformer layer's and the "
                      "last layer's states",
}
# How to pool AutoModel's outputs the same way (``pooling.pool``), in the usage snippet.
_AUTOMODEL_POOLING = {
    "cls": ("", "embeddings = outputs.pooler_output"),
    "cls_before_pooler": ("", "embeddings = outputs.last_hidden_state[:, 0]"),
    "mean": ("", "mask = batch[\"attention_mask\"].unsqueeze(-1).float()\n"
                 "embeddings = (outputs.last_hidden_state * mask).sum(1) / mask.sum(1)"),
    "first_last_avg": (", output_hidden_states=True",
                       "mask = batch[\"attention_mask\"].unsqueeze(-1).float()\n"
                       "states = (outputs.hidden_states[1] + outputs.hidden_states[-1]) / 2\n"
                       "embeddings = (states * mask).sum(1) / mask.sum(1)"),
}
_AUTOMODEL_POOLING["last_avg"] = _AUTOMODEL_POOLING["mean"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


@dataclass(frozen=True)
class ModelFolder:
    """The facts of a saved model folder the card states."""

    path: str                          # as the card shows it (project-relative)
    metadata: Mapping                  # cse_metadata.json
    modules: tuple[str, ...]           # sentence-transformers module classes, in order
    embedding_dimension: int
    max_seq_length: int | None
    base_model_id: str | None = None   # the base encoder's Hub id (None: a local folder)
    base_license: str | None = None    # from the base model's own card, when it is at hand
    dense_layers: tuple[str, ...] = field(default_factory=tuple)   # "in -> out, activation" per Dense


def split_front_matter(text: str) -> tuple[dict, str]:
    """``(front matter, body)`` of a Markdown card with ``---``-fenced YAML at the top;
    ``({}, text)`` when it has none."""
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end < 0:
        raise ValueError("the card's front matter has no closing '---' line")
    matter = yaml.safe_load(text[4:end]) or {}
    if not isinstance(matter, dict):
        raise ValueError("the card's front matter is not a YAML mapping")
    return matter, text[end + len("\n---\n"):]


def hub_model_id(name: str) -> str | None:
    """``name`` when it reads as a Hub model id (``owner/name`` or a legacy bare name)
    and no local folder of that name exists; else None (the Hub metadata field
    ``base_model`` takes Hub ids only)."""
    if not _HUB_ID.match(name) or Path(name).expanduser().exists():
        return None
    return name


def base_model_license(name: str) -> str | None:
    """The ``license`` of the base model's own card when it is on this machine (a
    local folder, the packaged default encoder, or the Hub cache); None otherwise:
    the card then states no license rather than guess one."""
    from contrastive_sentence_embeddings.encoders.loading import resolve_encoder

    candidates = [Path(resolve_encoder(name)) / CARD_FILE]
    if hub_model_id(name):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(name, CARD_FILE)
            if isinstance(cached, str):
                candidates.append(Path(cached))
        except Exception as error:  # noqa: BLE001 - a courtesy lookup; the card does without it
            logger.debug("no cached card for %s: %s", name, error)
    for card in candidates:
        if card.is_file():
            try:
                license_name = split_front_matter(card.read_text(encoding="utf-8"))[0].get("license")
            except (OSError, ValueError, yaml.YAMLError):
                continue
            if isinstance(license_name, str) and license_name:
                return license_name
    return None


def read_model_folder(path: str | Path, shown_as: str | None = None) -> ModelFolder:
    """The facts of the model saved in ``path`` (``training.saving`` layout): its
    metadata, its sentence-transformers modules and the dimension they output."""
    folder = Path(path)
    metadata_file = folder / METADATA_FILE
    if not metadata_file.is_file():
        raise FileNotFoundError(f"{folder}: no trained model here (no {METADATA_FILE}); the card describes one")
    metadata = _read_json(metadata_file)
    modules = _read_json(folder / "modules.json")
    config = _read_json(folder / "config.json")
    dimension = int(config["hidden_size"])
    dense = []
    for module in modules:
        kind = module["type"].rsplit(".", 1)[-1]
        if kind == "Dense":
            settings = _read_json(folder / module["path"] / "config.json")
            dimension = int(settings["out_features"])
            activation = str(settings.get("activation_function", "")).rsplit(".", 1)[-1] or "Identity"
            dense.append(f"{settings['in_features']} -> {settings['out_features']}, {activation}")
    transformer = _read_json(folder / "sentence_bert_config.json")
    base = str(metadata.get("base_encoder") or "")
    return ModelFolder(
        path=shown_as or str(folder),
        metadata=metadata,
        modules=tuple(module["type"].rsplit(".", 1)[-1] for module in modules),
        embedding_dimension=dimension,
        max_seq_length=transformer.get("max_seq_length"),
        base_model_id=hub_model_id(base) if base else None,
        base_license=base_model_license(base) if base else None,
        dense_layers=tuple(dense),
    )


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing from the model folder (save it with training.saving)") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error


def empty_inputs(reports: Mapping[str, Mapping]) -> set[tuple[str, str]]:
    """``(block, input)`` of every input that a report counting rows by input
    (``rows_out_by_input``) shows with no row out: e.g. ``("long_documents",
    "openwebtext")`` when every OpenWebText document was too short."""
    empty = set()
    for step, report in reports.items():
        counts = report.get("rows_out_by_input") if isinstance(report, Mapping) else None
        if step in STEP_BLOCKS and isinstance(counts, Mapping):
            empty |= {(STEP_BLOCKS[step], name) for name, count in counts.items() if not count}
    return empty


def training_sources(reports: Mapping[str, Mapping] | Iterable[str], data_processing) -> list[str]:
    """The raw sources (``data/01_raw/<source>``) whose rows reached the training data
    prepared by the steps of ``reports`` (``{step: report}``; step names alone when
    there is no report), as ``data_processing`` (a parsed
    ``parameter_blocks.DataProcessingConfig``) chose them: e.g. the sentence candidates read
    ``wiki`` and/or ``longdocs`` by ``wiki_sentences.inputs``. An input that the
    reports' per-input counts show with no row out (:func:`empty_inputs`) is left
    out: it was read, but nothing of it was trained on."""
    if not isinstance(reports, Mapping):
        reports = dict.fromkeys(reports, {})
    empty = empty_inputs(reports)
    sources: list[str] = []
    for step in reports:
        if step in STEP_SOURCES:
            block, by_input = STEP_SOURCES[step]
            chosen = [by_input[name] for name in getattr(data_processing, block).inputs
                      if (block, name) not in empty]
        else:
            chosen = list(FIXED_STEP_SOURCES.get(step, ()))
        sources += [source for source in chosen if source not in sources]
    return sources


def check_scores_this_model(metrics: Mapping, fingerprint: str, metrics_name: str) -> None:
    """Refuse a metrics file that scored other weights (its ``model_fingerprint``): the
    card would state another model's scores."""
    scored = metrics.get("model_fingerprint")
    if scored is not None and scored != fingerprint:
        raise ValueError(f"{metrics_name} scored other weights (fingerprint {scored}) than the model now in the "
                         f"folder ({fingerprint}): run its evaluation before writing the card")


def model_card(path: str | Path, metrics: Mapping, reports: Mapping[str, Mapping], data_processing,
               raw_data, shown_as: str | None = None, metrics_name: str = "the metrics file",
               base: Mapping | None = None) -> str:
    """The card of the model in ``path``: its folder's facts, checked against the
    ``metrics`` that scored it, the Hub ids of the raw data the ``reports``' steps
    read (``data_processing`` and ``raw_data``: the parsed blocks that chose them)."""
    from contrastive_sentence_embeddings.data.raw_sources import hub_dataset_ids
    from contrastive_sentence_embeddings.encoders.embedding_cache import model_fingerprint

    folder = read_model_folder(path, shown_as)
    check_scores_this_model(metrics, model_fingerprint(str(path)), metrics_name)
    datasets: list[str] = []
    for source in training_sources(reports, data_processing):
        datasets += [d for d in hub_dataset_ids(source, (raw_data.hub or {}).get(source)) if d not in datasets]
    return render_model_card(folder, metrics, reports, datasets, base)


# --- rendering (pure) -----------------------------------------------------------------
def sts_results(metrics: Mapping) -> list[dict]:
    """The STS tasks present in ``metrics``: key, name, Hub data set, score, interval
    and number of pairs scored (from the ``evaluation_report``)."""
    from contrastive_sentence_embeddings.evaluation.mteb_results import MTEB_STS_TASKS, task_decision

    report = metrics.get("evaluation_report") or {}
    pairs = report.get("pairs") or {}
    benchmark = report.get("benchmark_pairs") or {}
    tasks = {task.key: task for task in MTEB_STS_TASKS}
    rows = []
    for key, name, hub_id in STS_BENCHMARKS:
        value = metrics.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            # The Hub id is claimed only for the pairs that are that data set's test split
            # (the MTEB export's rule): SentEval's SICK-R is SICK's 4,927 test pairs, the
            # Hub's mteb/sickr-sts all 9,927 pairs of SICK.
            is_benchmark, why = task_decision(tasks[key], report) if key in tasks else (False, "")
            rows.append({"key": key, "name": name, "dataset": hub_id, "value": float(value),
                         "interval": metrics.get(f"{key}_ci"), "pairs": pairs.get(key),
                         "benchmark_pairs": benchmark.get(key), "is_the_benchmark": is_benchmark,
                         "data": why})
    return rows


def front_matter(folder: ModelFolder, metrics: Mapping, datasets: Sequence[str]) -> dict:
    """The card's YAML metadata in the Hub's fields (``model-index`` per
    https://github.com/huggingface/hub-docs/blob/main/modelcard.md)."""
    metadata = folder.metadata
    kind = str(metadata.get("method") or "")
    name = str(metadata.get("name") or Path(folder.path).name)
    tags = ["sentence-transformers", "feature-extraction", "sentence-similarity"]
    tags += [tag for tag in (kind, "contrastive-learning", "contrastive-sentence-embeddings") if tag]
    matter: dict = {"library_name": "sentence-transformers", "pipeline_tag": "sentence-similarity", "tags": tags}
    if folder.base_model_id:
        matter["base_model"] = folder.base_model_id
    if datasets:
        matter["datasets"] = list(datasets)
    if folder.base_license:
        matter["license"] = folder.base_license
    results = [{
        "task": {"type": "semantic-similarity", "name": "Semantic Similarity"},
        "dataset": {"name": row["name"], "type": row["dataset"], "split": "test"},
        "metrics": [{"type": STS_METRIC_TYPE, "value": row["value"], "name": STS_METRIC_NAME}],
    } for row in sts_results(metrics) if row["is_the_benchmark"]]
    if results:
        matter["metrics"] = [STS_METRIC_TYPE]
        matter["model-index"] = [{"name": name, "results": results}]
    return matter


def render_model_card(folder: ModelFolder, metrics: Mapping, reports: Mapping[str, Mapping],
                      datasets: Sequence[str], base: Mapping | None = None) -> str:
    """The whole ``README.md``: front matter, then the sections. ``reports``: the data
    report of every step that prepared the training data (``{step: report}``, as
    ``data/08_reporting/data_report/<step>.json`` holds it); ``datasets``: the Hub ids
    of the data those steps read; ``base``: the comparison with the starting encoder
    (:func:`base_comparison`), when the caller has one."""
    matter = yaml.safe_dump(front_matter(folder, metrics, datasets), sort_keys=False, allow_unicode=True, width=1000)
    sections = [
        _summary(folder),
        _method(folder.metadata),
        _architecture(folder),
        _training(folder.metadata, datasets),
        _data_report(reports),
        _evaluation(metrics, base),
        _usage(folder),
        _citation(folder.metadata),
    ]
    return f"---\n{matter}---\n\n" + "\n\n".join(section.strip("\n") for section in sections if section) + "\n"


def _summary(folder: ModelFolder) -> str:
    metadata = folder.metadata
    name = metadata.get("name") or Path(folder.path).name
    reference = METHOD_REFERENCES.get(str(metadata.get("method")))
    method = reference.title if reference else str(metadata.get("method") or "an unknown method")
    seed = f", seed {metadata['seed']}" if metadata.get("seed") is not None else ""
    return (f"# {name}\n\n"
            f"A sentence encoder trained with **{method}** from `{metadata.get('base_encoder', 'unknown')}`{seed}. "
            f"It maps a sentence to a {folder.embedding_dimension}-dimensional vector; compare two sentences by the "
            "cosine similarity of their vectors.\n\n"
            "Trained, scored and described by the contrastive-sentence-embeddings project; every number below "
            f"comes from this model's metadata (`{METADATA_FILE}`), its metrics file or the data reports of "
            "its training data.")


def _method(metadata: Mapping) -> str:
    reference = METHOD_REFERENCES.get(str(metadata.get("method")))
    if reference is None:
        return f"## Method\n\n`{metadata.get('method')}` (no description on record)."
    return f"## Method\n\n{reference.title} ({reference.cited_as}). {reference.summary}"


def _architecture(folder: ModelFolder) -> str:
    pooling = str(folder.metadata.get("pooling"))
    lines = ["## Model", "",
             "The modules sentence-transformers loads from this folder, in order:", ""]
    dense = iter(folder.dense_layers)
    for index, module in enumerate(folder.modules):
        detail = ""
        if module == "Transformer":
            detail = f": `{folder.metadata.get('base_encoder', '')}` architecture, weights as trained"
            if folder.max_seq_length:
                detail += f", inputs truncated to {folder.max_seq_length} tokens"
        elif module == "Dense":
            detail = f": {next(dense, '')}"
        lines.append(f"{index}. `{module}`{detail}")
    lines += ["",
              f"- Pooling: `{pooling}`, {POOLING_DESCRIPTIONS.get(pooling, 'see the project docs')}.",
              f"- Output: {folder.embedding_dimension}-dimensional embeddings; similarity: cosine.",
              "- Training-only heads (projectors, MLPs, masked-LM heads) are not part of this model: the folder "
              "holds only the modules listed above."]
    return "\n".join(lines)


def _yaml_block(values: Mapping) -> str:
    return "```yaml\n" + yaml.safe_dump(dict(values), sort_keys=False, allow_unicode=True, width=1000) + "```"


# How the card names ``peak_memory_gib`` by its ``peak_memory_measure`` (what the
# trainer measured, training.trainer.MEMORY_MEASURES); a model saved before the measure
# was recorded gets the neutral name.
MEMORY_LABELS = {
    "cuda_max_allocated": "peak GPU memory allocated by PyTorch (GiB)",
    "process_peak_rss": "peak memory of the training process (RSS, GiB)",
}


def training_parameters(metadata: Mapping) -> dict:
    """The training settings of the run that the run read: ``training`` less
    ``training_unused`` (those it never read had no effect, e.g. ``max_length`` for
    DeCLUTR, whose spans are sampled in data preparation; trainer.SettingsRead)."""
    unused = set(metadata.get("training_unused") or ())
    return {key: value for key, value in (metadata.get("training") or {}).items() if key not in unused}


def _training(metadata: Mapping, datasets: Sequence[str]) -> str:
    memory_label = MEMORY_LABELS.get(str(metadata.get("peak_memory_measure")),
                                     "peak memory (GiB; GPU allocated on CUDA, process RSS on CPU)")
    budget = [
        ("examples seen", metadata.get("examples_seen")),
        ("optimiser steps", metadata.get("steps")),
        ("kept weights of step", metadata.get("best_step")),
        ("training time (s)", metadata.get("train_seconds")),
        ("examples per second", metadata.get("examples_per_second")),
        ("processes", metadata.get("num_processes")),
        (memory_label, metadata.get("peak_memory_gib")),
    ]
    for key in ("train_sentences", "train_documents", "span_epochs", "anchor_spans", "train_pairs",
                "pairs_dataset"):
        if metadata.get(key) is not None:
            budget.append((key.replace("_", " "), metadata[key]))
    lines = ["## Training", ""]
    if datasets:
        lines += ["Data the training examples come from (Hub ids of the sources whose rows were kept by the "
                  "data preparation; offline runs read samples of them from a mirror): "
                  + ", ".join(f"`{d}`" for d in datasets) + ".", ""]
    lines += ["| | |", "|---|---|"]
    lines += [f"| {label} | {_plain(value)} |" for label, value in budget if value is not None]
    best_dev = metadata.get("best_dev")
    if isinstance(best_dev, Mapping) and best_dev:
        lines.append("| dev scores at the kept step | " + ", ".join(
            f"{key} {_plain(value)}" for key, value in best_dev.items()) + " |")
    lines += ["", "Method parameters:", "", _yaml_block(metadata.get("method_params") or {}),
              "", "Training parameters (those the run read; the others had no effect):", "",
              _yaml_block(training_parameters(metadata))]
    versions = metadata.get("versions")
    if isinstance(versions, Mapping) and versions:
        lines += ["", "Library versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v) + "."]
    return "\n".join(lines)


def _data_report(reports: Mapping[str, Mapping]) -> str:
    if not reports:
        return ""
    lines = ["## Training data report", "",
             "Rows in, out and dropped by each data-preparation step that fed this model "
             "(`data/08_reporting/data_report/<step>.json`):", "",
             "| step | rows in | rows out | dropped | main reasons dropped | rows out by input |",
             "|---|---:|---:|---:|---|---|"]
    for step, report in reports.items():
        dropped = report.get("dropped") or {}
        reasons = sorted(dropped.items(), key=lambda item: (-item[1], item[0]))[:3]
        reasons_text = "; ".join(f"{reason} ({count:,})" for reason, count in reasons)
        by_input = report.get("rows_out_by_input")
        inputs_text = "; ".join(f"{name} {_count(count)}" for name, count in by_input.items()) \
            if isinstance(by_input, Mapping) else ""
        lines.append(f"| {step} | {_count(report.get('rows_in'))} | {_count(report.get('rows_out'))} | "
                     f"{_count(report.get('rows_dropped'))} | {reasons_text} | {inputs_text} |")
    return "\n".join(lines)


def _base_comparison(base: Mapping) -> str:
    """The paragraph comparing the model with its starting encoder (``base``: what
    :func:`base_comparison` returns)."""
    if base.get("reason"):
        return f"No comparison with the starting encoder: {base['reason']}."
    significant = "" if base["p_value"] < base["alpha"] else f", not significant at p < {base['alpha']}"
    return (f"Against its starting encoder, `{base['base_encoder']}` with the same pooling ({base['pooling']}; row "
            f"`{base['name']}`, STS avg {base['base_sts_avg']:.2f}): **{base['difference']:+.2f}** STS avg "
            f"(p {base['p_value']:.3f}{significant}), a paired bootstrap over the pairs of the "
            f"{base['tasks']} STS tasks ({base['resamples']:,} resamples, the leaderboard's `vs base`).")


def base_comparison(metrics: Mapping, pairs: Mapping, baseline_metrics: Mapping[str, Mapping],
                    baseline_pairs: Mapping[str, Mapping], n_resamples: int, seed: int, alpha: float) -> dict:
    """The model against the untrained encoder it started from, scored by the baseline
    with the same pooling (``baseline-<pooling>``): its STS avg and the paired bootstrap
    test of the difference over the pairs both scored (as the leaderboard's ``vs base``),
    or ``{"reason": ...}`` when there is no such row or no per-pair predictions."""
    from contrastive_sentence_embeddings.evaluation.significance import paired_bootstrap_pvalue

    model = metrics.get("model") or {}
    encoder, pooling = model.get("base_encoder"), model.get("pooling")
    name = f"baseline-{pooling}"
    base = baseline_metrics.get(name)
    if base is None or (base.get("model") or {}).get("base_encoder") != encoder:
        return {"reason": f"no baseline row of {encoder} with {pooling} pooling was scored in this checkout "
                          "(kedro run --pipelines=baseline)"}
    if not isinstance(base.get("sts_avg"), (int, float)) or not isinstance(metrics.get("sts_avg"), (int, float)):
        return {"reason": f"no STS avg of this model and {name} to compare (a task not scored)"}
    tasks = sorted(set(pairs) & set(baseline_pairs.get(name) or {}))
    if not tasks:
        return {"reason": f"no per-pair STS predictions of this model and {name} to compare"}
    base_pairs = baseline_pairs[name]
    test = paired_bootstrap_pvalue({t: base_pairs[t]["gold"] for t in tasks}, {t: pairs[t]["predicted"] for t in tasks},
                                   {t: base_pairs[t]["predicted"] for t in tasks}, n_resamples=n_resamples, seed=seed)
    return {"name": name, "base_encoder": encoder, "pooling": pooling, "base_sts_avg": float(base.get("sts_avg")),
            "difference": float(test.difference), "p_value": float(test.p_value), "alpha": alpha,
            "tasks": len(tasks), "resamples": n_resamples}


def _evaluation(metrics: Mapping, base: Mapping | None = None) -> str:
    rows = sts_results(metrics)
    if not rows:
        return "## Evaluation\n\nThis model was not scored on the STS tasks."
    has_intervals = any(isinstance(row["interval"], Sequence) for row in rows)
    header = "| task | Spearman x 100 |" + (" 95% interval |" if has_intervals else "") + " pairs scored |"
    lines = ["## Evaluation", "",
             "Semantic textual similarity, SentEval's test files: the Spearman correlation between the cosine "
             "similarity of the two sentences' embeddings and the gold score, over all pairs of a task, x 100.",
             "", header, "|---|---:|" + ("---:|" if has_intervals else "") + "---:|"]
    not_scored = (metrics.get("evaluation_report") or {}).get("missing_tasks") or {}
    by_key = {row["key"]: row for row in rows}
    for key, name, _ in STS_BENCHMARKS:
        if key in not_scored:  # every pair of its files was dropped as bad input (the warnings say why)
            lines.append(f"| {name} | missing |{' |' if has_intervals else ''} 0 |")
        if key not in by_key:
            continue
        row = by_key[key]
        interval = ""
        if has_intervals:
            interval = (f" {row['interval'][0]:.2f} - {row['interval'][1]:.2f} |"
                        if isinstance(row["interval"], Sequence) else " |")
        pairs = _count(row["pairs"])
        if row["pairs"] is not None and row["benchmark_pairs"] not in (None, row["pairs"]):
            pairs += f" (of {row['benchmark_pairs']:,})"
        lines.append(f"| {row['name']} | {row['value']:.2f} |{interval} {pairs} |")
    average = metrics.get("sts_avg")
    if isinstance(average, (int, float)):
        interval = metrics.get("sts_avg_ci")
        interval_text = ""
        if has_intervals:
            interval_text = (f" {interval[0]:.2f} - {interval[1]:.2f} |" if isinstance(interval, Sequence) else " |")
        lines.append(f"| average (sts_avg) | {average:.2f} |{interval_text} |")
    elif not_scored:
        lines.append(f"| average (sts_avg) | n/a |{' |' if has_intervals else ''} |")
    not_claimed = [row for row in rows if not row["is_the_benchmark"]]
    if not_claimed:
        lines += ["", "Not listed in the card's `model-index` (its scores are not on the data set the Hub id "
                      "names): " + "; ".join(f"{row['name']}: {row['data']}" for row in not_claimed) + "."]
    if base is not None:
        lines += ["", _base_comparison(base)]
    warnings = (metrics.get("evaluation_report") or {}).get("warnings") or []
    if warnings:
        lines += ["", "Evaluation warnings:", ""] + [f"- {warning}" for warning in warnings]
    if metrics.get("evaluated_at"):
        lines += ["", f"Scored at {metrics['evaluated_at']}."]
    return "\n".join(lines)


def _usage(folder: ModelFolder) -> str:
    pooling = str(folder.metadata.get("pooling"))
    loading, pooling_code = _AUTOMODEL_POOLING.get(pooling, _AUTOMODEL_POOLING["mean"])
    path = folder.path
    text = ["## Usage", "", "With sentence-transformers (the pooling and any dense layers come with the folder):",
            "", "```python", "from sentence_transformers import SentenceTransformer", "",
            f'model = SentenceTransformer("{path}")',
            'embeddings = model.encode(["A man is playing a guitar.", "Someone plays an instrument."])',
            "print(model.similarity(embeddings[0], embeddings[1]))", "```", "",
            f"With transformers alone, pooling as in training (`{pooling}`):", "", "```python", "import torch",
            "from transformers import AutoModel, AutoTokenizer", "",
            f'tokenizer = AutoTokenizer.from_pretrained("{path}")',
            f'model = AutoModel.from_pretrained("{path}").eval()',
            'batch = tokenizer(["A man is playing a guitar."], padding=True, truncation=True, return_tensors="pt")',
            "with torch.no_grad():",
            f"    outputs = model(**batch{loading})",
            pooling_code, "```"]
    if folder.dense_layers:
        text += ["", "`AutoModel` loads the encoder only: the trained dense layers after the pooling "
                 f"({len(folder.dense_layers)} `Dense` module folders) are applied by sentence-transformers, "
                 "so use it for this model's embeddings."]
    return "\n".join(text)


def _citation(metadata: Mapping) -> str:
    reference = METHOD_REFERENCES.get(str(metadata.get("method")))
    if reference is None:
        return ""
    if reference.bibtex is None:
        return f"## Citation\n\n{reference.title}: {reference.cited_as}."
    return f"## Citation\n\n{reference.title} ({reference.cited_as}):\n\n```bibtex\n{reference.bibtex}\n```"


def _plain(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else ("" if value is None else str(value))
