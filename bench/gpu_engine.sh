#!/usr/bin/env bash
# The engine on one H200: GPU tests, decode roofline fractions, speculation benchmarks.
# Parts run in order, each in its own process with its own timeout; pick the ones that fit a call:
#   OUT=/path bash bench/gpu_engine.sh [tests] [decode] [fp8] [oracle] [drafters] [profile]
#       finer parts: decode8b codelm moe cublas oracle1 fp8dense fp8moe alltests (all of tests/gpu)
#       pdl (A/B of the launch fusions and programmatic dependent launch: codelm-12m, qwen3-8b)
#       moeab (qwen3-30b-a3b bf16 batch 1 under PDL off / cuBLAS / two-launch attention)
#       moeoracle (qwen3-30b-a3b FP8: oracle, automatic draft length, verify cost vs k and batch;
#                  then batch 16 and 64 again with bitwise_exact false)
#       moeab2 (qwen3-30b-a3b bf16 batch 1: the attention merge and the RoPE+store fusion one at a time,
#               then a PDL-off profile)  reduceab (attention merge rule vs always in the launch)
#       mergeab (attention merge of all rows at once vs HEAD's kernels in out/base, by merge mode)
#       codelmab (codelm-12m decode vs out/base)  moesweep (fused-MoE BLOCK_N x stages per GEMM, bf16 and FP8)
#       ncu (Nsight Compute on batch-1 GEMMs and the SASS MMA kinds)
#       moestages (bf16 MoE 3 vs 6 stages)  fusetests fuseab (the opt-in router + top-k and
#                  slot-mode GEMM2 + expert sum fusions: GPU tests, A/B)
#       final (oracle qwen3-8b b1, qwen3-8b decode, MoE oracle b1/16 or $MOE_BATCHES)  refactorab (default-path refactors vs out/base)
#       bisect30b (qwen3-30b-a3b FP8 b1: out/base / HEAD / HEAD with out/base's moe_align.py)
#       resttests (test_fp8_moe_kernels, attention, engine, fused layers, rope/store)
#       ncuattn (Nsight Compute on decode attention, batch 16 and 64)
#       attnidx (decode attention: KV rows looked up a tile ahead vs out/base; b1/b16 decode vs out/base, 3 pairs)
#       serverlen (qwen3-8b, qwen3-30b-a3b FP8 decode and the MoE oracle at --max-model-len 8192)
#       attnab (decode attention's programs per row vs out/base/paged_decode.py: tests, kernel times, qwen3-8b decode)
#       cvtab (FP8 conversion, 3 instructions per pair, vs out/base/fp8_gemm.py: kernels, SASS, decode, tests)
#       attnprobe (decode attention variants: partition size, tile, stages)  prof8b (qwen3-8b b16 / b64 kernel profile)
#       hoistab (PDL prologue hoists in attention / merge / rope vs out/base/hoist: tests, kernels, 30b b1, b16 profile)
#       burstab (bursts to a request's end + PDL hoists vs out/base/burst: tests, attention, qwen3-8b / 30b decode)
#       final9 (8b oracle, MoE oracle b1/16, 8b FP8 b1, 30b bf16 b1)
#       autok2 (MoE oracle b16/64 auto vs fixed, auto_diag b16)  attnwarps (attention warps / 32-token tile)
#       autok (MoE oracle: automatic k with timed verify costs vs fixed k = 7, 64 / 256 tokens; auto_diag)
#       smallab (skinny GEMM small-M configs vs out/base_sk: GPU tests, qwen3-8b decode x2, 30b bf16)
#       prof8 (PDL-off kernel profiles at batch 1: qwen3-30b-a3b FP8 and bf16, qwen3-8b FP8)  sweep30b (skinny GEMM configs for qwen3-30b-a3b's dense linears)
#       fp8large (FP8 GEMM 32-row config: tests, qwen3-8b FP8 b16 / b64 off vs on)  timeline (bench/spec_timeline.py: 8b, codelm-12m)
#       greedyab (one-launch greedy accept rule vs PyTorch ops: engine tests, timelines, 8b oracle b1)
#       nocompile (tests/gpu/test_no_compile_in_steps.py; MoE FP8 oracle 1,16,64 with compilations logged)
#       moeb1ab (qwen3-30b-a3b FP8 oracle at batch 1, 128 tokens: out/base vs HEAD, alternating twice)
#       tailab (bench/step_tail.py; qwen3-8b decode b1/16/64 and codelm-12m b1: out/base vs HEAD, alternating twice)
#       first23 burstdiag seedfix final23 (the seeded counter-noise diagnosis and fix, 2026-12-01)
#       topkdraw (Mode.TOPK_DRAW: GPU tests, cost per step, qwen3-8b at Qwen3's defaults off / on)
#       fp8spec (qwen3-8b FP8 oracle, auto k, batches 1,16,64 in one engine: out/base with every Triton
#                compilation logged (bench/jit_log.py), then HEAD; tests/gpu/test_no_compile_in_steps.py)
# (default: tests decode oracle drafters — about 8 minutes). Everything is logged to $OUT/engine.log.
LOG_NAME=engine.log
source "$(dirname "$0")/gpu_common.sh"
TS=(python3 -m turbospec.cli)
# A/B against another tree: PYTHONPATH=$tree with -P (python -m would put the current directory,
# this checkout, ahead of PYTHONPATH: before 2026-11-30 moeb1ab ran HEAD against itself)
TSP=(python3 -P -m turbospec.cli)
which_tree() { PYTHONPATH=$1 python3 -P -c 'import turbospec; print("### turbospec from", turbospec.__file__)' | tee -a "$log"; }
HELDOUT=(--model models/codelm-12m --prompts bench/prompts/heldout_code.jsonl --num-prompts 16 --max-tokens 128 --device cuda)
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv; git log -1 --format='commit %h'; } >>"$log" 2>&1
for part in ${*:-tests decode oracle drafters}; do
  case $part in
    tests)    run 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_attention_kernels.py tests/gpu/test_engine_gpu.py ;;
    alltests) run 570 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu ;;
    pdl)      # A/B in one call: (fusions off, PDL off) = before this change; then fusions on with PDL
              # off / on (GEMMs start after their predecessor) / all (GEMMs may start early too; that is
              # TURBOSPEC_PDL=1 since 2026-11-30, and "all" is no longer a value the switch takes)
              for v in "0 0 0" "1 16 0" "1 16 small" "1 16 1"; do
                set -- $v
                echo "### TURBOSPEC_FUSE_ROPE_STORE=$1 TURBOSPEC_SILU_FUSE_MAX_M=$2 TURBOSPEC_PDL=$3" | tee -a "$log"
                TURBOSPEC_FUSE_ROPE_STORE=$1 TURBOSPEC_SILU_FUSE_MAX_M=$2 TURBOSPEC_PDL=$3 \
                  run 40 "${TS[@]}" bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1,16 --prompt-len 128 --gen-len 256
                TURBOSPEC_FUSE_ROPE_STORE=$1 TURBOSPEC_SILU_FUSE_MAX_M=$2 TURBOSPEC_PDL=$3 \
                  run 70 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 512 --gen-len 64 --profile
              done ;;
    moeab)    # qwen3-30b-a3b bf16 batch 1 (34.5% of roofline at 4ffd9c1, 30.6% at 0ca8a14): which change?
              for v in "" "TURBOSPEC_PDL=0" "TURBOSPEC_GEMM=cublas" "TURBOSPEC_ATTN_REDUCE=two TURBOSPEC_FUSE_ROPE_STORE=0"; do
                echo "### moeab: ${v:-defaults}" | tee -a "$log"
                ( [ -z "$v" ] || export $v
                  run 90 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 32 )
              done ;;
    moeoracle) # issue 4: the verify-cost table (k x batch) and automatic draft length on the MoE, FP8
              run 300 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,4,16,64 \
                --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}'
              run 200 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 16,64 \
                --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto","bitwise_exact":false}' ;;
    moeab2)   for v in "TURBOSPEC_ATTN_REDUCE=two" "TURBOSPEC_FUSE_ROPE_STORE=0"; do
                echo "### moeab2: $v" | tee -a "$log"
                ( export $v; run 90 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 32 )
              done
              TURBOSPEC_PDL=0 run 120 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 32 --profile ;;
    reduceab) # baseline for the attention merge rule: the previous default (always in the launch)
              for sh in qwen3-8b qwen3-30b-a3b; do
                TURBOSPEC_ATTN_REDUCE=fused run 90 "${TS[@]}" bench decode --shape $sh --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64
                run 90 "${TS[@]}" bench decode --shape $sh --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64
              done ;;
    prof8)    # where a batch-1 step's time goes (PDL off: kernels do not overlap, so each is attributed)
              TURBOSPEC_PDL=0 run 120 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64 --profile
              TURBOSPEC_PDL=0 run 120 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64 --profile
              TURBOSPEC_PDL=0 run 100 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64 --profile
              run 200 python3 -m turbospec.kernels.microbench_moe ;;
    mergeab)  # the attention merge, all rows of a program at once (paged_merge._merge_rows): bits, then batch-1
              # decode against the previous kernels (out/base: carried copies of HEAD's paged_{merge,decode}.py)
              run 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_attention_kernels.py
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec /tmp/base/ && cp out/base/*.py /tmp/base/turbospec/kernels/
              for sh in qwen3-8b qwen3-30b-a3b; do
                for v in "base auto" "new auto" "new fused" "new two"; do
                  set -- $v; echo "### mergeab: $sh $1 TURBOSPEC_ATTN_REDUCE=$2" | tee -a "$log"
                  ( [ $1 = base ] && cd /tmp/base
                    TURBOSPEC_ATTN_REDUCE=$2 run 90 "${TS[@]}" bench decode --shape $sh --dtype bf16 --batch-sizes 1,16 --prompt-len 256 --gen-len 64 )
                done
              done ;;
    refactorab) # this session's refactors of the default path (split_k arrive/sum halves, skinny_gemm.k_slice_dot,
              # moe_align.route_rows, fused_moe._wblock) against a899ae4's kernels carried in out/base, alternating
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec /tmp/base/ && cp out/base/*.py /tmp/base/turbospec/kernels/
              for v in base new base new; do
                echo "### refactorab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 70 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64
                  run 70 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64 )
              done ;;
    bisect30b) # qwen3-30b-a3b FP8 batch 1: a899ae4's kernels (out/base) / HEAD / HEAD with a899ae4's moe_align.py
              rm -rf /tmp/base /tmp/mix && mkdir -p /tmp/base /tmp/mix && cp -r turbospec /tmp/base/ && cp -r turbospec /tmp/mix/
              cp out/base/*.py /tmp/base/turbospec/kernels/ && cp out/base/moe_align.py /tmp/mix/turbospec/kernels/
              for v in base new mix base new mix; do
                echo "### bisect30b: $v" | tee -a "$log"
                ( [ $v = new ] || cd /tmp/$v
                  run 70 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64 )
              done ;;
    resttests) run 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_fp8_moe_kernels.py \
                tests/gpu/test_attention_kernels.py tests/gpu/test_engine_gpu.py tests/gpu/test_fused_layers.py tests/gpu/test_rope_store.py ;;
    codelmab) # codelm-12m batch 1 / 16 / 64 (GQA 3: merge in the launch) against HEAD's kernels in out/base, as mergeab
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec /tmp/base/ && cp out/base/*.py /tmp/base/turbospec/kernels/ && cp -r models /tmp/base/
              for v in base new base new; do
                echo "### codelmab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 50 "${TS[@]}" bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1,16,64 --prompt-len 128 --gen-len 256 )
              done ;;
    moesweep) run 330 python3 -m turbospec.kernels.microbench_moe --sweep ;;
    ncu)      # Nsight Compute on batch-1 GEMMs (bench/ncu_gemv.py): speed of light, stalls, instruction mix; SASS MMA kinds
              NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
              run 300 "$NCU" --clock-control none --kernel-name regex:"_fp8_gemm_kernel|_skinny_gemm_kernel|_moe_gemm_kernel|_moe_down_sum_kernel" \
                --launch-skip 0 --launch-count 12 --section SpeedOfLight --section MemoryWorkloadAnalysis \
                --section WarpStateStats --section InstructionStats --section SchedulerStats --section Occupancy \
                --section LaunchStats python3 bench/ncu_gemv.py
              for kern in _fp8_gemm_kernel _skinny_gemm_kernel _moe_gemm_kernel; do
                for f in $(find ~/.triton/cache -name "$kern.cubin" | head -3); do
                  echo "### SASS $f: $(cuobjdump -sass $f | grep -oE '\b(HGMMA|QGMMA|HMMA|F2F|F2FP|PRMT|LOP3|SHF|FFMA|LDS|STS|LDSM|LDG|LDGSTS|SYNCS|BAR|WARPSYNC|I2F|FMUL)[.A-Z0-9_]*' | cut -d. -f1 | sort | uniq -c | tr '\n' ' ')" | tee -a "$log"
                done
              done ;;
    fusetests) # the opt-in launch fusions (router + top-k; slot-mode GEMM2 + expert sum): GPU tests (with the
              # refactored split-K GEMMs), the fused MoE at T = 1 per TURBOSPEC_MOE_SUM_IN_GEMM2, the router microbench
              run 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_router_topk.py \
                tests/gpu/test_fp8_moe_kernels.py ${SKINNY:-tests/gpu/test_skinny_gemm.py}
              for v in 0 1; do TURBOSPEC_MOE_SUM_IN_GEMM2=$v run 70 python3 -m turbospec.kernels.microbench_moe --quick; done
              run 90 python3 -m turbospec.kernels.microbench --router ;;
    fuseab)   # qwen3-30b-a3b batch 1, FP8 and bf16: (TURBOSPEC_FUSE_ROUTER, TURBOSPEC_MOE_SUM_IN_GEMM2) = (0, 0) the
              # default; (1, 0); (1, 1); (0, 0) again. 2026-11-30 (a "loop" variant since removed): no gain
              for v in "0 0" "1 0" "1 1" "0 0"; do set -- $v; for q in "--quantization fp8" ""; do
                echo "### fuseab: TURBOSPEC_FUSE_ROUTER=$1 TURBOSPEC_MOE_SUM_IN_GEMM2=$2 ${q:-bf16}" | tee -a "$log"
                TURBOSPEC_FUSE_ROUTER=$1 TURBOSPEC_MOE_SUM_IN_GEMM2=$2 run 80 "${TS[@]}" bench decode --shape qwen3-30b-a3b \
                  --dtype bf16 $q --batch-sizes 1 --prompt-len 256 --gen-len 64
              done; done ;;
    moestages) # bf16 fused-MoE pipeline depth: 3 (before) vs 6 (default) stages, qwen3-30b-a3b bf16 decode
              # (the f16-MMA FP8 variant measured with it on 2026-11-30 was slower and is not in the tree)
              for st in 3 6; do
                echo "### moestages: TURBOSPEC_MOE_BF16_STAGES=$st" | tee -a "$log"
                TURBOSPEC_MOE_BF16_STAGES=$st run 80 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1,16 --prompt-len 256 --gen-len 64
              done ;;
    attnab)   # decode attention, a row's partitions walked by G programs (split_programs) vs HEAD's one program
              # per partition (out/base/paged_decode.py): GPU tests, kernel times (bench/attn_bucket.py), then
              # qwen3-8b decode at batch 1 / 16 / 64 with a server's context limit (graph length bucket 2048), alternating
              # (ATTN_VARIANTS: kwargs of paged_decode_attention timed besides the defaults)
              run 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_attention_kernels.py
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec bench /tmp/base/ && cp out/base/paged_decode.py /tmp/base/turbospec/kernels/
              ( cd /tmp/base; run 100 python3 bench/attn_bucket.py )
              run 150 python3 bench/attn_bucket.py ${ATTN_VARIANTS:-}
              for v in base new base new; do
                echo "### attnab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 90 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --max-model-len 8192 )
              done ;;
    serverlen) # decode and the MoE oracle with a server's context limit (--max-model-len 8192: graph length bucket 2048)
              run 90 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --max-model-len 8192
              run 90 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16,64 --prompt-len 256 --gen-len 64 --max-model-len 8192
              run 240 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes ${MOE_BATCHES:-16,64} \
                --prompt-len 256 --max-tokens 64 --max-model-len 8192 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' ;;
    ncuattn)  # Nsight Compute on decode attention at batch 16 and 64 (bench/ncu_attn.py): why a program streams
              # its KV at 40-60% of copy bandwidth (stalls, occupancy, bytes in flight)
              NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
              run 200 "$NCU" --clock-control none --kernel-name regex:"_paged_decode_kernel|_reduce_partitions_kernel" \
                --launch-skip 0 --launch-count 12 --section SpeedOfLight --section MemoryWorkloadAnalysis \
                --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
                --section SourceCounters python3 bench/ncu_attn.py ;;
    attnidx)  # decode attention with the next tile's KV rows looked up one iteration ahead vs 9dac746 (out/base/paged_decode_head.py),
              # then qwen3-8b decode b1 / b16 (--max-model-len 8192) against 9f739a1's kernel (out/base/paged_decode.py), three pairs
              run 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_attention_kernels.py
              for v in head base; do rm -rf /tmp/$v && mkdir -p /tmp/$v && cp -r turbospec bench /tmp/$v/; done
              cp out/base/paged_decode_head.py /tmp/head/turbospec/kernels/paged_decode.py && cp out/base/paged_decode.py /tmp/base/turbospec/kernels/
              ( cd /tmp/head; TRITON_CACHE_DIR=/tmp/tc_head run 100 python3 bench/attn_bucket.py )
              TRITON_CACHE_DIR=/tmp/tc_new run 150 python3 bench/attn_bucket.py '{"num_stages":3}' '{"num_stages":4}'
              for v in head new; do
                for f in $(find /tmp/tc_$v -name "_paged_decode_kernel.cubin" | head -3); do
                  echo "### SASS $v $f: $(cuobjdump -sass $f | grep -oE '\b(LDGSTS|LDG|LDS|LDSM|HMMA|BAR|MUFU)[.A-Z0-9_]*' | cut -d. -f1 | sort | uniq -c | tr '\n' ' ')" | tee -a "$log"
                done
              done
              for v in base new base new base new; do
                echo "### attnidx: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 60 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16 --prompt-len 512 --gen-len 64 --max-model-len 8192 )
              done ;;
    cvtab)    # the fp8 -> bf16 conversion in 3 instructions per pair (sign-replicating prmt) vs out/base/fp8_gemm.py
              # (5 per pair): kernel bandwidth, SASS instruction counts, qwen3-30b-a3b / qwen3-8b FP8 decode alternating; tests
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec bench /tmp/base/ && cp out/base/fp8_gemm.py /tmp/base/turbospec/kernels/
              ( cd /tmp/base; TRITON_CACHE_DIR=/tmp/tc_base run 150 python3 -m turbospec.kernels.microbench_moe --quick )
              TRITON_CACHE_DIR=/tmp/tc_new run 150 python3 -m turbospec.kernels.microbench_moe --quick
              for v in base new; do
                for f in $(find /tmp/tc_$v -name "_fp8_gemm_kernel.cubin" -o -name "_moe_gemm_kernel.cubin" | head -6); do
                  echo "### SASS $v $(basename $f) $(cuobjdump -sass $f | grep -cE '^\s+/\*[0-9a-f]{4}\*/') instr: $(cuobjdump -sass $f | grep -oE '\b(PRMT|LOP3|SHF|IMAD|HMMA|HGMMA|LDGSTS|LDS|LDSM|STS|HMUL2|FFMA|FMUL)\b' | sort | uniq -c | tr '\n' ' ')" | tee -a "$log"
                done
              done
              for v in base new base new; do
                echo "### cvtab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 90 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 256 --gen-len 64 )
              done
              for v in base new; do
                echo "### cvtab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 90 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 512 --gen-len 64 )
              done
              run 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/gpu/test_fp8_moe_kernels.py ;;
    attnprobe) # decode attention's cost structure (bench/attn_bucket.py variants, bits not kept): partitions of 2 or 4
              # tiles (fewer partials, softmax restarts and merge work), a 128-token tile, 3 stages with one program per row
              run 200 python3 bench/attn_bucket.py '{"min_partition":128}' '{"min_partition":256}' \
                '{"block_n":128,"min_partition":128}' '{"num_stages":3,"programs_per_row":1}' ;;
    smallab)  # the skinny GEMM's small-M configs (M <= 16) and new general configs vs out/base_sk (the kernels
              # before them): GPU tests of the skinny GEMM, then qwen3-8b decode alternating, qwen3-30b-a3b bf16 b1
              run 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_skinny_gemm.py
              for v in base new base new; do
                echo "### smallab: $v" | tee -a "$log"
                ( [ $v = new ] || cd out/base_sk
                  run 120 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 \
                    --gen-len 64 --max-model-len 8192 )
              done
              for v in base new; do
                echo "### smallab: $v" | tee -a "$log"
                ( [ $v = new ] || cd out/base_sk
                  run 120 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1,16 --prompt-len 256 --gen-len 64 )
              done ;;
    prof8b)   # where a qwen3-8b batch-16 / batch-64 step goes (PDL off: kernels not overlapped), a server's context limit
              for b in 16 64; do
                TURBOSPEC_PDL=0 run 120 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes $b --prompt-len 512 \
                  --gen-len 16 --max-model-len 8192 --profile --profile-batch $b
              done ;;
    hoistab)  # PDL prologue hoists (attention: seq_lens and the first tile's block-table rows before the wait; merge:
              # seq_lens; rope: position, cos/sin, slot) vs out/base/hoist/*.py: GPU tests, attention kernel times,
              # qwen3-30b-a3b FP8 batch 1 alternating (+ every kernel launched early), a PDL-on batch-16 profile
              run 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/gpu/test_attention_kernels.py tests/gpu/test_rope_store.py
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec bench /tmp/base/ && cp out/base/hoist/*.py /tmp/base/turbospec/kernels/
              ( cd /tmp/base; run 100 python3 bench/attn_bucket.py )
              run 100 python3 bench/attn_bucket.py
              for v in base new base new; do
                echo "### hoistab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 60 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64 )
              done
              TURBOSPEC_PDL=1 run 60 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 256 --gen-len 64
              run 90 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 16 --prompt-len 512 --gen-len 64 --max-model-len 8192 --profile --profile-batch 16 ;;
    burstab)  # bursts to the end of a request + the PDL hoists (attention and merge: seq_lens; rope: position, cos/sin,
              # slot) vs out/base/burst (the engine and kernels before them): GPU tests, attention kernel times, qwen3-8b bf16
              # decode (server context limit) alternating, qwen3-30b-a3b FP8 decode
              run 280 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/gpu/test_attention_kernels.py \
                tests/gpu/test_engine_gpu.py -k "not fp32"
              rm -rf /tmp/base && mkdir -p /tmp/base && cp -r turbospec bench /tmp/base/ && cp out/base/burst/llm_engine.py /tmp/base/turbospec/engine/ \
                && cp out/base/burst/{paged_decode,paged_merge,rope}.py /tmp/base/turbospec/kernels/
              ( cd /tmp/base; run 60 python3 bench/attn_bucket.py )
              run 60 python3 bench/attn_bucket.py
              for v in base new base new; do
                echo "### burstab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 75 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --max-model-len 8192 )
              done
              for v in base new; do
                echo "### burstab: $v" | tee -a "$log"
                ( [ $v = base ] && cd /tmp/base
                  run 60 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 256 --gen-len 64 )
              done ;;
    precap)   # twenty-first session: the sampling defaults' burst variants captured at start-up (tests, then their
              # cost on qwen3-8b with a server's batch limit); tiles64: narrow weight tiles for the 17-64-row skinny GEMM
              run 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_default_variants_gpu.py \
                tests/gpu/test_penalties_gpu.py tests/gpu/test_sampled_bursts_gpu.py -k "not distribution"
              run 150 python3 bench/precapture_cost.py --shape qwen3-8b ;;
    tiles64)  run 150 python3 bench/tiles64.py ;;
    servergpu) # `turbospec serve` on CUDA under concurrent openai-client load (tests/gpu/test_server_gpu.py), dtype auto
              # with a float16 checkpoint. The image lacks fastapi / uvicorn / openai: carry them in .whl/ (git-ignored;
              # `pip download -d .whl --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
              # --implementation cp fastapi uvicorn openai`, then run with carry [".whl"])
              python3 -m pip install -q --no-index --find-links .whl --target /tmp/site fastapi uvicorn openai >>"$log" 2>&1
              ( export PYTHONPATH=/tmp/site:.; run 420 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rf \
                tests/gpu/test_server_gpu.py tests/gpu/test_dtype_auto_gpu.py ) ;;
    mixed)    # decode rows of a step that prefills as a forward of their own (scheduler.split_mixed): waves of
              # arrivals vs each request alone, split on / off; then the GPU tests of it (needs .whl for the server test)
              for v in 0 1; do TURBOSPEC_SPLIT_MIXED=$v run 150 python3 bench/mixed_step_invariance.py; done
              python3 -m pip install -q --no-index --find-links .whl --target /tmp/site fastapi uvicorn openai >>"$log" 2>&1
              ( export PYTHONPATH=/tmp/site:.; run 420 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rf \
                tests/gpu/test_mixed_steps_gpu.py tests/gpu/test_server_gpu.py ) ;;
    topkdraw) # Mode.TOPK_DRAW (kernels/topk_draw.py): its GPU tests and the sampled-burst ones, the per-step cost
              # against Mode.TOPK, then qwen3-8b decode at Qwen3's defaults with TURBOSPEC_TOPK_DRAW=0 / 1
              run 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_topk_draw_gpu.py \
                tests/gpu/test_sampled_bursts_gpu.py tests/gpu/test_default_variants_gpu.py
              run 90 python3 bench/topk_draw_cost.py
              for v in 0 1; do
                echo "### TURBOSPEC_TOPK_DRAW=$v" | tee -a "$log"
                TURBOSPEC_TOPK_DRAW=$v run 150 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 \
                  --prompt-len 512 --gen-len 64 --temperature 0.6 --top-p 0.95 --top-k 20
              done ;;
    split)    # what the mixed-step split costs qwen3-8b under arrivals (bench/split_cost.py: off / on alternating)
              run 300 python3 bench/split_cost.py --shape qwen3-8b ;;
    seededdiag) # which part makes 2 of 48 seeded requests differ through the n-gram server (bench/seeded_spec_diag.py)
              run 300 python3 bench/seeded_spec_diag.py ;;
    topklaw)  run 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_topk_draw_gpu.py ;;
    final23)  # end of the twenty-third session: the GPU tests with seeded requests after the counter-noise fix
              run 520 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_mixed_steps_gpu.py \
                tests/gpu/test_default_variants_gpu.py tests/gpu/test_no_compile_in_steps.py tests/gpu/test_top_p_gpu.py ;;
    seedfix)  # the seeded noise's top cell (E = 0) fixed: the diagnosis again, the server (needs .whl), seeded GPU tests
              run 200 python3 bench/seeded_spec_diag.py
              python3 -m pip install -q --no-index --find-links .whl --target /tmp/site fastapi uvicorn openai >>"$log" 2>&1
              ( export PYTHONPATH=/tmp/site:.; run 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rxXf \
                tests/gpu/test_server_gpu.py -k concurrent )
              run 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_sampled_bursts_gpu.py \
                tests/gpu/test_penalties_gpu.py ;;
    burstdiag) # seeded requests: bursts vs single steps (bench/seeded_burst_diag.py), then the engine tests
              run 200 python3 bench/seeded_burst_diag.py
              run 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_engine_gpu.py ;;
    first23)  # start of the twenty-third session: the seeded n-gram diagnosis, the TOPK_DRAW law tests after
              # check_advance_args, the restructured server test (needs .whl)
              run 300 python3 bench/seeded_spec_diag.py
              run 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_topk_draw_gpu.py
              python3 -m pip install -q --no-index --find-links .whl --target /tmp/site fastapi uvicorn openai >>"$log" 2>&1
              ( export PYTHONPATH=/tmp/site:.; run 200 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rxXf \
                tests/gpu/test_server_gpu.py ) ;;
    final22)  # end of the twenty-second session: the server under load (n-gram 8 at a time), dtype auto, engine and
              # mixed-step tests after the engine / server file splits (needs .whl); the top-p kernel's xfail cases run
              python3 -m pip install -q --no-index --find-links .whl --target /tmp/site fastapi uvicorn openai >>"$log" 2>&1
              ( export PYTHONPATH=/tmp/site:.; run 440 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rf \
                tests/gpu/test_server_gpu.py tests/gpu/test_dtype_auto_gpu.py tests/gpu/test_mixed_steps_gpu.py \
                tests/gpu/test_no_compile_in_steps.py tests/gpu/test_engine_gpu.py )
              run 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rf --runxfail tests/gpu/test_top_p_gpu.py \
                -k "equals_the_pytorch or graph" ;;
    final21)  # end of the twenty-first session: GPU tests of this session's paths (sort-free top-p, mixed-step split,
              # seeded cap, the server under load), then the top-p cost (needs .whl for the server test)
              python3 -m pip install -q --no-index --find-links .whl --target /tmp/site fastapi uvicorn openai >>"$log" 2>&1
              ( export PYTHONPATH=/tmp/site:.; run 440 python3 -m pytest -q -s -m gpu -p no:cacheprovider -rf \
                tests/gpu/test_top_p_gpu.py tests/gpu/test_server_gpu.py tests/gpu/test_mixed_steps_gpu.py \
                tests/gpu/test_no_compile_in_steps.py tests/gpu/test_engine_gpu.py )
              run 60 python3 bench/top_p_cost.py --scale 3
              run 60 python3 bench/top_p_cost.py --scale 1 ;;
    final20)  # end of the twentieth session: GPU tests of the engine paths this session touched, then #8's decode rows
              run 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_engine_gpu.py \
                tests/gpu/test_no_compile_in_steps.py tests/gpu/test_sampled_bursts_gpu.py -k "not distribution"
              run 150 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 ;;
    final19)  # end of the nineteenth session: GPU tests of this session's paths, then #8's decode rows and #4's batch-1 rows
              run 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_attention_kernels.py \
                tests/gpu/test_penalties_gpu.py
              run 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_engine_gpu.py \
                tests/gpu/test_no_compile_in_steps.py
              run 150 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64
              run 100 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64
              run 100 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1 \
                --prompt-len 256 --gen-len 64 ;;
    final9)   # end-of-session numbers when qwen3-8b decode was measured already: #8's oracle, #4's MoE table at batch
              # 1 and 16, qwen3-8b FP8 and qwen3-30b-a3b bf16 at batch 1
              run 100 "${TS[@]}" bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 256 --max-tokens 128 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}'
              run 200 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 \
                --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}'
              run 60 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1 --prompt-len 512 --gen-len 64
              run 60 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1 --prompt-len 256 --gen-len 64 ;;
    autok)    # the automatic draft length with timed verify steps correcting the start-up table (ObservedStepCost):
              # qwen3-30b-a3b FP8 oracle at batch 1 / 16, auto vs a fixed k = 7, 64 and 256 tokens; then bench/auto_diag.py
              for mt in 64 256; do
                for sc in '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' \
                          '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}'; do
                  run 120 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 \
                    --prompt-len 256 --max-tokens $mt --speculative-config "$sc"
                done
              done
              run 90 python3 bench/auto_diag.py qwen3-30b-a3b 1 fp8 ;;
    autok2)   # after chained bursts stop for probes: the MoE FP8 oracle at batch 16 / 64, auto vs fixed k = 7, 64 tokens;
              # then auto_diag at batch 16 (every choice, the timed verify ratios)
              for sc in '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' \
                        '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}'; do
                run 150 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 16,64 \
                  --prompt-len 256 --max-tokens 64 --speculative-config "$sc"
              done
              run 120 python3 bench/auto_diag.py qwen3-30b-a3b 16 fp8 ;;
    autok3)   # the start-up cost table on random ids: MoE FP8 oracle batch 1 / 16 / 64 auto vs fixed k = 7; batch 64 auto
              # with bitwise_exact false (k not capped at 0); auto_diag at batch 16
              for sc in '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' \
                        '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}' \
                        '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto","bitwise_exact":false}'; do
                run 150 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes ${B3:-1,16,64} \
                  --prompt-len 256 --max-tokens 64 --speculative-config "$sc"
              done
              run 120 python3 bench/auto_diag.py qwen3-30b-a3b 16 fp8 ;;
    attnwarps) # decode attention: warps per program and a 32-token tile (bits not kept), bench/attn_bucket.py
              run 200 python3 bench/attn_bucket.py '{"num_warps":8}' '{"num_warps":2}' '{"block_n":32}' \
                '{"num_warps":2,"programs_per_row":4}' '{"block_n":32,"num_warps":2}' ;;
    final)    # end-of-session numbers: #8's oracle, qwen3-8b decode, #4's MoE table at batch 1 and 16
              run 100 "${TS[@]}" bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 256 --max-tokens 128 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}'
              run 80 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64
              run 240 "${TS[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes ${MOE_BATCHES:-1,16} \
                --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' ;;
    fp8large) # the FP8 GEMM's 32-row config for 17-64 rows: GPU tests, then qwen3-8b FP8 decode at batch 16 / 64
              # and the MoE oracle at batch 16, with it off (TURBOSPEC_FP8_LARGE_MIN_M=0) and on, alternating
              run 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_fp8_large_config.py tests/gpu/test_skinny_gemm.py -k "fp8 or large"
              for v in 0 17 0 17; do
                echo "### TURBOSPEC_FP8_LARGE_MIN_M=$v" | tee -a "$log"
                TURBOSPEC_FP8_LARGE_MIN_M=$v run 150 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 16,64 --prompt-len 512 --gen-len 64
              done ;;
    timeline) # where a speculative step's wall time goes (host phases, GPU gaps), oracle k = 7, batch 1
              run 150 python3 bench/spec_timeline.py qwen3-8b 7 128
              run 90 python3 bench/spec_timeline.py models/codelm-12m 7 128 ;;
    nocompile) run 400 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_no_compile_in_steps.py \
                tests/gpu/test_attention_kernels.py tests/gpu/test_engine_gpu.py
              JIT_LOG_WHERE=1 run 300 python3 bench/jit_log.py bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 \
                --batch-sizes 1,16,64 --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' ;;
    tailab)   # step tail: chunked greedy argmax over bf16 logits + Triton token lookup vs out/base, alternating twice
              PYTHONPATH=. BASE=out/base run 120 python3 bench/step_tail.py
              for i in 1 2; do for tree in out/base .; do
                which_tree $tree
                PYTHONPATH=$tree run 150 "${TSP[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 \
                  --prompt-len 512 --gen-len 64
                PYTHONPATH=$tree run 60 "${TSP[@]}" bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1 \
                  --prompt-len 128 --gen-len 256
              done; done ;;
    moeb1ab)  for i in 1 2; do for tree in out/base .; do
                which_tree $tree
                PYTHONPATH=$tree run 150 "${TSP[@]}" bench spec --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 \
                  --batch-sizes 1 --prompt-len 256 --max-tokens 128 \
                  --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}'
              done; done ;;
    fp8spec)  run 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_no_compile_in_steps.py \
                tests/gpu/test_engine_gpu.py
              SPEC=(bench spec --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes ${FP8_BATCHES:-1,16,64}
                    --prompt-len 256 --max-tokens 128
                    --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}')
              [ -d out/base ] && PYTHONPATH=out/base run 240 python3 bench/jit_log.py "${SPEC[@]}"
              run 240 python3 bench/jit_log.py "${SPEC[@]}" ;;
    greedyab) # the greedy accept rule in one launch (kernels/greedy_verify.py) vs the PyTorch ops (TURBOSPEC_FUSED_GREEDY=0):
              # engine GPU tests (speculative == plain), then spec_timeline and the qwen3-8b oracle at batch 1, off / on
              run 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_engine_gpu.py
              for v in 0 1; do
                echo "### TURBOSPEC_FUSED_GREEDY=$v" | tee -a "$log"
                TURBOSPEC_FUSED_GREEDY=$v run 120 python3 bench/spec_timeline.py qwen3-8b 7 128
                TURBOSPEC_FUSED_GREEDY=$v run 90 python3 bench/spec_timeline.py models/codelm-12m 7 128
                TURBOSPEC_FUSED_GREEDY=$v run 100 "${TS[@]}" bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 256 \
                  --max-tokens 128 --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}'
              done ;;
    sweep30b) run 330 python3 -m turbospec.kernels.microbench_gemm --quick --sweep --budget 220 --models qwen3-30b-a3b ;;
    decode8b) run 100 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --profile ;;
    codelm)   run 50 "${TS[@]}" bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1,16,64 --prompt-len 128 --gen-len 256 ;;
    moe)      run 120 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1,16 --prompt-len 256 --gen-len 32 --profile ;;
    cublas)   echo "### the next two with TURBOSPEC_GEMM=cublas (baseline: cuBLAS linears)" | tee -a "$log"
              TURBOSPEC_GEMM=cublas run 70 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 512 --gen-len 64
              TURBOSPEC_GEMM=cublas run 40 "${TS[@]}" bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1 --prompt-len 128 --gen-len 256 ;;
    oracle1)  run 100 "${TS[@]}" bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1 --prompt-len 256 --max-tokens 128 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4}' ;;
    fp8dense) run 80 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 512 --gen-len 64 ;;
    fp8moe)   run 100 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 256 --gen-len 32 ;;
    decode)   run 100 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 512 --gen-len 64 --profile
              run 50 "${TS[@]}" bench decode --shape models/codelm-12m --dtype bf16 --batch-sizes 1,16,64 --prompt-len 128 --gen-len 256
              run 120 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --batch-sizes 1,16 --prompt-len 256 --gen-len 32 ;;
    fp8)      run 80 "${TS[@]}" bench decode --shape qwen3-8b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 512 --gen-len 64
              run 100 "${TS[@]}" bench decode --shape qwen3-30b-a3b --dtype bf16 --quantization fp8 --batch-sizes 1,16 --prompt-len 256 --gen-len 32 ;;
    oracle)   run 150 "${TS[@]}" bench spec --shape qwen3-8b --dtype bf16 --batch-sizes 1,16,64 --prompt-len 256 --max-tokens 64 \
                --speculative-config '{"method":"oracle","num_speculative_tokens":7,"acceptance_length":4,"draft_length":"auto"}' ;;
    drafters) for m in eagle3 dflash; do
                run 80 "${TS[@]}" bench spec "${HELDOUT[@]}" --speculative-config "{\"method\":\"$m\",\"model\":\"models/codelm-12m-$m\",\"num_speculative_tokens\":7}"
              done ;;
    profile)  run 60 python3 bench/profile_spec.py eagle3 models/codelm-12m-eagle3 ;;
    *)        echo "unknown part $part" | tee -a "$log" ;;
  esac
done
grep -E "^###|passed|failed|^#|^ +[0-9]+ |graph replay|plain:|speculative:|speedup|per-position|identical|run [0-9]" "$log"
