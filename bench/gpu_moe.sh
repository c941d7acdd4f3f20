#!/usr/bin/env bash
# FP8 + fused MoE + MoE-aware speculation on one H200 (issue 4). Every part is its own python3
# process with its own timeout; a failing part is logged and the next one still runs.
#
#   OUT=/path bash bench/gpu_moe.sh [parts...]     # parts: tests micro verify decode (default), sweep
#
# Each part's worst case (timeouts): tests 280 s, micro 300 s, verify 420 s, decode 190 + 200 + 190 s,
# sweep 420 s (optional: tile/split/stage data for the kernel heuristics). A
# 10-minute call fits "tests micro" or "verify" or "decode"; three calls cover everything:
#   bash bench/gpu_moe.sh tests micro ; bash bench/gpu_moe.sh verify ; bash bench/gpu_moe.sh decode
# Everything goes to $OUT/moe_log.txt (plus JSON next to it); the summary lines come last.
set +e
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_moe}
mkdir -p "$OUT"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
LOG="$OUT/moe_log.txt"
PARTS=${*:-tests micro verify decode}
declare -a SUMMARY

run() {   # run NAME TIMEOUT CMD...
  local name=$1 t=$2; shift 2
  echo "### [$name] $* (timeout ${t}s) $(date -u +%T)" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$t" "$@" >>"$LOG" 2>&1
  local rc=$?
  SUMMARY+=("$name: rc=$rc ($((SECONDS - t0)) s)")
  echo "### [$name] rc=$rc after $((SECONDS - t0)) s" | tee -a "$LOG"
  tail -n 30 "$LOG" | grep -v '^###' | tail -n 25
}

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null
} >>"$LOG" 2>&1

for part in $PARTS; do
  case $part in
    tests)
      run gpu-tests 280 python3 -m pytest -q -m gpu --noconftest -p no:cacheprovider -rf --durations=8 \
        tests/gpu/test_fp8_moe_kernels.py ;;
    micro)
      run microbench 300 python3 -m turbospec.kernels.microbench_moe --json "$OUT/microbench_moe.json" ;;
    sweep)
      run sweep 420 python3 -m turbospec.kernels.microbench_moe --sweep --json "$OUT/sweep_moe.json" ;;
    verify)
      run verify-table 420 python3 -m turbospec.kernels.microbench_moe --only-verify-table \
        --json "$OUT/verify_table.json" ;;
    decode)
      run decode-30b-bf16 190 python3 -m turbospec.cli bench decode --shape qwen3-30b-a3b --dtype bf16 \
        --batch-sizes 1,4,16,64 --json-out "$OUT/decode_30b_bf16.json"
      run decode-30b-fp8 200 python3 -m turbospec.cli bench decode --shape qwen3-30b-a3b --dtype bf16 \
        --quantization fp8 --batch-sizes 1,4,16,64 --json-out "$OUT/decode_30b_fp8.json"
      run decode-8b-fp8 190 python3 -m turbospec.cli bench decode --shape qwen3-8b --dtype bf16 \
        --quantization fp8 --batch-sizes 1,4,16,64 --json-out "$OUT/decode_8b_fp8.json" ;;
    *) echo "unknown part $part (tests micro verify decode sweep)" | tee -a "$LOG" ;;
  esac
done

echo "=== gpu_moe summary ($PARTS) ===" | tee -a "$LOG"
for s in "${SUMMARY[@]}"; do echo "$s" | tee -a "$LOG"; done
grep -E "of roofline|^ +1 |copy bandwidth|fast fp8|passed|failed|FAIL" "$LOG" | tail -n 40
