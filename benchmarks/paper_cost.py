"""What each ``conf/paper`` run costs, predicted from a measured throughput run.

    python benchmarks/paper_cost.py benchmarks/results/training_throughput_cuda_h100_run2.json \\
        --declutr benchmarks/results/training_throughput_cuda_h100_run3_declutr_scaling.json
    python benchmarks/paper_cost.py benchmarks/results/training_throughput_cuda_h100_run4.json \\
        --simcse-variant cuda-graphs --output benchmarks/results/paper_cost_nvidia_h100_run4_cuda_graphs.json
    python benchmarks/paper_cost.py benchmarks/results/training_throughput_cuda_h100_run5.json \\
        --declutr benchmarks/results/declutr_ablation_cuda_h100_run5.json \\
        --declutr-variant declutr-pad-1-no-cudnn-attention

For each method: the paper run's steps (its data size x epochs / the batch, from
``conf/paper`` and the sizes below), the measured step time and dev-evaluation time
(``benchmarks/training_throughput.py`` on the device named in the results), hence
the predicted wall time of the training on one such GPU, and on 8 with the same
per-GPU batch (each GPU's step as measured, the global batch 8x the paper's; the
all-reduce and all-gather are not measured with one GPU, so this is a lower
bound, and a different recipe than the paper's). Peak memory is the measured one.
``--simcse-variant KEY`` costs SimCSE from the results' ablation row ``KEY`` (e.g.
``cuda-graphs``: the speed settings that row names) instead of its default row;
``--declutr-variant KEY`` costs DeCLUTR from an ablation row of the file that gives its
row (``--declutr``, else the results), e.g. run 5's ``declutr-pad-1-no-cudnn-attention``,
the settings its blocks train with since.
Writes ``benchmarks/results/paper_cost_<device>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "src"))  # the checkout's library, installed or not

from contrastive_sentence_embeddings.runs.atomic_files import write_text_atomically  # noqa: E402
from contrastive_sentence_embeddings.configuration.layering import read_parameters_yaml  # noqa: E402
from contrastive_sentence_embeddings.runs.project_paths import recorded_command  # noqa: E402
# Training-set sizes of the paper runs (docs/record/data_scale.md, conf/paper comments).
PAPER_EXAMPLES = {
    "simcse": ("wiki1m sentences", 1_000_000),
    "imsimcse": ("wiki1m sentences", 1_000_000),
    "scd": ("wiki1m sentences", 1_000_000),
    "declutr": ("OpenWebText documents of >= 2048 tokens", 495_243),
    "clsr": ("SNLI + MultiNLI train entailment pairs (clsr_nli)", 314_315),
}
BLOCKS = {"simcse": "simcse", "imsimcse": "imsimcse", "scd": "scd", "declutr": "declutr", "clsr": "clsr_nli"}
GPUS = 8


def paper_training(block: str) -> dict:
    merged: dict = {}
    for env in ("base", "paper"):
        path = PROJECT_ROOT / "conf" / env / f"parameters_{block}.yml"
        if path.is_file():
            merged.update(((read_parameters_yaml(path.read_text(encoding="utf-8")) or {}).get(block) or {}).get(
                "training") or {})
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--declutr", type=Path, help="another results file whose declutr row is used")
    parser.add_argument("--simcse-variant", metavar="KEY", default=None,
                        help="cost SimCSE from the results' ablation row with this key (e.g. cuda-graphs)")
    parser.add_argument("--declutr-variant", metavar="KEY", default=None,
                        help="cost DeCLUTR from the ablation row with this key (of --declutr's file, else the results)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    results = json.loads(args.results.read_text(encoding="utf-8"))
    rows = {r["method"]: (r, args.results.name) for r in results["rows"] if "step_ms" in r}
    if args.declutr:
        extra = json.loads(args.declutr.read_text(encoding="utf-8"))
        rows.update({r["method"]: (r, args.declutr.name) for r in extra["rows"] if r["method"] == "declutr"
                     and "step_ms" in r})
    if args.simcse_variant:
        variants = {r.get("variant_key"): r for r in results.get("ablation") or []
                    if "step_ms" in r and r.get("method", "simcse") == "simcse"}  # not DeCLUTR's variants
        if args.simcse_variant not in variants:
            parser.error(f"--simcse-variant {args.simcse_variant}: {args.results} has no measured ablation row with "
                         f"that key (it has: {', '.join(sorted(k for k in variants if k)) or 'none'})")
        # The dev evaluation runs the encoder's own forward whatever the training settings
        # (trainer.uncompiled): its cost is the default row's.
        default_eval = rows["simcse"][0].get("dev_eval_seconds") if "simcse" in rows else None
        rows["simcse"] = ({**variants[args.simcse_variant], "dev_eval_seconds": default_eval},
                          f"{args.results.name}, ablation {args.simcse_variant}")
    if args.declutr_variant:
        source = args.declutr or args.results
        variants = {r.get("variant_key"): r
                    for r in json.loads(source.read_text(encoding="utf-8")).get("ablation") or []
                    if "step_ms" in r and r.get("method") == "declutr"}  # not SimCSE's variants
        if args.declutr_variant not in variants:
            parser.error(f"--declutr-variant {args.declutr_variant}: {source} has no measured DeCLUTR ablation row "
                         f"with that key (it has: {', '.join(sorted(k for k in variants if k)) or 'none'})")
        rows["declutr"] = (variants[args.declutr_variant], f"{source.name}, ablation {args.declutr_variant}")
    eval_seconds = [r["dev_eval_seconds"] for r, _ in rows.values() if r.get("dev_eval_seconds")]
    table = []
    for method, (label, examples) in PAPER_EXAMPLES.items():
        if method not in rows:
            table.append({"method": method, "missing": f"no measured row in {args.results.name}"})
            continue
        row, source = rows[method]
        training = paper_training(BLOCKS[method])
        batch, epochs = int(training["batch_size"]), int(training.get("epochs") or 1)
        steps = examples * epochs // batch
        evals = steps // int(training["eval_every"]) + 2 if training.get("eval_every") else 2  # + step 0 and the end
        # A method without its own dev-evaluation time (DeCLUTR, CLSR) takes the sentence methods' mean;
        # CLSR scores cached frozen embeddings through a small network, so it is far less (an upper bound).
        per_eval = row.get("dev_eval_seconds") or (sum(eval_seconds) / len(eval_seconds) if eval_seconds else 0.0)
        train_seconds = steps * row["step_ms"] / 1000
        total = train_seconds + evals * per_eval
        table.append({
            "method": method, "data": f"{examples:,} {label}", "epochs": epochs, "batch": batch, "steps": steps,
            "step_ms": row["step_ms"], "dev_evaluations": evals, "dev_eval_seconds": round(per_eval, 3),
            "hours_one_gpu": round(total / 3600, 2),
            "hours_8_gpus_same_per_gpu_batch": round((train_seconds / GPUS + evals * per_eval) / 3600, 2),
            "peak_memory_gib": row["peak_memory_gib"], "encoder": row["encoder_config"], "measured_in": source,
            **({"training_settings": row["settings"]} if row.get("settings") else {}),
            **({"method_settings": row["method_settings"]} if row.get("method_settings") else {}),
            **({"attention_backends": row["attention_backends"]}
               if row.get("attention_backends") not in (None, "any") else {}),
        })
    device = re.sub(r"[^A-Za-z0-9]+", "_", results["device"]).strip("_").lower()
    output = args.output or PROJECT_ROOT / "benchmarks" / "results" / f"paper_cost_{device}.json"
    report = {"command": recorded_command(__file__, sys.argv[1:], PROJECT_ROOT),
              "device": results["device"], "throughput_commit": results["git_commit"], "rows": table}
    write_text_atomically(output, json.dumps(report, indent=1) + "\n")
    columns = ["method", "data", "epochs", "batch", "steps", "step_ms", "dev_evaluations", "hours_one_gpu",
               "hours_8_gpus_same_per_gpu_batch", "peak_memory_gib", "encoder"]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in table:
        print("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    print(f"\nwritten: {output}")
    if any(math.isnan(r.get("step_ms", 0.0)) for r in table if "step_ms" in r):
        raise SystemExit("a measured step time is NaN")


if __name__ == "__main__":
    main()
