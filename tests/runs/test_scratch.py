"""Scratch left by killed runs (runs/scratch.py): what the next run removes and what it
leaves, workers that die with their parent, SIGTERM handled like Ctrl-C, and a full
disk reported with its path. The files and processes are made here."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.runs import scratch
from contrastive_sentence_embeddings.runs.atomic_files import folder_replaced_atomically

SRC = Path(__file__).resolve().parents[2] / "src"


def ended_process_pid() -> int:
    """The pid of a process that has run and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def marked_by(folder: Path, pid: int, project: Path, started: float | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "chunk.arrow").write_bytes(b"x" * 1500)
    (folder / scratch.MARKER_FILE).write_text(json.dumps(
        {"project": str(project), "pid": pid, "host_key": scratch.host_key(), "process_started": started}))
    return folder


def test_the_next_run_removes_only_marked_items_of_this_project_whose_owner_ended(tmp_path, caplog):
    project, temporary = tmp_path / "project", tmp_path / "tmp"
    data = project / "data" / "03_primary"
    data.mkdir(parents=True)
    dead, alive = ended_process_pid(), os.getppid()  # pytest's parent outlives this test
    crashed = marked_by(temporary / "cse-run-abc", dead, project.resolve())
    running = marked_by(temporary / "cse-run-def", alive, project.resolve())
    other_project = marked_by(temporary / "cse-fanout-ghi", dead, tmp_path / "elsewhere")
    unmarked = temporary / "cse-long_documents-jkl"
    unmarked.mkdir()
    host = scratch.host_key()
    half_written = data / f".long_documents.writing-0123abcd-p{dead}h{host}"
    half_written.mkdir()
    (half_written / "data-00000-of-00001.arrow").write_bytes(b"y" * 700)
    moved_aside = data / f".wiki_sentences.old-0123abcd-p{dead}h{host}"  # its target never arrived
    moved_aside.mkdir()
    (moved_aside / "state.json").write_text("{}")
    being_written = data / f".declutr_spans.writing-4567abcd-p{alive}h{host}"
    being_written.mkdir()
    foreign_host = data / f".nli_pairs.writing-89abcdef-p{dead}h00000000"
    foreign_host.mkdir()
    users_own = data / ".my_notes.writing-by-hand"
    users_own.mkdir()
    caplog.set_level("WARNING", logger=scratch.__name__)

    handled = scratch.remove_left_behind(project, temporary=temporary)

    assert sorted(handled) == sorted([crashed, half_written, moved_aside])
    assert not crashed.exists() and not half_written.exists() and not moved_aside.exists()
    assert (data / "wiki_sentences" / "state.json").is_file()  # the previous version, put back
    for kept in (running, other_project, unmarked, being_written, foreign_host, users_own):
        assert kept.exists(), kept
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3
    assert f"Removed {crashed} (1.6 kB" in lines[0] and f"process {dead}" in lines[0]
    assert any(line.startswith(f"Removed {half_written} (700 B)") for line in lines)
    assert any(line.startswith(f"Put back {data / 'wiki_sentences'}") for line in lines)


def test_a_process_reusing_a_dead_owners_pid_does_not_keep_its_scratch(tmp_path):
    project, temporary = tmp_path / "project", tmp_path / "tmp"
    # This very process, but not when it started: a later process given the same pid.
    reused = marked_by(temporary / "cse-run-abc", os.getpid(), project.resolve(), started=1.0)
    ours = marked_by(temporary / "cse-run-def", os.getpid(), project.resolve(),
                     started=scratch.process_start_time(os.getpid()))
    assert scratch.remove_left_behind(project, temporary=temporary) == [reused]
    assert ours.is_dir()


def test_an_atomic_folder_write_in_progress_is_not_taken_for_a_dead_ones(tmp_path):
    target = tmp_path / "data" / "long_documents"
    with folder_replaced_atomically(target) as staging:
        staging.mkdir()
        assert scratch.SIBLING_PATTERN.match(staging.name)["pid"] == str(os.getpid())
        assert scratch.remove_left_behind(tmp_path, temporary=tmp_path / "none") == []
        (staging / "state.json").write_text("{}")
    assert (target / "state.json").is_file()


WORKER = """
import os, sys, time
from pathlib import Path
from contrastive_sentence_embeddings.runs.scratch import die_with_folder_owner
die_with_folder_owner(Path(sys.argv[1]))
Path(sys.argv[2]).write_text(str(os.getpid()))
time.sleep(60)
"""

OWNER = """
import subprocess, sys, time
from contrastive_sentence_embeddings.runs.scratch import marked_folder
folder = marked_folder("fanout", dir=sys.argv[1])
subprocess.Popen([sys.executable, "-c", sys.argv[2], str(folder), sys.argv[3]])
time.sleep(60)
"""


