"""``kedro run --pipelines=simcse`` with ``simcse.training.num_processes: 2``: Kedro runs
once, and only the training node fans out into two CPU worker processes (torch's
elastic launcher, gloo, accelerate's DDP), with the shipped ``training.device: null``:
without a GPU that must be a real 2-process world (each worker sees 2 processes, the
data shared out, the gradients synchronised), not two single processes that only
gather each other's embeddings. Data preparation and evaluation run once,
one model is saved and loads in sentence-transformers, and its training equals one
process training on the same global batch (2 x 8 sentences a step).

The encoder is the tiny random BERT with dropout off: SimCSE's two views then coincide
and a step is a deterministic function of the batch, so the two runs can be compared
number for number (with dropout on, each process draws its own masks for its half of
the batch and no single-process run draws the same ones; test_distributed.py compares
gradients under fixed noise for the same reason)."""

from __future__ import annotations

import json
import logging

import datasets
import numpy as np
import pandas as pd
import pytest
import torch

from contrastive_sentence_embeddings.data.raw_file import folder_partitions
from contrastive_sentence_embeddings.evaluation.sts import DevScorer
from contrastive_sentence_embeddings.training import run
from contrastive_sentence_embeddings.training.curves import join_curve
from tests.helpers import ScratchProject, assert_loads_like_sentence_transformers, base_parameters

pytestmark = pytest.mark.integration

PER_PROCESS_BATCH = 8
PROCESSES = 2
STEPS = 4
# lr 1e-2: the loss falls from ln 16 = 2.77 to about 2.1 in four steps, so every step's
# loss depends visibly on the weights the previous steps produced.
# No `device`: the shipped null (CUDA when present). `device: cpu` under DDP is
# tests/training/test_declutr.py::test_trainer_under_ddp_keeps_processes_in_step's (torchrun).
SETTINGS = dict(max_steps=STEPS, eval_every=2, learning_rate=1e-2, log_every=1)


class NodeRuns(logging.Handler):
    """Every ``Running node: <node>`` Kedro logs in this process, with its time. A
    node is known by its outputs (``... -> [a;b]``): the logged text omits the namespace
    of its name."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.runs: list[tuple[str, float]] = []

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Running node: "):
            self.runs.append((message.rsplit(" -> ", 1)[-1], record.created))

    def count(self, output: str) -> int:
        return sum(output in outputs.strip("[]").split(";") for outputs, _ in self.runs)

    def started(self, output: str) -> float:
        return next(created for outputs, created in self.runs if output in outputs.strip("[]").split(";"))


class Records(logging.Handler):
    """Every record that reaches a logger of this process (at INFO and above)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture(scope="module")
def dropout_free_bert(tmp_path_factory, tiny_bert_dir):
    from transformers import AutoTokenizer, BertModel

    folder = tmp_path_factory.mktemp("tiny_bert_no_dropout")
    BertModel.from_pretrained(tiny_bert_dir, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0) \
        .save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


def simcse_block(batch_size: int, num_processes: int) -> dict:
    block = base_parameters("simcse", batch_size=batch_size, num_processes=num_processes, **SETTINGS)
    block["seeds"] = None      # one run keeps the test short (seeds: test_pipeline_registry.py)
    block["max_examples"] = 64  # 64 sentences: four global batches of 16
    return block


@pytest.fixture(scope="module")
def fanned_out(tmp_path_factory, mirror_dir, dropout_free_bert):
    scratch = ScratchProject(tmp_path_factory.mktemp("project"), mirror_dir,
                             {"encoder": str(dropout_free_bert), "simcse": simcse_block(PER_PROCESS_BATCH, PROCESSES)})
    node_runs, package_records = NodeRuns(), Records()
    node_logger = logging.getLogger("kedro.pipeline.node")
    package_logger = logging.getLogger("contrastive_sentence_embeddings")
    node_logger.addHandler(node_runs)
    package_logger.addHandler(package_records)
    try:
        scratch.run(["simcse"])
    finally:
        node_logger.removeHandler(node_runs)
        package_logger.removeHandler(package_records)
    yield scratch, node_runs, package_records.records
    scratch.close()


