"""How many worker processes the data preparation uses."""

from __future__ import annotations

import os


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which container limits and
    ``taskset`` set), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def worker_count(num_proc: int | None, work_items: int | None = None) -> int:
    """``num_proc`` workers (``None``: :func:`available_cores`), never more than there are
    ``work_items`` (e.g. input shards), and at least one."""
    workers = available_cores() if num_proc is None else int(num_proc)
    if workers < 1:
        raise ValueError(f"num_proc must be at least 1, got {num_proc}")
    if work_items is not None:
        workers = min(workers, max(1, work_items))
    return workers
