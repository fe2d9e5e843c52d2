"""What a run leaves in scratch space, and how it goes away when the run cannot remove
it itself.

Every scratch folder the project creates holds a marker file (:data:`MARKER_FILE`: the
project, the owner process's id, host and start time, when it was made), and every
hidden sibling an atomic write puts beside its target (``.<name>.writing-*`` and
``.<name>.old-*``, :mod:`.atomic_files`) names its owner process and host in its name
(:func:`sibling_token`). A run that is killed (``kill -9``, the OOM killer, a job's time
limit) removes neither; the next run of the project does (:func:`remove_left_behind`,
called by ``runs.hooks.ScratchHook`` when a run starts): only what carries the marker, is
this project's, and whose owner process is no longer running on this host, one log
line per item with its size. A previous version moved aside (``.old-*``) whose
replacement never arrived is put back instead.

While a Kedro run goes on (:class:`RunGuard`):

- every process this one forks (``datasets``' map workers, the ``multiprocess``
  manager, the span samplers) dies with it: Linux's ``PR_SET_PDEATHSIG``, elsewhere a
  thread in the child that watches its parent's pid (:func:`die_with_parent`); the
  fan-out's spawned training workers call it themselves;
- SIGTERM stops the run as Ctrl-C does: it raises in the main thread, so every
  ``finally`` and ``except BaseException`` block removes its scratch and its workers;
- the temporary files libraries make for their workers (``multiprocess``' ``pymp-*``,
  torch's ``pytorch-errorfile-*``, ``cse-*`` folders) go into a marked folder of this
  process (``cse-run-*``, :func:`process_folder`), removed when the process exits.

A full disk: :func:`explained_no_space` turns ``[Errno 28]`` and torch's ``file write
failed`` into one error naming the path, the free space and the fix.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

logger = logging.getLogger(__name__)

MARKER_FILE = ".cse-scratch-owner.json"
SCRATCH_PREFIX = "cse-"
# The hidden siblings of an atomic write: ``.<target>.<role>-<random>-p<pid>h<host key>``.
SIBLING_PATTERN = re.compile(
    r"^\.(?P<target>.+)\.(?P<role>writing|old)-[0-9a-f]{8}-p(?P<pid>\d+)h(?P<host>[0-9a-f]{8})$")
# How deep under the project's data folder hidden siblings are looked for
# (data/03_primary/.long_documents.writing-*: 2).
SIBLING_SEARCH_DEPTH = 3
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_project: Path | None = None
_process_folder: Path | None = None
_siblings_in_use: set[str] = set()
_lock = threading.Lock()


# --- owners ------------------------------------------------------------------------------
def set_project(path: str | Path) -> None:
    """The project whose scratch this process makes (the Kedro run's project path)."""
    global _project
    _project = Path(path).resolve()


def current_project() -> Path:
    return _project if _project is not None else Path.cwd().resolve()


def host_key(host: str | None = None) -> str:
    """8 hex digits naming a host (a hidden sibling's name holds it, not the host name)."""
    return hashlib.blake2b((host or socket.gethostname()).encode(), digest_size=4).hexdigest()


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None when unknown: with
    the pid it names one process, not whichever reuses the number later."""
    try:
        import psutil
    except ImportError:
        return _proc_start_time(pid)
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _proc_start_time(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:  # a zombie (killed, not yet reaped) has ended
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def owner_running(pid: int, host: str, started: float | None = None, path: str | None = None) -> bool | None:
    """Whether the owner of a scratch item still runs: None when it was another host's
    (it cannot be told from here), False when no such process exists (or a later one
    has its number: another start time). This very process owns ``path`` only if it
    made it (:func:`sibling_token`) or if it started when the marker says."""
    if host != host_key():
        return None
    if pid == os.getpid():
        if started is not None:
            now = process_start_time(pid)
            return now is None or abs(now - started) < 1.0
        return path is not None and path in _siblings_in_use
    if not _pid_running(pid):
        return False
    if started is not None:
        now = process_start_time(pid)
        return now is None or abs(now - started) < 1.0
    return True


def owner_record(purpose: str) -> dict:
    pid = os.getpid()
    return {"project": str(current_project()), "pid": pid, "host": socket.gethostname(), "host_key": host_key(),
            "process_started": process_start_time(pid),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "purpose": purpose}


def read_marker(folder: Path) -> dict | None:
    """A scratch folder's owner record, None for anything without a readable marker."""
    try:
        record = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("pid"), int) else None


