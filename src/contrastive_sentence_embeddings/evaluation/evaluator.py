"""Evaluating saved encoders: STS, transfer tasks and alignment/uniformity in one go.

The data are read once into an :class:`EvaluationData`; each model is then encoded
once per sentence, for all the pooling methods asked of it (the baseline scores five
poolings from one encoding). Transfer-task embeddings go through an on-disk cache
keyed by the model's weights, so re-running the leaderboard is cheap.

The per-model result is a flat dict (a DVC metric): a ``model`` block naming the
method, base encoder, pooling and seed, then ``sts12`` .. ``sickr``, ``sts_avg``,
the ``_wmean`` variants and per-subset values (``sts12/MSRpar``), the transfer
accuracies (``MR`` .. ``MRPC``, ``MRPC_f1``, ``transfer_avg``), ``alignment`` and
``uniformity``, ``evaluated_at`` (UTC, ISO 8601: when the scores were computed; the
leaderboard keeps the newest result of a model) and ``model_fingerprint`` (see
:func:`model_fingerprint`). An ``evaluation_report`` block records what the scores
were computed on: the number of pairs of every STS task (``pairs``) against the
benchmark's size (``benchmark_pairs``), a warning for every difference
(``warnings``), and the rows read, dropped (by reason, with ``file:line``) and read
as variants (``data``), and where the STS data came from (``sts_source``: mirror or
hub; for the Hub also ``sts_hub``, ``sts_unavailable`` and ``sts_notes``, see
:func:`sts_source_report`). It lives in the metrics file itself, so the evaluation
nodes save it with no catalog entry of its own.
A ``provenance`` block says what produced the record: the model's training side
(copied from its ``cse_metadata.json``: parameter block and hashes, seed, encoder,
code and training data), the scoring code, settings and data, and the model's
project-relative path and fingerprint (:func:`.provenance.record_provenance`;
``docs/evaluation.md``).
With ``sts_bootstrap_resamples`` > 0, also ``<task>_ci`` and
``sts_avg_ci``: ``[low, high]`` percentile bootstrap intervals of the "all" Spearman
values (see :mod:`.significance`). The per-pair STS predictions a significance test
needs can be collected with ``pair_predictions`` (see :func:`evaluate_encoder`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import cached_property

import numpy as np

from contrastive_sentence_embeddings.records import provenance
from contrastive_sentence_embeddings.encoders.attention_kernels import check_attention_backends
from contrastive_sentence_embeddings.configuration.layering import accepted_if_unknown, named_key
from contrastive_sentence_embeddings.configuration.strict import (
    RANGE,
    Allowed,
    ParameterError,
    PerName,
    check_values,
    flag,
    integer,
    number,
    random_seed,
)
from contrastive_sentence_embeddings.data.raw_file import RawFile
from contrastive_sentence_embeddings.data.report import StepReport
from contrastive_sentence_embeddings.data.sts_hub import HUB_REPOS
from contrastive_sentence_embeddings.encoders.loading import resolve_encoder
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder, precision_tag, read_model_metadata
from contrastive_sentence_embeddings.evaluation.alignment import alignment_uniformity
from contrastive_sentence_embeddings.evaluation.significance import bootstrap_task_intervals
from contrastive_sentence_embeddings.evaluation.sts import (
    BENCHMARK_PAIRS,
    STSB_FILES,
    StsSubset,
    check_pair_counts,
    cosine_scores,
    distinct_sentences,
    pair_counts,
    read_sts_benchmark,
    read_sts_provenance,
    read_stsb_split,
    score_sts,
    unavailable_scores,
)
from contrastive_sentence_embeddings.encoders.embedding_cache import EmbeddingCache, model_fingerprint
from contrastive_sentence_embeddings.evaluation.records import EXTERNAL, UNTRAINED_ROWS  # noqa: F401
from contrastive_sentence_embeddings.evaluation.transfer import (
    SPLIT_TASKS,
    TRANSFER_TASKS,
    TransferTask,
    evaluate_transfer,
    read_transfer_tasks,
    subsample_train,
)

logger = logging.getLogger(__name__)
Partitions = Mapping[str, Callable[[], RawFile]]


# EXTERNAL, UNTRAINED_ROWS: the rows nobody trained here (records.py), re-exported for the nodes.


@dataclass(frozen=True)
class ModelSpec:
    """One leaderboard row to produce: which encoder, pooled how, and its identity."""

    name: str
    path: str
    pooling: str
    method: str = "baseline"
    base_encoder: str = ""
    seed: int | None = None

    def identity(self) -> dict:
        return asdict(self)


# transfer_train_rows: a task with a training split, to a number of rows (null: all).
TRAIN_ROWS = PerName(SPLIT_TASKS, Allowed(int, 2, nullable=True))


@dataclass
class EvaluationSettings:
    """What to score and how. ``sts``, ``transfer`` and ``alignment`` switch the three
    parts on and off; ``cache_dir`` holds transfer embeddings, and an untrained
    encoder's STS embeddings (None: no cache)."""

    sts: bool = field(default=True, metadata=flag())
    transfer: bool = field(default=False, metadata=flag())
    alignment: bool = field(default=True, metadata=flag())
    transfer_tasks: Sequence[str] = TRANSFER_TASKS
    transfer_seed: int = field(default=1111, metadata=random_seed())
    k_folds: int = field(default=10, metadata=integer(2))
    # The most training rows a split task's classifier sees ({SST2: 10000}: a seeded
    # sample, transfer_seed), said in every metrics file's evaluation_report; {} or a
    # task's null: all.
    transfer_train_rows: Mapping[str, int | None] = field(default_factory=dict, metadata={RANGE: TRAIN_ROWS})
    alignment_split: str = "test"
    alignment_min_score: float = field(default=4.0, metadata=number(0, 5))  # STS scores run from 0 to 5
    batch_size: int = field(default=128, metadata=integer(1))
    device: str | None = None
    # The attention kernels every encoding may use (encoders/attention_kernels.py); None: PyTorch's.
    attention_backends: Sequence[str] | None = None
    cache_dir: str | None = "data/07_model_output/embedding_cache"
    on_bad_input: str = "skip"
    # Bootstrap intervals of each STS score (0 resamples: none); seeded, so a model's
    # intervals are the same on every run.
    sts_bootstrap_resamples: int = field(default=1000, metadata=integer(0))
    sts_bootstrap_seed: int = field(default=0, metadata=random_seed())
    sts_confidence_level: float = field(default=0.95, metadata=number(0, 1, low_open=True, high_open=True))

    @classmethod
    def from_params(cls, params: Mapping) -> "EvaluationSettings":
        known = {key: value for key, value in params.items() if key in cls.__dataclass_fields__}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(f"unknown evaluation parameter(s): {', '.join(unknown)}")
        return cls(**known)

    def __post_init__(self) -> None:
        self.attention_backends = check_attention_backends(self.attention_backends)
        problem = TRAIN_ROWS.problem(self.transfer_train_rows)
        if problem:
            raise ValueError(f"transfer_train_rows {problem}")
        # null: every row (how conf/paper undoes a CPU default under Kedro's soft merge)
        self.transfer_train_rows = {task: rows for task, rows in self.transfer_train_rows.items() if rows is not None}


