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
#   OUT=/path bash bench/gpu_pending.sh draw engine archs norm
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T="python3 -m pytest -q -m gpu -p no:cacheprovider -rf"
nvidia-smi --query-gpu=name,clocks.sm --format=csv
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
    *)      echo "unknown part $part (draw, engine, archs, norm)"; exit 2 ;;
  esac
done
