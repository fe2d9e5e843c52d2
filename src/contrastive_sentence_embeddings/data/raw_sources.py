"""Where the raw data comes from: an offline mirror directory, or the Hugging Face Hub.

Every raw source has the same layout in ``data/01_raw/<source>/`` whichever way it
arrived, so that everything downstream has one reader per format:

=============== ======================== =================================================
source          mirror sub-directory     Hub (machines with internet)
=============== ======================== =================================================
``wiki``        ``wiki/``                ``princeton-nlp/datasets-for-simcse`` (wiki1m)
``longdocs``    ``longdocs/``            ``Salesforce/wikitext`` (``wikitext-2-v1``)
``openwebtext`` ``openwebtext/``         ``Skylion007/openwebtext``
``sts``         ``sts/``                 ``mteb/sts12-sts`` .. ``mteb/sts16-sts``,
                                         ``mteb/stsbenchmark-sts``, ``mteb/sickr-sts``
                                         (see :mod:`.sts_hub` for what they lack)
``nli``         ``nli/``                 ``stanfordnlp/snli``, ``nyu-mll/multi_nli``
``transfer``    ``transfer/``            none: SentEval's ``get_transfer_data.bash``
=============== ======================== =================================================

The mirror defaults to ``../shared/datasets`` (relative to the project root) and is
overridden by the ``CSE_DATA_MIRROR`` environment variable or the ``mirror_dir``
parameter.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from contrastive_sentence_embeddings.data.raw_file import RawFile

logger = logging.getLogger(__name__)

MIRROR_ENV_VAR = "CSE_DATA_MIRROR"
DEFAULT_MIRROR_DIR = "../shared/datasets"
# The repository DVC runs a stage for (set by DVC for every stage command, and to the
# original repository for a queued experiment's copy).
DVC_ROOT_ENV_VAR = "DVC_ROOT"
MODES = ("auto", "mirror", "hub")

HubFetcher = Callable[[Path, dict[str, Any]], None]


class RawDataUnavailable(RuntimeError):
    """Neither the offline mirror nor the Hub could provide a raw source."""


@dataclass(frozen=True)
class RawSource:
    name: str
    mirror_subdir: str
    description: str
    fetch_from_hub: HubFetcher | None = None
    hub_hint: str = ""


def resolve_mirror_dir(configured: str | None = None) -> Path:
    """The offline mirror: the ``mirror_dir`` parameter if set, else ``$CSE_DATA_MIRROR``,
    else ``../shared/datasets``; relative paths are taken from the working directory
    (the project root under ``kedro run``), or under DVC from the repository's root
    (``$DVC_ROOT``): a queued experiment runs in a copy under ``.dvc/tmp/exps``, where
    ``../shared/datasets`` would not be the project's sibling."""
    chosen = Path(configured or os.environ.get(MIRROR_ENV_VAR) or DEFAULT_MIRROR_DIR).expanduser()
    if not chosen.is_absolute() and os.environ.get(DVC_ROOT_ENV_VAR):
        chosen = Path(os.environ[DVC_ROOT_ENV_VAR]) / chosen
    return chosen.resolve()


def list_files(directory: Path) -> dict[str, RawFile]:
    """Every regular, non-hidden file below ``directory``, keyed by its relative path."""
    files = {}
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            files[relative.as_posix()] = RawFile(path)
    return files


def materialise_raw_source(
    name: str,
    mirror_dir: str | None = None,
    mode: str = "auto",
    hub_options: dict[str, Any] | None = None,
    staging_dir: Path | None = None,
) -> dict[str, RawFile]:
    """The files of raw source ``name``, keyed by path relative to the source folder.

    ``mode='mirror'`` reads the offline mirror only, ``'hub'`` downloads only, and
    ``'auto'`` uses the mirror when it has the source and the Hub otherwise. When no
    way works a :class:`RawDataUnavailable` says what was tried and what to do.
    """
    if mode not in MODES:
        raise ValueError(f"raw data mode must be one of {MODES}, got {mode!r}")
    source = RAW_SOURCES[name]
    mirror = resolve_mirror_dir(mirror_dir) / source.mirror_subdir
    if mode in ("auto", "mirror"):
        files = list_files(mirror) if mirror.is_dir() else {}
        if files:
            logger.info(
                "raw %s: %d files (%.1f MB) from the offline mirror %s",
                name,
                len(files),
                sum(f.path.stat().st_size for f in files.values()) / 1e6,
                mirror,
            )
            return files
        if mode == "mirror":
            raise RawDataUnavailable(
                f"Raw source '{name}' ({source.description}) is not in the offline "
                f"mirror: {mirror} is missing or empty. Point {MIRROR_ENV_VAR} (or the "
                "raw_data.mirror_dir parameter) at a directory laid out like "
                "../shared/datasets, or set raw_data.mode to 'hub' on a machine with "
                "internet access."
            )
    return _fetch_from_hub(source, mirror, hub_options or {}, staging_dir, mode)


