"""Locks that keep two live runs off the same files, and name the run that holds them.

Two ``kedro run`` in one checkout would otherwise re-link the same ``data/01_raw``
folder under each other, and the same method twice would delete each other's live
checkpoints. A run therefore takes, before any node runs, a lock per data set it
writes (exclusive) and per data set it only reads (shared), and the trainer takes one
on its checkpoint folder; a second run that needs one of them stops at once with the
holder's pid, host, start time and command line.

The locks are the operating system's (``flock``): they belong to the open file, so a
run that dies in any way (``kill -9`` included) releases them with its last file
descriptor, and a stale lock cannot exist. What the files hold is only the
description shown in the message: each holder writes one record
(``.holder-<host>-<pid>-<id>.json``) beside its lock files, itself locked while the
holder lives; a record whose lock can be taken is a dead run's and is removed by
whoever finds it. A holder removes its lock files on release (an exclusive one at
once; a shared one when no other run still shares it); after ``kill -9`` they stay
behind, empty and unlocked, and are reused or removed by the next run.

Locks are per process: workers that a locked run starts (the training fan-out) take
none of the run's locks, and are never refused by them.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import sys
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from contrastive_sentence_embeddings.runs.project_paths import project_relative

LOCK_SUFFIX = ".lock"
HOLDER_PREFIX = ".holder-"


class LockHeld(RuntimeError):
    """Another live run holds a lock this run needs (the message names that run)."""


def lock_file_name(name: str) -> str:
    """The (hidden) lock file of a lock called ``name`` (a catalog name, a folder): the
    characters a file name cannot safely hold become ``_``."""
    return "." + re.sub(r"[^A-Za-z0-9._-]", "_", name) + LOCK_SUFFIX


def _locked(path: Path, shared: bool) -> int | None:
    """A descriptor of ``path`` (created when missing) holding its lock, or None when
    another process holds a conflicting one. Retried when the file was removed or
    replaced between opening and locking it (its last holder's release), so the lock
    taken is always on the file now at ``path``."""
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(descriptor, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(descriptor).st_ino:
            return descriptor
        os.close(descriptor)


def _release(path: Path, descriptor: int) -> None:
    """Give a lock back, removing its file when no other process shares it."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # still shared by another live run: the file stays theirs
        pass
    else:
        try:
            if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                path.unlink()
        except FileNotFoundError:
            pass
    os.close(descriptor)


def _started() -> float:
    """When this process started (the lock's time where that cannot be read)."""
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - only a description
        return time.time()


def this_process() -> dict:
    """What a holder record says about the running process."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(_started())),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv and sys.argv[0] else sys.executable,
    }


def live_holders(lock_dir: Path) -> list[dict]:
    """The records of the live runs holding locks in ``lock_dir``; the records of dead
    runs (their lock is free) are removed."""
    holders = []
    for record in sorted(Path(lock_dir).glob(f"{HOLDER_PREFIX}*.json")):
        descriptor = _locked(record, shared=True)
        if descriptor is not None:  # nobody holds it: a run that died without releasing
            _release(record, descriptor)
            continue
        try:
            holders.append(json.loads(record.read_text(encoding="utf-8")))
        except (OSError, ValueError):  # being written or removed this instant
            holders.append({})
    return holders


def describe_holder(holder: dict) -> str:
    if not holder:
        return "another run (it is starting or stopping)"
    return (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')} "
            f"(`{holder.get('command')}`)")


@dataclass
class HeldLocks:
    """Locks held by this process in one folder; :meth:`release` gives them back (so
    does the end of the process)."""

    lock_dir: Path
    remove_dir: bool = False  # removed on release when left empty (no one else's)
    held: dict[str, tuple[Path, int]] = field(default_factory=dict)
    record: tuple[Path, int] | None = None

    def release(self) -> None:
        for path, descriptor in self.held.values():
            _release(path, descriptor)
        self.held = {}
        if self.record is not None:
            _release(*self.record)
            self.record = None
        if self.remove_dir:
            try:
                self.lock_dir.rmdir()  # only when nothing else is in it
            except OSError:
                pass

    def __enter__(self) -> HeldLocks:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class LockFolderNotWritable(OSError):
    """The folder a run keeps its locks in cannot be created or written (a read-only
    ``data/``, another user's folder): one line naming it and the reason, where the
    lock code's traceback said it in 159 lines."""


def acquire(lock_dir: str | Path, writes: Iterable[str], reads: Iterable[str] = (), what: str = "data set",
            advice: str = "", locks_only: bool = False) -> HeldLocks:
    """:func:`take_locks`; a folder it cannot write in is :class:`LockFolderNotWritable`."""
    try:
        return take_locks(lock_dir, writes, reads, what, advice, locks_only)
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as error:
        raise LockFolderNotWritable(
            f"cannot lock the run's {what}s in {project_relative(Path(lock_dir))}: {error.strerror or error} "
            f"({project_relative(Path(error.filename)) if error.filename else lock_dir}); a run locks what it "
            "reads and writes there, so the folder must be writable: fix its permissions or run from a "
            "writable copy of the project") from error
    except OSError as error:
        if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise LockFolderNotWritable(
                f"cannot lock the run's {what}s in {project_relative(Path(lock_dir))}: {error.strerror} "
                "(read-only file system?); the folder must be writable") from error
        raise


def take_locks(lock_dir: str | Path, writes: Iterable[str], reads: Iterable[str] = (), what: str = "data set",
               advice: str = "", locks_only: bool = False) -> HeldLocks:
    """Take, without waiting, an exclusive lock for each name in ``writes`` and a shared
    one for each other name in ``reads``, in ``lock_dir``; or take none and raise
    :class:`LockHeld` naming the first busy one, whether it is written or read there,
    and the live run(s) holding it. ``advice`` ends the message. ``locks_only``: the
    folder holds nothing but locks, and goes when the last holder releases (otherwise
    it is removed only if this call created it and it is left empty)."""
    lock_dir = Path(lock_dir)
    created = locks_only or not lock_dir.is_dir()
    lock_dir.mkdir(parents=True, exist_ok=True)
    writes = set(writes)
    wanted = {name: False for name in writes} | {name: True for name in set(reads) - writes}
    locks = HeldLocks(lock_dir, created)
    live_holders(lock_dir)  # removes the records of runs that died holding locks here
    # The record first (and locked), so that a run refused by one of these locks finds it.
    record_path = lock_dir / f"{HOLDER_PREFIX}{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"
    descriptor = _locked(record_path, shared=False)
    locks.record = (record_path, descriptor)
    description = this_process() | {"locks": {name: "read" if shared else "write"
                                              for name, shared in sorted(wanted.items())}}
    os.write(descriptor, json.dumps(description, indent=1).encode("utf-8"))
    for name, shared in sorted(wanted.items()):
        path = lock_dir / lock_file_name(name)
        descriptor = _locked(path, shared)
        if descriptor is None:
            locks.release()
            raise LockHeld(_busy_message(lock_dir, name, shared, what, advice))
        locks.held[name] = (path, descriptor)
    return locks


def _busy_message(lock_dir: Path, name: str, shared: bool, what: str, advice: str) -> str:
    holders = [holder for holder in live_holders(lock_dir) if name in holder.get("locks", {}) or not holder]
    writers = [holder for holder in holders if holder.get("locks", {}).get(name) == "write"]
    shown = writers or holders
    doing = "writes" if writers else "reads"
    who = "; ".join(describe_holder(holder) for holder in shown) or "another run"
    need = "read" if shared else "write"
    return (f"{what} {name!r} is locked: another live run {doing} it ({who}), and this run would {need} it "
            f"(lock in {project_relative(lock_dir)}). {advice or 'Wait for that run to end, or stop it.'}").rstrip()