# --- making scratch ---------------------------------------------------------------------------
def marked_folder(prefix: str, dir: str | Path | None = None, purpose: str | None = None) -> Path:
    """A new folder ``cse-<prefix>-*`` (in ``dir``, default the temporary area) holding
    the marker that names this process as its owner."""
    folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{prefix}-", dir=dir))
    with explained_no_space(folder, remedy_for_temporary_files()):
        (folder / MARKER_FILE).write_text(json.dumps(owner_record(purpose or prefix), indent=1), encoding="utf-8")
    return folder


def sibling_token() -> str:
    """The suffix of a hidden sibling this process is about to make: random, then its
    owner (pid and host key), which :func:`remove_left_behind` reads back."""
    return f"{uuid.uuid4().hex[:8]}-p{os.getpid()}h{host_key()}"


@contextmanager
def sibling_in_use(path: Path) -> Iterator[Path]:
    """``path`` (a hidden sibling) counts as this process's while the block runs."""
    with _lock:
        _siblings_in_use.add(str(path))
    try:
        yield path
    finally:
        with _lock:
            _siblings_in_use.discard(str(path))


def process_folder() -> Path:
    """This process's marked folder for other libraries' temporary files, made on first
    use and removed when the process exits (by :func:`remove_left_behind` of the next
    run when it is killed)."""
    global _process_folder
    with _lock:
        if _process_folder is None or not _process_folder.is_dir():
            _process_folder = marked_folder("run", purpose="temporary files of this process and its workers")
            atexit.register(_remove_own_folder, _process_folder, os.getpid())
        return _process_folder


def _remove_own_folder(folder: Path, owner: int) -> None:
    if os.getpid() == owner:  # not a forked child that inherited the exit handler
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def temporary_files_in(folder: Path) -> Iterator[Path]:
    """Inside the block, ``tempfile``'s default folder (this process) and ``TMPDIR`` (the
    processes it starts) are ``folder``; both are restored after."""
    previous_default, previous_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(folder), str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous_default
        if previous_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous_env


