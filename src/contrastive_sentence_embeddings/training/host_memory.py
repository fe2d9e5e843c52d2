"""Freed host memory kept in the process for reuse, for training on CPU.

glibc's ``malloc`` gives large blocks their own memory mapping and unmaps them when
they are freed, and trims the free top of its heap back to the kernel; a CPU training
step allocates and frees the same activation-sized blocks every step (6-25 MB each for
the default encoder at batch 64, length 32), so each step has the kernel map and zero
them again: 22-35 thousand minor page faults a step, about 7% of a SimCSE step on two
cores (docs/results.md). :func:`keep_freed_memory` sets two ``mallopt`` thresholds so
that blocks up to 32 MiB (glibc's ceiling for the setting on 64-bit) come from the heap
and the heap is not trimmed: freed blocks are reused, not faulted in again. The two go
together: fixing either one turns off glibc's adaptive thresholds, and the trim
threshold alone leaves the mapping threshold at its 128 KiB start, so that every
block above it is mapped and unmapped (800 thousand faults a step, 60% slower,
measured the same way).

The cost: the process keeps the freed memory of its peak until it exits (its resident
size does not fall after training), as the jemalloc or tcmalloc configurations that
PyTorch's CPU tuning guide recommends do. The setting is process-wide and is not
undone (glibc cannot report the adaptive thresholds it had; setting them back would
fix them), as the TF32 flag that transformers' Trainer sets is. Elsewhere than Linux
with glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import platform

logger = logging.getLogger(__name__)

# mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# The largest mapping threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX).
LARGEST_MMAP_THRESHOLD = 32 * 1024 * 1024
# mallopt takes a C int: the largest one, so the heap is in effect never trimmed.
NEVER_TRIM = 2**31 - 1

_applied: bool | None = None  # None: not tried yet in this process


def keep_freed_memory() -> bool:
    """Keep freed host memory in this process for reuse (the module's docstring says
    how and why); whether it is in effect. Only the first call changes anything."""
    global _applied
    if _applied is None:
        _applied = _set_thresholds()
        if _applied:
            logger.info("CPU training: freed memory is kept for reuse (glibc malloc: blocks up to %d MiB from the "
                        "heap, no trimming; training.retain_freed_memory)", LARGEST_MMAP_THRESHOLD // 2**20)
    return _applied


def _set_thresholds() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success. The mapping threshold first: were only the trim
    # threshold set, every block above 128 KiB would be mapped (the docstring).
    return bool(mallopt(M_MMAP_THRESHOLD, LARGEST_MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
