#!/usr/bin/env bash
# Attention kernels on one GPU (H200/H100): correctness tests, then the micro-benchmark with a
# small config sweep. Run from anywhere; logs go to $OUT (or out/gpu_kernels).
#   bash bench/gpu_kernels.sh [all|test|bench]   # all: tests then bench, under 10 min (timeouts)
#   bash bench/gpu_kernels.sh gemm               # small-M GEMM: tests (skinny + FP8 linear), then
#                                                # cuBLAS vs skinny_gemm and the config sweep; < 7 min
#   bash bench/gpu_kernels.sh sweeps             # config searches: FP8 GEMM (fp8_sweep), bf16 skinny
#                                                # GEMM (incl. swapped operands), fused MoE; ~8 min
# Needs python3 with torch + triton; the package is used from the source tree (PYTHONPATH=.).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_kernels}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null || true
} 2>&1 | tee "$OUT/env.txt"

WHAT=${1:-all}
rc_test=0; rc_bench=0
if [ "$WHAT" = sweeps ]; then        # config searches: FP8 GEMM, bf16 skinny GEMM, fused MoE; ~8 min
  timeout 210 $PY -m turbospec.kernels.fp8_sweep --budget "${FP8_BUDGET:-140}" 2>&1 | tee "$OUT/fp8_sweep.log"
  rc_bench=${PIPESTATUS[0]}
  timeout 230 $PY -m turbospec.kernels.microbench_gemm --sweep --budget "${GEMM_BUDGET:-150}" 2>&1 | tee "$OUT/gemm_sweep.log"
  rc_bench=$(( rc_bench | PIPESTATUS[0] ))
  timeout 100 $PY -m turbospec.kernels.microbench_moe --sweep 2>&1 | tee "$OUT/moe_sweep.log"
  rc_bench=$(( rc_bench | PIPESTATUS[0] ))
  echo "gpu_kernels sweeps: rc=$rc_bench (logs in $OUT)"
  exit $(( rc_bench != 0 ))
fi
if [ "$WHAT" = gemm ]; then
  timeout 170 $PY -m pytest -q -m gpu --noconftest -p no:cacheprovider -rf --durations=5 \
    tests/gpu/test_skinny_gemm.py tests/gpu/test_fp8_moe_kernels.py -k "not fused and not topk and not align" \
    2>&1 | tee "$OUT/gemm_test.log"
  rc_test=${PIPESTATUS[0]}
  timeout 250 $PY -m turbospec.kernels.microbench_gemm --sweep --budget 140 2>&1 | tee "$OUT/gemm_bench.log"
  rc_bench=${PIPESTATUS[0]}
  echo "gpu_kernels gemm: tests rc=$rc_test microbench_gemm rc=$rc_bench (logs in $OUT)"
  exit $(( rc_test != 0 || rc_bench != 0 ))
fi
# --noconftest: these tests need no fixtures, and tests/conftest.py pulls in CPU-test dependencies
if [ "$WHAT" != bench ]; then
  timeout 220 $PY -m pytest -q -m gpu --noconftest -p no:cacheprovider -rf --durations=5 \
    tests/gpu/test_attention_kernels.py 2>&1 | tee "$OUT/test.log"
  rc_test=${PIPESTATUS[0]}
fi
if [ "$WHAT" != test ]; then
  timeout 340 $PY -m turbospec.kernels.microbench --sweep 2>&1 | tee "$OUT/microbench.log"
  rc_bench=${PIPESTATUS[0]}
fi

echo "gpu_kernels: tests rc=$rc_test microbench rc=$rc_bench (logs in $OUT)"
exit $(( rc_test != 0 || rc_bench != 0 ))