# --- removing what a dead run left -------------------------------------------------------
def tree_size(path: Path) -> int:
    if not path.is_dir() or path.is_symlink():
        return path.lstat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def human_size(size: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def _removed(path: Path) -> bool:
    """Remove ``path``; a failure is logged (the run goes on) and gives False."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as error:
        logger.warning("Could not remove %s, left by an earlier run: %s", path, error)
        return False
    return True


def hidden_siblings(data_folder: Path, depth: int = SIBLING_SEARCH_DEPTH) -> Iterator[tuple[Path, re.Match]]:
    """The atomic writes' hidden siblings under ``data_folder``, ``depth`` levels deep
    at most; other hidden entries are not entered."""
    if not data_folder.is_dir():
        return
    for root, folders, files in os.walk(data_folder):
        level = len(Path(root).relative_to(data_folder).parts)
        for name in [*folders, *files]:
            match = SIBLING_PATTERN.match(name)
            if match:
                yield Path(root) / name, match
        folders[:] = [name for name in folders if not name.startswith(".")] if level + 1 < depth else []


def remove_left_behind(project: str | Path | None = None, temporary: str | Path | None = None,
                       data_folder: str | Path | None = None) -> list[Path]:
    """Remove what earlier runs of ``project`` (default: :func:`current_project`) left:
    the marked folders in ``temporary`` (default: the temporary area) whose owner ended,
    and the hidden siblings of atomic writes under ``data_folder`` (default
    ``<project>/data``) whose owner ended; a moved-aside previous version whose target is
    missing is renamed back instead. Logs one line per item (with its size); returns the
    paths removed or put back."""
    project = Path(project).resolve() if project is not None else current_project()
    temporary = Path(temporary if temporary is not None else tempfile.gettempdir())
    data_folder = Path(data_folder) if data_folder is not None else project / "data"
    handled: list[Path] = []
    for folder in sorted(temporary.glob(f"{SCRATCH_PREFIX}*")):
        record = read_marker(folder) if folder.is_dir() and not folder.is_symlink() else None
        if record is None or record.get("project") != str(project):
            continue
        if owner_running(record["pid"], record.get("host_key", ""), record.get("process_started")) is not False:
            continue
        size = tree_size(folder)
        if not _removed(folder):
            continue
        logger.warning("Removed %s (%s): scratch of process %d (started %s), a run of this project that ended "
                       "without removing it", folder, human_size(size), record["pid"], record.get("created", "?"))
        handled.append(folder)
    for path, match in sorted(hidden_siblings(data_folder), key=lambda item: str(item[0])):
        pid = int(match["pid"])
        if owner_running(pid, match["host"], path=str(path)) is not False:
            continue
        target = path.with_name(match["target"])
        if match["role"] == "old" and not target.exists():
            try:
                os.replace(path, target)
            except OSError as error:
                logger.warning("Could not put back %s from %s: %s", target, path.name, error)
                continue
            logger.warning("Put back %s: the previous version, moved aside to %s by process %d, which ended "
                           "before the new version took its place", target, path.name, pid)
        else:
            size = tree_size(path)
            if not _removed(path):
                continue
            logger.warning("Removed %s (%s): left by process %d, which ended while writing %s", path,
                           human_size(size), pid, target.name)
        handled.append(path)
    return handled


# --- worker processes die with their parent ---------------------------------------------
def die_with_parent(parent_pid: int, started_by_main_thread: bool = True) -> None:
    """End this process (SIGKILL) when ``parent_pid``, its parent, ends: Linux's
    ``PR_SET_PDEATHSIG``, or else a daemon thread that watches the parent's pid. The
    signal comes when the parent's thread that started this process ends, so a process
    another thread started is watched instead. A parent that has already gone ends it
    at once."""
    if not (started_by_main_thread and _request_parent_death_signal()):
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:  # it ended before the request took effect
        os._exit(128 + signal.SIGKILL)


def die_with_folder_owner(folder: Path) -> None:
    """:func:`die_with_parent` when this process's parent is the owner of the marked
    ``folder`` (a worker the owner started); nothing otherwise (``torchrun`` started it)."""
    record = read_marker(Path(folder))
    if record is not None and record["pid"] == os.getppid() and record.get("host_key") == host_key():
        die_with_parent(record["pid"])


def _request_parent_death_signal() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, interval: float = 1.0) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os._exit(128 + signal.SIGKILL)

    threading.Thread(target=watch, name="cse-watch-parent", daemon=True).start()


_children_die_with_parent = False
_forking_pid: int | None = None
_forking_in_main_thread = True


def _before_fork() -> None:
    global _forking_pid, _forking_in_main_thread
    _forking_pid = os.getpid()
    _forking_in_main_thread = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    if _children_die_with_parent and _forking_pid is not None:
        # the parent's SIGTERM handler is for the parent's run; a worker ends as usual
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(_forking_pid, _forking_in_main_thread)


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


# --- a run ------------------------------------------------------------------------------------
# multiprocess' manager listens on a Unix socket at <tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX
# (32 bytes more), and a socket's path has at most 107 bytes: a temporary area longer than
# this is not moved into the process folder (which adds 17 bytes).
MAX_SOCKET_FOLDER_BYTES = 107 - 32
class RunGuard:
    """What a Kedro run sets up for its time (:meth:`start`, :meth:`stop`): forked
    workers die with this process, SIGTERM raises in the main thread (the previous
    handler is restored when it fires and at :meth:`stop`), other libraries' temporary
    files go into :func:`process_folder`."""

    def __init__(self) -> None:
        self._previous_handler = None
        self._temporary = None
        self.terminated_by: int | None = None  # the signal that stopped the run

    def start(self) -> None:
        global _children_die_with_parent
        _children_die_with_parent = True
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._terminate)
        try:
            folder = process_folder()
        except OSError as error:  # a temporary area that cannot be written is the steps' to report
            logger.warning("Could not make this run's scratch folder in %s: %s", tempfile.gettempdir(), error)
            return
        if len(os.fsencode(folder)) <= MAX_SOCKET_FOLDER_BYTES:
            self._temporary = temporary_files_in(folder)
            self._temporary.__enter__()
        else:
            logger.debug("%s is too long a path for the workers' sockets: their temporary files stay in %s",
                         folder, folder.parent)

    def stop(self) -> None:
        global _children_die_with_parent
        _children_die_with_parent = False
        self._restore_handler()
        if self._temporary is not None:
            self._temporary.__exit__(None, None, None)
            self._temporary = None

    def _restore_handler(self) -> None:
        if self._previous_handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def _terminate(self, signum, frame) -> None:
        self._restore_handler()  # a second SIGTERM ends the process at once
        self.terminated_by = signum
        logger.warning("Received SIGTERM: stopping the run; its workers and scratch files are removed as on Ctrl-C")
        raise SystemExit(128 + signum)

    def exit_if_terminated(self) -> None:
        """Exit with 128 + the signal if one stopped the run: a library that turned the
        exit into an error of its own on the way out (``datasets``' map waits for its
        workers' results in a ``finally`` and raises ``TimeoutError``) does not make
        it look like a failed step."""
        if self.terminated_by is not None:
            logger.warning("The run was stopped by signal %d (SIGTERM); the error above is how the step it "
                           "interrupted reported it", self.terminated_by)
            raise SystemExit(128 + self.terminated_by)


# --- a full disk ------------------------------------------------------------------------------
# torch's zip writer reports a failed write (ENOSPC included) without the errno or the path.
_TORCH_WRITE_FAILED = re.compile(r"PytorchStreamWriter failed writing|file write failed|inline_container\.cc")
_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
# Less free than this after torch's write failed: the disk filled up.
LOW_SPACE_BYTES = 256 * 2**20


class NoSpaceLeftError(OSError):
    """A write that failed because the file system holding ``path`` is full: one line
    naming the path, the free space and what to do."""

    def __init__(self, path: Path, message: str):
        super().__init__(errno.ENOSPC, message, str(path))
        self.message = message

    def __str__(self) -> str:
        return self.message


def free_space(path: Path) -> tuple[int, int] | None:
    """(free, total) bytes of the file system holding ``path`` (its nearest existing
    folder), None when it cannot be read."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return usage.free, usage.total


def no_space_error(error: BaseException, path: Path, remedy: str) -> NoSpaceLeftError | None:
    """``error`` explained as a full disk at ``path`` (an ``OSError`` with ``ENOSPC`` or
    ``EDQUOT``, or torch's ``file write failed`` with less than :data:`LOW_SPACE_BYTES`
    free), None for any other error."""
    if isinstance(error, NoSpaceLeftError):
        return None
    space = free_space(path)
    if isinstance(error, OSError):
        full = error.errno in _NO_SPACE_ERRNOS or "No space left on device" in str(error)
    elif isinstance(error, RuntimeError) and _TORCH_WRITE_FAILED.search(str(error)):
        full = space is not None and space[0] < LOW_SPACE_BYTES
    else:
        full = False
    if not full:
        return None
    room = (f"the file system holding it has {human_size(space[0])} free of {human_size(space[1])}"
            if space else "its file system's free space could not be read")
    return NoSpaceLeftError(path, f"No space left on device while writing {path}: {room}. {remedy}")


@contextmanager
def explained_no_space(path: Path, remedy: str) -> Iterator[None]:
    """Re-raise a full disk inside the block as :class:`NoSpaceLeftError` about ``path``."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        explained = no_space_error(error, path, remedy)
        if explained is None:
            raise
        raise explained from error


def remedy_for_temporary_files() -> str:
    return ("Free space there, or point TMPDIR at a folder on a larger disk (`TMPDIR=/big/tmp kedro run ...`); "
            "data preparation's scratch needs about 4 bytes per token of the long documents kept "
            "(8 GB at paper scale; docs/record/data_scale.md, 'Scratch space').")
