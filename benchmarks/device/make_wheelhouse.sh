#!/usr/bin/env bash
# Downloads, on a machine with PyPI, the wheels `kedro run` of this project needs on the
# GPU machine (python 3.12, x86-64, no network; torch, transformers, accelerate,
# sentence-transformers, pandas, pyarrow, scipy, scikit-learn ... already there): kedro
# and its dependencies, kedro-datasets, datasets (dill, multiprocess, xxhash ...), psutil.
# Versions are those of the project's own virtualenv (wheelhouse_requirements.py), so the
# device runs what the tests ran. Not spaCy: see wheelhouse_requirements.py.
#
#   benchmarks/device/make_wheelhouse.sh                  # -> .device/wheels (cp312)
#   PYTHON=/path/to/.venv/bin/python WHEELS=/tmp/w PY_VERSION=3.11 benchmarks/device/make_wheelhouse.sh
#
# The folder gets requirements.txt (what was asked for) and the wheels; a folder that
# already holds wheels is refused (remove it yourself: it may hold wheels put there by hand).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
WHEELS="${WHEELS:-$ROOT/.device/wheels}"
PY_VERSION="${PY_VERSION:-3.12}"

if [[ ! -x "$PYTHON" ]]; then
    echo "make_wheelhouse: no Python at $PYTHON (set PYTHON to the project's virtualenv python)" >&2
    exit 2
fi
if compgen -G "$WHEELS/*.whl" > /dev/null; then
    echo "make_wheelhouse: $WHEELS already holds wheels; remove them first" >&2
    exit 2
fi
mkdir -p "$WHEELS"
"$PYTHON" "$ROOT/benchmarks/device/wheelhouse_requirements.py" > "$WHEELS/requirements.txt.part"
mv "$WHEELS/requirements.txt.part" "$WHEELS/requirements.txt"

# --no-deps: requirements.txt is already the whole closure, pinned; --only-binary: the
# device builds nothing. The platform tags cover pure-Python wheels and manylinux ones.
# A release published as a source archive only (omegaconf's antlr4-python3-runtime 4.9.3)
# is built into a wheel here, and kept only if that wheel is pure Python (py3-none-any).
while read -r requirement; do
    if ! "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --dest "$WHEELS" \
            --python-version "$PY_VERSION" --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform any "$requirement" 2> "$WHEELS/pip-download.err"; then
        echo "make_wheelhouse: no wheel of $requirement on the index; building one from its source archive"
        built="$(mktemp -d)"
        "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$built" "$requirement"
        if ! compgen -G "$built/*-none-any.whl" > /dev/null; then
            echo "make_wheelhouse: $requirement did not build into a pure-Python wheel ($(ls "$built"))" >&2
            exit 1
        fi
        mv "$built"/*.whl "$WHEELS/"
        rmdir "$built"
    fi
done < <(grep '==' "$WHEELS/requirements.txt")
rm -f "$WHEELS/pip-download.err"

wanted=$(grep -c '==' "$WHEELS/requirements.txt")
got=$(find "$WHEELS" -maxdepth 1 -name '*.whl' | wc -l)
if [[ "$wanted" != "$got" ]]; then
    echo "make_wheelhouse: $wanted requirements but $got wheels in $WHEELS" >&2
    exit 1
fi
echo "make_wheelhouse: $got wheels for python $PY_VERSION in $WHEELS ($(du -sh "$WHEELS" | cut -f1))"
