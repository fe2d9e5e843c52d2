"""What one STS evaluation costs in a fresh process under each attention setting, and
what sentence-transformers' ``encode`` costs on the same sentences, on a GPU or the CPU.

    python benchmarks/evaluation_kernels.py --device cuda                        # ~1-2 min on an H100
    python benchmarks/evaluation_kernels.py --device cpu --encoder-config tiny   # a rehearsal

The question behind it (docs/record/gpu.md): every scoring node encodes its sentences sorted by
length, each batch padded to its own longest (``SentenceEncoder.encode_poolings``), so a
fresh process meets a new batch shape at nearly every batch. cuDNN's attention, PyTorch's
choice on Hopper with torch >= 2.10, prepares a graph for every new shape (~150 ms a shape,
forward and backward, on the H100 of run 5; the forward alone was never measured), while
the memory-efficient kernel prepares nothing. conf/base's ``evaluation.attention_backends``
leaves cuDNN out on that ground; this measures it.

Each setting runs in a process of its own, started cold (no graph prepared), on the same
random-weight encoder of ``--encoder-config``'s size (speed does not depend on the
weights; no Hub) and the 7 STS tasks' distinct sentences of the mirror (what an evaluation
node encodes), twice: the first evaluation pays whatever is prepared per shape, the second
finds it prepared. Settings: ``default`` (the library's evaluation under PyTorch's choice),
``no-cudnn`` (under conf/base's list), ``peer`` (``SentenceTransformer.encode`` on the same
folder, batch size and precision, under PyTorch's choice). Each evaluation is the encoding
and the scoring of all 7 tasks (the peer's embeddings are scored the same way). Reported per
setting: the seconds of the first and the second evaluation and their difference, sentences
per second, the distinct batch shapes the encoding met, the kernel SDPA ran, the process's
load time, peak GPU memory, and the STS average (random weights: a check that the settings
compute the same embeddings, not a score). Writes
``benchmarks/results/evaluation_kernels_<device>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark's encoder and SDPA helpers
import training_throughput as throughput  # noqa: E402

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.data.raw_file import folder_partitions  # noqa: E402
from contrastive_sentence_embeddings.data.report import StepReport  # noqa: E402
from contrastive_sentence_embeddings.encoders.encoding import SentenceEncoder, autocast_for, precision_tag  # noqa: E402
from contrastive_sentence_embeddings.evaluation.sts import distinct_sentences, read_sts_benchmark, score_sts  # noqa: E402
from contrastive_sentence_embeddings.records.provenance import tuning_environment  # noqa: E402

SETTINGS = {"default": None, "no-cudnn": throughput.NO_CUDNN_ATTENTION, "peer": None}
POOLING = "mean"  # the peer's own pooling for a plain transformers folder


def sts_inputs(mirror: Path) -> tuple[dict, list[str]]:
    """The 7 STS tasks as the evaluation reads them, and their distinct sentences."""
    suite = read_sts_benchmark(folder_partitions(mirror / "sts"), StepReport("sts"))
    return suite, distinct_sentences(suite)


class InputShapes:
    """The distinct (rows, width) batches ``model``'s passes meet while this is entered,
    read at its token-embedding layer (``get_input_embeddings``), which every pass calls
    with the token ids however the model itself is called (sentence-transformers 6 calls
    the transformer's ``forward`` directly, past its hooks)."""

    def __init__(self, model: torch.nn.Module):
        self.module, self.seen = model.get_input_embeddings(), set()

    def __enter__(self) -> "InputShapes":
        self.handle = self.module.register_forward_pre_hook(lambda module, args: self.seen.add(tuple(args[0].shape)))
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()


def evaluate_once(encode, suite: dict, sentences: list[str], device: torch.device) -> tuple[float, float]:
    """Seconds of one evaluation (``encode`` then the 7 tasks' scores) and its STS average."""
    throughput.synchronize(device)
    started = time.perf_counter()
    embeddings = encode(sentences)
    metrics = score_sts(suite, dict(zip(sentences, embeddings)))
    throughput.synchronize(device)
    return time.perf_counter() - started, float(metrics["sts_avg"])


def measure(setting: str, folder: Path, suite: dict, sentences: list[str], batch_size: int,
            device: torch.device) -> dict:
    """``setting`` in this process: load, evaluate twice, then read the kernel SDPA ran."""
    started = time.perf_counter()
    if setting == "peer":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(folder), device=str(device))

        def encode(texts):
            with autocast_for(device):  # the precision our evaluation runs in
                return model.encode(texts, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)

        transformer = model[0].auto_model
    else:
        encoder = SentenceEncoder.load(str(folder), POOLING, batch_size, str(device), SETTINGS[setting])

        def encode(texts):
            return encoder.encode(texts, show_progress=False)

        transformer = encoder.model
    throughput.synchronize(device)
    load_seconds = time.perf_counter() - started
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with InputShapes(transformer) as shapes:  # each side sorts and pads its own way
        first, first_avg = evaluate_once(encode, suite, sentences, device)
    again, again_avg = evaluate_once(encode, suite, sentences, device)
    kernel = throughput.dispatched_attention(lambda: encode(sentences[:4]))
    return {
        "setting": setting, "side": "sentence-transformers" if setting == "peer" else "ours",
        "backends": list(SETTINGS[setting] or ()) or "any", "attention_kernel": kernel,
        "precision": precision_tag(device), "load_seconds": round(load_seconds, 2),
        "first_seconds": round(first, 3), "repeat_seconds": round(again, 3),
        "first_extra_seconds": round(first - again, 3),
        "sentences_per_second_first": round(len(sentences) / first, 1),
        "sentences_per_second_repeat": round(len(sentences) / again, 1),
        "batch_shapes": len(shapes.seen),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
        "sts_avg": round(first_avg, 4), "sts_avg_repeat": round(again_avg, 4),
    }


