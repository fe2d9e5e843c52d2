"""Live logging of a training run with DVCLive, the project's own experiment logger
(the project is a DVC project: ``dvc plots show``, ``dvc exp show`` and DVC's VS Code
extension read what it writes).

Every row the trainer adds to its curve is logged as it happens, at its own step:

* a training row (every ``log_every`` steps): ``train/loss``, each loss term
  (``train/<term>``), ``train/lr``, ``train/examples_per_second``,
  ``train/peak_memory_gib``;
* a dev row (step 0 and every ``eval_every`` steps): ``dev/<score>`` (``dev/stsb_dev``,
  ``dev/sickr_dev``, ``dev/dev_avg``).

DVCLive writes one TSV per name under ``<folder>/plots/metrics/`` (``step`` and the
value), each row as it is logged; the folder is ``training.live_log_dir`` (per seed
``<dir>/seed<k>``, as checkpoints are). It is told not to touch ``dvc.yaml`` and not to
save a DVC experiment of its own: the project's ``dvc.yaml`` declares each folder as a
plot of its ``train`` stage, so ``dvc plots show`` draws the same files. DVCLive's
summary (``metrics.json``, written by ``make_summary``/``end``) is not written: a plot
folder holding it is an error to ``dvc plots show``, and each run's results are
already DVC metrics (``metrics/<run>.json``, the leaderboard's ``summary.json``).

Only the main process logs. A resumed run continues the files it finds (DVCLive's
``resume``): rows logged after the checkpoint it resumes from, by the interrupted
run, are dropped first, so every step appears once.

Where DVCLive cannot start (it is not installed, or DVC, which it imports, is absent,
as on a GPU image; or its setup fails, as in a git repository without a commit, where
DVCLive 3.49 asks git for a revision that does not exist), the same files are written
by ``TsvMetrics`` in DVCLive's layout and format, and one warning says why: the curve a
``dvc.yaml`` plot declares is there either way, only DVC Studio's live updates are not.
"""

from __future__ import annotations

import csv
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

from contrastive_sentence_embeddings.runs.library_messages import held_messages

logger = logging.getLogger(__name__)

# Curve columns that are not metrics of the step they are logged at.
_NOT_LOGGED = ("step", "epoch")


def metric_name(column: str) -> str:
    """The DVCLive name of a curve column: dev scores keep their ``dev/`` prefix, every
    other column (the loss, its terms, the learning rate, throughput) goes under
    ``train/``."""
    return column if column.startswith("dev/") else f"train/{column}"


class LiveLog:
    """A DVCLive ``Live`` logging the trainer's rows into ``folder``."""

    def __init__(self, folder: str | Path, resume_after: int | None = None):
        self.folder = Path(folder)
        if resume_after is not None:
            drop_rows_after(self.folder, resume_after)
        try:
            self.live = _start_dvclive(self.folder, resume=resume_after is not None)
            writer = "DVCLive"
        except Exception as error:  # noqa: BLE001 - any failure of DVCLive's setup: the same files, written directly
            reason = f"{type(error).__name__}: {error}".splitlines()[0]
            logger.warning("live log: DVCLive could not start here (%s); its TSV files are written directly "
                           "(the same curves, no DVC Studio updates)", reason)
            self.live = TsvMetrics(self.folder, resume=resume_after is not None)
            writer = "TSV files in DVCLive's layout"
        logger.info("live log (%s): %s", writer, self.folder / "plots" / "metrics")

    def log(self, row: Mapping) -> None:
        """Log every finite number of ``row`` at ``row["step"]`` (each is appended to its
        TSV at once, so a run's curve can be watched while it trains)."""
        self.live.step = int(row["step"])
        for column, value in row.items():
            if column in _NOT_LOGGED or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value):
                self.live.log_metric(metric_name(column), float(value))

    def close(self) -> None:
        """Nothing left to write (every row is on disk as it is logged); ``Live.end``
        is not called: it writes the summary and, inside ``dvc exp run``, stages files
        in git, which the experiment itself does. The DVC repository DVCLive opened
        to learn where it runs is closed here, not left to the interpreter's exit."""
        repo = getattr(self.live, "_dvc_repo", None)
        if repo is not None:
            repo.close()
            self.live._dvc_repo = None


def _start_dvclive(folder: Path, resume: bool):
    """DVCLive's ``Live`` on ``folder``: report=None, no HTML/Markdown report rewritten at
    every step; dvcyaml=False, dvc.yaml is the project's, never rewritten by a logger;
    save_dvc_exp=False, `dvc exp run` saves the experiment, a Kedro run is not one."""
    from dvclive import Live  # imported here: only a run that logs live needs it

    # DVCLive names a random experiment it will not save ("Logging to experiment
    # 'ruled-lads'"): a name nothing else shows, held back from the run's log.
    with held_messages("dvclive", r"^Logging to experiment"):
        return Live(str(folder), resume=resume, report=None, save_dvc_exp=False, dvcyaml=False)


class TsvMetrics:
    """What ``Live.log_metric`` writes, without DVCLive: ``<folder>/plots/metrics/<name>.tsv``,
    a header ``step<TAB><last part of the name>`` and one row a call, appended at once.
    A new run starts from no metric files (as DVCLive's does); a resumed one appends."""

    def __init__(self, folder: Path, resume: bool):
        self.metrics = Path(folder) / "plots" / "metrics"
        if not resume:
            for path in self.metrics.rglob("*.tsv"):  # only the files a live log writes
                path.unlink()
        self.step = 0

    def log_metric(self, name: str, value: float) -> None:
        path = self.metrics / f"{name}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", encoding="utf-8", newline="") as stream:
            writer = csv.writer(stream, delimiter="\t", lineterminator=os.linesep)
            if new:
                writer.writerow(["step", name.rsplit("/", 1)[-1]])
            writer.writerow([self.step, value])


def drop_rows_after(folder: Path, step: int) -> None:
    """Remove the rows of every DVCLive metric file under ``folder`` logged after
    ``step`` (an interrupted run's rows past the checkpoint a resumed run starts from)."""
    for path in (folder / "plots" / "metrics").rglob("*.tsv"):
        with path.open(newline="") as stream:
            rows = list(csv.reader(stream, delimiter="\t"))
        if not rows:
            continue
        header, body = rows[0], rows[1:]
        position = header.index("step") if "step" in header else None
        if position is None:
            continue
        kept = [row for row in body if row and int(float(row[position])) <= step]
        if len(kept) != len(body):
            with path.open("w", newline="") as stream:
                csv.writer(stream, delimiter="\t", lineterminator="\n").writerows([header, *kept])
            logger.info("live log: %d row(s) of %s past step %d dropped (the run resumes there)",
                        len(body) - len(kept), path, step)


def open_live_log(folder: str | Path | None, main_process: bool, resume_after: int | None = None) -> LiveLog | None:
    """A live log into ``folder`` on the main process; None without a folder or elsewhere."""
    if folder is None or not main_process:
        return None
    return LiveLog(folder, resume_after)
