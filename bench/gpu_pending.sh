#!/usr/bin/env bash
# What landed without a GPU run (sessions 25-26), in parts; each writes under $OUT and keeps to one
# device call (10 minutes):
#   draw     Mode.TOP_P_DRAW's GPU tests (law of the draw, seeded filter, start-up variants, sampled
#            bursts), then bench/topk_draw_cost.py (= bench/gpu_top_p.sh drawtests)
#   engine   tests/gpu/test_engine_gpu.py + test_no_compile_in_steps.py (the start-up set
#            Mode.startup(), TOPK_DRAW's compile warm-up, unseeded top-k / top-p sent with nothing compiling)
#   archs    tests/gpu/test_more_archs_gpu.py (Qwen2's q/k/v biases and Mistral's window cap on CUDA:
#            graphs = CPU tokens, bf16 n-gram = plain) and the FP8 / skinny-GEMM tests with a bias
#   norm     (session 28) tests/gpu/test_norm_epilogue_gpu.py after the review fixes (bf16 only,
#            folds_norms, the qkv-bias case, never run), then test_engine_gpu.py with the norms folded
#   targets  (session 29) the issues' target rows as they stand: #8's qwen3-8b bf16 decode at batch
#            1 / 16 / 64, #4's qwen3-8b FP8 and qwen3-30b-a3b FP8 / bf16 at batch 1
#   fp8rows  (session 32) per-row FP8 scales (compressed-tensors / per-tensor checkpoints): their GPU
#            tests, the FP8 kernel tests after the kernels' new scale stride, Mixtral / Qwen2-MoE
#   fp8bench (session 32) bench decode, block-FP8 against one scale per row (fp8-channel), same call
#   partial  (session 33) partial rotary on CUDA: tests/gpu/test_phi3_gpu.py (its Phi-4-mini case),
#            the refactored test_moe_archs_gpu.py, then bench decode --shape phi-4-mini against phi-4
#   gemv     (session 34) bench/fp8_gemv_probe.py: the CUDA C++ FP8 GEMV (kernels/csrc/fp8_gemv.cu,
#            built with the machine's nvcc) against the Triton FP8 GEMM and fused MoE, kernel
#            against kernel (PDL off for both)
#   gemvtests (session 34) tests/gpu/test_fp8_gemv_gpu.py
#   gemvab   (session 34) bench decode, TURBOSPEC_FP8_GEMV=0 then 1: qwen3-8b FP8 and 30b-a3b FP8, batch 1
#   bf16gemv (session 34) bench/bf16_gemv_probe.py: a CUDA bf16 GEMV (not in the engine) against the
#            skinny GEMM and cuBLAS on qwen3-8b / 30b's dense shapes (#8's batch-1 row)
#   gemvspec (session 34) bench spec with TURBOSPEC_FP8_GEMV=1: 30b-a3b FP8 oracle, batch 1 and 4 (identical?)
#   bf16ab   (session 35) bench decode qwen3-8b bf16 batch 1 / 16, TURBOSPEC_BF16_GEMV=0 then 1
#   verifyab (session 35) bench spec qwen3-30b-a3b FP8 oracle with TURBOSPEC_FP8_GEMV=1, this tree (experts on
#            Triton in an engine with a drafter) against branch wip/moe-gemv-verify (MoE GEMV for up to 16
#            tokens), made beforehand with `mkdir -p old_gemv/wip && git archive wip/moe-gemv-verify turbospec
#            | tar -x -C old_gemv/wip` and carried (`carry: ["old_gemv"]`)
#            (gemv: GEMV_ARGS="--quick --baseline old_gemv" times the session-34 permuted kernels too)
#   suiteN/M (session 36) the GPU suite's N-th of M shares (test files i with i % M == N, sorted): the whole
#            suite takes more than one call (about 585 tests; 333 ran in 540 s on an H100), e.g. suite0/3
#   targetsab (session 36) the issues' target rows (as `targets`) with both GEMV switches 0, then 1
#   suitex   (session 37) the whole GPU suite in one call, spread over ${SUITE_WORKERS:-6} pytest-xdist
#            workers (the image has pytest-xdist; most of the suite's time is Triton / nvcc compiling;
#            each worker's engines size their KV cache from the free memory at their start, so a failure
#            for memory here is to be re-run alone before it is believed)
#   auto     (session 38) the GEMVs' default "auto" (engines of max_num_seqs 1): tests/gpu/test_gemv_auto_gpu.py
#            and the GEMV / structured-output tests; then bench decode at batch 1 (an engine of one sequence)
#            with both switches 0, then unset (auto), for the four target shapes; then the #8 oracle row
#            (session 39: its tests and every row ran on an H100, docs/benchmarks.md; the H200 rows are owed)
#   moegroup (session 40) an MoE's experts (FP8 and bf16) on the CUDA GEMVs at 1-16 tokens, grouped by expert
#            from 2 (`auto` engines now send their experts there too): the GEMV tests and tests/test_cubin_build.py,
#            then bench/moe_verify_probe.py (Triton / per-slot / grouped at T = 1..16), then qwen3-30b-a3b FP8
#            and bf16 bench decode b1 with both switches 0, then auto, then the FP8 oracle (k 7, AL 4, auto length)
#   moeab    (session 41) the MoE engine test and the one-token bad-words case, then 30b-a3b FP8 / bf16 b1 decode
#            and the FP8 oracle, defaults against switches 1 (the MoE GEMV), in one call. Run before AUTO_EXPERTS
#            was turned on, when the defaults kept the experts on Triton; now both sides of a b1 pair take the GEMV
#   profile  (session 41) bench decode --profile (PDL off) for 30b-a3b FP8 / bf16 and 8b FP8 at b1
#   bounds   (session 42) bench/fusion_probe.py on qwen3-30b-a3b FP8 b1 (GEMVs on): base, nonorm, norope, noattn,
#            base again, one process each: what removing each family of small launches could save at most
#   moelean  (session 40) moegroup's GPU tests (MOE_K: a -k filter), then its probe if AUTO_LIMIT leaves time
#   tinyab   (session 42) launch savers with the GEMVs on: qwen3-30b-a3b FP8 b1 decode under each setting of
#            TINY_ENVS (default: defaults, TURBOSPEC_FUSE_ROUTER=1, TURBOSPEC_ATTN_REDUCE=fused, both, defaults
#            again; settings separated by ';'), then bf16 under TINY_BF16_ENVS, while AUTO_LIMIT leaves time
#   earlyab  (session 43) TURBOSPEC_GEMV_EARLY (the GEMVs' first weight loads before their PDL wait; 1 is the
#            default since): the four b1 target rows with it 0 then 1; between them tests/gpu/test_gemv_early_gpu.py
#            and the auto-engine GEMV tests under 1 (EARLY_ROWS_FIRST before the tests, EARLY_ROWS_THEN after; each
#            pair while AUTO_LIMIT leaves time)
#   foldab   (session 45) the RMSNorm folded into the CUDA GEMVs (csrc/norm_fold.cuh, TURBOSPEC_NORM_EPILOGUE=gemv):
#            FOLD_ROWS_FIRST of the four b1 target rows with it 0 then gemv, then tests/gpu/test_gemv_norm_fold_gpu.py,
#            then FOLD_ROWS_THEN (each pair while AUTO_LIMIT leaves time)
#   OUT=/path bash bench/gpu_pending.sh draw engine archs norm targets
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T="python3 -m pytest -q -m gpu -p no:cacheprovider -rfE"
nvidia-smi --query-gpu=name,clocks.sm --format=csv

