"""Where the host waits for the device: the operations of a training step whose
result the host must read (a scalar's value, a count that sizes a tensor, a copy to
host memory), counted with the line of our code (or of transformers) that asked for
them.

On a GPU each such read is a synchronisation: the host stops queueing kernels until
the device has finished everything queued before, so a step with reads between its
passes runs its host work and its device work one after the other instead of
overlapping them. The reads are the same operations on CPU, where they cost nothing,
so they can be found and tested there, before a GPU is at hand:

* ``_local_scalar_dense`` (``.item()``, ``int(t)``, ``bool(t)``, ``if t:``);
* ``nonzero``, ``masked_select``, ``unique``, ``repeat_interleave`` without an output
  size: their output's size is data;
* indexing with a boolean mask (``x[mask]``, ``x[mask] = y``): a ``nonzero`` inside
  the indexing kernel, so the dispatcher sees only ``index`` (or ``index_put_``)
  with a boolean index;
* a copy from a device tensor into host memory (``.cpu()``, ``.tolist()``).

:class:`HostReads` is a ``TorchDispatchMode``: every operation runs as it is, and
the reads made while it is active are counted by operation and site, except those
made while a data loader builds a batch (host tensors, copied to the device after).
"""

from __future__ import annotations

import collections
import os
import traceback
from pathlib import Path

import torch
import torch.utils.data
from torch.utils._python_dispatch import TorchDispatchMode

READS_BY_SIZE = {"nonzero", "masked_select", "unique", "_unique2", "unique_consecutive", "unique_dim"}
SCALAR_READS = {"_local_scalar_dense", "is_nonzero"}
INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}
COPIES = {"_to_copy", "copy_"}
# Frames from these packages name a site; torch's own frames are skipped, so a site is
# where our code (or the transformers model) asked.
SITE_PACKAGES = ("contrastive_sentence_embeddings", "transformers", "accelerate", "sentence_transformers")


def _has_boolean_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


def _copies_to_host(name: str, args, kwargs) -> bool:
    if name == "_to_copy":
        source, target = args[0], kwargs.get("device")
        return isinstance(source, torch.Tensor) and source.device.type != "cpu" and target is not None \
            and torch.device(target).type == "cpu"
    target, source = args[0], args[1]  # copy_(self, src)
    return target.device.type == "cpu" and isinstance(source, torch.Tensor) and source.device.type != "cpu"


def read_kind(func, args, kwargs) -> str | None:
    """The kind of host read ``func(*args, **kwargs)`` is, or None."""
    name = func._schema.name.split("::")[-1]
    if name in SCALAR_READS:
        return "scalar"
    # repeat_interleave reaches the dispatcher as its `repeats`-only form (the others
    # decompose into it): its output size is the repeats' sum unless it is given.
    if name in READS_BY_SIZE or (name == "repeat_interleave" and func._schema.overload_name == "Tensor"
                                 and kwargs.get("output_size") is None):
        return "size"
    if name in INDEXING and _has_boolean_index(args):
        return "boolean index"
    if name in COPIES and _copies_to_host(name, args, kwargs):
        return "copy to host"
    return None


# A data loader's own frames: a read under them is the collate's, on host tensors.
_LOADER = str(Path(torch.utils.data.__file__).parent) + os.sep


def building_a_batch(frames: traceback.StackSummary) -> bool:
    """Whether ``frames`` (a calling stack) run inside a data loader's fetch (the collate
    function): its tensors are host tensors, moved to the device after, so its reads
    never wait for the device (on CPU the same code would otherwise count)."""
    return any(frame.filename.startswith(_LOADER) for frame in frames)


def call_site(frames: traceback.StackSummary, depth: int = 2) -> str:
    """The innermost ``depth`` frames of ``frames`` (a calling stack) that belong to
    :data:`SITE_PACKAGES`, innermost first, each as its path from the package:
    ``contrastive_sentence_embeddings/training/objective.py:400 __call__ <- ...``."""
    sites = []
    for frame in frames:
        # A mode's hook only passes the call on (the CPU dropout's function mode): the
        # site is whoever called through it.
        if frame.filename == __file__ or frame.name in ("__torch_function__", "__torch_dispatch__"):
            continue
        path = Path(frame.filename).as_posix()
        for package in SITE_PACKAGES:
            at = path.rfind(f"/{package}/")
            if at >= 0:
                sites.append(f"{path[at + 1:]}:{frame.lineno} {frame.name}")
                break
    return " <- ".join(reversed(sites[-depth:])) or "(outside the project and transformers)"


class HostReads(TorchDispatchMode):
    """Counts the host reads (module docstring) made while active, by ``(kind,
    operation, site)``; :attr:`active` can be switched off to let steps pass uncounted."""

    def __init__(self, depth: int = 2):
        super().__init__()
        self.depth = depth
        self.active = True
        self.sites: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.active:
            kind = read_kind(func, args, kwargs)
            if kind is not None:
                frames = traceback.extract_stack()  # once per read: both questions below read it
                if not building_a_batch(frames):
                    self.sites[(kind, func._schema.name.split("::")[-1], call_site(frames, self.depth))] += 1
        return func(*args, **kwargs)

    @property
    def total(self) -> int:
        return sum(self.sites.values())

    def table(self, per: float = 1.0) -> list[dict]:
        """The sites, most reads first: ``{"kind", "op", "site", "count"}`` with counts
        divided by ``per`` (steps, to give reads per step)."""
        return [{"kind": kind, "op": op, "site": site, "count": round(count / per, 2)}
                for (kind, op, site), count in self.sites.most_common()]
