#!/usr/bin/env bash
# Sampled against greedy decoding (bench/sampled_decode.py) on one H200: the tree in out/base (another
# commit's `turbospec`, with this checkout's benchmarks/decode.py copied in) and this checkout, one
# after the other per shape, each with `python -P` so that PYTHONPATH picks the tree (the output names
# the file imported); then the GPU tests of sampled bursts and of no compilation inside a step.
#   git archive <rev> turbospec | tar -x -C out/base; cp turbospec/benchmarks/decode.py out/base/turbospec/benchmarks/
#   OUT=/path bash bench/gpu_sampled.sh          (device tool: carry ["out/base"])
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv
S=bench/sampled_decode.py
for shape in "models/codelm-12m --prompt-len 128 --gen-len 128" "qwen3-8b"; do
  for tree in out/base . ; do
    echo "### $tree $shape"; PYTHONPATH=$tree timeout 200 python3 -P $S --shape $shape --repeats 1
  done
done 2>&1 | tee "$OUT/bench.txt"
PYTHONPATH=. timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_sampled_bursts_gpu.py \
  tests/gpu/test_no_compile_in_steps.py > "$OUT/tests.txt" 2>&1; tail -5 "$OUT/tests.txt"
