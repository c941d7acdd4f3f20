#!/usr/bin/env bash
# Last H200 call: is the drafter's time gone with cuDNN SDPA left out? Then the held-out
# acceptance / speed benches of the committed demo drafters.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
log="$OUT/final2.log"
run() { local t=$1; shift; echo "### $* (timeout $t s)" | tee -a "$log"; timeout "$t" "$@" >>"$log" 2>&1; echo "### rc=$?" | tee -a "$log"; }
run 60 python3 bench/profile_spec.py eagle3 models/codelm-12m-eagle3
for m in eagle3 dflash; do
  run 80 python3 -m turbospec.cli bench spec --model models/codelm-12m --prompts bench/prompts/heldout_code.jsonl --num-prompts 16 --max-tokens 128 --device cuda --speculative-config "{\"method\":\"$m\",\"model\":\"models/codelm-12m-$m\",\"num_speculative_tokens\":7}"
done
grep -E "^###|run [0-9]|^#|plain:|speculative:|speedup|per-position|identical" "$log"
