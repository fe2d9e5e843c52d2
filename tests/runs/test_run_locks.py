"""Locks between live runs (runs/run_locks.py): refused at once with the holder named,
shared reads, released by the end of the holder however it ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from contrastive_sentence_embeddings.runs import run_locks
from contrastive_sentence_embeddings.runs.run_locks import LockHeld, acquire

# A holder in another process: takes the locks named on its command line, says so, waits.
HOLDER = """
import sys, time
from contrastive_sentence_embeddings.runs.run_locks import acquire
acquire(sys.argv[1], writes=sys.argv[2].split(",") if sys.argv[2] else [],
        reads=sys.argv[3].split(",") if sys.argv[3] else [], locks_only=True)
print("locked", flush=True)
time.sleep(120)
"""


def start_holder(lock_dir, writes="", reads=""):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_dir), writes, reads],
                              stdout=subprocess.PIPE, text=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_lock_another_live_process_holds_is_refused_naming_it_and_freed_by_its_kill(tmp_path):
    holder = start_holder(tmp_path / "locks", writes="raw_wiki")
    try:
        with pytest.raises(LockHeld) as refused:
            acquire(tmp_path / "locks", writes=["raw_sts", "raw_wiki"])
        message = str(refused.value)
        assert f"pid {holder.pid} on {os.uname().nodename}" in message and "'raw_wiki'" in message
        assert "writes it" in message and "-c " in message  # the holder's command line
        # refused as a whole: the free lock it took first was given back
        acquire(tmp_path / "locks", writes=["raw_sts"]).release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with acquire(tmp_path / "locks", writes=["raw_wiki"], locks_only=True) as locks:  # no stale lock after kill -9
        assert list(locks.held) == ["raw_wiki"]
        records = list((tmp_path / "locks").glob(".holder-*.json"))  # the dead run's record is gone
        assert [json.loads(r.read_text())["pid"] for r in records] == [os.getpid()]
    assert not (tmp_path / "locks").exists()  # released: nothing left behind


def test_readers_share_a_lock_that_a_writer_cannot_take(tmp_path):
    holder = start_holder(tmp_path / "locks", reads="wiki_sentences")
    try:
        with acquire(tmp_path / "locks", writes=[], reads=["wiki_sentences"]):
            pass
        with pytest.raises(LockHeld, match=rf"another live run reads it \(pid {holder.pid} .*this run would write it"):
            acquire(tmp_path / "locks", writes=["wiki_sentences"])
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_file_replaced_between_open_and_lock_is_opened_again(tmp_path, monkeypatch):
    lock = tmp_path / "x.lock"
    real_flock, replaced = run_locks.fcntl.flock, []

    def flock_after_a_release(descriptor, operation):
        if not replaced:  # the previous holder removes the file just before we lock it
            replaced.append(True)
            lock.unlink()
        return real_flock(descriptor, operation)

    monkeypatch.setattr(run_locks.fcntl, "flock", flock_after_a_release)
    descriptor = run_locks._locked(lock, shared=False)
    assert os.fstat(descriptor).st_ino == lock.stat().st_ino
    os.close(descriptor)


def test_a_live_run_training_into_a_checkpoint_folder_keeps_it_from_another_run(tmp_path):
    from contrastive_sentence_embeddings.training.trainer import CHECKPOINT_MARKER, CheckpointStore, release_checkpoints

    root = tmp_path / "checkpoints" / "simcse"
    staging = root / ".staging-step-3"  # the live run is writing its checkpoint of step 3
    staging.mkdir(parents=True)
    (staging / CHECKPOINT_MARKER).write_text("")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom contrastive_sentence_embeddings.training.trainer import "
         "CheckpointStore\nCheckpointStore(sys.argv[1]).claim()\nprint('locked', flush=True)\ntime.sleep(120)", str(root)],
        stdout=subprocess.PIPE, text=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeld, match=rf"checkpoint folder 'simcse' is locked: another live run writes it \(pid "
                                           rf"{holder.pid} .*another checkpoint_dir"):
            CheckpointStore(root).claim()  # what the trainer does before removing "interrupted" staging folders
        assert release_checkpoints(root) == [] and staging.is_dir()  # the other run's: left alone
    finally:
        holder.kill()
        holder.wait()
    assert release_checkpoints(root) == [staging] and not root.exists()
    assert sorted(p.name for p in root.parent.iterdir()) == []  # its lock and record went with it


def test_a_lock_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path, monkeypatch):
    """A read-only data/ (PermissionError: simulated, a root test process writes anywhere)
    and a lock folder that is a file: one message naming the folder, not the lock code's
    traceback."""
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "ro")) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    (tmp_path / "ro" / ".locks").mkdir(parents=True)
    monkeypatch.setattr(run_locks.os, "open", read_only)
    with pytest.raises(run_locks.LockFolderNotWritable, match=r"cannot lock the run's data sets in .*ro/\.locks: "
                                                              r"Permission denied \(.*holder-.*\.json\)") as error:
        acquire(tmp_path / "ro" / ".locks", ["wiki_sentences"])
    assert "\n" not in str(error.value)
    monkeypatch.undo()

    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(run_locks.LockFolderNotWritable, match=r"cannot lock the run's data sets in .*file/\.locks"):
        acquire(tmp_path / "file" / ".locks", ["wiki_sentences"])


def test_kedro_run_with_a_lock_folder_it_cannot_make_says_so_in_one_line(tmp_path, mirror_dir):
    from tests.helpers import ScratchProject
    from tests.configuration.test_parameters import kedro

    ScratchProject(tmp_path, mirror_dir).close()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / ".locks").write_text("a file where the lock folder goes")
    result = kedro(tmp_path, mirror_dir, "run", "--nodes=ingest_sts")
    assert result.returncode == 1
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "cannot lock the run's data sets in data/.locks" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
