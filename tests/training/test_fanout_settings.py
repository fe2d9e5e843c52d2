"""``training.num_processes``: parsed strictly in every method block, ``auto`` resolved
to the visible GPUs, and what it changes in the trainer's step count and resume
fingerprint; ``cse-train``'s argument handling. (The fan-out itself runs in
tests/pipelines/training/test_fanout.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from contrastive_sentence_embeddings.configuration.strict import ParameterError
from contrastive_sentence_embeddings.training.entry import method_run, parse_params
from contrastive_sentence_embeddings.training.fanout import resolve_num_processes, threads_per_process
from contrastive_sentence_embeddings.training.method_block import MethodBlock
from contrastive_sentence_embeddings.training.trainer import (
    TrainingConfig,
    check_world,
    launched_world,
    run_fingerprint,
    total_steps,
    trains_on_cpu,
)


def block(kind: str = "simcse", **training) -> dict:
    return {"kind": kind, "pooling": "mean", "training": training}


@pytest.mark.parametrize("value, gpus, expected", [(1, 8, 1), (3, 0, 3), ("auto", 8, 8), ("auto", 0, 1)])
def test_num_processes_resolution(value, gpus, expected):
    assert resolve_num_processes(value, cuda_devices=gpus) == expected


def test_auto_without_a_count_asks_torch():
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert resolve_num_processes("auto") == max(1, visible)


def test_num_processes_defaults_to_one_in_every_method():
    for kind in ("simcse", "scd", "imsimcse", "declutr", "clsr"):
        assert MethodBlock.from_params(block(kind), kind).training.num_processes == 1


@pytest.mark.parametrize("value", [0, -1, "many", True, 1.5, None])
def test_bad_num_processes_is_an_error_naming_the_key(value):
    with pytest.raises(ParameterError, match=r"simcse\.training\.num_processes = .*: must be an integer >= 1 or 'auto'") \
            as error:
        MethodBlock.from_params(block(num_processes=value), "simcse")
    assert error.value.key == "simcse.training.num_processes"


@pytest.mark.parametrize("value", [2, "auto"])
def test_good_num_processes_parse(value):
    assert MethodBlock.from_params(block("declutr", num_processes=value), "declutr").training.num_processes == value


def test_clsr_is_not_fanned_out():
    with pytest.raises(ParameterError, match=r"clsr_stsb\.training\.num_processes must be 1 for clsr") as error:
        MethodBlock.from_params(block("clsr", num_processes="auto"), "clsr_stsb")
    assert error.value.key == "clsr_stsb.training.num_processes"


def test_an_epoch_is_counted_in_global_batches():
    config = TrainingConfig(batch_size=8, epochs=2)
    assert total_steps(100, config) == 24               # 12 batches of 8, twice
    assert total_steps(100, config, processes=2) == 12  # 6 global batches of 16, twice


def test_resume_fingerprint_follows_the_processes_not_the_setting():
    model = torch.nn.Linear(2, 2)
    model.method = "m"
    one, auto = TrainingConfig(num_processes=1), TrainingConfig(num_processes="auto")
    assert run_fingerprint(one, "data", model) == run_fingerprint(auto, "data", model)
    assert run_fingerprint(one, "data", model, processes=2) != run_fingerprint(one, "data", model)


def test_threads_are_shared_out_between_local_processes():
    assert threads_per_process(16, 8) == 2
    assert threads_per_process(2, 4) == 1
    assert threads_per_process(None, 1) == 1


def test_cse_train_params_read_like_kedro_run():
    assert parse_params("simcse.training.max_steps=10,encoder=bert-base-uncased,seed=3") == {
        "simcse": {"training": {"max_steps": 10}}, "encoder": "bert-base-uncased", "seed": 3}
    assert parse_params(None) == {}
    with pytest.raises(SystemExit, match="key=value"):
        parse_params("simcse")


def test_cse_train_runs_are_the_graphs_runs():
    params = {"methods": ["simcse", "declutr"],
              "simcse": {**block(checkpoint_dir="ckpt"), "seeds": [42, 43]}, "declutr": block("declutr")}
    seeded, family = method_run(params, "simcse.seed43")
    assert family == "sentences"
    assert seeded["training"] == {"checkpoint_dir": "ckpt/seed43", "seed": 43}
    assert method_run(params, "declutr")[1] == "documents"
    with pytest.raises(ParameterError, match="simcse.seed42, simcse.seed43, declutr"):
        method_run(params, "simcse")


def test_the_workers_map_the_saved_documents_instead_of_a_copy(tmp_path):
    """A fanned-out DeCLUTR run hands its workers the folder the catalog's Arrow data set
    is memory-mapped from (nothing copied); an in-memory table is saved into the job."""
    import pandas as pd
    import pyarrow as pa

    from contrastive_sentence_embeddings.pipelines.datasets import ArrowDataset
    from contrastive_sentence_embeddings.training.fanout import TrainingJob, load_table, prepare_job

    saved = ArrowDataset(str(tmp_path / "long_documents"))
    saved.save(pa.table({"doc_id": ["a", "b", "c"], "input_ids": pa.array([[1, 2], [3], [4, 5, 6]], pa.list_(pa.int32()))}))
    documents = saved.load()
    spans = pa.table({"epoch": [0], "doc_id": ["a"]})
    job_folder = tmp_path / "job"
    job_folder.mkdir()
    job = prepare_job(job_folder, "documents", "encoder", block("declutr"),
                      {"documents": documents, "spans": spans, "selected": documents.select([2, 0]),
                       "frame": pd.DataFrame({"x": [1]})})
    assert job.data["documents"] == str((tmp_path / "long_documents").resolve())
    assert {name: Path(path).parent for name, path in job.data.items() if name != "documents"} == {
        "spans": job_folder.resolve(), "selected": job_folder.resolve(), "frame": job_folder.resolve()}
    loaded = {name: load_table(path) for name, path in TrainingJob.load(job_folder).data.items()}
    assert loaded["documents"]["input_ids"] == [[1, 2], [3], [4, 5, 6]]
    assert loaded["selected"]["doc_id"] == ["c", "a"] and loaded["spans"]["doc_id"] == ["a"]
    assert loaded["frame"]["x"].tolist() == [1]


@pytest.mark.parametrize("device, processes, cuda, cpu", [
    (None, 2, False, True),    # the shipped device with several processes on a CPU machine: CPU DDP
    (None, 1, False, False),   # one process: accelerate picks the device itself
    (None, 2, True, False),    # one process per GPU (NCCL)
    ("cpu", 1, True, True), ("cpu", 2, True, True),
])
def test_several_processes_without_cuda_train_on_cpu(device, processes, cuda, cpu):
    assert trains_on_cpu(device, processes, cuda) is cpu


@pytest.mark.parametrize("environ, world", [
    ({}, (1, 0)),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, (2, 1)),        # torchrun, the fan-out
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3"}, (4, 3)),  # mpirun
    ({"WORLD_SIZE": "two", "PMI_SIZE": "2", "PMI_RANK": "0"}, (2, 0)),
])
def test_the_launched_world_is_read_from_the_launchers_variables(environ, world):
    assert launched_world(environ) == world


def test_a_process_that_sees_another_world_than_its_launcher_is_refused():
    check_world((2, 1), (2, 1), (2, 1), "DistributedType.MULTI_CPU")  # a real 2-process world
    check_world((1, 0), (1, 0), None, "DistributedType.NO")           # one process, no process group
    # What accelerate made of two launched CPU processes under device null before: a
    # process group of 2, each process alone and main for accelerate.
    with pytest.raises(RuntimeError) as refused:
        check_world((1, 0), (2, 1), (2, 1), "DistributedType.NO")
    message = str(refused.value)
    assert "\n" not in message
    assert "RANK=1 of WORLD_SIZE=2" in message and "process 0 of 1 for accelerate (DistributedType.NO)" in message
    assert "training.device: cpu" in message
    with pytest.raises(RuntimeError, match="torch.distributed process 0 of 3"):
        check_world((2, 0), (2, 0), (3, 0))
