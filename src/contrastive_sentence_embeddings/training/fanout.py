"""Training in several processes started by the training node itself.

``kedro run`` runs once: data preparation, evaluation and the leaderboard are other
nodes, in the one Kedro process. A method whose ``training.num_processes`` resolves
to more than one (:func:`resolve_num_processes`) has its training node fan out:

1. the node writes what the workers need to a temporary folder it creates
   (:func:`prepare_job`): the prepared data it loaded from the catalog, as Parquet,
   and :class:`TrainingJob` (the method block, the encoder, the dev sets' file paths)
   as JSON;
2. PyTorch's elastic launcher (the API behind ``torchrun``) starts that many worker
   processes on this machine (:func:`launch`); each runs :func:`worker_main`: the
   same ``training.run.train_on_*`` function as the single-process path, in which
   accelerate's DDP finds the process group from the launcher's environment;
3. rank 0 alone writes the result (:func:`write_result`: the trained encoder, its
   tokenizer and metadata, the training curve) into that folder, last of all a
   ``done`` marker; the other ranks write nothing (the trainer's checkpoints, in
   ``training.checkpoint_dir``, are written by rank 0 too).
   Meanwhile the node replays the workers' log records (rank 0's from INFO, the
   others' from WARNING), which they write to that folder, into its own log
   (``training/worker_logs.py``);
4. the node reads the result back (:func:`read_result`), removes the folder, and
   returns the model and the curve to the catalog exactly as the single-process path
   does, so ``<method>.model`` is saved by ``datasets.SentenceEncoderDataset`` as
   always.

Each worker sets ``CSE_TRAINING_WORKER=1``: a Kedro run started under a multi-process
launcher without it is refused (it would run the whole pipeline in every process).
Multi-node training uses the same worker through ``training/entry.py`` under ``torchrun``.

``batch_size`` is per process (as under ``accelerate launch``): N processes train on
a global batch of ``N x batch_size``, and with the gathered in-batch negatives and the
trainer's loss scaling a step equals one process's step on that global batch
(``training/distributed.py``; ``tests/pipelines/training/test_fanout.py`` checks it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from torch.distributed.elastic.multiprocessing.errors import record

from contrastive_sentence_embeddings.configuration.blocks import FANOUT_FAMILIES
# The marker of a worker of ours: the launch guard (runs/launch_guard.py) never refuses it.
from contrastive_sentence_embeddings.runs.launch_guard import WORKER_ENV_VAR as WORKER_ENV
from contrastive_sentence_embeddings.training import worker_logs
from contrastive_sentence_embeddings.runs.scratch import die_with_folder_owner, marked_folder, temporary_files_in
from contrastive_sentence_embeddings.training.run_name import current_run, named_run

logger = logging.getLogger(__name__)

JOB_FILE = "job.json"
RESULT_DIR = "result"
DONE_MARKER = "done"


def resolve_num_processes(value: int | str, cuda_devices: int | None = None) -> int:
    """``training.num_processes`` as a count: an integer as it is, ``"auto"`` one
    process per visible CUDA GPU (``cuda_devices``, default: what torch sees), 1 when
    there is none."""
    from contrastive_sentence_embeddings.training.trainer import check_num_processes

    check_num_processes(value)
    if value != "auto":
        return int(value)
    if cuda_devices is None:
        import torch

        cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return max(1, cuda_devices)


def threads_per_process(cpus: int | None, local_processes: int) -> int:
    """CPU threads for each of ``local_processes`` processes on one machine: the cores
    shared out (at least one), so the workers do not oversubscribe them (torchrun sets
    OMP_NUM_THREADS=1 for the same reason)."""
    return max(1, (cpus or 1) // max(1, local_processes))


@dataclass(frozen=True)
class TrainingJob:
    """What every worker reads: the family's training function, the method block (as
    the node received it), the encoder, the prepared data as Parquet files (family
    input name -> path) and the dev sets as raw files (partition -> [path, encoding])."""

    family: str
    encoder: str
    block: dict
    data: dict[str, str]
    raw_sts: dict[str, list] = field(default_factory=dict)
    run_name: str | None = None  # the run's name for its logs (run_name.current_run in the node)

    def save(self, folder: Path) -> Path:
        path = Path(folder) / JOB_FILE
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> "TrainingJob":
        return cls(**json.loads((Path(folder) / JOB_FILE).read_text(encoding="utf-8")))


def raw_file_paths(partitions: Mapping[str, Callable]) -> dict[str, list]:
    """The files behind a ``raw_*`` partitioned data set as loaded by Kedro (lazy
    loaders of ``RawFile``): partition -> [absolute path, encoding]."""
    files = {}
    for partition, load in partitions.items():
        raw = load()
        files[partition] = [str(Path(raw.path).resolve()), raw.encoding]
    return files


def raw_partitions(files: Mapping[str, list]) -> dict[str, Callable]:
    """The inverse of :func:`raw_file_paths`: lazy loaders, as ``DevScorer`` takes."""
    from contrastive_sentence_embeddings.data.raw_file import RawFile

    return {partition: (lambda p=path, e=encoding: RawFile(p, e)) for partition, (path, encoding) in files.items()}


def prepare_job(folder: Path, family: str, encoder: str, block: Mapping, tables: Mapping[str, pd.DataFrame],
                raw_sts: Mapping[str, Callable] | None = None) -> TrainingJob:
    """Hand the inputs of a training node to the workers through ``folder``: a pandas
    table as a Parquet file there, a prepared Arrow data set by the folder it is
    memory-mapped from (every worker maps the same files, nothing is copied; one that
    is not on disk as a whole is saved there first), and the job description beside
    them; return the job."""
    if family not in FANOUT_FAMILIES:  # CLSR (pairs): method_block.MethodBlock refuses it
        raise ValueError(f"the {family} family cannot train in several processes; set training.num_processes: 1")
    data = {}
    for name, table in tables.items():
        if isinstance(table, pd.DataFrame):
            path = Path(folder) / f"{name}.parquet"
            table.to_parquet(path)
        else:
            path = saved_dataset_folder(table) or save_dataset(table, Path(folder) / name)
        data[name] = str(Path(path).resolve())
    job = TrainingJob(family, encoder, json.loads(json.dumps(dict(block))), data,
                      raw_file_paths(raw_sts) if raw_sts is not None else {}, run_name=current_run())
    job.save(folder)
    return job


def saved_dataset_folder(dataset) -> Path | None:
    """The ``save_to_disk`` folder a ``datasets.Dataset`` is memory-mapped from whole
    (as the catalog's ``ArrowDataset`` loads it), or None (in memory, a row selection,
    files from elsewhere)."""
    files = [Path(entry["filename"]) for entry in getattr(dataset, "cache_files", None) or []]
    if not files or getattr(dataset, "_indices", None) is not None:
        return None
    folders = {path.parent for path in files}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    return folder if (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file() else None


def save_dataset(table, path: Path) -> Path:
    """A ``datasets.Dataset`` or ``pyarrow.Table`` saved at ``path`` (``save_to_disk``)."""
    import datasets

    if not isinstance(table, datasets.Dataset):
        table = datasets.Dataset(table)
    table.save_to_disk(str(path))
    return path


def load_table(path: str | Path):
    """What :func:`prepare_job` handed over: a memory-mapped ``datasets.Dataset`` for a
    folder, a pandas table for a Parquet file."""
    if Path(path).is_dir():
        import datasets

        return datasets.load_from_disk(str(path), keep_in_memory=False)
    return pd.read_parquet(path)


def train_job(job: TrainingJob, main_process: bool):
    """Run ``job``'s training in this process (one of the DDP processes). The dev
    scorer is built on the main process only (the trainer scores there alone)."""
    from contrastive_sentence_embeddings.evaluation.sts import STARTING_SCORES_DIR, DevScorer

    dev_scorer = None
    if job.raw_sts and main_process:
        dev_scorer = DevScorer(raw_partitions(job.raw_sts), memo_dir=STARTING_SCORES_DIR)
    tables = {name: load_table(path) for name, path in job.data.items()}
    from contrastive_sentence_embeddings.training.method_block import MethodBlock

    # The job crossed a process boundary as plain data (JSON), so each worker parses the
    # block itself: once, here, as the training node does on the single-process path.
    return train_tables(job.family, tables, job.encoder, MethodBlock.from_params(job.block, "method"), dev_scorer)


def train_tables(family: str, tables: Mapping[str, pd.DataFrame], encoder: str, config, dev_scorer=None):
    """The family's ``training.run`` function, the same as the single-process path,
    on its prepared tables (the training pipeline's input names), with the method's
    parsed block (a :class:`~.method_block.MethodBlock`); returns
    ``(TrainedEncoder, TrainingResult)``."""
    from contrastive_sentence_embeddings.training import run

    if family == "sentences":
        return run.train_on_sentences(run.sentence_texts(tables["sentences"]), encoder, config, dev_scorer)
    if family == "documents":
        return run.train_on_documents(tables["documents"], tables["spans"], encoder, config, dev_scorer)
    raise ValueError(f"no multi-process training for the {family} family")


def write_result(folder: Path, trained, curve: pd.DataFrame) -> Path:
    """Rank 0's hand-over: the trained encoder and tokenizer (``save_pretrained``),
    pooling and metadata, the training curve; the ``done`` marker last, so a reader
    never takes a half-written result for a finished one."""
    result = Path(folder) / RESULT_DIR
    result.mkdir(parents=True, exist_ok=True)
    trained.encoder.save_pretrained(result / "encoder")
    trained.tokenizer.save_pretrained(result / "encoder")
    (result / "trained.json").write_text(json.dumps({"pooling": trained.pooling, "metadata": trained.metadata},
                                                    indent=1, default=str), encoding="utf-8")
    curve.to_parquet(result / "training_curve.parquet")
    (result / DONE_MARKER).write_text("complete\n")
    return result


def read_result(folder: Path):
    """What :func:`write_result` wrote: ``(TrainedEncoder, curve)``."""
    from transformers import AutoModel, AutoTokenizer

    from contrastive_sentence_embeddings.training.trained_encoder import TrainedEncoder

    result = Path(folder) / RESULT_DIR
    if not (result / DONE_MARKER).is_file():
        raise RuntimeError(f"the training workers finished without rank 0's result in {result}")
    description = json.loads((result / "trained.json").read_text(encoding="utf-8"))
    encoder = AutoModel.from_pretrained(result / "encoder")
    tokenizer = AutoTokenizer.from_pretrained(result / "encoder", use_fast=True)
    trained = TrainedEncoder(encoder, tokenizer, description["pooling"], description["metadata"])
    return trained, pd.read_parquet(result / "training_curve.parquet")


def setup_worker() -> int:
    """What every training worker does first (fan-out or ``torchrun``): mark itself as
    a worker (``CSE_TRAINING_WORKER=1``), keep gloo on the loopback device when the
    rendezvous is local, share the CPU cores out; returns its global rank."""
    os.environ[WORKER_ENV] = "1"
    if sys.platform == "linux" and os.environ.get("MASTER_ADDR") in ("127.0.0.1", "localhost"):
        # One machine: gloo (CPU) talks over loopback rather than the hostname's address.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if "OMP_NUM_THREADS" not in os.environ:
        import torch

        threads = threads_per_process(os.cpu_count(), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        torch.set_num_threads(threads)
        # Said in the environment too, or accelerate's CPU set-up resets it to 1 thread.
        os.environ["OMP_NUM_THREADS"] = str(threads)
    return int(os.environ.get("RANK", "0"))


# torch elastic's error recording: a worker's traceback becomes part of the launcher's
# error instead of being lost with the process. Applied here, at module level, so the
# spawned workers can unpickle the entrypoint by name.
@record
def worker_main(folder: str) -> None:
    """One worker process of a fan-out (started by :func:`launch`): train the job in
    ``folder``; rank 0 writes the result there."""
    die_with_folder_owner(Path(folder))  # the Kedro process that made the folder and started this one
    rank = setup_worker()
    # A spawned process has none of the Kedro run's logging: its records go to the job
    # folder only, and the training node replays them into the run's log, once
    # (training/worker_logs.py).
    worker_logs.log_to_folder(folder, rank)
    job = TrainingJob.load(folder)
    with named_run(job.run_name):
        trained, result = train_job(job, main_process=rank == 0)
    if rank == 0:
        write_result(Path(folder), trained, result.curve)


def launch(folder: Path, processes: int, entrypoint: Callable[[str], None] = worker_main) -> None:
    """Start ``processes`` workers on this machine with torch's elastic launcher (a
    c10d rendezvous on a free local port, no restarts: a failed worker fails the run)
    and wait for them; each calls ``entrypoint(str(folder))`` (a module-level function:
    spawned processes import it by name). The launcher's temporary files (its
    ``pytorch-errorfile-*``, the workers' own) go into ``folder``, which a run that is
    killed leaves marked for the next run to remove."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=f"cse-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.5,
        start_method="spawn", logs_specs=DefaultLogsSpecs(log_dir=str(Path(folder) / "launcher_logs")))
    with temporary_files_in(folder):
        elastic_launch(config, entrypoint)(str(folder))


def train_in_processes(family: str, encoder: str, block: Mapping, tables: Mapping[str, pd.DataFrame],
                       raw_sts: Mapping[str, Callable] | None, processes: int, workdir: str | None = None):
    """A training node's fan-out: prepare the job in a fresh temporary folder, start
    ``processes`` workers, read rank 0's result back; return ``(TrainedEncoder,
    curve)``. The folder (created here, so ours to delete; marked as this process's, so
    the next run removes it if this one is killed) is removed either way."""
    folder = marked_folder("fanout", dir=workdir, purpose="the training workers' job and result")
    try:
        prepare_job(folder, family, encoder, block, tables, raw_sts)
        logger.info("training in %d processes (global batch %d x %d); job in %s", processes, processes,
                    block.get("training", {}).get("batch_size", "?"), folder)
        with worker_logs.replayed(folder):  # the workers' dev scores, resumption, throughput in this run's log
            launch(folder, processes)
        return read_result(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
