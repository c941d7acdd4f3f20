#!/usr/bin/env bash
# Sort-free top-p (layers/cutoff_search.py, kernels/top_p_kernel.py) on one H200, in parts (each
# writes under $OUT; one part per device call keeps each under the 10-minute limit):
#   kernel  the kernel's GPU tests alone (== PyTorch path at 152k, eager and in a graph)
#   tests   the GPU tests of top-p (kernel == PyTorch path at 152k, in a graph, seeded bursts ==
#           single steps, the users' law in bursts), of sampled bursts, of the one-launch top-k draw
#           and of no compilation inside a step; then the CPU and interpreter tests of top-p
#   cost    bench/top_p_cost.py (sort / PyTorch sort-free / kernel, mask alone and compute_probs, in
#           CUDA graphs, batch 1 / 16 / 64): logits N(0,1) x 3, x 1 (flat: every token a candidate),
#           x 3 with 3 peak tokens
#   decode  bench/sampled_decode.py, qwen3-8b, batch 1 / 16 / 64, greedy and Llama's t0.6 p0.9, with
#           TURBOSPEC_TOP_P=sort then kernel, twice alternating
#   codelm  the same on codelm-12m (vocab 8192), prompt 128 + gen 128
#   drawtests  Mode.TOP_P_DRAW (top-p alone drawn in the advance kernel): its GPU tests (law of the draw and
#           of the seeded filter variant, greedy rows kept, start-up variants), then bench/topk_draw_cost.py
#   drawdecode  bench/sampled_decode.py, qwen3-8b, greedy and t0.6 p0.9, TURBOSPEC_TOP_P_DRAW=0 / 1 alternating
#   drawcodelm  the same on codelm-12m
#   OUT=/path bash bench/gpu_top_p.sh kernel cost tests decode codelm
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
S=bench/sampled_decode.py
nvidia-smi --query-gpu=name,clocks.sm --format=csv
for part in "$@"; do
  case $part in
    kernel) PYTHONPATH=. timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_top_p_gpu.py \
              -k "kernel" > "$OUT/kernel_tests.txt" 2>&1
            tail -3 "$OUT/kernel_tests.txt" ;;
    tests)  PYTHONPATH=. timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_top_p_gpu.py \
              tests/gpu/test_sampled_bursts_gpu.py tests/gpu/test_topk_draw_gpu.py tests/gpu/test_no_compile_in_steps.py \
              > "$OUT/tests.txt" 2>&1
            tail -3 "$OUT/tests.txt"
            PYTHONPATH=. timeout 150 python3 -m pytest -q -p no:cacheprovider -rf tests/test_top_p.py \
              tests/test_top_p_interpret.py tests/test_sampler_topk_bound.py > "$OUT/cpu_tests.txt" 2>&1
            tail -3 "$OUT/cpu_tests.txt" ;;
    cost)   for args in "--scale 3" "--scale 1" "--scale 3 --peak 3"; do
              PYTHONPATH=. timeout 100 python3 bench/top_p_cost.py $args
            done 2>&1 | tee "$OUT/cost.txt" ;;
    decode) for mode in sort kernel sort kernel; do
              echo "### TURBOSPEC_TOP_P=$mode"; TURBOSPEC_TOP_P=$mode PYTHONPATH=. timeout 140 python3 -P $S \
                --shape qwen3-8b --batch-sizes 1,16,64 --settings "greedy,t0.6 p0.9" --repeats 1
            done 2>&1 | tee "$OUT/decode.txt" ;;
    codelm) for mode in sort kernel sort kernel; do
              echo "### TURBOSPEC_TOP_P=$mode"; TURBOSPEC_TOP_P=$mode PYTHONPATH=. timeout 100 python3 -P $S \
                --shape models/codelm-12m --prompt-len 128 --gen-len 128 --batch-sizes 1,16,64 \
                --settings "greedy,t0.6 p0.9" --repeats 2
            done 2>&1 | tee "$OUT/codelm.txt" ;;
    drawtests) PYTHONPATH=. timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_top_p_gpu.py \
              -k "alone or seeded" > "$OUT/drawtests.txt" 2>&1
            PYTHONPATH=. timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_default_variants_gpu.py \
              tests/gpu/test_sampled_bursts_gpu.py >> "$OUT/drawtests.txt" 2>&1
            grep -E "passed|failed" "$OUT/drawtests.txt"
            PYTHONPATH=. timeout 100 python3 bench/topk_draw_cost.py 2>&1 | tee "$OUT/drawcost.txt" ;;
    drawdecode) for m in 0 1 0 1; do
              echo "### TURBOSPEC_TOP_P_DRAW=$m"; TURBOSPEC_TOP_P_DRAW=$m PYTHONPATH=. timeout 140 python3 $S \
                --shape qwen3-8b --batch-sizes 1,16,64 --settings "greedy,t0.6 p0.9" --repeats 1
            done 2>&1 | tee "$OUT/drawdecode.txt" ;;
    drawcodelm) for m in 0 1 0 1; do
              echo "### TURBOSPEC_TOP_P_DRAW=$m"; TURBOSPEC_TOP_P_DRAW=$m PYTHONPATH=. timeout 100 python3 $S \
                --shape models/codelm-12m --prompt-len 128 --gen-len 128 --batch-sizes 1,16,64 \
                --settings "greedy,t0.6 p0.9" --repeats 2
            done 2>&1 | tee "$OUT/drawcodelm.txt" ;;
    *)      echo "unknown part $part (kernel, tests, cost, decode, codelm, drawtests, drawdecode, drawcodelm)" ;;
  esac
done
