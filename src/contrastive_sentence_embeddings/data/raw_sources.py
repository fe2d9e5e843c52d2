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
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from kedro.io import DatasetError

from contrastive_sentence_embeddings.configuration.strict import parse_strict
from contrastive_sentence_embeddings.data.mirror import (  # noqa: F401 - also imported from here
    DEFAULT_MIRROR_DIR,
    DVC_ROOT_ENV_VAR,
    MIRROR_ENV_VAR,
    resolve_mirror_dir,
)
from contrastive_sentence_embeddings.data.raw_file import RawFile

logger = logging.getLogger(__name__)

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
# A mirror file this user could change (writable, or owned: an editor's `:w!` makes it
# writable) is copied up to this size; above it, linked with a warning and a check.
COPY_LIMIT_ENV_VAR = "CSE_RAW_COPY_LIMIT_MB"
DEFAULT_COPY_LIMIT_MB = 1024
_FICLONE = 0x40049409  # Linux's ioctl that shares a file's blocks copy-on-write (btrfs, XFS)


class RawSourceChanged(DatasetError):
    """A mirror file linked into data/01_raw changed since it was linked (a Kedro
    ``DatasetError``: a catalog load or save shows the message as it is)."""


def copy_limit_bytes() -> int:
    value = os.environ.get(COPY_LIMIT_ENV_VAR, "").strip()
    try:
        return int(float(value) * 1e6) if value else DEFAULT_COPY_LIMIT_MB * 1_000_000
    except ValueError:
        raise ValueError(f"{COPY_LIMIT_ENV_VAR}={value!r} is not a number of megabytes") from None


def changeable_by_this_user(path: Path) -> bool:
    """Whether this user could change ``path`` in place: it is writable to them, or
    theirs (so they, or an editor, can make it writable), on a file system mounted
    read-write."""
    try:
        read_only_mount = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        read_only_mount = False
    if read_only_mount:
        return False
    return os.access(path, os.W_OK) or path.stat().st_uid == os.geteuid()


def publish_raw_file(raw: RawFile, target: Path, link_record: Path | None = None) -> str:
    """Put ``raw`` at ``target`` such that editing ``target`` cannot change the mirror
    (or the Hub cache) it came from, copying as few bytes as that allows, and say how:

    1. a copy-on-write clone (``reflink``, btrfs/XFS): free, and independent;
    2. a hard link when the source is read-only to this user and not theirs (a shared
       mirror owned by someone else): no one here can write it, through the link or not;
    3. a copy when the source is one this user could change and is no larger than
       ``$CSE_RAW_COPY_LIMIT_MB`` (1024 by default);
    4. above that, a hard link (else a symbolic one, else a copy), with a warning: an
       edit of ``target`` would edit the source. Its size and modification time are
       recorded in ``link_record`` (when given), and a later run that finds them changed
       stops (:func:`check_linked_source`) naming both paths.

    A file this run staged (``raw.staged_in``, a Hub download) is its own: moved (or,
    across file systems, copied), and its staging folder removed once empty.

    DVC tracks ``data/01_raw/*`` as outputs of the raw_data stage and copes with every
    way: it hashes a link's content and, when it commits the stage, replaces the file
    with one from its cache (``cache.type`` reflink,copy: a clone or a copy), leaving
    the mirror file itself untouched (mode and link count included); ``dvc status`` is
    then clean. A plain ``kedro run`` keeps what was published. The target appears
    atomically (written under a temporary name and renamed), and is left as it is when
    it already is that file (the same inode: a rerun over a linked mirror file)."""
    target = Path(target)
    source = raw.path.resolve()  # a staged link into the Hub cache: its target
    ours = raw.staged_in is not None and not raw.path.is_symlink()
    if link_record is not None and not ours:
        check_linked_source(target, link_record, linked_now=False)
    if target.exists() and os.path.samefile(target, source):
        return "in place"
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.publishing-{uuid.uuid4().hex[:12]}")
    try:
        if ours:
            how = _move(source, temporary)
        else:  # a staged link must not be linked to symbolically: its folder is about to go
            how = _protected_copy_or_link(source, temporary, target, symbolic=raw.staged_in is None)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if link_record is not None and not ours:
        _record_link(link_record, target, source, how)
    if raw.staged_in is not None:
        raw.path.unlink(missing_ok=True)
        _remove_empty_folders(raw.path.parent, raw.staged_in)
    return how


def _protected_copy_or_link(source: Path, temporary: Path, target: Path, symbolic: bool) -> str:
    if _reflink(source, temporary):
        return "reflink"
    if not changeable_by_this_user(source):
        try:
            os.link(source, temporary)
            return "hard link to a read-only file"
        except OSError:  # another file system: a copy, as a symbolic link would be no safer
            pass
    size = source.stat().st_size
    if size <= copy_limit_bytes():
        shutil.copyfile(source, temporary)
        return "copy"
    how = _link(source, temporary, symbolic)
    if how != "copy":
        logger.warning(
            "%s is a %s to %s (%.0f MB, writable by you, over %s=%g for a copy): editing it would edit "
            "that file and every project linked to it; a later run stops if it changes. To avoid linking, "
            "make the source read-only to you (owned by another user) or raise %s.",
            project_relative_or_path(target), how, source, size / 1e6, COPY_LIMIT_ENV_VAR,
            copy_limit_bytes() / 1e6, COPY_LIMIT_ENV_VAR)
    return how


