"""The 7 STS test sets from the Hugging Face Hub, written in the offline mirror's layout.

A machine with internet and no mirror gets ``data/01_raw/sts`` from the Hub copies the
MTEB benchmark publishes, converted into the SentEval files the evaluation reads, so
the readers in :mod:`..evaluation.sts` serve both origins:

=========== =========================== ============ =============================================
task        Hub data set                test pairs   written as (in ``data/01_raw/sts``)
=========== =========================== ============ =============================================
``sts12``   ``mteb/sts12-sts``          3,108        ``STS12-en-test/STS.{input,gs}.hub-pooled.txt``
``sts13``   ``mteb/sts13-sts``          1,500        ``STS13-en-test/`` (as above; no SMT, as SentEval)
``sts14``   ``mteb/sts14-sts``          3,750        ``STS14-en-test/``
``sts15``   ``mteb/sts15-sts``          3,000        ``STS15-en-test/``
``sts16``   ``mteb/sts16-sts``          1,186        ``STS16-en-test/``
``stsb``    ``mteb/stsbenchmark-sts``   1,379        ``STSBenchmark/sts-{train,dev,test}.csv``
``sickr``   ``mteb/sickr-sts``          9,927        ``SICK/SICK_test_annotated.txt``
=========== =========================== ============ =============================================

(test pairs: MTEB's published statistics of those test splits; STS12-16 have the
pair counts of SentEval's files.) Each row has ``sentence1``, ``sentence2`` and a
gold ``score`` (0-5; SICK 1-5). What the Hub copies
lack, and what the evaluation therefore reports differently:

* STS12-16 come without the subset (genre) of each pair, so their rows are written as
  one subset, :data:`POOLED_SUBSET`. SentEval's "all" score is one Spearman over all
  subsets concatenated, which is the same formula over the same pairs pooled; the
  per-subset scores (``sts12/MSRpar``, ...) and their size-weighted mean
  (``sts12_wmean``) cannot be computed and are not reported.
* ``mteb/sickr-sts`` holds all of SICK (train, trial and test: 9,927 pairs) in its one
  split, not SentEval's SICK-R test (4,927), and there is no SICK trial set for the
  trainer's model selection. The evaluation scores what is there and flags the pair
  count, as it does for any set that differs from its benchmark.

:data:`PROVENANCE_FILE` (``hub_source.json``) records which repository, revision and
split each file came from and the rows dropped while converting; the evaluation copies
it into every metrics file's ``evaluation_report``.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# The subset name of STS12-16 pairs whose SentEval subset is unknown (Hub copies).
POOLED_SUBSET = "hub-pooled"
# Written beside the converted files; its presence means "this raw STS is from the Hub".
PROVENANCE_FILE = "hub_source.json"

HUB_REPOS = {
    "sts12": "mteb/sts12-sts",
    "sts13": "mteb/sts13-sts",
    "sts14": "mteb/sts14-sts",
    "sts15": "mteb/sts15-sts",
    "sts16": "mteb/sts16-sts",
    "stsb": "mteb/stsbenchmark-sts",
    "sickr": "mteb/sickr-sts",
}
# The revisions the MTEB benchmark pins for the same tasks: a Hub data set can be
# re-uploaded, and a score is only comparable with another computed on the same rows.
PINNED_REVISIONS = {
    "sts12": "a0d554a64d88156834ff5ae9920b964011b16384",
    "sts13": "7e90230a92c190f1bf69ae9002b8cea547a64cca",
    "sts14": "6031580fec1f6af667f0bd2da0a551cf4f0b2375",
    "sts15": "ae752c7c21bf194d8b67fd573edf7ae58183cbe3",
    "sts16": "4d8694f8f0e0100860b497b999b3dbed754a0513",
    "stsb": "b0fddb56ed78048fa8b90373c8a3cfc37b684831",
    "sickr": "20a6d6f312dd54037fe07a32d58e5e168867909d",
}
YEARS = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16"}
STSB_SPLITS = {"train": "train", "validation": "dev", "test": "test"}  # Hub split -> SentEval file
SICK_HEADER = ("pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment")
REQUIRED_COLUMNS = ("sentence1", "sentence2", "score")

# (repo_id, split, revision) -> the rows of that split, each a mapping of column -> value.
LoadSplit = Callable[[str, str, "str | None"], Iterable[Mapping[str, Any]]]


class HubLayoutError(ValueError):
    """A Hub split that does not have the columns the converter reads."""


@dataclass(frozen=True)
class StsHubOptions:
    """``raw_data.hub.sts``: per task (``sts12`` .. ``sts16``, ``stsb``, ``sickr``), the Hub
    repository (``repo_ids``) and the revision (``revisions``; null: the newest) to read
    instead of the defaults, :data:`HUB_REPOS` at :data:`PINNED_REVISIONS`."""

    repo_ids: dict = field(default_factory=dict)
    revisions: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("repo_ids", "revisions"):
            unknown = sorted(set(getattr(self, name)) - set(HUB_REPOS))
            if unknown:
                raise ValueError(f"{name}: unknown STS task(s) {', '.join(unknown)}; "
                                 f"the tasks are {', '.join(HUB_REPOS)}")

    def repo_id(self, task: str) -> str:
        return self.repo_ids.get(task, HUB_REPOS[task])

    def revision(self, task: str) -> str | None:
        # A replaced repository has no default pin: the default revision belongs to ours.
        default = PINNED_REVISIONS[task] if self.repo_id(task) == HUB_REPOS[task] else None
        return self.revisions.get(task, default)


def load_hub_split(repo_id: str, split: str, revision: str | None) -> Iterable[Mapping[str, Any]]:
    """One split of a Hub data set through ``datasets.load_dataset`` (downloaded once
    into the Arrow cache, ``HF_DATASETS_CACHE``)."""
    from datasets import load_dataset

    return load_dataset(repo_id, split=split, revision=revision)


def hub_pairs(rows: Iterable[Mapping[str, Any]], where: str) -> tuple[list[tuple[str, str, float]], Counter]:
    """The ``(sentence1, sentence2, score)`` of every usable row, whitespace runs (line
    breaks, tabs) made one space, and the rows dropped by reason: a missing or blank
    sentence, a missing or non-numeric score. Range checks stay with the readers, which
    skip and count them per ``file:line``. Rows without the three columns at all mean
    another layout: :class:`HubLayoutError` naming ``where`` and the columns found."""
    pairs: list[tuple[str, str, float]] = []
    dropped: Counter = Counter()
    for row in rows:
        missing = [column for column in REQUIRED_COLUMNS if column not in row]
        if missing:
            raise HubLayoutError(f"{where}: rows have no column(s) {', '.join(missing)} "
                                 f"(columns: {', '.join(map(str, row))}); expected {', '.join(REQUIRED_COLUMNS)}")
        first, second = (" ".join(str(row[c]).split()) if row[c] is not None else "" for c in REQUIRED_COLUMNS[:2])
        if not first or not second:
            dropped["blank sentence"] += 1
            continue
        try:
            score = float(row["score"])
        except (TypeError, ValueError):
            dropped["score is not a number"] += 1
            continue
        if math.isnan(score):
            dropped["score is not a number"] += 1
            continue
        pairs.append((first, second, score))
    return pairs, dropped


def _score_text(score: float) -> str:
    # repr round-trips exactly: the readers parse back the very value the Hub holds.
    return repr(float(score))


def _write(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


def write_pooled_year(folder: Path, pairs: list[tuple[str, str, float]]) -> list[str]:
    """A year's pairs as SentEval's ``STS.input.<subset>.txt`` / ``STS.gs.<subset>.txt``
    with the one subset :data:`POOLED_SUBSET`; returns the files' names."""
    names = [f"STS.input.{POOLED_SUBSET}.txt", f"STS.gs.{POOLED_SUBSET}.txt"]
    _write(folder / names[0], (f"{a}\t{b}" for a, b, _ in pairs))
    _write(folder / names[1], (_score_text(score) for _, _, score in pairs))
    return names


