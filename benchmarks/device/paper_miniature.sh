#!/usr/bin/env bash
# `kedro run --env paper` in miniature on the GPU machine (no network, no kedro,
# datasets or spaCy installed): run from the repository root with `.device/` carried
# (wheels from make_wheelhouse.sh, tokenizer, datasets: docs/record/gpu.md says how to fill it).
#
#   OUT=/some/folder benchmarks/device/paper_miniature.sh
#
# Only sizes and sources differ from conf/paper (the test tests/test_paper_environment.py
# uses the same kind of overrides): a random-weight encoder of bert-base-uncased's shape,
# the offline mirror for the data, few sentences and steps. Everything else (device
# selection, bf16 autocast on CUDA, checkpoints, saving, STS and transfer evaluation,
# the leaderboard) is the paper configuration's own code path. Under $OUT: the log,
# summary.json (machine, versions, and per method where it trained, in what precision,
# peak memory, speed, scores) and each method's cse_metadata.json and training curve.
#
# Settings (environment): METHODS ("simcse declutr"), STEPS (20), NUM_PROCESSES (auto:
# one training process per visible GPU), PYTHON (python3), WORK (/tmp/paper_miniature:
# the scratch project, removed first), SITE (/tmp/site), CSE_TOKENIZER_DIR
# (.device/tokenizer), CSE_DATA_MIRROR (.device/datasets), WHEELS (.device/wheels); ENCODER_LAYERS (12) and
# ENCODER_HIDDEN (768) shrink the encoder for a CPU rehearsal (CUDA_VISIBLE_DEVICES= forces CPU).
set -euo pipefail

ROOT="$(pwd)"
if [[ ! -f "$ROOT/pyproject.toml" || ! -d "$ROOT/src/contrastive_sentence_embeddings" ]]; then
    echo "paper_miniature: run me from the repository root" >&2
    exit 2
