"""Publish a trained model folder, with its model card, to a Hugging Face Hub repository:
``contrastive-sentence-embeddings publish <folder> --repo-id <user>/<name>``.

A folder the training node saved is Hub-ready: ``SentenceTransformer("<user>/<name>")``
and ``AutoModel`` load it as they load the folder, and its ``README.md`` (written by
the ``model_card`` node once the model is scored) is the card the Hub shows, its
front matter the Hub's metadata and ``model-index``. What is pushed, and what is
checked first (nothing that fails its own checks leaves the machine):

* the folder is whole (``encoders.integrity``: every file the saver recorded in
  ``cse_metadata.json``, at its recorded size; the tokenizer fits the model);
* it has its card, with front matter the Hub can read;
* exactly the saver's files, ``cse_metadata.json`` and ``README.md`` are uploaded; any
  other file in the folder is named and left out (the Hub repo holds what this
  project's loaders and the card describe, no stray file a user dropped there).

The upload is Hugging Face's own client (``HfApi.create_repo``, then one
``HfApi.upload_folder`` commit limited to those files); its token is the one
``hf auth login`` saved or ``HF_TOKEN``. ``--dry-run`` checks and lists without
contacting the Hub.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from contrastive_sentence_embeddings.encoders.fingerprint import (
    DOCUMENTATION_FILES,
    FINGERPRINT_KEY,
    METADATA_FILE,
    fingerprinted_files,
)
from contrastive_sentence_embeddings.encoders.integrity import BrokenModelFolder, folder_problems, read_folder_metadata

CARD_FILE = "README.md"
assert CARD_FILE in DOCUMENTATION_FILES  # the fingerprint leaves the card out: it is written after scoring


class NotPublishable(ValueError):
    """A folder that cannot be published as it is; the message says why and what to do."""


@dataclass(frozen=True)
class Publication:
    """What a publication uploads from ``folder`` (paths relative to it, with their sizes)
    and what it leaves out."""

    folder: Path
    files: dict[str, int]
    left_out: tuple[str, ...]

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())


def prepare(folder: str | Path) -> Publication:
    """Check ``folder`` (module docstring) and list what would be uploaded; raise
    :class:`NotPublishable` or ``encoders.integrity.BrokenModelFolder`` naming the problem."""
    from contrastive_sentence_embeddings.publishing.model_card import split_front_matter

    folder = Path(folder)
    if not folder.is_dir():
        raise NotPublishable(f"{folder}: no such model folder")
    runs = sorted(child.name for child in folder.iterdir() if (child / METADATA_FILE).is_file())
    if runs and not (folder / METADATA_FILE).is_file():
        raise NotPublishable(f"{folder}: holds the models of several seeds; publish one of them: "
                             f"{', '.join(str(folder / run) for run in runs)}")
    metadata, problem = read_folder_metadata(folder)
    if problem:
        raise BrokenModelFolder(f"model folder {folder}: {problem}; restore the folder (`dvc checkout`) or train "
                                "the model again")
    record = metadata.get(FINGERPRINT_KEY)
    recorded = record.get("sizes") if isinstance(record, dict) else None
    if not metadata or not recorded:
        raise NotPublishable(f"{folder}: not a model folder this project saved (its {METADATA_FILE} has no record of "
                             "the files the saver wrote); publish a folder from data/06_models/")
    problems = folder_problems(folder)
    if problems:
        raise BrokenModelFolder(f"model folder {folder}: {'; '.join(problems)}; restore the folder (`dvc checkout`) "
                                "or train the model again")
    card = folder / CARD_FILE
    if not card.is_file():
        raise NotPublishable(f"{folder}: no model card ({CARD_FILE}); the model_card node writes it once the model is "
                             "scored: kedro run --pipelines=<method>")
    try:
        matter, _ = split_front_matter(card.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as error:
        first = str(error).strip().splitlines()[0]
        raise NotPublishable(f"{card}: the card's front matter cannot be read ({first}); write the card again: "
                             "kedro run --pipelines=<method>") from None
    if not matter:
        raise NotPublishable(f"{card}: the card has no front matter (the Hub's metadata); write it again: "
                             "kedro run --pipelines=<method>")
    chosen = {file.relative_to(folder).as_posix(): file.stat().st_size for file in fingerprinted_files(folder)
              if file.relative_to(folder).as_posix() in recorded}
    for name in (METADATA_FILE, CARD_FILE):
        chosen[name] = (folder / name).stat().st_size
    everything = {file.relative_to(folder).as_posix() for file in folder.rglob("*") if file.is_file()}
    left_out = tuple(sorted(name for name in everything - set(chosen)))
    return Publication(folder, dict(sorted(chosen.items())), left_out)


def check_loads(folder: Path) -> None:
    """Load the folder as every user of the Hub repo will (tokenizer and model), with the
    tokenizer checks of ``encoders.integrity``: a model that fails them is not published."""
    from transformers.utils import logging as transformers_logging

    from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # a check, not a load the user waits for
    try:
        SentenceEncoder.load(str(folder), device="cpu")
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def publish(publication: Publication, repo_id: str, *, private: bool = False, revision: str | None = None,
            commit_message: str | None = None, api=None) -> str:
    """Create ``repo_id`` (a model repo; kept if it exists) and upload the publication's
    files in one commit; returns the commit's URL (or the repo's)."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    info = api.upload_folder(
        repo_id=repo_id, repo_type="model", folder_path=str(publication.folder), revision=revision,
        allow_patterns=list(publication.files),
        commit_message=commit_message or f"Upload {publication.folder.name} with its model card "
                                         "(contrastive-sentence-embeddings)")
    return str(getattr(info, "commit_url", None) or getattr(info, "repo_url", None) or info)