def hub_unreachable(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, says that the Hub could not be
    reached (no network, a DNS or connection failure, a timeout, ``HF_HUB_OFFLINE``)
    rather than that it answered with a refusal (no such repository, no access)."""
    kinds: list[type] = [ConnectionError, TimeoutError]
    for module, names in (("huggingface_hub.errors", ("OfflineModeIsEnabled", "LocalEntryNotFoundError")),
                          ("requests.exceptions", ("ConnectionError", "Timeout")),
                          ("httpx", ("TransportError",))):
        try:
            imported = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        kinds += [getattr(imported, name) for name in names if hasattr(imported, name)]
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, tuple(kinds)):
            return True
        pending += [current.__cause__, current.__context__]
    return False


def _one_line(error: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def hub_repositories(source: str, options: dict[str, Any] | None = None) -> list[str]:
    """The Hub data sets a source's download reads (every STS task's repository for
    ``sts``; :func:`hub_dataset_ids` otherwise)."""
    if source == "sts":
        from contrastive_sentence_embeddings.data.sts_hub import HUB_REPOS

        chosen = dict((options or {}).get("repo_ids") or {})
        return [chosen.get(task, repo) for task, repo in HUB_REPOS.items()]
    return hub_dataset_ids(source, options)


def _fetch_from_hub(
    source: RawSource, mirror: Path, options: dict[str, Any], staging_dir: Path | None, mode: str = "auto"
) -> dict[str, RawFile]:
    if mode == "hub":
        has_files = mirror.is_dir() and bool(list_files(mirror))
        mirror_state = (f"raw_data.mode is 'hub' for it, so the offline mirror was not read ({mirror} "
                        f"{'holds a sample of it' if has_files else 'is missing or empty'})")
    else:
        mirror_state = f"it is not in the offline mirror ({mirror} is missing or empty)"
    what_to_do = (
        f"Either put the data in an offline mirror ({mirror} was looked for; set "
        f"{MIRROR_ENV_VAR} or the raw_data.mirror_dir parameter to its parent folder), "
        "or run on a machine that can reach the Hugging Face Hub "
        "(with HF_HUB_OFFLINE unset)."
    )
    if source.fetch_from_hub is None:
        raise RawDataUnavailable(
            f"Raw source '{source.name}' ({source.description}) has no offline mirror "
            f"at {mirror} and no Hub source. {source.hub_hint} {what_to_do}"
        )
    # A staging folder of our own (none given) is removed: at once if the download
    # fails, else file by file as each is published into data/01_raw (RawFile.staged_in).
    ours = staging_dir is None
    staging = Path(tempfile.mkdtemp(prefix=f"cse-hub-{source.name}-") if ours else staging_dir)
    staging.mkdir(parents=True, exist_ok=True)
    logger.info("raw %s: fetching from the Hugging Face Hub into %s", source.name, staging)
    try:
        source.fetch_from_hub(staging, options)
    except Exception as err:  # noqa: BLE001 - any library failure means "not available"
        logger.debug("Hub download of %s failed", source.name, exc_info=True)
        if ours:
            shutil.rmtree(staging, ignore_errors=True)
        reason = _one_line(err)
        if hub_unreachable(err):
            offline = "; HF_HUB_OFFLINE is set, so the Hub libraries do not try the network" \
                if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on") else ""
            raise RawDataUnavailable(
                f"Raw source '{source.name}' ({source.description}): the Hugging Face Hub could not be reached "
                f"for {', '.join(hub_repositories(source.name, options))} ({reason}{offline}); {mirror_state}. "
                f"To run offline, read it from the offline mirror: add `--params raw_data.mode=mirror` (or "
                f"`raw_data.source_modes.{source.name}=mirror` for this source alone) to `kedro run`, with its files "
                f"in {mirror} ({MIRROR_ENV_VAR} or raw_data.mirror_dir names the folder laid out like "
                f"{DEFAULT_MIRROR_DIR}; a mirror holds samples, not the full data sets); or run where the Hub "
                "can be reached."
            ) from None
        raise RawDataUnavailable(
            f"Raw source '{source.name}' ({source.description}): {mirror_state}, and downloading it from the "
            f"Hub failed ({reason}). {what_to_do}"
        ) from None
    files = list_files(staging)
    if ours:
        if not files:  # nothing to publish: nothing would ever empty the folder
            shutil.rmtree(staging, ignore_errors=True)
        else:
            # Whatever is not published by the end of the process (a later step failed)
            # goes with it: the folder is this run's own (mkdtemp above).
            atexit.register(shutil.rmtree, staging, ignore_errors=True)
        files = {key: RawFile(raw.path, raw.encoding, staged_in=staging) for key, raw in files.items()}
    return files


# --- publishing a raw file into data/01_raw --------------------------------------------
def publish_raw_file(raw: RawFile, target: Path) -> str:
    """Put ``raw`` at ``target`` without copying its bytes where the file system allows,
    and say how: a mirror file is hard-linked (same file system), else symbolically
    linked, else copied; a file this run staged (``raw.staged_in``, a Hub download) is
    moved (or, across file systems, copied) and its staging folder removed once empty.

    DVC tracks ``data/01_raw/*`` as outputs of the raw_data stage and copes with all
    three: it hashes a link's content and, when it commits the stage, replaces the link
    with a copy from its cache (``cache.type`` reflink,copy), leaving the mirror file
    itself untouched (mode and link count included); ``dvc status`` is then clean. A
    plain ``kedro run`` keeps the link. The target appears atomically (written under a
    temporary name and renamed), and is left as it is when it already is that file
    (the same inode: a rerun over a linked mirror file)."""
    target = Path(target)
    source = raw.path.resolve()  # a staged link into the Hub cache: its target
    if target.exists() and os.path.samefile(target, source):
        return "in place"
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.publishing-{uuid.uuid4().hex[:12]}")
    try:
        if raw.staged_in is not None and not raw.path.is_symlink():
            how = _move(source, temporary)
        else:  # a staged link must not be linked to: its folder is about to go
            how = _link(source, temporary, symbolic=raw.staged_in is None)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if raw.staged_in is not None:
        raw.path.unlink(missing_ok=True)
        _remove_empty_folders(raw.path.parent, raw.staged_in)
    return how


def _link(source: Path, target: Path, symbolic: bool) -> str:
    try:
        os.link(source, target)
        return "hard link"
    except OSError:  # another file system, or one without hard links
        pass
    if symbolic:
        try:
            os.symlink(source, target)
            return "symbolic link"
        except OSError:
            pass
    shutil.copyfile(source, target)
    return "copy"


def _move(source: Path, target: Path) -> str:
    try:
        os.replace(source, target)
        return "move"
    except OSError:  # across file systems
        shutil.copyfile(source, target)
        return "copy"


def _remove_empty_folders(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents up to and including ``root`` while they are
    empty (the first one that is not stops it: another staged file still in it)."""
    folder, root = Path(folder), Path(root)
    while folder == root or root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == root:
            return
        folder = folder.parent


# --- Hub fetchers: each writes the mirror layout of its source into ``dest`` ---------


# The default Hub repositories of each source (``raw_data.hub.<source>`` may name others).
WIKI_REPO = "princeton-nlp/datasets-for-simcse"
WIKITEXT_REPO = "Salesforce/wikitext"
OPENWEBTEXT_REPO = "Skylion007/openwebtext"
NLI_REPOS = {"snli": "stanfordnlp/snli", "multinli": "nyu-mll/multi_nli"}


def hub_dataset_ids(source: str, options: dict[str, Any] | None = None) -> list[str]:
    """The Hub data sets a raw source stands for (what its fetcher downloads, with the
    ``raw_data.hub.<source>`` options applied), whichever way the files arrived: the
    offline mirror holds samples of the same data. For ``sts``, the STS-B repository
    (the only STS set any method trains on). Empty for a source with no Hub counterpart
    (the SentEval transfer tasks)."""
    options = options or {}
    if source == "nli":
        return list(options.get("repo_ids", NLI_REPOS).values())
    if source == "sts":
        from contrastive_sentence_embeddings.data.sts_hub import HUB_REPOS

        return [dict(options.get("repo_ids") or {}).get("stsb", HUB_REPOS["stsb"])]
    default = {"wiki": WIKI_REPO, "longdocs": WIKITEXT_REPO, "openwebtext": OPENWEBTEXT_REPO}.get(source)
    return [options.get("repo_id", default)] if default else []


def _fetch_wiki(dest: Path, options: dict[str, Any]) -> None:
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(
        repo_id=options.get("repo_id", WIKI_REPO),
        filename=options.get("filename", "wiki1m_for_simcse.txt"),
        repo_type="dataset",
    )
    (dest / Path(path).name).symlink_to(path)


def _fetch_longdocs(dest: Path, options: dict[str, Any]) -> None:
    from datasets import load_dataset

    repo = options.get("repo_id", WIKITEXT_REPO)
    config = options.get("config", "wikitext-2-v1")
    for split, short in (("validation", "valid"), ("test", "test")):
        rows = load_dataset(repo, config, split=split)
        write_lines(dest / f"wikitext-2.{short}.txt", (row["text"].rstrip("\n") for row in rows))


def _fetch_openwebtext(dest: Path, options: dict[str, Any]) -> None:
    from datasets import load_dataset

    rows = load_dataset(
        options.get("repo_id", OPENWEBTEXT_REPO), split="train", streaming=True
    )
    documents = _until_limit((row["text"] for row in rows), options.get("max_documents"))
    write_lines(dest / "train.txt", (one_line(doc) for doc in documents))


def _fetch_sts(dest: Path, options: dict[str, Any]) -> None:
    from contrastive_sentence_embeddings.config import parse_strict
    from contrastive_sentence_embeddings.data.sts_hub import StsHubOptions, fetch_sts

    fetch_sts(dest, parse_strict(StsHubOptions, options, "raw_data.hub.sts"))


def _fetch_nli(dest: Path, options: dict[str, Any]) -> None:
    from datasets import load_dataset

    repos = options.get("repo_ids", NLI_REPOS)
    for name, repo in repos.items():
        for split, rows in load_dataset(repo).items():
            frame = rows.to_pandas()[["premise", "hypothesis", "label"]]
            (dest / name).mkdir(parents=True, exist_ok=True)
            frame.to_parquet(dest / name / f"{split}.parquet", index=False)


def _until_limit(items: Iterable[str], limit: int | None) -> Iterable[str]:
    for i, item in enumerate(items):
        if limit is not None and i >= limit:
            return
        yield item


def one_line(text: str) -> str:
    """A document on one line: every run of whitespace (line breaks, tabs) becomes one space."""
    return " ".join(text.split())


def write_lines(path: Path, lines: Iterable[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")


RAW_SOURCES: dict[str, RawSource] = {
    source.name: source
    for source in (
        RawSource("wiki", "wiki", "Wikipedia sentences, one per line", _fetch_wiki),
        RawSource("longdocs", "longdocs", "WikiText-2 articles", _fetch_longdocs),
        RawSource("openwebtext", "openwebtext", "OpenWebText, one document per line", _fetch_openwebtext),
        RawSource("sts", "sts", "STS12-16, STS-B and SICK", _fetch_sts),
        RawSource("nli", "nli", "SNLI / MultiNLI pairs", _fetch_nli),
        RawSource(
            "transfer",
            "transfer",
            "SentEval transfer tasks",
            None,
            "SentEval's data/downstream/get_transfer_data.bash downloads them.",
        ),
    )
}