fi
OUT="${OUT:-/tmp/paper_miniature_out}"
PYTHON="${PYTHON:-python3}"
# A path made absolute (the scripts change folder), without resolving its links: a
# virtualenv's python is a link to the base interpreter.
[[ "$PYTHON" == */* ]] && PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
WORK="${WORK:-/tmp/paper_miniature}"
SITE="${SITE:-/tmp/site}"
WHEELS="${WHEELS:-$ROOT/.device/wheels}"
METHODS="${METHODS:-simcse declutr}"
STEPS="${STEPS:-20}"
NUM_PROCESSES="${NUM_PROCESSES:-auto}"
export CSE_TOKENIZER_DIR="${CSE_TOKENIZER_DIR:-$ROOT/.device/tokenizer}"
export CSE_DATA_MIRROR="${CSE_DATA_MIRROR:-$ROOT/.device/datasets}"
# Made absolute: kedro runs in a scratch project elsewhere, where a relative folder
# would point at nothing (seen on the GPU machine: "longdocs ... is missing or empty").
CSE_TOKENIZER_DIR="$(cd "$CSE_TOKENIZER_DIR" 2>/dev/null && pwd || echo "$CSE_TOKENIZER_DIR")"
CSE_DATA_MIRROR="$(cd "$CSE_DATA_MIRROR" 2>/dev/null && pwd || echo "$CSE_DATA_MIRROR")"
mkdir -p "$OUT"
LOG="$OUT/paper_miniature.log"
exec > >(tee "$LOG") 2>&1

for folder in "$WHEELS" "$CSE_TOKENIZER_DIR" "$CSE_DATA_MIRROR"; do
    [[ -d "$folder" ]] || { echo "paper_miniature: $folder is missing (see docs/record/gpu.md)" >&2; exit 2; }
done

# 1. The wheelhouse, into a folder of its own ahead of the system's packages.
if "$PYTHON" -m pip --version > /dev/null 2>&1; then
    "$PYTHON" -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
else  # a Python without pip: a wheel is a zip of its files as installed (nothing is run from bin/)
    echo "paper_miniature: no pip in $PYTHON; unpacking the wheels into $SITE"
    for wheel in "$WHEELS"/*.whl; do "$PYTHON" -m zipfile -e "$wheel" "$SITE"; done
fi
export PYTHONPATH="$SITE:$ROOT/src"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 KEDRO_DISABLE_TELEMETRY=1 MPLBACKEND=Agg
"$PYTHON" - <<'PY'
import importlib, sys
missing = []
for name in ("torch", "transformers", "accelerate", "sentence_transformers", "kedro", "kedro_datasets", "datasets",
             "pandas", "pyarrow", "scipy", "sklearn", "matplotlib", "contrastive_sentence_embeddings"):
    try:
        module = importlib.import_module(name)
        print(f"paper_miniature: {name} {getattr(module, '__version__', '')} from {module.__file__}")
    except Exception as error:  # say every missing one, then stop
        missing.append(f"{name}: {error}")
if missing:
    sys.exit("paper_miniature: cannot import\n  " + "\n  ".join(missing))
# The wheels were pinned against the project's venv; say where the machine's own
# packages fall outside what they require (a likely cause if a step below fails).
from importlib import metadata
from packaging.requirements import Requirement
for dist in ("kedro", "kedro-datasets", "datasets"):
    for line in metadata.requires(dist) or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            have = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            print(f"paper_miniature: warning: {dist} requires {requirement}, which is not installed")
            continue
        if not requirement.specifier.contains(have, prereleases=True):
            print(f"paper_miniature: warning: {dist} requires {requirement}; this machine has {have}")
PY

# 2. A scratch project (the repository's conf, its code on PYTHONPATH): the run's data/
#    stays out of the repository. WORK is ours: removed and made anew.
rm -rf "$WORK"
mkdir -p "$WORK/project/src" "$WORK/project/conf"
cp "$ROOT/pyproject.toml" "$ROOT/params.yaml" "$WORK/project/"
for entry in "$ROOT"/conf/*; do
    [[ "$(basename "$entry")" == local ]] || cp -r "$entry" "$WORK/project/conf/"
done
mkdir -p "$WORK/project/conf/local"
ENCODER="$WORK/bert-base-uncased-random"
"$PYTHON" "$ROOT/benchmarks/device/random_encoder.py" --tokenizer "$CSE_TOKENIZER_DIR" --out "$ENCODER" \
    --layers "${ENCODER_LAYERS:-12}" --hidden "${ENCODER_HIDDEN:-768}"

# 3. One `kedro run --env paper --pipelines=<method>` per method, its --params given
#    nested through --config. Sizes and sources only:
#    - the mirror (conf/paper downloads from the Hub) and the random encoder;
#    - wiki1m's sentences: enough for STEPS batches of 64; one seed;
#    - DeCLUTR: the mirror's OpenWebText documents have 550-900 tokens, not 2048, so
#      shorter documents and spans are accepted, and 4 documents a batch (10 in all);
#    - two transfer tasks, 2 folds, 20 bootstrap resamples.
cd "$WORK/project"
for method in $METHODS; do
    case "$method" in
        declutr) training="{batch_size: 4, max_steps: $STEPS, eval_every: $(( (STEPS + 1) / 2 )), num_processes: $NUM_PROCESSES}" ;;
        *) training="{max_steps: $STEPS, eval_every: $(( (STEPS + 1) / 2 )), num_processes: $NUM_PROCESSES}" ;;
    esac
    cat > "$WORK/run_$method.yml" <<YML
run:
  env: paper
  pipelines: $method
  params:
    encoder: $ENCODER
    raw_data: {mode: mirror}
    data_processing:
      wiki_sentences: {n_sentences: $(( STEPS * 64 + 64 ))}
      long_documents: {min_doc_tokens: 256}
      declutr_spans: {max_length: 64, anchor_gap: 64}
    $method:
      seeds: [42]
      training: $training
    evaluation: {transfer_tasks: [TREC, MRPC], k_folds: 2, sts_bootstrap_resamples: 20}
    leaderboard: {bootstrap_resamples: 20}
YML
    echo "paper_miniature: kedro run --env paper --pipelines=$method (config $WORK/run_$method.yml)"
    start=$(date +%s)
    "$PYTHON" -m kedro run --config "$WORK/run_$method.yml"
    echo "paper_miniature: $method finished in $(( $(date +%s) - start )) s"
done

# 4. What proves the path: each run's metadata and curve, and a summary.
cd "$ROOT"
"$PYTHON" "$ROOT/benchmarks/device/miniature_summary.py" --project "$WORK/project" --out "$OUT" $METHODS
