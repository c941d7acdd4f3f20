#!/usr/bin/env bash
# bench/fusion_probe.py variants on one H200, each in its own process (results: grep RESULT).
#   OUT=/path bash bench/gpu_probe.sh [dense] [normtests] [normab] [normab2] [pdlab] [rbab] [ldab] [ncu64] [attnreg] [attnub] [moe] [tests] [enginetests]
LOG_NAME=probe.log
source "$(dirname "$0")/gpu_common.sh"
P=(python3 bench/fusion_probe.py)
for part in ${*:-dense}; do
  case $part in
    dense) for v in base nosilu nonorm; do run 150 "${P[@]}" $v --batch-sizes 1,64 --gen-len 128 --repeats 2; done
           for v in pf pfearly base; do run 120 "${P[@]}" $v --batch-sizes 1 --gen-len 128 --repeats 2; done ;;
    normtests) # the RMSNorm folded into the GEMM epilogues: kernel tests, then the GEMMs' own tests
           run 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_norm_epilogue_gpu.py ;;
    normtests2) run 400 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_skinny_gemm.py \
             tests/gpu/test_fp8_moe_kernels.py -k "fp8 or skinny" ;;
    normab|normab2) # TURBOSPEC_NORM_EPILOGUE off / on, one process each (normab2: the second pair, FP8, codelm-12m)
           for m in 0 1; do run 150 env TURBOSPEC_NORM_EPILOGUE=$m "${P[@]}" base --batch-sizes 1,64 --gen-len 128 --repeats 2; done
           if [ $part = normab2 ]; then
             for m in 0 1; do run 150 env TURBOSPEC_NORM_EPILOGUE=$m "${P[@]}" base --quantization fp8 --gen-len 128 --repeats 2; done
             for m in 0 1; do run 150 env TURBOSPEC_NORM_EPILOGUE=$m "${P[@]}" base --shape models/codelm-12m --prompt-len 128 \
               --batch-sizes 1,64 --gen-len 256 --repeats 2; done
           fi ;;
    pdlab) # every GEMM may start early (TURBOSPEC_PDL=1, the default since 2026-11-30) against
           # the earlier rule (=small: GEMMs over 8 MiB start in order), alternating
           for m in small 1 small 1; do
             run 150 env TURBOSPEC_PDL=$m "${P[@]}" base --batch-sizes 1,64 --gen-len 128 --repeats 2
             run 150 env TURBOSPEC_PDL=$m "${P[@]}" base --quantization fp8 --gen-len 128 --repeats 2
             run 150 env TURBOSPEC_PDL=$m "${P[@]}" base --shape qwen3-30b-a3b --quantization fp8 --prompt-len 256 --gen-len 128 --repeats 2; done ;;
    rbab)  # this tree against the one in out/base (`git archive REV turbospec | tar -x -C out/base`),
           # alternating; TURBOSPEC_AB only tags the RESULT lines
           for t in base new base new; do
             pp=.; [ $t = base ] && pp=out/base
             run 150 env TURBOSPEC_AB=$t PYTHONPATH=$pp python3 -P "${P[@]:1}" base --batch-sizes 1,16 --gen-len 128 --repeats 2
             run 150 env TURBOSPEC_AB=$t PYTHONPATH=$pp python3 -P "${P[@]:1}" base --shape qwen3-30b-a3b --prompt-len 256 --gen-len 128 --repeats 2
           done ;;
    ldab)  # the large-decode attention settings (TURBOSPEC_ATTN_LARGE_DECODE): GPU tests, then engine A/B alternating
           run 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_attention_kernels.py
           for m in 0 1 0 1; do
             run 150 env TURBOSPEC_ATTN_LARGE_DECODE=$m "${P[@]}" base --batch-sizes 16,64 --gen-len 128 --repeats 2; done ;;
    ncu64) # Nsight Compute on the skinny GEMM at 64 rows vs 1 (bench/ncu_gemm64.py): DRAM / L2 / L1 throughput, stalls
           NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
           run 400 "$NCU" --clock-control none --kernel-name regex:"_skinny_gemm_kernel" --launch-skip 0 --launch-count 16 \
             --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
             --section LaunchStats --section SchedulerStats python3 bench/ncu_gemm64.py ;;
    attnreg) # decode attention with a register cap (more programs per SM), kernel times
           run 200 python3 bench/attn_bucket.py '{"maxnreg": 128}' '{"maxnreg": 128, "programs_per_row": 1}' \
             '{"maxnreg": 128, "programs_per_row": 1, "num_stages": 3}' \
             '{"maxnreg": 128, "programs_per_row": 1, "fused_reduce": false}' '{"maxnreg": 112, "programs_per_row": 1}' ;;
    attnub) # upper bounds: the step without the RoPE + KV-store launch / without any attention launch
           for v in base norope noattn base; do run 150 "${P[@]}" $v --batch-sizes 1,64 --gen-len 128 --repeats 2; done ;;
    tests) run 500 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_engine_gpu.py \
             tests/gpu/test_sampled_bursts_gpu.py tests/gpu/test_skinny_gemm.py tests/gpu/test_fp8_moe_kernels.py \
             tests/gpu/test_fp8_large_config.py tests/gpu/test_no_compile_in_steps.py ;;
    enginetests) run 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/gpu/test_engine_gpu.py \
             tests/gpu/test_sampled_bursts_gpu.py ;;
    moe)   for v in base pf pfearly; do run 150 "${P[@]}" $v --shape qwen3-30b-a3b --quantization fp8 --prompt-len 256 --gen-len 128 --repeats 2; done ;;
    *)     echo "unknown part $part"; exit 1 ;;
  esac
done
grep RESULT "$log"