def evaluation_settings(evaluation: Mapping, overrides: Mapping | None = None,
                        where: str = "evaluation") -> EvaluationSettings:
    """``params:evaluation`` with a block's overrides on top, parsed strictly."""
    merged = {**evaluation, **(overrides or {})}
    check_values(EvaluationSettings, evaluation, "evaluation")
    check_values(EvaluationSettings, overrides or {}, where)
    try:
        return EvaluationSettings.from_params(merged)
    except ValueError as error:
        raise ParameterError(f"{where}: {error}", key=named_key(error, where),
                             accepted=accepted_if_unknown(error, EvaluationSettings)) from error


@dataclass
class EvaluationData:
    """The evaluation data sets, read once and shared by every model."""

    sts: dict[str, list[StsSubset]] | None = None
    transfer: dict[str, TransferTask] | None = None
    geometry: StsSubset | None = None
    report: StepReport = field(default_factory=lambda: StepReport("evaluation_data"))
    warnings: list[str] = field(default_factory=list)
    # Where the STS files came from (``read_sts_provenance``): the mirror, or the Hub.
    sts_provenance: dict = field(default_factory=lambda: {"source": "mirror"})

    @classmethod
    def read(cls, raw_sts: Partitions, raw_transfer: Partitions, settings: EvaluationSettings) -> "EvaluationData":
        data = cls()
        if settings.sts:
            data.sts = read_sts_benchmark(raw_sts, data.report, settings.on_bad_input)
            data.sts_provenance = read_sts_provenance(raw_sts)
            for note in sts_source_report(data.sts, data.sts_provenance).get("sts_notes", []):
                logger.warning("STS data: %s", note)
        if settings.alignment:
            pid = STSB_FILES[settings.alignment_split]
            if data.sts is not None and settings.alignment_split == "test" and "stsb" not in data.sts:
                logger.warning("alignment/uniformity: not scored, the STS-B test set has no pair left")
            elif data.sts and settings.alignment_split == "test":
                # The STS-B test set is already read (and counted) for STS: reading it
                # again would count its rows twice in the report.
                data.geometry = data.sts["stsb"][0]
            elif pid not in raw_sts:
                raise FileNotFoundError(f"alignment/uniformity: expected the raw STS file {pid} in data/01_raw/sts")
            else:
                data.geometry = read_stsb_split(raw_sts[pid](), settings.alignment_split, data.report,
                                                settings.on_bad_input)
        cut = []
        if settings.transfer:
            data.transfer = read_transfer_tasks(raw_transfer, data.report, tuple(settings.transfer_tasks),
                                                on_bad_input=settings.on_bad_input)
            for task, rows in settings.transfer_train_rows.items():
                if task not in data.transfer:  # (a null, the whole split, was dropped on parsing)
                    continue
                available = len(data.transfer[task].train)
                data.transfer[task] = subsample_train(data.transfer[task], rows, settings.transfer_seed)
                if len(data.transfer[task].train) < available:  # subsample_train keeps a smaller split whole
                    data.report.extra.setdefault("transfer training rows used", {})[task] = {
                        "used": rows, "read": available, "seed": settings.transfer_seed}
                    cut.append(f"{task}: the classifier trained on {rows:,} of {available:,} training rows "
                               f"(evaluation.transfer_train_rows, seed {settings.transfer_seed}); "
                               "tested on the whole test set")
                    logger.info("transfer %s", cut[-1])
        data.report.log(logger)
        if data.sts:
            data.warnings = [*(f"{task}: not scored, {why}" for task, why in data.missing_tasks.items()),
                             *check_pair_counts(pair_counts(data.sts))]
        data.warnings += cut
        return data

    @property
    def missing_tasks(self) -> dict[str, str]:
        """``{task: why}`` for every STS task left with no pair to score (read_sts_benchmark)."""
        return dict(self.report.extra.get("missing_tasks") or {})

    def evaluation_report(self) -> dict:
        """What the scores are computed on (the ``evaluation_report`` block of every
        metrics file): pairs per STS task against the benchmark's size, warnings for
        differences, and the readers' row counts, drops and variants."""
        counts = pair_counts(self.sts or {})
        report = {
            "pairs": counts,
            "benchmark_pairs": {task: BENCHMARK_PAIRS[task] for task in counts if task in BENCHMARK_PAIRS},
            "warnings": list(self.warnings),
            **({"missing_tasks": self.missing_tasks} if self.missing_tasks else {}),
            "data": self.report.to_dict(),
        }
        if self.sts:
            report.update(sts_source_report(self.sts, self.sts_provenance))
        if self.geometry is not None:
            report["alignment_pairs"] = len(self.geometry)
        return report

    @cached_property
    def fingerprints(self) -> dict[str, str]:
        """What the scores are computed on, as hashes of the data as read (the
        ``provenance.evaluation.data`` of every record): ``sts`` (each task's pairs:
        both sentences and the gold score, subset by subset), ``alignment`` (the split
        scored for alignment/uniformity) and ``transfer`` (every task's sentences and
        labels); only the parts read."""
        parts = {}
        if self.sts:
            parts["sts"] = _hash_rows([task, subset.subset, subset.sentence1, subset.sentence2, subset.scores.tolist()]
                                      for task in sorted(self.sts) for subset in self.sts[task])
        if self.geometry is not None:
            subset = self.geometry
            parts["alignment"] = _hash_rows([[subset.sentence1, subset.sentence2, subset.scores.tolist()]])
        if self.transfer:
            parts["transfer"] = _hash_rows(
                [name, task.protocol, list(task.classes), split_name, split.sentences, split.labels.tolist(),
                 split.second]
                for name, task in sorted(self.transfer.items())
                for split_name in ("data", "train", "dev", "test")
                if (split := getattr(task, split_name)) is not None)
        return parts

    def sentence_level_sentences(self) -> list[str]:
        """Sentences of STS and of the alignment/uniformity split, each once."""
        suite = dict(self.sts or {})
        if self.geometry is not None:
            suite["_geometry"] = [self.geometry]
        return distinct_sentences(suite)