def _size(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:,} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="contrastive-sentence-embeddings publish",
        description="Push a trained model folder (data/06_models/<run>) with its model card to a Hugging Face "
                    "Hub model repository, after checking it is whole and loads. The token is the one "
                    "`hf auth login` saved, or HF_TOKEN.")
    parser.add_argument("folder", help="the model folder, e.g. data/06_models/simcse")
    parser.add_argument("--repo-id", required=True, help="the Hub repository, <user or organisation>/<name>")
    parser.add_argument("--private", action="store_true", help="create the repository private (if it is new)")
    parser.add_argument("--revision", help="the branch to commit to (default: the repository's main branch)")
    parser.add_argument("--commit-message", help="the Hub commit's message")
    parser.add_argument("--dry-run", action="store_true", help="check and list the files; contact nothing")
    args = parser.parse_args(argv)
    if args.repo_id.count("/") != 1 or not all(args.repo_id.split("/")):
        print(f"error: --repo-id {args.repo_id!r}: expected <user or organisation>/<name>", file=sys.stderr)
        return 2
    try:
        publication = prepare(args.folder)
        check_loads(publication.folder)
    except (NotPublishable, BrokenModelFolder, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{publication.folder}: {len(publication.files)} files, {_size(publication.total_bytes)}, to "
          f"{args.repo_id}{' (private)' if args.private else ''}:")
    for name, size in publication.files.items():
        print(f"  {name}  ({_size(size)})")
    if publication.left_out:
        print(f"left out (not written by the saver): {', '.join(publication.left_out)}")
    if args.dry_run:
        print("dry run: nothing was uploaded")
        return 0
    try:
        url = publish(publication, args.repo_id, private=args.private, revision=args.revision,
                      commit_message=args.commit_message)
    except Exception as error:  # noqa: BLE001 - the Hub client's errors (offline, no token, refused) in one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        print(f"error: the Hub refused or could not be reached ({type(error).__name__}: {first}); check the "
              "network, HF_HUB_OFFLINE, and the token (`hf auth login` or HF_TOKEN)", file=sys.stderr)
        return 1
    print(f"published: {url}")
    return 0
