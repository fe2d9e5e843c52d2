#!/usr/bin/env bash
# What to run whenever a GPU machine is lent, as one script sized to the lent time
# (15 minutes of device time a task, the machine's start included; at most 10 minutes a
# command): two parts of about 5 minutes each, the first the one that matters most, so
# that a second call, or a rerun of the first, still fits. From the repository root of
# the GPU machine, with `.device/` carried (benchmarks/device/prepare_carry.sh makes it):
#
#   OUT=/some/folder CSE_CODE_VERSION=<commit> benchmarks/device/device_check.sh            # part 1
#   PART=2 OUT=/some/folder CSE_CODE_VERSION=<commit> benchmarks/device/device_check.sh     # part 2
#
# Part 1, measure: the CUDA tests (tests/cuda: numerics, compiled and CUDA-graph training
# against eager); what attention's first call on a new shape costs under PyTorch's
# choice, without cuDNN's SDPA and with TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 (sdpa_shapes.py,
# ~30 s: run 5 found it behind DeCLUTR's slow step); the training-throughput benchmark
# for SimCSE and DeCLUTR at the paper's settings with sentence-transformers' trainer as
# the peer, then SimCSE's speed settings (cuDNN's attention or not, eager and as CUDA graphs).
# Part 2, explain and prove the path: what bounds DeCLUTR's step without cuDNN's
# attention (widths rounded to 8, fewer larger passes, torch.compile, and cuDNN again for
# the comparison), what one STS evaluation costs in a cold process with and without cuDNN's
# attention and as sentence-transformers' encode (evaluation_kernels.py), where a DeCLUTR
# and a SimCSE step go (--profile: the device's busy share,
# launches, the host reads with the line behind each), then a SimCSE step as CUDA
# graphs, DeCLUTR's memory at the paper's batch, and last `kedro run --env paper` in
# miniature (paper_miniature.sh).
#
# Every stage runs under what is left of BUDGET_S; one that cannot start with the time it
# needs is skipped and said so, one that runs out is stopped (the benchmarks save after
# every row, so what they measured stays). Under $OUT, as plain files (what the device
# tool brings back: at most 8, no deeper than 2 folders): device_check.log (everything
# printed), device_check.json (the machine, the commit, each stage's status and seconds),
# and the part's results.
#
# Settings (environment): PART (1), BUDGET_S (300), PYTHON (python3), DEVICE (cuda; cpu
# rehearses the script on a machine without a GPU), ENCODER_CONFIG (empty: each method's
# paper encoder; `tiny` for a rehearsal), STEPS and WARMUP (40 and 20), PROFILE_STEPS (5),
# SDPA_SHAPES (20: shapes per setting in sdpa_shapes.py),
# SKIP_STAGES (stage names, e.g. `paper_miniature`, to leave out: the log and
# device_check.json say so),
# CSE_CODE_VERSION (required on cuda: the machine's copy of .git is not the tree that
# runs), CSE_TOKENIZER_DIR / CSE_DATA_MIRROR / WHEELS (.device/tokenizer, .device/datasets,
# .device/wheels, where they exist).
set -euo pipefail

ROOT="$(pwd)"
if [[ ! -f "$ROOT/pyproject.toml" || ! -d "$ROOT/src/contrastive_sentence_embeddings" ]]; then
    echo "device_check: run me from the repository root" >&2
    exit 2
