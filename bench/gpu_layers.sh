#!/usr/bin/env bash
# Fused layer kernels (q/k-norm + RoPE, SiLU-and-mul, RMSNorm wiring) on one GPU: correctness
# tests, then the decoder-layer micro-benchmark (kernels per layer, us per layer, GB/s).
#   bash bench/gpu_layers.sh [all|test|bench]     # all: under 4 minutes (timeouts)
# Needs python3 with torch + triton; the package is used from the source tree (PYTHONPATH=.).
# Everything goes to $OUT/layers_log.txt (OUT defaults to out/gpu_layers).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_layers}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
LOG="$OUT/layers_log.txt"
: > "$LOG"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null || true
} 2>&1 | tee -a "$LOG"

WHAT=${1:-all}
rc_test=0; rc_bench=0
# --noconftest: these tests need no fixtures, and tests/conftest.py pulls in CPU-test dependencies
if [ "$WHAT" != bench ]; then
  echo "### pytest tests/gpu/test_fused_layers.py" | tee -a "$LOG"
  # 4 workers where pytest-xdist is installed: most of the time is Triton compiling, one kernel
  # variant at a time per process
  XDIST=$($PY -c "import xdist" 2>/dev/null && echo "-n 4" || true)
  timeout 150 $PY -m pytest -q -m gpu --noconftest -p no:cacheprovider -rfs --durations=5 $XDIST \
    tests/gpu/test_fused_layers.py 2>&1 | tee -a "$LOG"
  rc_test=${PIPESTATUS[0]}
fi
if [ "$WHAT" != test ]; then
  echo "### python -m turbospec.kernels.microbench_layers" | tee -a "$LOG"
  timeout 80 $PY -m turbospec.kernels.microbench_layers 2>&1 | tee -a "$LOG"
  rc_bench=${PIPESTATUS[0]}
fi

echo "gpu_layers: tests rc=$rc_test microbench rc=$rc_bench (log: $LOG)" | tee -a "$LOG"
exit $(( rc_test != 0 || rc_bench != 0 ))
