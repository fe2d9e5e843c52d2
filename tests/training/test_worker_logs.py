"""The fan-out workers' log records reach the training node's log
(``training/worker_logs.py``): written by the worker to the job folder, replayed by the
parent through its own loggers while it waits and when the workers have stopped. (The
fan-out itself, with a dev-score line from its rank 0, runs in
tests/pipelines/training/test_fanout.py.)"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from contrastive_sentence_embeddings.training import worker_logs

TRAINER = "contrastive_sentence_embeddings.training.trainer"


def _spawned_worker(folder: str, rank: int) -> None:
    """A process started like the fan-out's workers (spawn: no logging of the parent's)."""
    worker_logs.log_to_folder(folder, rank)
    logger = logging.getLogger(TRAINER)
    logger.info("step 2: STS-B dev 81.00, SICK-R trial 75.00 (best stsb_dev 81.00 at step 2)")
    logger.warning("a warning of rank %d", rank)
    if rank == 0:
        go = Path(folder) / "go"
        deadline = time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            raise ValueError("a failure inside the worker")
        except ValueError:
            logger.exception("resumed from step-4 at step 4, then failed")


def messages(caplog, name: str = TRAINER) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == name]


def test_a_spawned_workers_records_reach_this_process_while_it_waits(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_spawned_worker, args=(str(tmp_path), rank)) for rank in (0, 1)]
    with worker_logs.replayed(tmp_path, interval=0.05):
        for worker in workers:
            worker.start()
        # Rank 0 waits for "go": its dev-score line must arrive while it still runs.
        deadline = time.monotonic() + 60
        while not any("STS-B dev 81.00" in message for message in messages(caplog)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers[0].is_alive()
        (tmp_path / "go").touch()
        for worker in workers:
            worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    trainer = messages(caplog)
    assert trainer.count("[rank 0] step 2: STS-B dev 81.00, SICK-R trial 75.00 (best stsb_dev 81.00 at step 2)") == 1
    assert "[rank 0] a warning of rank 0" in trainer and "[rank 1] a warning of rank 1" in trainer
    assert not any(message.startswith("[rank 1] step 2") for message in trainer)  # rank 1 logs from WARNING
    # The last record, logged after "go", arrived when the block ended, its traceback with it.
    failed = next(record for record in caplog.records if "then failed" in record.getMessage())
    assert failed.levelno == logging.ERROR and "ValueError: a failure inside the worker" in failed.exc_text
    assert {record.process for record in caplog.records if record.name == TRAINER} == {w.pid for w in workers}
    assert "ValueError: a failure inside the worker" in caplog.text  # formatted as this process formats


def test_only_complete_lines_are_replayed_and_this_processs_levels_decide(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    logging.getLogger("chatty.library").setLevel(logging.WARNING)
    path = worker_logs.log_file(tmp_path, 0)
    path.parent.mkdir(parents=True)
    info = {"name": TRAINER, "levelno": logging.INFO, "levelname": "INFO", "msg": "trained 4 steps", "created": 1.0}
    quiet = {**info, "name": "chatty.library", "msg": "saving state"}
    being_written = json.dumps({**info, "msg": "step 4: STS-B dev 80.00"})
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(info) + "\n" + json.dumps(quiet) + "\n" + being_written[:20])
    follower = worker_logs.LogFollower(tmp_path)
    assert follower.poll() == 2
    assert messages(caplog) == ["[rank 0] trained 4 steps"]
    assert not messages(caplog, "chatty.library")  # INFO of a logger this process keeps at WARNING
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(being_written[20:] + "\nnot json\n")
    assert follower.poll() == 2
    assert messages(caplog) == ["[rank 0] trained 4 steps", "[rank 0] step 4: STS-B dev 80.00"]
    unreadable = messages(caplog, "contrastive_sentence_embeddings.training.worker_logs")
    assert len(unreadable) == 1 and "unreadable line" in unreadable[0] and "not json" in unreadable[0]
    assert follower.poll() == 0  # nothing is replayed twice
    caplog.clear()
    os.remove(path)
    assert follower.poll() == 0


def test_a_worker_that_logs_nothing_leaves_nothing_to_replay(tmp_path, caplog):
    with worker_logs.replayed(tmp_path, interval=0.01) as follower:
        time.sleep(0.05)
    assert follower.poll() == 0 and not caplog.records


@pytest.mark.parametrize("rank, level", [(0, logging.INFO), (1, logging.WARNING)])
def test_the_worker_side_levels(tmp_path, rank, level):
    root = logging.getLogger()
    handlers, previous = list(root.handlers), root.level
    package = logging.getLogger("contrastive_sentence_embeddings")
    package_level = package.level
    package.setLevel(logging.INFO)  # as the project's logging.yml does, when a worker loads it
    try:
        path = worker_logs.log_to_folder(tmp_path, rank)
        assert root.level == level and path == tmp_path / worker_logs.LOG_FOLDER / f"rank{rank}.jsonl"
        logging.getLogger(TRAINER).info("an info line")
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["msg"] for line in lines] == (["an info line"] if rank == 0 else [])
    finally:
        for handler in root.handlers[:]:
            if handler not in handlers:
                root.removeHandler(handler)
                handler.close()
        root.setLevel(previous)
        package.setLevel(package_level)


def _worker_under_kedros_cli(folder: str) -> None:
    """A worker as `kedro run` spawns it: the spawned process re-imports the launching
    script, kedro's CLI, whose import of kedro.framework.project sets up the project's
    console logging in the worker too."""
    import kedro.framework.project  # noqa: F401 - its import configures logging, as in the worker

    assert logging.getLogger().handlers, "importing kedro.framework.project set up no logging here"
    worker_logs.log_to_folder(folder, 0)
    logging.getLogger(TRAINER).info("step 4: STS-B dev 82.00 (best stsb_dev 82.00 at step 4)")


def test_a_worker_under_kedros_cli_prints_nothing_itself(tmp_path, capfd, caplog):
    """Rank 0's records reach the terminal once, replayed by the training node: the
    worker's own console handler (from kedro's logging set-up) would print each a second
    time, unmarked."""
    process = multiprocessing.get_context("spawn").Process(target=_worker_under_kedros_cli, args=(str(tmp_path),))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    printed = "".join(capfd.readouterr())
    assert "STS-B dev 82.00" not in printed, printed
    with caplog.at_level(logging.INFO, logger=TRAINER):
        assert worker_logs.LogFollower(tmp_path).poll() == 1
    assert [record.getMessage() for record in caplog.records] == [
        "[rank 0] step 4: STS-B dev 82.00 (best stsb_dev 82.00 at step 4)"]
