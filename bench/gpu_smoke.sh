#!/usr/bin/env bash
# One H200 call: kernel tests, engine GPU tests, then the decode / spec benchmarks.
#   bash bench/gpu_smoke.sh   (from the repo root; logs under $OUT)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
log="$OUT/smoke.log"
run() { echo "### $*" | tee -a "$log"; timeout "${T:-300}" "$@" 2>&1 | tee -a "$log" | tail -n 40; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$log"
T=120 run python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/gpu/test_attention_kernels.py
T=150 run python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_engine_gpu.py
T=120 run python3 -m turbospec.cli bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1,16,64 --prompt-len 128 --gen-len 128
T=170 run python3 -m turbospec.cli bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64
