"""What attention costs the first time it meets an input shape, against the second time,
under PyTorch's own choice of SDPA backend, with cuDNN's left out, and with cuDNN's
attention asked to keep one graph for every sequence length.

    python benchmarks/sdpa_shapes.py --device cuda          # ~30 s on an H100
    python benchmarks/sdpa_shapes.py --device cpu --shapes 6

The question behind it (docs/record/gpu.md, "DeCLUTR's step: new shapes on every step?"): on
Hopper, PyTorch >= 2.10 runs ``scaled_dot_product_attention`` through cuDNN, which
builds an execution graph for every new input shape before it runs; DeCLUTR's length
buckets keep producing new shapes. This measures the mechanism alone, with nothing of
DeCLUTR around it: ``--shapes`` distinct (rows, width) pairs like DeCLUTR's buckets
(widths 34-514, rows * width <= 8192, each row padded after a random length, the
boolean mask transformers passes), bert-base's heads (12 x 64), bf16 on CUDA (fp32 on
a CPU), forward and backward, each shape run twice: the first call pays whatever is
prepared per shape, the second finds it cached. Each backend setting gets its own
shapes (so none finds the other's graphs) and a warm-up call first. The settings:
``default`` (PyTorch's choice), ``no-cudnn`` (flash, memory-efficient or math), and
``cudnn-avoid-recompile`` (PyTorch's choice in a process started with
``TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1``, pytorch/pytorch#155958: cuDNN's ragged path,
which needs no new graph for a new sequence length; a process of its own because the
variable is read once). q, k and v are laid out as transformers' attention makes them
(batch, length, heads, head size in memory, viewed as batch, heads, length, head size). Reported per
setting: the kernel SDPA ran, and the first and repeated calls' median and total ms.
Writes ``benchmarks/results/sdpa_shapes_<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark's SDPA helpers
import training_throughput as throughput  # noqa: E402

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.records.provenance import tuning_environment  # noqa: E402

HEADS, HEAD_DIM, BUDGET = 12, 64, 8192
SETTINGS = {"default": None, "no-cudnn": throughput.NO_CUDNN_ATTENTION, "cudnn-avoid-recompile": None}
ENVIRONMENT = {"cudnn-avoid-recompile": {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}}  # set in a child process


def bucket_shapes(count: int, seed: int, exclude: set | frozenset = frozenset()) -> list[tuple[int, int]]:
    """``count`` distinct (rows, width) pairs shaped like DeCLUTR's buckets, none in
    ``exclude``."""
    generator = torch.Generator().manual_seed(seed)
    shapes: list[tuple[int, int]] = []
    while len(shapes) < count:
        width = int(torch.randint(34, 515, (1,), generator=generator))
        rows = int(torch.randint(1, BUDGET // width + 1, (1,), generator=generator))
        if (rows, width) not in shapes and (rows, width) not in exclude:
            shapes.append((rows, width))
    return shapes


def attention_call(rows: int, width: int, device: torch.device, dtype: torch.dtype, generator) -> float:
    """Milliseconds of one forward and backward of SDPA over a padded batch of this shape."""
    leaves = [torch.randn(rows, width, HEADS, HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
              for _ in range(3)]
    q, k, v = (leaf.transpose(1, 2) for leaf in leaves)  # transformers' layout
    lengths = torch.randint(max(1, width // 2), width + 1, (rows,), generator=generator).to(device)
    keep = torch.arange(width, device=device)[None, :] < lengths[:, None]  # (rows, width): real tokens
    mask = keep[:, None, None, :].expand(rows, 1, width, width)
    throughput.synchronize(device)
    started = time.perf_counter()
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out.float().sum().backward()
    throughput.synchronize(device)
    return 1000 * (time.perf_counter() - started)


def measure(setting: str, shapes: list[tuple[int, int]], device: torch.device, dtype: torch.dtype) -> dict:
    generator = torch.Generator().manual_seed(0)
    with throughput.allowed_attention(SETTINGS[setting]):
        # warm-up, on a shape no row uses (widths start at 34), and the kernel SDPA runs for these calls
        kernel = throughput.dispatched_attention(lambda: attention_call(3, 33, device, dtype, generator))
        first, again = [], []
        for rows, width in shapes:
            first.append(attention_call(rows, width, device, dtype, generator))
            again.append(attention_call(rows, width, device, dtype, generator))
    return {"setting": setting, "backends": list(SETTINGS[setting] or ()) or "any", "attention_kernel": kernel,
            "shapes": [list(shape) for shape in shapes],
            "first_call_ms_median": round(statistics.median(first), 3),
            "repeat_call_ms_median": round(statistics.median(again), 3),
            "first_calls_ms_total": round(sum(first), 1), "repeat_calls_ms_total": round(sum(again), 1),
            "first_call_ms": [round(x, 3) for x in first], "repeat_call_ms": [round(x, 3) for x in again]}


def in_child_process(setting: str, seed: int, args) -> dict:
    """``setting`` measured by this script in a process started with its variables."""
    child = throughput.in_fresh_process(__file__, ["--device", args.device, "--shapes", str(args.shapes), "--settings",
                                                   setting, "--shape-seed", str(seed)], ENVIRONMENT[setting])
    if "error" in child:
        return {"setting": setting, **child}
    return {**child["rows"][0], "environment": ENVIRONMENT[setting]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--shapes", type=int, default=20, help="distinct shapes per backend setting")
    parser.add_argument("--settings", default="default,no-cudnn,cudnn-avoid-recompile",
                        help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--shape-seed", type=int, default=0, help=argparse.SUPPRESS)  # a child's first seed
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    settings = throughput.chosen_settings(parser, args.settings, SETTINGS)
    if args.shapes < 1:
        parser.error("--shapes must be at least 1")
    device = throughput.chosen_device(parser, args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    report = {
        **throughput.results_header(__file__, device), "dtype": str(dtype).replace("torch.", ""),
        "heads": HEADS, "head_dim": HEAD_DIM, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [],
    }
    output = Path(args.output) if args.output else throughput.RESULTS_DIR / f"sdpa_shapes_{device.type}.json"
    report["environment"] = tuning_environment()
    used: set[tuple[int, int]] = set()
    for index, setting in enumerate(settings, start=args.shape_seed):
        if setting in ENVIRONMENT and not all(os.environ.get(k) == v for k, v in ENVIRONMENT[setting].items()):
            row = in_child_process(setting, index, args)
        else:
            shapes = bucket_shapes(args.shapes, seed=index, exclude=used)
            used.update(shapes)
            row = measure(setting, shapes, device, dtype)
        report["rows"].append(row)
        write_text_atomically(output, json.dumps(report, indent=1) + "\n")  # after every row: a run cut short keeps it
        if "error" in row:
            print(f"{setting}: {row['error']}", flush=True)
            continue
        print(f"{setting}: {row['attention_kernel']}, first call {row['first_call_ms_median']} ms (median), "
              f"again {row['repeat_call_ms_median']} ms; {len(row['shapes'])} shapes: {row['first_calls_ms_total']} ms "
              f"first, {row['repeat_calls_ms_total']} ms again", flush=True)
    print(f"written: {output}")


if __name__ == "__main__":
    main()