def project_relative_or_path(path: Path) -> str:
    from contrastive_sentence_embeddings.runs.project_paths import project_relative

    return project_relative(path)


def _reflink(source: Path, target: Path) -> bool:
    """Clone ``source`` to ``target`` copy-on-write; False where the file system (or
    the platform) cannot, leaving nothing at ``target``."""
    try:
        import fcntl

        with source.open("rb") as reading, target.open("wb") as writing:
            fcntl.ioctl(writing.fileno(), _FICLONE, reading.fileno())
        return True
    except (OSError, ImportError):
        target.unlink(missing_ok=True)
        return False


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


_LINKS_THAT_SHARE = ("hard link", "symbolic link")


def _read_record(link_record: Path) -> dict:
    try:
        return json.loads(Path(link_record).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise RawSourceChanged(f"{link_record} is unreadable ({type(err).__name__}: {err}); delete it and run "
                               "again (it only records which raw files are links to writable sources)") from None


def _record_link(link_record: Path, target: Path, source: Path, how: str) -> None:
    """Remember (or forget) what ``target`` is linked to, with the size and time of the
    source now, for :func:`check_linked_source`."""
    from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically

    records = _read_record(link_record)
    key = str(target.resolve())
    if how in _LINKS_THAT_SHARE:
        status = source.stat()
        records[key] = {"source": str(source), "how": how, "size": status.st_size, "mtime_ns": status.st_mtime_ns,
                        "linked": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())}
    elif key in records:
        del records[key]
    else:
        return
    Path(link_record).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(Path(link_record), json.dumps(records, indent=1, sort_keys=True) + "\n")


def check_linked_source(target: Path, link_record: Path, linked_now: bool = True) -> None:
    """Stop when ``target`` was published as a link to a writable source and that source
    (so, while still linked, ``target`` too) changed since: an edit of a raw file that
    went into the mirror, or a mirror changed under the project. ``linked_now``: check
    only while ``target`` is still that link (a reader; DVC replaces the link with its
    own copy when it commits the stage, and a copy cannot edit the mirror); else
    whatever ``target`` is now (before it is published again)."""
    entry = _read_record(link_record).get(str(Path(target).resolve()))
    if entry is None:
        return
    source = Path(entry["source"])
    try:
        status = source.stat()
    except FileNotFoundError:
        return
    if linked_now and not (Path(target).exists() and os.path.samefile(target, source)):
        return
    if (status.st_size, status.st_mtime_ns) == (entry["size"], entry["mtime_ns"]):
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status.st_mtime_ns / 1e9))
    raise RawSourceChanged(
        f"{source} changed since it was linked into {project_relative_or_path(Path(target))} on {entry['linked']} "
        f"(a {entry['how']}: one file; size {entry['size']} -> {status.st_size} bytes, modified {when}), so an "
        "edit of the raw file edits the mirror and every project linked to it. Restore the mirror file; if it "
        f"was updated on purpose, delete {project_relative_or_path(Path(link_record))} and run again.")


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


@dataclass(frozen=True)
class RawDataConfig:
    """``raw_data``: where each raw source comes from. ``mode`` for every source, and
    ``source_modes`` for the sources that must come from elsewhere: at paper scale the
    training data come from the Hub, but the transfer tasks have no Hub copy, so they
    come from the mirror (and STS from the mirror when it has SentEval's files). Here,
    beside :data:`MODES` and :data:`RAW_SOURCES`, which it checks against."""

    mode: str = "auto"
    mirror_dir: str | None = None
    hub: dict = field(default_factory=dict)
    source_modes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for where, mode in [("mode", self.mode), *((f"source_modes.{k}", v) for k, v in self.source_modes.items())]:
            if mode not in MODES:
                raise ValueError(f"{where} must be auto, mirror or hub, got {mode!r}")
        unknown = sorted(set(self.source_modes) - set(RAW_SOURCES))
        if unknown:
            raise ValueError(f"source_modes names unknown raw source(s) {', '.join(unknown)}; "
                             f"the sources are {', '.join(RAW_SOURCES)}")
        if (self.hub or {}).get("sts") is not None:
            # Checked here too, not only when the download starts: a misspelt revision
            # key would otherwise fetch the newest rows in silence.
            from contrastive_sentence_embeddings.data.sts_hub import StsHubOptions

            parse_strict(StsHubOptions, self.hub["sts"], "raw_data.hub.sts")

    def mode_for(self, source: str) -> str:
        return self.source_modes.get(source, self.mode)
