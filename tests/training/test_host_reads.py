"""The host-read counter finds each kind of read the host waits for on a GPU, names
the line of our code that made it, and leaves out what a data loader's collate does
on host tensors."""

from __future__ import annotations

import inspect

import torch
from torch.utils.data import DataLoader

from contrastive_sentence_embeddings.training.host_reads import HostReads


def test_each_kind_of_read_is_counted_and_index_by_position_is_not():
    x = torch.arange(12.0).reshape(4, 3)
    mask = x[:, 0] > 2
    with HostReads() as reads:
        x.index_select(0, torch.tensor([1, 2]))  # sizes known on the host: no read
        x[torch.tensor([0, 3])]
        torch.repeat_interleave(x[:, 0].long(), 2)  # an int repeat: size known
        _ = x[mask]  # boolean index
        x[mask] = 0.0
        float(x.sum())  # scalar
        bool(x.any())
        x.nonzero()  # size is data
        torch.repeat_interleave(torch.tensor([1, 2]))
        torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)  # size given: no read
    kinds = {}
    for row in reads.table():
        kinds[(row["kind"], row["op"])] = kinds.get((row["kind"], row["op"]), 0) + row["count"]
    assert kinds == {("boolean index", "index"): 1, ("boolean index", "index_put_"): 1,
                     ("scalar", "_local_scalar_dense"): 2, ("size", "nonzero"): 1,
                     ("size", "repeat_interleave"): 1}
    assert reads.total == 6


def test_sites_name_our_code_and_inactive_steps_and_collates_are_not_counted():
    from contrastive_sentence_embeddings.training.declutr import masked_positions

    labels = torch.tensor([[-100, 5, -100], [7, -100, -100]])
    with HostReads() as reads:
        masked_positions(labels)
        reads.active = False
        masked_positions(labels)
    [row] = reads.table()
    assert row["count"] == 1 and row["kind"] == "size"
    # the line in our code that read (this test's own frames are not a site)
    source, first = inspect.getsourcelines(masked_positions)
    line = first + next(i for i, text in enumerate(source) if "nonzero()" in text)
    assert row["site"] == f"contrastive_sentence_embeddings/training/declutr.py:{line} masked_positions"

    loader = DataLoader([labels[0], labels[1]], batch_size=2, collate_fn=lambda rows: masked_positions(torch.stack(rows)))
    with HostReads() as reads:
        [positions] = list(loader)
    assert positions.tolist() == [1, 3] and reads.total == 0
