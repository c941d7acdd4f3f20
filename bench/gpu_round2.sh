#!/usr/bin/env bash
# One H200 call (< 10 min): engine GPU tests (fused kernels, graphs, bursts, lossless spec), then
# decode benchmarks with a kernel profile, the oracle speculation benchmark, and an MoE probe.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
log="$OUT/round2.log"
run() { local t=$1; shift; echo "### $* (timeout $t s, $(date -u +%T))" | tee -a "$log"; timeout "$t" "$@" >>"$log" 2>&1; echo "### rc=$?" | tee -a "$log"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >>"$log"
git log -1 --format='commit %h' >>"$log" 2>/dev/null
run 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_engine_gpu.py
run 100 python3 -m turbospec.cli bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --profile
run 50 python3 -m turbospec.cli bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1,16,64 --prompt-len 128 --gen-len 256
run 150 python3 -m turbospec.cli bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 256 --max-tokens 64 --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}'
run 120 python3 -m turbospec.cli bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1,16 --prompt-len 256 --gen-len 32
grep -v "^\s*$" "$log" | grep -E "^###|passed|failed|Error|error|^#|^ +[0-9]+ |graph replay|roofline|auto k" | head -120