def write_stsb_split(path: Path, pairs: list[tuple[str, str, float]], origin: str) -> None:
    """STS-B pairs as SentEval's 7-column TSV: genre, file, year, id, score, s1, s2 (the
    Hub rows carry no genre, file or year the evaluation would use)."""
    _write(path, (f"hub\t{origin}\t\t{i:04d}\t{_score_text(score)}\t{a}\t{b}" for i, (a, b, score) in
                  enumerate(pairs)))


def write_sick(path: Path, pairs: list[tuple[str, str, float]]) -> None:
    """SICK pairs with SICK's header; the entailment label is not on the Hub copy (and
    not used by SICK-R), written as ``unknown``."""
    _write(path, ["\t".join(SICK_HEADER),
                  *(f"{i}\t{a}\t{b}\t{_score_text(score)}\tunknown" for i, (a, b, score) in enumerate(pairs, 1))])


def fetch_sts(dest: Path, options: StsHubOptions, load_split: LoadSplit = load_hub_split) -> dict:
    """Write the 7 STS test sets (and STS-B train and dev) from the Hub into ``dest`` in
    the mirror's layout, and :data:`PROVENANCE_FILE`; returns the provenance."""
    tasks: dict[str, dict] = {}
    for task, repo_split_files in _plan(options).items():
        repo, revision = options.repo_id(task), options.revision(task)
        for split, relative in repo_split_files:
            where = f"{repo}@{revision or 'newest'} split {split!r}"
            pairs, dropped = hub_pairs(load_split(repo, split, revision), where)
            if not pairs:
                raise HubLayoutError(f"{where}: no usable rows")
            if task in YEARS:
                files = [f"{relative}/{name}" for name in write_pooled_year(dest / relative, pairs)]
            elif task == "stsb":
                write_stsb_split(dest / relative, pairs, repo)
                files = [relative]
            else:
                write_sick(dest / relative, pairs)
                files = [relative]
            if dropped:
                logger.warning("raw sts: %s: dropped %s", where, dict(dropped))
            entry = tasks.setdefault(task, {"repo_id": repo, "revision": revision, "splits": {}})
            entry["splits"][split] = {"files": files, "rows": len(pairs), "dropped": dict(dropped)}
        if task in YEARS:
            tasks[task]["subsets"] = "pooled: the Hub rows carry no SentEval subset"
    provenance = {"source": "hub", "tasks": tasks}
    (dest / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
    logger.warning(
        "raw sts: from the Hub, STS12-16 have no subset labels (only their pooled 'all' score is "
        "computed) and SICK-R is all of SICK (no SentEval test split, no trial set); see %s",
        PROVENANCE_FILE,
    )
    return provenance


def _plan(options: StsHubOptions) -> dict[str, list[tuple[str, str]]]:
    """Per task, the (Hub split, file or folder relative to ``dest``) to write."""
    plan: dict[str, list[tuple[str, str]]] = {task: [("test", f"{year}-en-test")] for task, year in YEARS.items()}
    plan["stsb"] = [(split, f"STSBenchmark/sts-{short}.csv") for split, short in STSB_SPLITS.items()]
    plan["sickr"] = [("test", "SICK/SICK_test_annotated.txt")]
    return plan