def test_a_started_worker_dies_with_the_process_that_made_its_folder(tmp_path):
    """What every fan-out training worker does first (fanout.worker_main)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    pid_file = tmp_path / "worker.pid"
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), WORKER, str(pid_file)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and owner.poll() is None, "the worker never started"
            time.sleep(0.1)
        worker = int(pid_file.read_text())
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while scratch._pid_running(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    if scratch._pid_running(worker):
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived the process that started it")


def test_sigterm_stops_a_run_like_ctrl_c_and_the_handler_is_restored(tmp_path):
    previous = signal.getsignal(signal.SIGTERM)
    guard = scratch.RunGuard()
    guard.start()
    try:
        assert Path(tempfile.gettempdir()) == scratch.process_folder() == Path(os.environ["TMPDIR"])
        assert scratch.read_marker(scratch.process_folder())["pid"] == os.getpid()
        cleaned = []
        with pytest.raises(SystemExit) as stopped:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises in this (the main) thread first
            finally:
                cleaned.append(True)
        assert stopped.value.code == 128 + signal.SIGTERM and cleaned == [True]
        assert signal.getsignal(signal.SIGTERM) is previous  # a second SIGTERM is not caught
        with pytest.raises(SystemExit):
            guard.exit_if_terminated()
    finally:
        guard.stop()
    assert signal.getsignal(signal.SIGTERM) is previous
    assert Path(tempfile.gettempdir()) != scratch.process_folder()


# --- a full disk --------------------------------------------------------------------------
TORCH_WRITE_FAILURE = ("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file "
                       "data/0: file write failed")


def test_a_full_disk_during_a_checkpoint_names_the_folder_and_the_free_space(tiny_bert, tokenizer, tmp_path,
                                                                             monkeypatch):
    import torch

    from tests.training.test_crash_safety import train_tiny

    def full_disk(*args, **kwargs):
        raise RuntimeError(TORCH_WRITE_FAILURE)  # what torch's zip writer raises on ENOSPC

    monkeypatch.setattr(torch, "save", full_disk)
    monkeypatch.setattr(scratch, "free_space", lambda path: (4096, 50 * 10**9))
    checkpoints = tmp_path / "checkpoints"
    with pytest.raises(scratch.NoSpaceLeftError) as raised:
        train_tiny(tiny_bert, tokenizer, checkpoints, max_steps=2)
    message = str(raised.value)
    assert message.startswith(f"No space left on device while writing {checkpoints}")
    assert "has 4.1 kB free of 50.0 GB" in message and "training.checkpoint_dir" in message
    assert raised.value.errno == errno.ENOSPC and isinstance(raised.value.__cause__, RuntimeError)


def test_a_torch_write_failure_with_room_left_is_not_called_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(scratch, "free_space", lambda path: (10 * 10**9, 50 * 10**9))
    with pytest.raises(RuntimeError, match="file write failed"):
        with scratch.explained_no_space(tmp_path, "Free space."):
            raise RuntimeError(TORCH_WRITE_FAILURE)


def test_a_full_temporary_area_during_data_preparation_names_the_folder_and_tmpdir(tokenizer, tmp_path,
                                                                                   monkeypatch):
    import pyarrow as pa

    from contrastive_sentence_embeddings.data import documents as docs
    from contrastive_sentence_embeddings.data.report import StepReport

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_file = pa.OSFile

    def full_disk(path, mode="r"):
        if "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device")  # what the OS says, with no path
        return real_file(path, mode)

    monkeypatch.setattr(pa, "OSFile", full_disk)
    documents = [("d1", "f:1", "", "a document of a few words")]
    with pytest.raises(scratch.NoSpaceLeftError) as raised:
        docs.tokenized_long_documents(documents, tokenizer, 1, StepReport("long_documents"))
    message = str(raised.value)
    assert message.startswith(f"No space left on device while writing {tmp_path / 'cse-long_documents-'}")
    assert "free of" in message and "TMPDIR" in message
    assert list(tmp_path.iterdir()) == []  # the working folder went with the error


def test_a_full_disk_during_a_model_save_names_the_folder_and_keeps_the_previous_model(tiny_bert, tokenizer,
                                                                                       tmp_path, monkeypatch):
    import transformers.modeling_utils

    from contrastive_sentence_embeddings.training.saving import save_sentence_encoder

    model = tmp_path / "models" / "simcse"
    save_sentence_encoder(model, tiny_bert, tokenizer, "mean", {"run": "before"})
    before = sorted(path.name for path in model.iterdir())

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")  # what the OS says, with no path

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)  # save_pretrained's writer
    with pytest.raises(scratch.NoSpaceLeftError) as raised:
        save_sentence_encoder(model, tiny_bert, tokenizer, "mean", {"run": "after"})
    assert str(raised.value).startswith(f"No space left on device while writing {model.parent / '.simcse.saving-'}")
    assert "data/06_models" in str(raised.value)
    assert sorted(path.name for path in model.iterdir()) == before
    assert [path.name for path in model.parent.iterdir()] == ["simcse"]  # the half-written copy is gone
