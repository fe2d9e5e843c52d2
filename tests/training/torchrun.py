"""Two real CPU training processes for a test: the data a worker reads, written to a
folder, and the worker started twice by torchrun (gloo). Not a test module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import wiki_sentences


def write_worker_data(folder: Path, mirror_dir: Path, documents, span_table, sentences: int = 64) -> Path:
    """``folder/data`` with the first ``sentences`` wiki sentences of the mirror
    (``sentences.txt``) and DeCLUTR's documents and spans (parquet)."""
    data = folder / "data"
    data.mkdir()
    (data / "sentences.txt").write_text("\n".join(wiki_sentences(mirror_dir, limit=sentences)), encoding="utf-8")
    documents.to_parquet(data / "documents.parquet")
    span_table.to_parquet(data / "spans.parquet")
    return data


def run_two_processes(worker: Path, *arguments: Path, out: Path, port: int, timeout: int = 300) -> list[dict]:
    """Start ``worker *arguments out`` in two processes and return what each wrote to
    ``out/rank<r>.json``; a failed run fails with the end of its stderr."""
    out.mkdir()
    # The checkout's src first: the workers must run this copy of the code, not an installed one.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo",
           "PYTHONPATH": os.pathsep.join([str(Path.cwd() / "src"), str(Path.cwd())])}
    # torchrun sets the process-group variables; accelerate (inside the trainer) picks
    # them up as it does under `accelerate launch` on GPUs, with gloo on CPU.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
               str(worker), *map(str, arguments), str(out)]
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