def in_child_process(setting: str, folder: Path, args) -> dict:
    """``setting`` measured by this script in a fresh process (nothing prepared yet)."""
    arguments = ["--device", args.device, "--batch-size", str(args.batch_size), "--child", setting, "--folder", str(folder)]
    if args.mirror:
        arguments += ["--mirror", args.mirror]
    row = throughput.in_fresh_process(__file__, arguments)
    return {"setting": setting, **row} if "error" in row else row


COLUMNS = [("setting", "setting"), ("kernel", "attention_kernel"), ("batch shapes", "batch_shapes"),
           ("first s", "first_seconds"), ("again s", "repeat_seconds"), ("first - again s", "first_extra_seconds"),
           ("sentences/s first", "sentences_per_second_first"), ("sentences/s again", "sentences_per_second_repeat"),
           ("load s", "load_seconds"), ("STS avg", "sts_avg")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--encoder-config", default="bert-base-uncased", choices=sorted(throughput.ENCODER_CONFIGS))
    parser.add_argument("--batch-size", type=int, default=128, help="evaluation.batch_size (conf/base: 128)")
    parser.add_argument("--settings", default="default,no-cudnn,peer", help=f"of {', '.join(SETTINGS)}")
    parser.add_argument("--mirror", default=None, help="the data mirror (default: $CSE_DATA_MIRROR or ../shared/datasets)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: $CSE_TOKENIZER_DIR or the package)")
    parser.add_argument("--output", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one setting, in this process
    parser.add_argument("--folder", default=None, help=argparse.SUPPRESS)  # the child's encoder folder
    args = parser.parse_args()
    settings = throughput.chosen_settings(parser, args.settings, SETTINGS)
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")
    device = throughput.chosen_device(parser, args.device)
    suite, sentences = sts_inputs(throughput.mirror_dir(args.mirror))
    if args.child:
        row = measure(args.child, Path(args.folder), suite, sentences, args.batch_size, device)
        write_text_atomically(Path(args.output), json.dumps(row) + "\n")
        return

    import transformers

    try:
        import sentence_transformers
        peer_version = sentence_transformers.__version__
    except ImportError:
        peer_version = None
    report = {
        **throughput.results_header(__file__, device), "transformers": transformers.__version__,
        "sentence_transformers": peer_version, "encoder_config": args.encoder_config, "pooling": POOLING,
        "batch_size": args.batch_size, "sentences": len(sentences), "environment": tuning_environment(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [],
    }
    output = Path(args.output) if args.output else throughput.RESULTS_DIR / f"evaluation_kernels_{device.type}.json"
    with tempfile.TemporaryDirectory() as scratch:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(throughput.tokenizer_dir(args.tokenizer))
        folder = throughput.build_encoder_folder(args.encoder_config, tokenizer, Path(scratch))
        for setting in settings:
            row = in_child_process(setting, folder, args)
            report["rows"].append(row)
            write_text_atomically(output, json.dumps(report, indent=1) + "\n")  # after every row: a run cut short keeps it
            if "error" in row:
                print(f"{setting}: {row['error']}", flush=True)
                continue
            print(f"{setting}: {row['attention_kernel']}, {row['batch_shapes']} batch shapes, first evaluation "
                  f"{row['first_seconds']} s, again {row['repeat_seconds']} s", flush=True)
    print(throughput.markdown([row for row in report["rows"] if "error" not in row], COLUMNS))
    print(f"written: {output}")


if __name__ == "__main__":
    main()
