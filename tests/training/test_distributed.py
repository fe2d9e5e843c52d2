"""Gathering embeddings across processes: two CPU processes (gloo backend), each with a
DDP copy of the same tiny model and half of a fixed batch, must reproduce the loss and
the parameter gradients of one process training on the whole batch.

All distributed cases run in one process group of two workers (module-scoped fixture, a few
seconds); each child writes its results to a file that the tests then compare with a
single-process reference computed here."""

from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from contrastive_sentence_embeddings.training.distributed import (
    gather_embeddings,
    gather_with_grad,
    scale_loss_for_ddp,
    world_size,
)
from contrastive_sentence_embeddings.training.losses import info_nce, nt_xent

WORLD_SIZE = 2
BATCH = 8
SPLITS = {"equal": (4, 4), "unequal": (5, 3)}
LOSSES = {"info_nce": lambda a, b: info_nce(a, b, temperature=0.05), "nt_xent": lambda a, b: nt_xent(a, b, 0.1)}
# Relative tolerance. The losses compute in float32, and the distributed run sums
# the gradient in a different order (two halves, then DDP's all-reduce), so an entry
# that is a near-cancelling sum of much larger terms differs by float32 round-off of
# those terms (seen: 3e-8 on an entry of 1e-2). Gradients are therefore compared
# elementwise with rtol plus an absolute slack of RTOL times the tensor's largest entry.
RTOL = 1e-6
TIMEOUT_S = 60
# spawn, not fork: forking a process whose OpenMP / intra-op thread pools are already
# running can deadlock the children. In the full suite (many torch tests before this
# one) forked workers hung past the 60 s limit on a fresh-clone CI run; spawn costs a
# few seconds of re-importing torch per test and cannot inherit a held lock.
START_METHOD = "spawn"


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))


def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed inputs and fixed "dropout" noise: view 1 is x, view 2 is x + noise."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, 8, generator=generator)
    noise = 0.1 * torch.randn(BATCH, 8, generator=generator)
    return x, noise


def encode(model: nn.Module, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both views in one forward pass (as SimCSE does), split back into (z1, z2)."""
    z = model(torch.cat([x, x + noise], dim=0))
    return z[: x.shape[0]], z[x.shape[0] :]


def assert_grads_close(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], what: str) -> None:
    assert got.keys() == expected.keys()
    for name, want in expected.items():
        atol = RTOL * want.abs().max().item()
        torch.testing.assert_close(got[name], want, rtol=RTOL, atol=atol, msg=lambda m: f"{what} {name}: {m}")


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in model.named_parameters()}


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    """One training process: DDP model, its slice of the batch, gathered global loss."""
    torch.set_num_threads(1)
    if sys.platform == "linux":  # gloo binds to the loopback device, not to the hostname's address
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )
    try:
        results: dict = {"world_size": world_size()}
        model = nn.parallel.DistributedDataParallel(make_model())
        x, noise = make_batch()

        def step(loss_name: str, split: tuple[int, int], scale: bool) -> dict:
            start = sum(split[:rank])
            rows = slice(start, start + split[rank])
            model.zero_grad(set_to_none=True)
            z1, z2 = encode(model, x[rows], noise[rows])
            g1, g2 = gather_embeddings(z1, z2)
            loss = LOSSES[loss_name](g1, g2)
            (scale_loss_for_ddp(loss) if scale else loss).backward()
            return {"loss": loss.item(), "rows": g1.shape[0], "grads": grads(model.module)}

        for loss_name in LOSSES:
            for split_name, split in SPLITS.items():
                results[(loss_name, split_name)] = step(loss_name, split, scale=True)
        results["unscaled"] = step("info_nce", SPLITS["equal"], scale=False)

        # The raw gather: rank r contributes r + 1 rows filled with r; gradient reaches
        # the local rows only.
        local = torch.full((rank + 1, 3), float(rank), requires_grad=True)
        gathered = gather_with_grad(local)
        (gathered * torch.arange(1.0, gathered.shape[0] + 1).unsqueeze(1)).sum().backward()
        results["gathered"] = gathered.detach()
        results["local_grad"] = local.grad.detach()

        # Mismatched trailing shapes: a clear error on every process, no hang.
        try:
            gather_with_grad(torch.zeros(2, 4 if rank == 0 else 3))
        except ValueError as error:
            results["mismatch_error"] = str(error)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("distributed")
    context = mp.start_processes(
        _worker, args=(str(folder / "init"), str(folder)), nprocs=WORLD_SIZE, join=False, start_method=START_METHOD
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the {WORLD_SIZE} worker processes did not finish within {TIMEOUT_S} s")
    return [torch.load(folder / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD_SIZE)]


def reference(loss_name: str) -> tuple[float, dict[str, torch.Tensor]]:
    """One process, the whole batch of 8, the same model and loss."""
    model = make_model()
    x, noise = make_batch()
    z1, z2 = encode(model, x, noise)
    loss = LOSSES[loss_name](z1, z2)
    loss.backward()
    return loss.item(), grads(model)


@pytest.mark.parametrize("split_name", SPLITS)
@pytest.mark.parametrize("loss_name", LOSSES)
def test_distributed_loss_and_gradients_match_single_process(ranks, loss_name, split_name):
    expected_loss, expected_grads = reference(loss_name)
    for rank, results in enumerate(ranks):
        got = results[(loss_name, split_name)]
        assert results["world_size"] == WORLD_SIZE
        assert got["rows"] == BATCH
        assert got["loss"] == pytest.approx(expected_loss, rel=RTOL), f"rank {rank}"
        assert_grads_close(got["grads"], expected_grads, f"rank {rank}")


def test_without_scaling_ddp_gradients_are_one_over_world_size(ranks):
    """What ``scale_loss_for_ddp`` corrects: DDP averages, so the plain loss gives 1/W."""
    expected_loss, expected_grads = reference("info_nce")
    for results in ranks:
        got = results["unscaled"]
        assert got["loss"] == pytest.approx(expected_loss, rel=RTOL)
        halved = {name: grad / WORLD_SIZE for name, grad in expected_grads.items()}
        assert_grads_close(got["grads"], halved, "unscaled")


def test_gather_concatenates_in_rank_order_with_unequal_sizes(ranks):
    expected = torch.tensor([[0.0] * 3, [1.0] * 3, [1.0] * 3])
    for rank, results in enumerate(ranks):
        torch.testing.assert_close(results["gathered"], expected)
        # d/d(local) of sum_k k * gathered_k (k = 1-based row): the local rows' weights only.
        first = sum(r + 1 for r in range(rank))
        weights = torch.arange(first + 1.0, first + rank + 2).unsqueeze(1).expand(rank + 1, 3)
        torch.testing.assert_close(results["local_grad"], weights)


def test_mismatched_trailing_shapes_raise_on_every_process(ranks):
    for results in ranks:
        assert "differ beyond dim 0" in results["mismatch_error"]


def test_not_initialised_is_the_identity():
    assert not dist.is_initialized()
    tensor = torch.randn(3, 4, requires_grad=True)
    assert gather_with_grad(tensor) is tensor
    other = torch.randn(3, 4)
    gathered = gather_embeddings(tensor, other)
    assert isinstance(gathered, tuple) and gathered[0] is tensor and gathered[1] is other
    assert world_size() == 1
    loss = tensor.sum()
    assert scale_loss_for_ddp(loss) is loss
