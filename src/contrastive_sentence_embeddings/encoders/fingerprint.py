"""Which weights a score was computed on: the fingerprint of a model folder, and the
fingerprints of the models a folder held before.

A metrics record carries the fingerprint of the model it scored (``model_fingerprint``);
the leaderboard shows its scores as this checkout's only while the model in that folder
still has that fingerprint (``evaluation.leaderboard.record_status``).

The fingerprint is ``sha256-<16 hex>``: a sha256 over every file of the folder that
decides what the model computes, each as its relative path, size and content (in path
order). Left out: the model card (``README.md``, written after the model is scored), hidden
files, and the project's metadata file (``cse_metadata.json``), which records the
fingerprint itself. Neither the folder's place nor any file's modification time enters
it, so a copied or cloned model keeps its fingerprint and a retrained one gets another.

Reading every weight each time a leaderboard is built would be slow for a large model,
so the saver computes the fingerprint once, over the folder it is about to publish, and
records it in the metadata (:data:`FINGERPRINT_KEY`: the digest and each file's size).
:func:`model_fingerprint` uses the recorded digest while the folder's files still have
the recorded names and sizes, and hashes the contents otherwise (a model saved before
models recorded it, an encoder folder, a folder edited by hand); a process hashes a
folder once while its files are unchanged.

A save that replaces a model records the replaced model's fingerprint and save time
(:data:`EARLIER_KEY`, newest first, at most :data:`EARLIER_KEPT`), so a record of an
earlier model of the same folder can be called that: "scores of an earlier model".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from contrastive_sentence_embeddings.encoders.loading import resolve_encoder

METADATA_FILE = "cse_metadata.json"  # encoding.METADATA_FILE; not imported from there, which loads torch
# Files of a model folder that describe the model but do not change what it computes:
# the model card is written after evaluation (publishing/model_card.py), so counting it would
# make a model look retrained to the leaderboard and to the embedding caches.
DOCUMENTATION_FILES = frozenset({"README.md"})
FINGERPRINT_KEY = "weights_fingerprint"
EARLIER_KEY = "earlier_models"
EARLIER_KEPT = 20
PREFIX = "sha256-"
_CHUNK = 1 << 20
_computed: dict[tuple, str] = {}


def fingerprinted_files(folder: Path) -> list[Path]:
    """The files of ``folder`` the fingerprint covers (module docstring), in path order."""
    files = []
    for file in sorted(folder.rglob("*")):
        relative = file.relative_to(folder).as_posix()
        if relative in DOCUMENTATION_FILES or relative == METADATA_FILE or any(
                part.startswith(".") for part in relative.split("/")):
            continue
        if file.is_file():
            files.append(file)
    return files


def content_fingerprint(folder: str | Path) -> dict:
    """``{"digest": "sha256-...", "sizes": {relative path: bytes}}`` of a model folder,
    from the files' contents (module docstring)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    sizes = {}
    for file in fingerprinted_files(folder):
        relative = file.relative_to(folder).as_posix()
        size = file.stat().st_size
        sizes[relative] = size
        digest.update(f"{relative}\0{size}\0".encode())
        with open(file, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    return {"digest": PREFIX + digest.hexdigest()[:16], "sizes": sizes}


def recorded_fingerprint(folder: Path, metadata: Mapping) -> str | None:
    """The digest the saver recorded in ``metadata``, if the folder's files still have
    the recorded names and sizes; else None (the contents must be hashed)."""
    recorded = metadata.get(FINGERPRINT_KEY)
    if not isinstance(recorded, Mapping) or not str(recorded.get("digest", "")).startswith(PREFIX):
        return None
    on_disk = {file.relative_to(folder).as_posix(): file.stat().st_size for file in fingerprinted_files(folder)}
    return str(recorded["digest"]) if on_disk == recorded.get("sizes") else None


def read_metadata(folder: Path) -> dict:
    """The project's metadata of a model folder; ``{}`` when it has none or it is not JSON
    (the loaders report a broken file; a fingerprint then comes from the contents)."""
    try:
        metadata = json.loads((folder / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return metadata if isinstance(metadata, dict) else {}


def model_fingerprint(path: str) -> str:
    """The fingerprint of the model ``path`` names: for a local folder the recorded or
    computed digest (module docstring); for a Hub id the id itself."""
    source = Path(resolve_encoder(path))
    if not source.is_dir():
        return path
    recorded = recorded_fingerprint(source, read_metadata(source))
    if recorded:
        return recorded
    # Modification times only say whether this process may reuse a digest it computed;
    # they are never part of the fingerprint.
    state = (str(source.resolve()), tuple((file.relative_to(source).as_posix(), file.stat().st_size,
                                           file.stat().st_mtime_ns) for file in fingerprinted_files(source)))
    if state not in _computed:
        _computed[state] = content_fingerprint(source)["digest"]
    return _computed[state]


def earlier_models(folder: str | Path) -> dict[str, str | None]:
    """``{fingerprint: when that model was saved}`` of the models ``folder`` held before
    its current one (:data:`EARLIER_KEY` of its metadata), newest first."""
    entries = read_metadata(Path(folder)).get(EARLIER_KEY) or []
    return {str(entry["fingerprint"]): entry.get("saved_at") for entry in entries
            if isinstance(entry, Mapping) and entry.get("fingerprint")}


def lineage_for_save(output_dir: str | Path) -> list[dict]:
    """What a save into ``output_dir`` records as :data:`EARLIER_KEY`: the model it
    replaces (when the folder holds one of the project's models) and the models that one
    had replaced, newest first, at most :data:`EARLIER_KEPT`."""
    folder = Path(output_dir)
    if not (folder / METADATA_FILE).is_file():
        return []
    metadata = read_metadata(folder)
    replaced = {"fingerprint": model_fingerprint(str(folder)), "saved_at": metadata.get("saved_at")}
    before = [entry for entry in metadata.get(EARLIER_KEY) or [] if isinstance(entry, Mapping)]
    return [replaced, *before][:EARLIER_KEPT]


def scored_fingerprint(record: Mapping, run: str) -> str | None:
    """The fingerprint of the model whose scores for ``run`` ``record`` holds: a metrics
    record of the run (``model.name``: its ``model_fingerprint``), a summary over seeds
    (``provenance.runs[run].model.fingerprint``) or an MTEB export report (``run``: its
    ``revision``); None when it holds no scores of ``run``."""
    if not isinstance(record, Mapping):
        return None
    if record.get("run") == run and "revision" in record:  # mteb_results.REPORT_FILE
        return str(record["revision"])
    runs = ((record.get("provenance") or {}).get("runs")) or {}
    if run in runs:
        return ((runs[run] or {}).get("model") or {}).get("fingerprint")
    if (record.get("model") or {}).get("name") == run:
        return record.get("model_fingerprint")
    return None


def scores_of_other_models(records: Mapping[str, Mapping], run: str, fingerprint: str) -> list[str]:
    """The keys of ``records`` (e.g. file paths) that hold scores of ``run`` computed on
    a model other than the one with ``fingerprint``, in their order."""
    return [key for key, record in records.items()
            if scored_fingerprint(record, run) not in (None, fingerprint)]
