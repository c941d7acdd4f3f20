#!/usr/bin/env bash
# Sampled decoding on one H200, in parts (each writes under $OUT; device tool: carry ["out/base"]):
#   ab      bench/sampled_decode.py on codelm-12m and qwen3-8b, the tree in out/base then this one
#           (each with `python -P`, so that PYTHONPATH picks it: the output names the file imported);
#           then the GPU tests of sampled bursts and of no compilation inside a step
#   cost    bench/sampler_cost.py; `turbospec bench decode` on qwen3-8b greedy, then as an OpenAI
#           client samples (temperature 0.7, top-p 0.95); the GPU tests of the engine, sampled bursts
#           and attention
#   kernel  the GPU tests of sampled bursts; sampled_decode.py on codelm-12m (out/base, this tree) and
#           qwen3-8b batch 1 / 64 (this tree)
#   logprobs  the GPU tests of sampled bursts (logprobs in bursts = single steps' bits) and the engine;
#           codelm-12m greedy with and without 5 logprobs per token, batch 1 / 8, out/base then this tree
#   pentests  the GPU tests of penalties (in bursts = single steps), sampled bursts (seeded speculation
#           = plain), the engine and no compilation inside a step
#   pencodelm / pen8b  greedy, repetition penalty 1.05, and an OpenAI-style sampled request with
#           penalties, codelm-12m / qwen3-8b, out/base (single steps) then this tree (bursts)
#   penkernel  the GPU tests of penalties; qwen3-8b and codelm-12m greedy / penalized with apply_penalties
#           as PyTorch ops (TURBOSPEC_PENALTY_KERNEL=0) then as one kernel, alternating
#   topk    the GPU tests of sampled bursts (the users' law, seeded bits); qwen3-8b greedy and Qwen3's
#           default sampling (t 0.6, top-p 0.95, top-k 20), out/base then this tree
# out/base holds another commit's package:  git archive <rev> turbospec | tar -x -C out/base
#   OUT=/path bash bench/gpu_sampled.sh ab|cost|kernel|logprobs ...
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
S=bench/sampled_decode.py
CODELM=(--shape models/codelm-12m --prompt-len 128 --gen-len 128)
gpu_tests() { local t=$1; shift; PYTHONPATH=. timeout "$t" python3 -m pytest -q -m gpu -p no:cacheprovider -rf "$@" \
  > "$OUT/tests.txt" 2>&1; tail -3 "$OUT/tests.txt"; }
nvidia-smi --query-gpu=name,clocks.sm --format=csv
for part in "$@"; do
  case $part in
    logprobs) gpu_tests 170 tests/gpu/test_sampled_bursts_gpu.py tests/gpu/test_engine_gpu.py
            for tree in out/base . ; do                 # greedy, and greedy with 5 logprobs per token
              echo "### $tree"; PYTHONPATH=$tree timeout 80 python3 -P $S "${CODELM[@]}" --batch-sizes 1,8 \
                --settings "greedy,greedy logprobs5" --repeats 2
            done 2>&1 | tee "$OUT/logprobs.txt" ;;
    ab)     for shape in "${CODELM[*]}" "--shape qwen3-8b"; do
              for tree in out/base . ; do
                echo "### $tree $shape"; PYTHONPATH=$tree timeout 200 python3 -P $S $shape --repeats 1
              done
            done 2>&1 | tee "$OUT/bench.txt"
            gpu_tests 280 tests/gpu/test_sampled_bursts_gpu.py tests/gpu/test_no_compile_in_steps.py ;;
    cost)   { PYTHONPATH=. timeout 60 python3 bench/sampler_cost.py
              for t in 0 0.7; do
                PYTHONPATH=. timeout 150 python3 -m turbospec.cli bench decode --shape qwen3-8b --dtype bf16 \
                  --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --temperature $t --top-p 0.95
              done; } 2>&1 | tee "$OUT/bench.txt"
            gpu_tests 250 tests/gpu/test_engine_gpu.py tests/gpu/test_sampled_bursts_gpu.py tests/gpu/test_attention_kernels.py ;;
    kernel) gpu_tests 120 tests/gpu/test_sampled_bursts_gpu.py
            { for tree in out/base . ; do
                PYTHONPATH=$tree timeout 60 python3 -P $S "${CODELM[@]}" --repeats 1
              done
              PYTHONPATH=. timeout 100 python3 -P $S --shape qwen3-8b --batch-sizes 1,64 --repeats 1; } 2>&1 | tee "$OUT/bench.txt" ;;
    pentests) gpu_tests 420 tests/gpu/test_penalties_gpu.py tests/gpu/test_sampled_bursts_gpu.py \
              tests/gpu/test_engine_gpu.py tests/gpu/test_no_compile_in_steps.py ;;
    pencodelm) for tree in out/base . ; do     # penalties: single steps (base) vs penalized bursts
              echo "### $tree"; PYTHONPATH=$tree timeout 120 python3 -P $S "${CODELM[@]}" --batch-sizes 1,16,64 \
                --settings "greedy,rep1.05,t0.7 p0.9 k20 rep1.05 freq0.1" --repeats 2
            done 2>&1 | tee "$OUT/pencodelm.txt" ;;
    pen8b)  for tree in out/base . ; do
              echo "### $tree"; PYTHONPATH=$tree timeout 200 python3 -P $S --shape qwen3-8b --batch-sizes 1,16,64 \
                --settings "greedy,rep1.05,t0.7 p0.9 k20 rep1.05 freq0.1" --repeats 1
            done 2>&1 | tee "$OUT/pen8b.txt" ;;
    penkernel) gpu_tests 200 tests/gpu/test_penalties_gpu.py tests/gpu/test_no_compile_in_steps.py
            for k in 0 1 0 1; do                # apply_penalties as PyTorch ops / as kernels/penalty_kernel.py
              echo "### TURBOSPEC_PENALTY_KERNEL=$k"; TURBOSPEC_PENALTY_KERNEL=$k PYTHONPATH=. timeout 100 python3 -P $S \
                --shape qwen3-8b --batch-sizes 1,16,64 --settings "greedy,rep1.05" --repeats 1
            done 2>&1 | tee "$OUT/penkernel.txt"
            for k in 0 1; do
              echo "### TURBOSPEC_PENALTY_KERNEL=$k"; TURBOSPEC_PENALTY_KERNEL=$k PYTHONPATH=. timeout 60 python3 -P $S \
                "${CODELM[@]}" --batch-sizes 1,16,64 --settings "greedy,rep1.05,t0.7 p0.9 k20 rep1.05 freq0.1" --repeats 2
            done 2>&1 | tee -a "$OUT/penkernel.txt" ;;
    topk)   gpu_tests 150 tests/gpu/test_sampled_bursts_gpu.py -k "distribution or seeded_requests_burst or greedy_rows"
            for tree in out/base . ; do      # top-k + top-p: the full sort (base) / a partial top-k of 128
              echo "### $tree"; PYTHONPATH=$tree timeout 100 python3 -P $S --shape qwen3-8b --batch-sizes 1,64 \
                --settings "greedy,t0.6 p0.95 k20" --repeats 1
            done 2>&1 | tee "$OUT/topk.txt" ;;
    *)      echo "unknown part $part (ab, cost, kernel, logprobs, pentests, pencodelm, pen8b, penkernel, topk)" ;;
  esac
done