@pytest.fixture(scope="module")
def one_process(fanned_out, dropout_free_bert, mirror_dir):
    """The same training in this one process on the global batch (16), on the
    sentences the pipeline prepared."""
    scratch, _, _ = fanned_out
    sentences = datasets.load_from_disk(str(scratch.root / "data/05_model_input/wiki_sentences"))["sentence"][:]
    block = simcse_block(PER_PROCESS_BATCH * PROCESSES, 1)
    block["training"]["checkpoint_dir"] = None
    return run.train_on_sentences(sentences, str(dropout_free_bert), block,
                                  DevScorer(folder_partitions(scratch.root / "data/01_raw/sts")))


def test_kedro_runs_every_node_once_and_only_training_fans_out(fanned_out):
    scratch, node_runs, _ = fanned_out
    names = [name for name, _ in node_runs.runs]
    assert len(names) == len(set(names)), names
    # data preparation, training, evaluation, leaderboard: once each
    for output in ("wiki_sentences", "simcse.model", "simcse.metrics", "leaderboard_table"):
        assert node_runs.count(output) == 1, (output, names)
    # Nothing outside this Kedro process wrote data preparation's outputs during training:
    # every data report is older than the training node's start.
    reports = sorted((scratch.root / "data/08_reporting/data_report").glob("*.json"))
    assert reports
    training_started = node_runs.started("simcse.model")
    assert all(report.stat().st_mtime < training_started for report in reports)
    metrics = scratch.root / "data/08_reporting/metrics/simcse.json"
    assert metrics.stat().st_mtime > (scratch.root / "data/06_models/simcse/cse_metadata.json").stat().st_mtime
    assert np.isfinite(json.loads(metrics.read_text())["sts_avg"])
    # The job folder the node created for its workers is gone.
    assert not list(scratch.root.glob("**/cse-fanout-*"))


def test_the_workers_log_lines_reach_the_kedro_log(fanned_out):
    """Rank 0's INFO records (the dev score at each evaluation, the throughput) are
    replayed through the Kedro process's loggers, the other rank's INFO is not."""
    import os

    _, _, records = fanned_out
    from_workers = [record for record in records if record.process != os.getpid()]
    trainer = [record.getMessage() for record in from_workers
               if record.name == "contrastive_sentence_embeddings.training.trainer"]
    dev_lines = [message for message in trainer if "STS-B dev" in message]
    assert [message.split(":")[0] for message in dev_lines] == ["[rank 0] step 0", "[rank 0] step 2",
                                                               "[rank 0] step 4"], trainer
    assert any(message.startswith(f"[rank 0] trained {STEPS} steps in") for message in trainer), trainer
    assert not [record for record in from_workers if record.getMessage().startswith("[rank 1]")
                and record.levelno < logging.WARNING]
    # Rank 0's in the order it logged them, with its times.
    rank0 = [record.created for record in from_workers if record.getMessage().startswith("[rank 0]")]
    assert rank0 == sorted(rank0)


def test_one_model_saved_trained_by_two_processes_and_loadable(fanned_out):
    scratch, _, _ = fanned_out
    models = scratch.root / "data/06_models"
    assert [path.name for path in models.iterdir() if not path.name.startswith(".")] == ["simcse"]
    metadata = json.loads((models / "simcse/cse_metadata.json").read_text())
    assert metadata["num_processes"] == PROCESSES and metadata["steps"] == STEPS
    assert metadata["examples_seen"] == STEPS * PER_PROCESS_BATCH * PROCESSES
    assert metadata["training"]["batch_size"] == PER_PROCESS_BATCH
    assert_loads_like_sentence_transformers(models / "simcse")
    # The checkpoints (written by rank 0 during training) were released once the model was saved.
    assert not (scratch.root / "data/07_model_output/checkpoints/simcse").exists()