fi
: "${OUT:?device_check: set OUT to the folder for the results}"
PART="${PART:-1}"
BUDGET_S="${BUDGET_S:-300}"
PYTHON="${PYTHON:-python3}"
# A path made absolute (the scripts change folder), without resolving its links: a
# virtualenv's python is a link to the base interpreter.
[[ "$PYTHON" == */* ]] && PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
DEVICE="${DEVICE:-cuda}"
ENCODER_CONFIG="${ENCODER_CONFIG:-}"
STEPS="${STEPS:-40}"
WARMUP="${WARMUP:-20}"
PROFILE_STEPS="${PROFILE_STEPS:-5}"
SDPA_SHAPES="${SDPA_SHAPES:-20}"
SKIP_STAGES="${SKIP_STAGES:-}"
WHEELS="${WHEELS:-$ROOT/.device/wheels}"
SITE="${SITE:-/tmp/device_check_site}"
case "$PART" in 1|2) ;; *) echo "device_check: PART is 1 or 2, not '$PART'" >&2; exit 2 ;; esac
if [[ "$DEVICE" == cuda && -z "${CSE_CODE_VERSION:-}" ]]; then
    echo "device_check: set CSE_CODE_VERSION to the commit that runs (the device's .git is not it)" >&2
    exit 2
fi
# The carried tokenizer and data; on a machine with the project installed (a rehearsal),
# the packaged tokenizer and the mirror beside the checkout.
if [[ -z "${CSE_TOKENIZER_DIR:-}" ]]; then
    if [[ -d "$ROOT/.device/tokenizer" ]]; then
        export CSE_TOKENIZER_DIR="$ROOT/.device/tokenizer"
    elif packaged="$(PYTHONPATH="$ROOT/src" "$PYTHON" -c 'from contrastive_sentence_embeddings.encoders.loading import packaged_default_encoder_path as p; print(p())' 2> /dev/null)"; then
        export CSE_TOKENIZER_DIR="$packaged"
    fi
fi
if [[ -z "${CSE_DATA_MIRROR:-}" ]]; then
    for folder in "$ROOT/.device/datasets" "$ROOT/../shared/datasets"; do
        if [[ -d "$folder" ]]; then export CSE_DATA_MIRROR="$folder"; break; fi
    done
fi
# Said before any device time is spent: without its README the tests take the folder for
# no mirror and every stage that reads data fails (tests/cuda did, on 2026-11-27).
if [[ ! -f "${CSE_DATA_MIRROR:-}/README.md" ]]; then
    echo "device_check: no data mirror at '${CSE_DATA_MIRROR:-}' (no README.md there): run" \
         "benchmarks/device/prepare_carry.sh and carry .device, or set CSE_DATA_MIRROR" >&2
    exit 2
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
    KEDRO_DISABLE_TELEMETRY=1 PYTHONUNBUFFERED=1 MPLBACKEND=Agg COLUMNS=${COLUMNS:-160}  # the log: rich wraps at 80

mkdir -p "$OUT"
SCRATCH="$(mktemp -d /tmp/device_check.XXXXXX)"  # ours: removed however the script ends
trap 'rm -rf "$SCRATCH"' EXIT
STAGES="$SCRATCH/stages.tsv"
: > "$STAGES"
exec > >(tee "$OUT/device_check.log") 2>&1
TEE_PID=$!
START=$(date +%s)
echo "device_check: part $PART on $DEVICE, budget ${BUDGET_S}s, commit ${CSE_CODE_VERSION:-(from git)}, $(date -u +%FT%TZ)"

export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

# stage NAME NEEDS_S COMMAND...: COMMAND under what is left of the budget (less the grace
# a stopped Python gets to write what it has), or skipped if less than NEEDS_S is left.
GRACE_S=15
stage() {
    local name=$1 needs=$2
    shift 2
    local remaining began rc status
    remaining=$(( $(left) - GRACE_S ))
    if [[ " ${SKIP_STAGES//,/ } " == *" $name "* ]]; then
        echo "device_check: $name skipped: named in SKIP_STAGES"
        printf '%s\t%s\t%s\n' "$name" "skipped: named in SKIP_STAGES" 0 >> "$STAGES"
        return 0
    fi
    if (( remaining < needs )); then
        echo "device_check: $name skipped: ${remaining}s of the budget left, it needs ${needs}s"
        printf '%s\t%s\t%s\n' "$name" "skipped: ${remaining}s left, needs ${needs}s" 0 >> "$STAGES"
        return 0
    fi
    echo "device_check: $name (at most ${remaining}s): $*"
    began=$(date +%s)
    set +e
    # SIGINT first: Python stops with KeyboardInterrupt, the benchmarks keep their saved rows.
    timeout --signal=INT --kill-after="$GRACE_S" "$remaining" "$@"
    rc=$?
    set -e
    case $rc in
        0) status=ok ;;
        124|137) status="stopped at the budget" ;;
        *) status="failed (exit $rc)" ;;
    esac
    echo "device_check: $name: $status after $(( $(date +%s) - began ))s"
    printf '%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - began ))" >> "$STAGES"
}

encoder_args=()
[[ -n "$ENCODER_CONFIG" ]] && encoder_args=(--encoder-config "$ENCODER_CONFIG")
throughput=("$PYTHON" benchmarks/training_throughput.py --device "$DEVICE" "${encoder_args[@]}")
[[ "$DEVICE" == cpu ]] && throughput+=(--no-cpu-shortcuts)  # a rehearsal of the GPU's path

# sentence-transformers, the peer in both parts, imports `datasets` (with dill, multiprocess) when
# it is imported (6.2 does: its samplers); absent from the GPU image: from the carried wheels,
# into a folder of our own ahead of the path.
if ! "$PYTHON" -c "import datasets" 2> /dev/null; then
    if compgen -G "$WHEELS/datasets-*.whl" > /dev/null; then
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
            "$WHEELS"/datasets-*.whl "$WHEELS"/dill-*.whl "$WHEELS"/multiprocess-*.whl
        export PYTHONPATH="$SITE:$PYTHONPATH"
    else
        echo "device_check: no datasets package and no wheel of it in $WHEELS: the peer's rows will fail"
    fi
fi
if [[ "$PART" == 1 ]]; then
    stage cuda_numerics 60 bash -c "set -o pipefail; '$PYTHON' -m pytest -q -rA -p no:cacheprovider tests/cuda \
        2>&1 | tee '$OUT/cuda_numerics.txt'"
    stage sdpa_shapes 45 "$PYTHON" benchmarks/sdpa_shapes.py --device "$DEVICE" --shapes "$SDPA_SHAPES" \
        --output "$OUT/sdpa_shapes.json"
    # SimCSE's speed settings: static shapes and compile measured in runs 4 and 5 (within
    # 2%); cuDNN's attention against the memory-efficient kernel, eager and as CUDA graphs.
    ablation="default,no-cudnn-attention,cuda-graphs,cuda-graphs-no-cudnn-attention"
    [[ "$DEVICE" == cpu ]] && ablation="default,static-shapes"  # CUDA graphs and cuDNN need CUDA
    stage training_throughput 90 "${throughput[@]}" --methods simcse,declutr --steps "$STEPS" --warmup "$WARMUP" \
        --ablation "$ablation" --output "$OUT/training_throughput.json"
    # Gradient caching (issue 42, item 3): batch 1,024 in mini-batches of 64 ran at
    # 1,123 examples/s against 6,875 uncached on the H100 (run 2), where one extra forward
    # should cost ~1.3x. SimCSE at the paper's batch, then 1,024 and 4,096 each uncached
    # and cached, the per-example cost of each in one file (15 steps a row: ~100 s on an H100).
    scaling_batches=1024,4096
    [[ "$DEVICE" == cpu ]] && scaling_batches=128  # a rehearsal: one cached and one plain row
    stage gradient_cache_scaling 90 "${throughput[@]}" --methods simcse --steps 10 --warmup 5 \
        --no-peer --no-eval-cost --scaling "$scaling_batches" --output "$OUT/gradient_cache_scaling.json"
else
    # DeCLUTR's step: run 5 found cuDNN's attention preparing each new pass shape (640 ms a
    # step with it, 175 without; its blocks leave it out since). What bounds the 175 ms
    # step now: widths rounded to 8, fewer and larger passes (bucket_tokens 32768), one
    # compiled graph for all widths, and PyTorch's own choice again (run 5's row, for the
    # comparison within this run). Each row ~10-30 s at those step times.
    declutr_variants="declutr-pad-8,declutr-bucket-32768,declutr-compile,declutr-cudnn-attention"
    [[ "$DEVICE" == cpu ]] && declutr_variants="declutr-pad-8,declutr-bucket-32768"  # no cuDNN on a CPU
    stage declutr_ablation 90 "${throughput[@]}" --methods declutr --steps "$WARMUP" --warmup "$WARMUP" \
        --no-peer --no-eval-cost --ablation "$declutr_variants" --output "$OUT/declutr_ablation.json"
    # Evaluation: every scoring node encodes length-sorted batches, a new shape at nearly every
    # batch of a fresh process. conf/base leaves cuDNN's attention out of it on the ground of
    # run 5's training figures; this measures it: one STS evaluation in a cold process under
    # each setting, twice, and sentence-transformers' encode beside it (~1 min at bert-base size).
    stage evaluation_kernels 60 "$PYTHON" benchmarks/evaluation_kernels.py --device "$DEVICE" \
        "${encoder_args[@]}" --output "$OUT/evaluation_kernels.json"
    # DeCLUTR first: SimCSE's step was profiled on the H100 in run 4; the two rows and
    # their profiles took 96 s there, hence 120.
    stage training_profile 120 "${throughput[@]}" --methods declutr,simcse --steps "$WARMUP" --warmup "$WARMUP" \
        --no-peer --no-eval-cost --profile "$PROFILE_STEPS" --output "$OUT/training_profile.json"
    # SimCSE's step as CUDA graphs (run 4: 17.9 ms against 13.6 ms of eager kernels): is
    # it now bound by the device, and how long do the compiled kernels take? (On a CPU
    # rehearsal: compiled, no graphs.)
    compiled=(--set=static_shapes=true --set=compile=true)
    [[ "$DEVICE" == cuda ]] && compiled+=('--set=compile_mode="reduce-overhead"')
    stage training_profile_compiled 60 "${throughput[@]}" --methods simcse --steps "$WARMUP" --warmup "$WARMUP" \
        --no-peer --no-eval-cost --profile "$PROFILE_STEPS" "${compiled[@]}" --output "$OUT/training_profile_compiled.json"
    if [[ "$DEVICE" == cuda ]]; then  # the paper's batch at roberta-base size
        memory_rows=(--encoder-config "${ENCODER_CONFIG:-roberta-base}" --rows masked_b16 masked_b16_checkpointing)
    else  # a rehearsal: the default encoder, 4 documents, one step
        memory_rows=(--rows masked_b4 --steps 1)
    fi
    stage declutr_memory 60 "$PYTHON" benchmarks/declutr_memory.py --device "$DEVICE" "${memory_rows[@]}" \
        --output "$OUT/declutr_memory.json"
    # Last: it reproduced the same scores and peaks in runs 3 and 4; a proof of the path, not a measurement.
    miniature_env=(OUT="$SCRATCH/paper_miniature" WORK="$SCRATCH/paper_miniature_project" PYTHON="$PYTHON"
                   WHEELS="$WHEELS" SITE="$SCRATCH/paper_miniature_site" STEPS="${MINIATURE_STEPS:-6}")
    [[ "$DEVICE" == cpu ]] && miniature_env+=(CUDA_VISIBLE_DEVICES= ENCODER_LAYERS=2 ENCODER_HIDDEN=128)
    stage paper_miniature 150 env "${miniature_env[@]}" benchmarks/device/paper_miniature.sh
    if [[ -d "$SCRATCH/paper_miniature" ]]; then
        # its summary.json is in the archive: the device tool brings back at most 8 files
        tar -czf "$OUT/paper_miniature.tar.gz" -C "$SCRATCH" paper_miniature
    fi
fi

"$PYTHON" - "$STAGES" "$OUT/device_check.json" "$PART" "$BUDGET_S" "$(( $(date +%s) - START ))" <<'PY'
"""device_check.json: the machine, the commit, and each stage's status and seconds."""
import json, platform, subprocess, sys
from pathlib import Path

stages_file, target, part, budget, seconds = sys.argv[1:]
stages = [dict(zip(("stage", "status", "seconds"), line.split("\t")))
          for line in Path(stages_file).read_text(encoding="utf-8").splitlines() if line]
for entry in stages:
    entry["seconds"] = int(entry["seconds"])
machine = {"host": platform.node(), "python": platform.python_version()}
try:
    import torch
    machine.update(torch=torch.__version__, cuda=torch.version.cuda,
                   gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
except Exception as error:  # noqa: BLE001 - the summary is written whatever failed
    machine["torch"] = f"not importable: {error}"
try:
    machine["nvidia_smi"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=20).stdout.strip() or None
except (OSError, subprocess.SubprocessError):
    machine["nvidia_smi"] = None
sys.path.insert(0, "src")
from contrastive_sentence_embeddings.records.provenance import results_commit  # noqa: E402

summary = {"part": int(part), "budget_s": int(budget), "seconds": int(seconds),
           "git_commit": results_commit(Path.cwd()), "machine": machine, "stages": stages}
Path(target).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
print("device_check: " + "; ".join(f"{s['stage']} {s['status']} ({s['seconds']}s)" for s in stages))
PY
echo "device_check: done in $(( $(date +%s) - START ))s; under $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exec > /dev/null 2>&1  # the log's tee sees its end of input and finishes writing before we exit
wait "$TEE_PID" 2> /dev/null || true