def _hash_rows(rows) -> str:
    """sha256 over the canonical JSON of each row in turn."""
    import hashlib

    digest = hashlib.sha256()
    for row in rows:
        digest.update(provenance.canonical_json(row).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def sts_source_report(suite: Mapping[str, Sequence[StsSubset]], provenance: Mapping) -> dict:
    """The ``evaluation_report`` keys saying where the STS data came from:
    ``sts_source`` (``mirror`` or ``hub``); for the Hub, ``sts_hub`` (each task's
    repository and revision), ``sts_unavailable`` (the scores the Hub copies cannot
    give, see :func:`.sts.unavailable_scores`) and ``sts_notes`` in words."""
    source = {"sts_source": str(provenance.get("source", "mirror"))}
    missing = unavailable_scores(suite)
    if source["sts_source"] == "mirror" and not missing:
        return source
    tasks = provenance.get("tasks") or {}
    source["sts_hub"] = {task: {"repo_id": entry.get("repo_id"), "revision": entry.get("revision")}
                         for task, entry in tasks.items()}
    source["sts_unavailable"] = missing
    pooled = [task for task, subsets in suite.items() if any(subset.pooled for subset in subsets)]
    notes = []
    if pooled:
        notes.append(f"{', '.join(pooled)}: the pairs carry no SentEval subset, so only the pooled \"all\" "
                     "Spearman (one correlation over every pair, as SentEval's \"all\") is reported; the "
                     "per-subset scores and the _wmean values are not computable: "
                     f"{', '.join(missing)}")
    if tasks.get("sickr", {}).get("repo_id") == HUB_REPOS["sickr"]:
        notes.append(f"sickr: {HUB_REPOS['sickr']} is all of SICK (train, trial and test), not SentEval's "
                     "SICK-R test split; its score is not the papers' SICK-R (see the pair counts)")
    source["sts_notes"] = notes
    return source


def sts_pair_predictions(
    suite: Mapping[str, Sequence[StsSubset]], embedding_of: Mapping[str, np.ndarray]
) -> dict[str, dict[str, np.ndarray]]:
    """Per task, every scored pair's gold score, predicted cosine similarity and subset
    name, the subsets concatenated in the suite's order (the pairs of the "all" score):
    ``{task: {"gold", "predicted", "subset"}}``, as :mod:`.significance` takes them."""
    pairs = {}
    for task, subsets in suite.items():
        predicted = [cosine_scores(np.stack([embedding_of[s] for s in subset.sentence1]),
                                   np.stack([embedding_of[s] for s in subset.sentence2])) for subset in subsets]
        pairs[task] = {
            "gold": np.concatenate([subset.scores for subset in subsets]),
            "predicted": np.concatenate(predicted),
            "subset": np.concatenate([np.full(len(subset), subset.subset) for subset in subsets]),
        }
    return pairs


def flatten_transfer(results: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{"MR": acc, ..., "MRPC": acc, "MRPC_f1": f1, "transfer_avg": mean acc}``."""
    flat = {task: float(scores["acc"]) for task, scores in results.items()}
    if "MRPC" in results and "f1" in results["MRPC"]:
        flat["MRPC_f1"] = float(results["MRPC"]["f1"])
    if all(task in results for task in TRANSFER_TASKS):
        flat["transfer_avg"] = float(np.mean([results[task]["acc"] for task in TRANSFER_TASKS]))
    return flat


def embedding_cache_key(fingerprint: str, pooling: str, device) -> str:
    """What produced a set of cached embeddings (``EmbeddingCache`` adds the sentences):
    the weights' fingerprint, the pooling and the precision (``encoding.precision_tag``),
    so that embeddings computed in bf16 on a GPU are never read back by an fp32
    evaluation on a CPU, whose metrics would say CPU."""
    return f"{fingerprint}:{pooling}:{precision_tag(device)}"


def pooling_caches(encoder: SentenceEncoder, poolings: Sequence[str], cache_dir: str,
                   fingerprint: str) -> dict[str, EmbeddingCache]:
    """One disk cache per pooling of ``encoder`` in ``cache_dir`` (the transfer tasks'
    embeddings, and an untrained encoder's STS ones)."""
    return {p: EmbeddingCache(lambda s, p=p: encoder.encode_poolings(s, [p])[p], cache_dir,
                              embedding_cache_key(fingerprint, p, encoder.device)) for p in poolings}


def _sentence_level_embeddings(
    encoder: SentenceEncoder, sentences: list[str], poolings: Sequence[str], settings: EvaluationSettings,
    fingerprint: str, cached: bool,
) -> dict[str, np.ndarray]:
    """The STS and alignment/uniformity sentences encoded once for all ``poolings``.
    An untrained encoder (``cached``: the baseline, an external row) is scored again by
    every pipeline whose leaderboard needs its row, on the same weights and sentences:
    its embeddings go through the disk cache under the key the transfer embeddings use
    (weights' fingerprint, pooling, precision; the sentences are hashed by the cache),
    so the second method's run reads them instead of encoding 26,083 sentences again.
    A trained model is scored once; its embeddings are not kept."""
    if not (cached and settings.cache_dir):
        return encoder.encode_poolings(sentences, poolings)
    caches = pooling_caches(encoder, poolings, settings.cache_dir, fingerprint)
    if all(cache.path(sentences).is_file() for cache in caches.values()):
        return {p: cache(sentences) for p, cache in caches.items()}
    embedded = encoder.encode_poolings(sentences, poolings)
    for pooling, cache in caches.items():
        cache.store(sentences, embedded[pooling])
    return embedded


def _transfer_scores(
    encoder: SentenceEncoder, poolings: Sequence[str], tasks: Mapping[str, TransferTask],
    settings: EvaluationSettings, fingerprint: str,
) -> dict[str, dict[str, float]]:
    """Transfer scores per pooling. Each task's sentences are encoded once for all
    poolings; the cache (when on) stores one file per pooling."""
    scores = {}
    caches = pooling_caches(encoder, poolings, settings.cache_dir, fingerprint) if settings.cache_dir else {}
    # Without a disk cache, the other poolings of a batch of sentences wait in memory
    # until their own pass over the tasks asks for them.
    memo: dict[tuple[str, int], np.ndarray] = {}

    def encode_for(pooling: str) -> Callable[[list[str]], np.ndarray]:
        def encode(sentences: list[str]) -> np.ndarray:
            key = hash(tuple(sentences))
            if caches and caches[pooling].path(sentences).is_file():
                return caches[pooling](sentences)
            if (pooling, key) in memo:
                return memo.pop((pooling, key))
            embedded = encoder.encode_poolings(sentences, poolings)
            for other, values in embedded.items():
                if caches:
                    caches[other].store(sentences, values)
                elif other != pooling:
                    memo[(other, key)] = values
            return embedded[pooling]

        return encode

    for pooling in poolings:
        results = evaluate_transfer(tasks, encode_for(pooling), seed=settings.transfer_seed, k_folds=settings.k_folds)
        scores[pooling] = flatten_transfer(results)
    return scores


def evaluate_encoder(
    specs: Sequence[ModelSpec], data: EvaluationData, settings: EvaluationSettings,
    pair_predictions: dict[str, dict] | None = None,
) -> dict[str, dict]:
    """Metrics for every spec of one encoder (all ``specs`` share ``path``). When
    ``pair_predictions`` is a dict, each spec's per-pair STS predictions
    (:func:`sts_pair_predictions`) are put in it under the spec's name, for
    :func:`.significance.save_pair_predictions`."""
    paths = {spec.path for spec in specs}
    if len(paths) != 1:
        raise ValueError(f"evaluate_encoder takes specs of one encoder, got {sorted(paths)}")
    started = time.perf_counter()
    path = specs[0].path
    # Taken before the weights are read: a model replaced during the evaluation (another
    # run saving into the folder) never lends its fingerprint to the scores of this one.
    fingerprint = model_fingerprint(path)
    model_metadata = read_model_metadata(resolve_encoder(path))
    encoder = SentenceEncoder.load(path, specs[0].pooling, settings.batch_size, settings.device,
                                   settings.attention_backends)
    poolings = list(dict.fromkeys(spec.pooling for spec in specs))
    results: dict[str, dict] = {spec.pooling: {} for spec in specs}

    sentences = data.sentence_level_sentences()
    if sentences:
        embedded = _sentence_level_embeddings(encoder, sentences, poolings, settings, fingerprint,
                                              cached=all(spec.method in UNTRAINED_ROWS for spec in specs))
        for pooling in poolings:
            embedding_of = dict(zip(sentences, embedded[pooling]))
            if data.sts:
                results[pooling].update(score_sts(data.sts, embedding_of))
                pairs = sts_pair_predictions(data.sts, embedding_of)
                if settings.sts_bootstrap_resamples > 0:
                    average_key = "sts_avg" if "sts_avg" in results[pooling] else None
                    results[pooling].update(bootstrap_task_intervals(
                        pairs, settings.sts_bootstrap_resamples, settings.sts_bootstrap_seed,
                        settings.sts_confidence_level, average_key=average_key))
                if pair_predictions is not None:
                    for spec in specs:
                        if spec.pooling == pooling:
                            pair_predictions[spec.name] = pairs
            if data.geometry is not None:
                results[pooling].update(alignment_uniformity(data.geometry, embedding_of,
                                                             settings.alignment_min_score))
    if data.transfer:
        for pooling, flat in _transfer_scores(encoder, poolings, data.transfer, settings, fingerprint).items():
            results[pooling].update(flat)

    seconds = time.perf_counter() - started
    evaluated_at = utc_now()
    evaluation_report = data.evaluation_report()
    code = provenance.code_version()
    metrics = {}
    for spec in specs:
        identity = spec.identity()
        identity.update({k: v for k, v in model_metadata.items()
                         if k in ("method", "base_encoder", "seed") and not identity.get(k)})
        record_provenance = provenance.record_provenance(
            model_metadata.get("provenance"), baseline=identity.get("method") in UNTRAINED_ROWS,
            encoder=identity.get("base_encoder") or path, pooling=spec.pooling, model_path=path,
            model_fingerprint=fingerprint, settings=settings, scored_on=data.fingerprints, evaluated_at=evaluated_at,
            code=code, execution=encoder.execution())
        metrics[spec.name] = {"model": identity, **results[spec.pooling], "eval_seconds": round(seconds, 1),
                              "evaluated_at": evaluated_at, "model_fingerprint": fingerprint,
                              "evaluation_report": evaluation_report, "provenance": record_provenance}
        not_scored = f" ({', '.join(data.missing_tasks)} not scored)" if data.missing_tasks else ""
        logger.info("%s (%s, %s pooling): STS avg %s%s, transfer avg %s", spec.name, path, spec.pooling,
                    _fmt(results[spec.pooling].get("sts_avg")), not_scored,
                    _fmt(results[spec.pooling].get("transfer_avg")))
    return metrics


def utc_now() -> str:
    """The current UTC time in ISO 8601 to the second (``2025-01-31T12:00:00+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _fmt(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def evaluate_models(specs: Sequence[ModelSpec], data: EvaluationData, settings: EvaluationSettings,
                    pair_predictions: dict[str, dict] | None = None) -> dict[str, dict]:
    """Metrics for every spec, loading each encoder once (``pair_predictions``: as
    :func:`evaluate_encoder`)."""
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"two models would write the same metrics file: {', '.join(duplicates)}")
    by_path: dict[str, list[ModelSpec]] = {}
    for spec in specs:
        by_path.setdefault(spec.path, []).append(spec)
    metrics = {}
    for group in by_path.values():
        metrics.update(evaluate_encoder(group, data, settings, pair_predictions))
    return metrics
