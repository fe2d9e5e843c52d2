"""The fan-out workers' log records, in the Kedro run's log.

The training workers (``training/fanout.py``) are spawned processes: they have none of
the Kedro run's logging (its console handler, a log file it writes, a test's
``caplog``), and what they print goes to the terminal only. So each worker writes its
log records, one JSON object a line, to ``<job folder>/worker_logs/rank<r>.jsonl``
(:func:`log_to_folder`: rank 0 from INFO, the other ranks from WARNING, as the
single-process run would log), and the training node replays them through its own
loggers while it waits for the workers and once more when they have stopped
(:func:`replayed`): the dev score at each evaluation, "resumed from ... at step N",
the throughput reach the run's log with the worker's time, logger and level, the
message marked ``[rank r]``.

A file rather than a queue or a socket: nothing has to be handed to the launcher's
spawned processes, a worker that dies leaves every line it finished (the half-written
last one is left out), and what the parent has not read yet stays on disk until it
does. The files live in the job folder and go with it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from contextlib import contextmanager
from pathlib import Path

LOG_FOLDER = "worker_logs"
_RANK_FILE = re.compile(r"^rank(\d+)\.jsonl$")
# The record attributes a replayed record keeps (the message is kept formatted: a
# record's arguments need not survive JSON).
_KEPT = ("name", "levelno", "levelname", "pathname", "filename", "module", "lineno", "funcName", "created",
         "msecs", "relativeCreated", "thread", "threadName", "processName", "process")


def record_as_dict(record: logging.LogRecord) -> dict:
    """What a replayed record needs of ``record``: its attributes, the formatted
    message, any traceback as text."""
    entry = {key: getattr(record, key, None) for key in _KEPT}
    entry["msg"] = record.getMessage()
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    entry["exc_text"] = record.exc_text
    entry["stack_info"] = record.stack_info
    return entry


class JsonLinesHandler(logging.Handler):
    """Each record as one JSON line (:func:`record_as_dict`), appended to ``path`` and
    flushed at once, so the reader sees every finished record."""

    def __init__(self, path: str | Path, level: int = logging.NOTSET):
        super().__init__(level)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stream = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = json.dumps(record_as_dict(record), default=str)
            with self.lock:
                self.stream.write(line + "\n")
                self.stream.flush()
        except Exception:  # noqa: BLE001 - logging must never stop the training
            self.handleError(record)

    def close(self) -> None:
        with self.lock:
            if not self.stream.closed:
                self.stream.close()
        super().close()


def log_file(folder: str | Path, rank: int) -> Path:
    return Path(folder) / LOG_FOLDER / f"rank{rank}.jsonl"


def log_to_folder(folder: str | Path, rank: int) -> Path:
    """A worker's logging: every record of rank 0 from INFO, of the other ranks from
    WARNING, to :func:`log_file` and nowhere else (the training node prints them, once);
    returns the file."""
    path = log_file(folder, rank)
    level = logging.INFO if rank == 0 else logging.WARNING
    root = logging.getLogger()
    root.setLevel(level)
    for console in list(root.handlers):
        # A spawned worker re-imports the launching script, kedro's CLI, whose import of
        # kedro.framework.project sets up the project's console logging here as well:
        # each record would print from the worker and again when the node replays it.
        root.removeHandler(console)
    handler = JsonLinesHandler(path)
    # The handler filters too: a logger given its own level (the project's
    # logging.yml sets the package to INFO) would otherwise pass INFO past the root.
    handler.setLevel(level)
    root.addHandler(handler)
    return path


def replay(entry: dict, rank: int) -> None:
    """Hand a worker's record to this process's logger of the same name, as if logged
    here (this process's levels and handlers decide where it goes)."""
    logger = logging.getLogger(entry.get("name") or "root")
    record = logging.makeLogRecord({**entry, "msg": f"[rank {rank}] {entry.get('msg', '')}", "args": None})
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


class LogFollower:
    """Reads the workers' log files in ``folder`` from where it last stopped and
    replays every complete line (:meth:`poll`)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder) / LOG_FOLDER
        self.offsets: dict[Path, int] = {}

    def poll(self) -> int:
        """Replay the lines written since the last call; returns how many."""
        if not self.folder.is_dir():
            return 0
        replayed = 0
        for path in sorted(self.folder.iterdir()):
            match = _RANK_FILE.match(path.name)
            if not match:
                continue
            with open(path, "rb") as stream:
                stream.seek(self.offsets.get(path, 0))
                data = stream.read()
            complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = None
                if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                        and isinstance(entry.get("levelno"), int)):
                    entry = {"name": __name__, "levelno": logging.WARNING, "levelname": "WARNING",
                             "msg": f"unreadable line in {path}: {line[:200]!r}"}
                replay(entry, int(match.group(1)))
                replayed += 1
        return replayed

    def poll_or_warn(self) -> int:
        """:meth:`poll`, a file that cannot be read said in a warning (the training
        goes on: its log is not worth its result)."""
        try:
            return self.poll()
        except OSError as err:
            logging.getLogger(__name__).warning("cannot read the training workers' log in %s: %s", self.folder, err)
            return 0


@contextmanager
def replayed(folder: str | Path, interval: float = 0.5):
    """While the block runs, replay the workers' log lines in ``folder`` every
    ``interval`` seconds (a daemon thread); on leaving it, however it ends, replay
    what is left. Yields the :class:`LogFollower`."""
    follower = LogFollower(folder)
    stopped = threading.Event()

    def follow() -> None:
        while not stopped.wait(interval):
            follower.poll_or_warn()

    thread = threading.Thread(target=follow, name="cse-worker-logs", daemon=True)
    thread.start()
    try:
        yield follower
    finally:
        stopped.set()
        thread.join()
        follower.poll_or_warn()
