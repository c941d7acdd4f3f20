#!/usr/bin/env bash
# Final H200 call: profile of a speculative step, oracle speculation on qwen3-8b with automatic
# draft length, FP8 decode on qwen3-8b and qwen3-30b-a3b. Logs under $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
log="$OUT/final.log"
run() { local t=$1; shift; echo "### $* (timeout $t s, $(date -u +%T))" | tee -a "$log"; timeout "$t" "$@" >>"$log" 2>&1; echo "### rc=$?" | tee -a "$log"; }
git log -1 --format='commit %h' >>"$log" 2>/dev/null
run 70 python3 bench/profile_spec.py eagle3 models/codelm-12m-eagle3
run 150 python3 -m turbospec.cli bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 256 --max-tokens 64 --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}'
run 80 python3 -m turbospec.cli bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 512 --gen-len 64
run 100 python3 -m turbospec.cli bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 256 --gen-len 32
grep -E "^###|^#|^ +[0-9]+ |eagle3:|same as plain|Error|error" "$log" | head -80