def test_two_processes_train_like_one_process_on_the_global_batch(fanned_out, one_process):
    from transformers import AutoModel

    scratch, _, _ = fanned_out
    reference, result = one_process
    curve = join_curve(pd.read_csv(scratch.root / "data/08_reporting/training_curves/simcse.csv"),
                       pd.read_csv(scratch.root / "data/08_reporting/dev_curves/simcse.csv"))
    expected = result.curve
    # Every step's loss: the weights after each step gave the same loss on the next batch.
    steps = curve.dropna(subset=["loss"]).set_index("step")["loss"]
    expected_steps = expected.dropna(subset=["loss"]).set_index("step")["loss"]
    assert list(steps.index) == list(range(1, STEPS + 1))
    np.testing.assert_allclose(steps.to_numpy(), expected_steps.to_numpy(), rtol=1e-4)
    assert steps.iloc[-1] < steps.iloc[0] - 0.2  # and it did train
    # The dev scores at every evaluation, the last one a function of the final weights.
    dev = curve.dropna(subset=["dev/stsb_dev"]).set_index("step")["dev/stsb_dev"]
    expected_dev = expected.dropna(subset=["dev/stsb_dev"]).set_index("step")["dev/stsb_dev"]
    assert list(dev.index) == [0, 2, 4]
    np.testing.assert_allclose(dev.to_numpy(), expected_dev.to_numpy(), atol=1e-3)
    # The saved weights: the same kept step, the same numbers.
    metadata = json.loads((scratch.root / "data/06_models/simcse/cse_metadata.json").read_text())
    assert metadata["best_step"] == result.best_step
    saved = AutoModel.from_pretrained(scratch.root / "data/06_models/simcse").state_dict()
    for name, value in reference.encoder.state_dict().items():
        torch.testing.assert_close(saved[name], value, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_cse_train_under_torchrun_publishes_where_evaluation_reads(fanned_out):
    """The multi-node route on one machine: torchrun (c10d rendezvous, 2 processes)
    runs `cse-train` in the scratch project on the data `kedro run` prepared; rank 0
    publishes the model and curve through the catalog, and the evaluation node alone
    (`kedro run --namespaces=simcse --tags=evaluation`) scores it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from transformers import AutoModel

    scratch, _, _ = fanned_out
    model = scratch.root / "data/06_models/simcse"
    metrics = scratch.root / "data/08_reporting/metrics/simcse.json"
    fanned_out_weights = AutoModel.from_pretrained(model).state_dict()
    before = {path: path.stat().st_mtime for path in (model / "cse_metadata.json", metrics)}
    checkout = Path(__file__).resolve().parents[3]
    # The checkout's src first: the workers must run this copy of the code, not an installed one.
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo",
           "PYTHONPATH": os.pathsep.join([str(checkout / "src"), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--max-restarts", "0",
               "-m", "contrastive_sentence_embeddings.training.entry", "--method", "simcse"]
    finished = subprocess.run(command, cwd=scratch.root, env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-4000:]
    metadata = json.loads((model / "cse_metadata.json").read_text())
    assert (model / "cse_metadata.json").stat().st_mtime > before[model / "cse_metadata.json"]
    assert metadata["name"] == "simcse" and metadata["num_processes"] == 2 and metadata["steps"] == STEPS
    assert_loads_like_sentence_transformers(model)
    # The same deterministic training as the fanned-out node's.
    for name, value in AutoModel.from_pretrained(model).state_dict().items():
        torch.testing.assert_close(value, fanned_out_weights[name], rtol=1e-4, atol=1e-5)
    assert not (scratch.root / "data/07_model_output/checkpoints/simcse").exists()  # released after publishing

    scratch.run(["__default__"], namespaces=["simcse"], tags=["evaluation"])
    assert metrics.stat().st_mtime > before[metrics]
    assert json.loads(metrics.read_text())["model"]["name"] == "simcse"
