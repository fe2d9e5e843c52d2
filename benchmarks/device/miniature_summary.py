"""The proof a miniature paper run leaves (paper_miniature.sh): for each method, the
trained model's ``cse_metadata.json`` and training curve copied to ``--out/<method>/``,
and ``--out/summary.json``: the machine and library versions, and per method where it
trained (``device``, ``mixed_precision``), its peak memory, speed and scores, each
read from the files the run wrote (their paths are listed beside the figures)."""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from pathlib import Path

PROOF_KEYS = ("device", "mixed_precision", "num_processes", "steps", "examples_seen", "examples_per_second",
              "peak_memory_gib", "peak_memory_measure", "train_seconds", "best_step", "best_dev")


def machine() -> dict:
    import torch

    from contrastive_sentence_embeddings.records.provenance import results_commit  # src is on PYTHONPATH (paper_miniature.sh)

    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": cuda,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "bf16_supported": bool(cuda and torch.cuda.is_bf16_supported()),
        **{name: _version(name) for name in ("transformers", "accelerate", "kedro", "datasets")},
        "git_commit": results_commit(Path(__file__).resolve().parents[2]),
    }


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def only(paths: list[Path], what: str) -> Path:
    if len(paths) != 1:
        raise FileNotFoundError(f"{what}: expected one file, found {[str(p) for p in paths]}")
    return paths[0]


def method_proof(project: Path, method: str, out: Path) -> dict:
    """Copy ``method``'s metadata and training curve to ``out/<method>/``; its figures."""
    metadata_file = only(sorted((project / "data/06_models" / method).rglob("cse_metadata.json")),
                         f"{method}'s cse_metadata.json")
    curve_file = project / "data/08_reporting/training_curves" / f"{method}.csv"  # every seed's rows, with `seed`
    if not curve_file.is_file():
        raise FileNotFoundError(f"{curve_file}: {method}'s training curve is missing")
    metrics_file = project / "data/08_reporting/metrics" / f"{method}.json"
    metadata = json.loads(metadata_file.read_text(encoding="utf-8"))
    target = out / method
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(metadata_file, target / "cse_metadata.json")
    shutil.copy(curve_file, target / "training_curve.csv")
    figures = {key: metadata.get(key) for key in PROOF_KEYS}
    # Relative to the scratch project: where the run wrote them in any copy of the project.
    figures["files"] = {name: path.relative_to(project).as_posix() for name, path in
                        (("metadata", metadata_file), ("curve", curve_file), ("metrics", metrics_file))}
    if metrics_file.is_file():
        metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
        figures["metrics"] = {key: value for key, value in metrics.items()  # the averages, not each subset
                              if isinstance(value, (int, float, str)) and "/" not in key}
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True, help="the scratch project the runs wrote into")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("methods", nargs="+")
    args = parser.parse_args(argv)
    from contrastive_sentence_embeddings.runs.project_paths import recorded_command

    arguments = sys.argv[1:] if argv is None else list(argv)
    summary = {"command": recorded_command(__file__, arguments, Path(__file__).resolve().parents[2]),
               "machine": machine(),
               "methods": {method: method_proof(args.project, method, args.out) for method in args.methods}}
    text = json.dumps(summary, indent=1, default=str)
    (args.out / "summary.json").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