# bench_rows FILE TIMEOUT "ARGS" ...: one `bench decode ARGS` per row, each under a '### ' header in $OUT/FILE
bench_rows() {
  local file=$1 limit=$2; shift 2
  for a in "$@"; do
    echo "### bench decode $a" >> "$OUT/$file"
    PYTHONPATH=. timeout "$limit" python3 -m turbospec.cli bench decode $a >> "$OUT/$file" 2>&1
  done
}
for part in "$@"; do
  case $part in
    draw)   OUT="$OUT" bash bench/gpu_top_p.sh drawtests ;;
    engine) PYTHONPATH=. timeout 540 $T tests/gpu/test_engine_gpu.py tests/gpu/test_no_compile_in_steps.py \
              -k "not prefill_warm_up" > "$OUT/engine_tests.txt" 2>&1
            tail -5 "$OUT/engine_tests.txt" ;;
    archs)  PYTHONPATH=. timeout 400 $T tests/gpu/test_more_archs_gpu.py tests/gpu/test_skinny_gemm.py \
              > "$OUT/archs_tests.txt" 2>&1
            tail -5 "$OUT/archs_tests.txt" ;;
    norm)   PYTHONPATH=. timeout 300 $T tests/gpu/test_norm_epilogue_gpu.py > "$OUT/norm_tests.txt" 2>&1
            PYTHONPATH=. TURBOSPEC_NORM_EPILOGUE=1 timeout 240 $T tests/gpu/test_engine_gpu.py >> "$OUT/norm_tests.txt" 2>&1
            grep -E "passed|failed" "$OUT/norm_tests.txt" ;;
    targets) bench_rows targets.txt 150 \
              "--shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64" \
              "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
              "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
              "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64"
            grep -E "^###|roofline|tok/s" "$OUT/targets.txt" | tail -30 ;;
    suite*/*) n=${part#suite}; m=${n#*/}; n=${n%/*}
            files=$(ls tests/gpu/test_*.py | sort | awk -v n="$n" -v m="$m" '(NR - 1) % m == n')
            PYTHONPATH=. TURBOSPEC_CACHE_DIR=$OUT/cache timeout 560 $T $files > "$OUT/suite${n}of${m}.txt" 2>&1
            tail -6 "$OUT/suite${n}of${m}.txt" ;;
    suitex) # SIGINT at the limit: pytest stops and still prints which tests failed; -v names each as it ends
            PYTHONPATH=. TURBOSPEC_CACHE_DIR=$OUT/cache timeout -s INT -k 30 ${SUITE_LIMIT:-560} ${T/-q/-v} \
              -n ${SUITE_WORKERS:-6} --dist load --durations 25 tests/gpu > "$OUT/suitex.txt" 2>&1
            grep -E "(FAILED|ERROR) tests/" "$OUT/suitex.txt" | head -20; tail -3 "$OUT/suitex.txt" ;;
    targetsab) export TURBOSPEC_CACHE_DIR=$OUT/cache     # each row with the switches 0 then 1, so a cut-off run keeps pairs
            rows=("--shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64" \
                  "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
                  "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                  "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64")
            for i in ${TARGET_ROWS:-0 1 2 3}; do      # TARGET_ROWS="0 1": the 8b rows alone (a call may not fit all four)
              [[ $i =~ ^[0-3]$ ]] || { echo "TARGET_ROWS: $i is not a row (0-3)"; continue; }
              for v in 0 1; do TURBOSPEC_BF16_GEMV=$v TURBOSPEC_FP8_GEMV=$v bench_rows targetsab.txt 150 "${rows[$i]}"; done
            done
            grep -E "^###|roofline|^ +[0-9]" "$OUT/targetsab.txt" | tail -40; grep -o "device [^|]*|[^|]*|[^|]*|[^|]*| copy bandwidth [^|]*" "$OUT/targetsab.txt" | head -1 ;;
    auto)   export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            PYTHONPATH=. timeout 230 $T tests/gpu/test_gemv_auto_gpu.py tests/gpu/test_bf16_gemv_gpu.py \
              tests/gpu/test_fp8_gemv_gpu.py tests/gpu/test_structured_gpu.py tests/gpu/test_penalties_gpu.py \
              > "$OUT/auto_tests.txt" 2>&1
            grep -E "(FAILED|ERROR) tests/" "$OUT/auto_tests.txt" | head; tail -2 "$OUT/auto_tests.txt"
            # the pairs in the order they are owed, each only while a pair still fits the call
            for a in "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                     "--shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
                     "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
                     "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64"; do
              (( SECONDS + 190 > ${AUTO_LIMIT:-570} )) && { echo "### (out of time: $a not run)" >> "$OUT/auto_bench.txt"; break; }
              TURBOSPEC_FP8_GEMV=0 TURBOSPEC_BF16_GEMV=0 bench_rows auto_bench.txt 95 "$a"
              bench_rows auto_bench.txt 95 "$a"
            done
            if (( SECONDS + 110 < ${AUTO_LIMIT:-570} )); then
              echo "### bench spec qwen3-8b bf16 oracle k 7 AL 4 b1" >> "$OUT/auto_bench.txt"
              PYTHONPATH=. timeout 110 python3 -m turbospec.cli bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1 \
                --prompt-len 256 --max-tokens 128 --speculative-config \
                '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}' >> "$OUT/auto_bench.txt" 2>&1
            fi
            grep -E "^###|^# bench|^ +[0-9]" "$OUT/auto_bench.txt" | grep -oE "^###.*|^ +[0-9].*|CUDA GEMVs [^|]*|env [^|]*$" ;;
    moelean) # moegroup's tests, then its probe while it fits ${AUTO_LIMIT:-570} s (a short device budget)
            export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            PYTHONPATH=. timeout $(( ${AUTO_LIMIT:-570} - 60 )) $T -k "${MOE_K:-}" tests/gpu/test_fp8_gemv_gpu.py \
              tests/gpu/test_bf16_gemv_gpu.py tests/gpu/test_gemv_auto_gpu.py > "$OUT/moegroup_tests.txt" 2>&1
            grep -E "(FAILED|ERROR) tests/|passed|failed" "$OUT/moegroup_tests.txt" | head -20
            if (( SECONDS + 60 < ${AUTO_LIMIT:-570} )); then
              PYTHONPATH=. TURBOSPEC_PDL=0 timeout $(( ${AUTO_LIMIT:-570} - SECONDS )) python3 bench/moe_verify_probe.py \
                > "$OUT/moegroup_probe.txt" 2>&1
              cat "$OUT/moegroup_probe.txt"
            fi ;;
    earlyab) export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV TURBOSPEC_GEMV_EARLY
            rows=("--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                  "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
                  "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                  "--shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 512 --gen-len 64")
            pairs() { for i in "$@"; do
                (( SECONDS + 110 > ${AUTO_LIMIT:-570} )) && { echo "### (out of time: row $i not run)" >> "$OUT/early_bench.txt"; return; }
                for v in 0 1; do TURBOSPEC_GEMV_EARLY=$v bench_rows early_bench.txt 90 "${rows[$i]}"; done
              done; }
            pairs ${EARLY_ROWS_FIRST:-0 1}           # the rows first (the tests reuse their cubins), then the tests
            PYTHONPATH=. timeout 150 $T tests/gpu/test_gemv_early_gpu.py > "$OUT/early_tests.txt" 2>&1
            PYTHONPATH=. TURBOSPEC_GEMV_EARLY=1 timeout 150 $T tests/gpu/test_gemv_auto_gpu.py >> "$OUT/early_tests.txt" 2>&1
            grep -E "(FAILED|ERROR) tests/|passed|failed" "$OUT/early_tests.txt" | head -20
            pairs ${EARLY_ROWS_THEN:-2 3}
            grep -E "^###|roofline|^ +[0-9]" "$OUT/early_bench.txt" | tail -40 ;;
    foldab) export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV TURBOSPEC_NORM_EPILOGUE
            rows=("--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                  "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
                  "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                  "--shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 512 --gen-len 64")
            fpairs() { for i in "$@"; do
                (( SECONDS + 130 > ${AUTO_LIMIT:-570} )) && { echo "### (out of time: row $i not run)" >> "$OUT/fold_bench.txt"; return; }
                for v in 0 gemv; do TURBOSPEC_NORM_EPILOGUE=$v bench_rows fold_bench.txt 150 "${rows[$i]}"; done
              done; }
            fpairs ${FOLD_ROWS_FIRST:-0}
            grep -E "^###|roofline|^ +[0-9]" "$OUT/fold_bench.txt" | tail -20
            PYTHONPATH=. TURBOSPEC_NORM_EPILOGUE=gemv timeout ${FOLD_TEST_LIMIT:-220} $T tests/gpu/test_gemv_norm_fold_gpu.py \
              > "$OUT/fold_tests.txt" 2>&1
            grep -E "(FAILED|ERROR) tests/|passed|failed|Error" "$OUT/fold_tests.txt" | head -20
            fpairs ${FOLD_ROWS_THEN:-1 2 0}
            grep -E "^###|roofline|^ +[0-9]" "$OUT/fold_bench.txt" | tail -40 ;;
    moeab)  # (session 41) the MoE engine test after its fix, the one-token bad-words burst case, then
            # qwen3-30b-a3b FP8 / bf16 b1 decode and the FP8 oracle with defaults (experts on Triton) against
            # both switches 1 (experts on the CUDA GEMVs at 1-16 tokens), each pair in this call
            export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            PYTHONPATH=. timeout 200 $T tests/gpu/test_gemv_auto_gpu.py tests/gpu/test_penalties_gpu.py \
              -k "moe_engine or bad_words" > "$OUT/moeab_tests.txt" 2>&1
            grep -E "(FAILED|ERROR) tests/|passed|failed" "$OUT/moeab_tests.txt" | head -20
            for a in "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                     "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64"; do
              bench_rows moeab_bench.txt 80 "$a"
              TURBOSPEC_FP8_GEMV=1 TURBOSPEC_BF16_GEMV=1 bench_rows moeab_bench.txt 80 "$a"
            done
            for v in auto 1; do
              echo "### bench spec qwen3-30b-a3b FP8 oracle k 7 AL 4 auto, b1, switches $v" >> "$OUT/moeab_bench.txt"
              PYTHONPATH=. TURBOSPEC_FP8_GEMV=$v TURBOSPEC_BF16_GEMV=$v timeout 130 python3 -m turbospec.cli bench spec \
                --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' \
                >> "$OUT/moeab_bench.txt" 2>&1
            done
            grep -E "^###|^# bench|^ +[0-9]|^batch|^verify" "$OUT/moeab_bench.txt" | grep -oE "^###.*|^ +[0-9].*|^batch.*|^verify.*|CUDA GEMVs [^|]*|env [^|]*$" ;;
    tinyab) export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            S30="--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64"
            IFS=';' read -ra fp8envs <<< "${TINY_ENVS:-;TURBOSPEC_FUSE_ROUTER=1;TURBOSPEC_ATTN_REDUCE=fused;TURBOSPEC_FUSE_ROUTER=1 TURBOSPEC_ATTN_REDUCE=fused;}"
            IFS=';' read -ra bf16envs <<< "${TINY_BF16_ENVS:-;TURBOSPEC_FUSE_ROUTER=1 TURBOSPEC_ATTN_REDUCE=fused}"
            for e in "${fp8envs[@]}" "bf16" "${bf16envs[@]}"; do
              [[ $e == bf16 ]] && { q=""; continue; }
              (( SECONDS + 70 > ${AUTO_LIMIT:-560} )) && { echo "### (out of time: '$e' not run)" >> "$OUT/tinyab.txt"; break; }
              env $e bash -c "$(declare -f bench_rows); OUT=$OUT; bench_rows tinyab.txt 80 '$S30 ${q- --quantization fp8}'"
            done
            grep -E "^###|^ +[0-9]" "$OUT/tinyab.txt" | grep -oE "^###.*|^ +[0-9].*|env [^|]*$" ;;
    bounds) export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            for v in ${BOUNDS_VARIANTS:-base nonorm norope noattn base}; do
              (( SECONDS + 75 > ${AUTO_LIMIT:-560} )) && { echo "(out of time: $v not run)" >> "$OUT/bounds.txt"; break; }
              PYTHONPATH=. timeout 110 python3 bench/fusion_probe.py $v --shape qwen3-30b-a3b --quantization fp8 \
                --batch-sizes 1 --prompt-len 256 --gen-len 64 --repeats 2 >> "$OUT/bounds.txt" 2>&1
            done
            grep -E "^# |^RESULT|Error|error" "$OUT/bounds.txt" | cut -c1-260 ;;
    profile) # (session 41) where a b1 step's GPU time goes: bench decode --profile, PDL off (each kernel its own time),
            # for qwen3-30b-a3b FP8 and bf16 and qwen3-8b FP8, after one defaults row of 30b FP8
            export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            S30="--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64"
            bench_rows profile.txt 90 "$S30 --quantization fp8"
            for a in "$S30 --quantization fp8" "$S30" "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64"; do
              TURBOSPEC_PDL=0 bench_rows profile.txt 120 "$a --profile"
            done
            grep -E "^###|^ +1 |Self CUDA time total|graph replay" "$OUT/profile.txt" ;;
    moegroup) export TURBOSPEC_CACHE_DIR=$OUT/cache; unset TURBOSPEC_FP8_GEMV TURBOSPEC_BF16_GEMV
            PYTHONPATH=. timeout 240 $T tests/gpu/test_fp8_gemv_gpu.py tests/gpu/test_bf16_gemv_gpu.py \
              tests/gpu/test_gemv_auto_gpu.py tests/gpu/test_gemv_nvrtc_gpu.py > "$OUT/moegroup_tests.txt" 2>&1
            PYTHONPATH=. timeout 60 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_cubin_build.py \
              >> "$OUT/moegroup_tests.txt" 2>&1        # not GPU-marked: builds both sources (nvcc, NVRTC)
            grep -E "(FAILED|ERROR) tests/|passed|failed" "$OUT/moegroup_tests.txt" | head -20
            PYTHONPATH=. TURBOSPEC_PDL=0 timeout 120 python3 bench/moe_verify_probe.py > "$OUT/moegroup_probe.txt" 2>&1
            cat "$OUT/moegroup_probe.txt"
            for a in "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
                     "--shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64"; do
              (( SECONDS + 120 > ${AUTO_LIMIT:-570} )) && { echo "### (out of time: $a not run)" >> "$OUT/moegroup_bench.txt"; break; }
              TURBOSPEC_FP8_GEMV=0 TURBOSPEC_BF16_GEMV=0 bench_rows moegroup_bench.txt 80 "$a"
              bench_rows moegroup_bench.txt 80 "$a"
            done
            if (( SECONDS + 110 < ${AUTO_LIMIT:-570} )); then
              echo "### bench spec qwen3-30b-a3b FP8 oracle k 7 AL 4 auto b1" >> "$OUT/moegroup_bench.txt"
              PYTHONPATH=. timeout 110 python3 -m turbospec.cli bench spec --shape qwen3-30b-a3b --dtype bf16 \
                --quantization fp8 --batch-sizes 1 --prompt-len 256 --max-tokens 64 --speculative-config \
                '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' \
                >> "$OUT/moegroup_bench.txt" 2>&1
            fi
            grep -E "^###|^# bench|^ +[0-9]|verify|identical|speedup" "$OUT/moegroup_bench.txt" | tail -40 ;;
    fp8rows) PYTHONPATH=. timeout 420 $T tests/gpu/test_fp8_row_scale_gpu.py tests/gpu/test_moe_archs_gpu.py \
              tests/gpu/test_fp8_moe_kernels.py tests/gpu/test_fp8_large_config.py > "$OUT/fp8rows_tests.txt" 2>&1
            tail -8 "$OUT/fp8rows_tests.txt" ;;
    fp8bench) bench_rows fp8bench.txt 140 \
              "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 512 --gen-len 64" \
              "--shape qwen3-8b --dtype bf16 --quantization fp8-channel --batch-sizes 1,16 --prompt-len 512 --gen-len 64" \
              "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64" \
              "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8-channel --batch-sizes 1 --prompt-len 256 --gen-len 64"
            grep -E "^###|^#|roofline|^ +[0-9]" "$OUT/fp8bench.txt" | tail -30 ;;
    partial) PYTHONPATH=. timeout 300 $T tests/gpu/test_phi3_gpu.py tests/gpu/test_moe_archs_gpu.py \
              tests/gpu/test_fused_layers.py tests/gpu/test_rope_store.py > "$OUT/partial_tests.txt" 2>&1
            tail -6 "$OUT/partial_tests.txt"
            bench_rows partial_bench.txt 120 \
              "--shape phi-4-mini --dtype bf16 --batch-sizes 1,16 --prompt-len 512 --gen-len 64" \
              "--shape phi-4 --dtype bf16 --batch-sizes 1 --prompt-len 512 --gen-len 64"
            grep -E "^###|roofline|tok/s" "$OUT/partial_bench.txt" | tail -20 ;;
    gemv)   PYTHONPATH=. TURBOSPEC_PDL=0 TURBOSPEC_CACHE_DIR=$OUT/cache timeout ${GEMV_LIMIT:-240} \
              python3 bench/fp8_gemv_probe.py ${GEMV_ARGS:-} > "$OUT/gemv.txt" 2>&1
            tail -60 "$OUT/gemv.txt" ;;
    gemvtests) PYTHONPATH=. TURBOSPEC_CACHE_DIR=$OUT/cache timeout 240 $T tests/gpu/test_fp8_gemv_gpu.py \
              tests/gpu/test_bf16_gemv_gpu.py > "$OUT/gemv_tests.txt" 2>&1
            tail -8 "$OUT/gemv_tests.txt" ;;
    gemvab) for v in 0 1; do
              export TURBOSPEC_FP8_GEMV=$v TURBOSPEC_CACHE_DIR=$OUT/cache
              bench_rows gemvab.txt 150 \
                "--shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64" \
                "--shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64"
            done
            unset TURBOSPEC_FP8_GEMV
            grep -E "^###|^#|roofline|^ +[0-9]" "$OUT/gemvab.txt" | tail -30 ;;
    gemvspec) export TURBOSPEC_FP8_GEMV=1 TURBOSPEC_CACHE_DIR=$OUT/cache
            PYTHONPATH=. timeout 200 python3 -m turbospec.cli bench spec --shape qwen3-30b-a3b --dtype bf16 \
              --quantization fp8 --batch-sizes 1,4 --prompt-len 256 --max-tokens 64 --speculative-config \
              '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' \
              > "$OUT/gemvspec.txt" 2>&1
            unset TURBOSPEC_FP8_GEMV
            tail -25 "$OUT/gemvspec.txt" ;;
    bf16ab) for v in 0 1; do
              export TURBOSPEC_BF16_GEMV=$v TURBOSPEC_CACHE_DIR=$OUT/cache
              bench_rows bf16ab.txt 150 \
                "--shape qwen3-8b --dtype bf16 --batch-sizes 1,16 --prompt-len 512 --gen-len 64"
            done
            unset TURBOSPEC_BF16_GEMV
            grep -E "^###|^#|roofline|^ +[0-9]" "$OUT/bf16ab.txt" | tail -20 ;;
    verifyab) S='{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}'
            for t in . old_gemv/wip; do
              echo "### $t: $(PYTHONPATH=$t python3 -P -c 'import turbospec; print(turbospec.__file__)')" >> "$OUT/verifyab.txt"
              TURBOSPEC_FP8_GEMV=1 TURBOSPEC_CACHE_DIR=$OUT/cache PYTHONPATH=$t timeout 150 python3 -P -m turbospec.cli \
                bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,4 --prompt-len 256 \
                --max-tokens 64 --speculative-config "$S" >> "$OUT/verifyab.txt" 2>&1
            done
            grep -vE "^turbospec: building" "$OUT/verifyab.txt" | tail -24 ;;
    bf16gemv) PYTHONPATH=. TURBOSPEC_PDL=0 TURBOSPEC_CACHE_DIR=$OUT/cache timeout ${GEMV_LIMIT:-240} \
              python3 bench/bf16_gemv_probe.py > "$OUT/bf16gemv.txt" 2>&1
            tail -40 "$OUT/bf16gemv.txt" ;;
    *)      echo "unknown part $part (draw, engine, archs, norm, targets, fp8rows, fp8bench, partial, gemv, gemvtests, gemvab, gemvspec, bf16gemv, bf16ab, verifyab, targetsab, suiteN/M, suitex, auto)"; exit 2 ;;
  esac
done
