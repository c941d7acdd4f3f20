#!/usr/bin/env bash
# Train the demo's two drafters for models/codelm-12m on one H200 in ONE call (aimed at a 10-minute
# call; the bulk is REGEN_SECONDS = 150 s of regeneration + TRAIN_MIN = 4 min of training, then one
# bench per drafter), export them, and measure acceptance on held-out code with plain decoding.
#
#   OUT=/path/to/out bash bench/gpu_train.sh        # from anywhere; runs from the repo root
#
# Stages (each bounded by `timeout`, each failure logged and survived where possible):
#   1. stdlib corpus: this machine's Python standard library, chunked to <= 1024 codelm tokens
#   2. regenerate: codelm-12m continues up to 49,152 line-aligned stdlib windows (64..512 tokens)
#      by 256 greedy tokens through turbospec.LLM (so the drafters learn the target's own outputs),
#      256 at a time (the largest batch the engine runs with CUDA graphs / decode bursts), starting
#      no new batch after REGEN_SECONDS; skipped on failure (training then uses the raw corpus with
#      the target's soft labels only)
#   3. train EAGLE-3 (chain k=7, draft vocab 6144) and DFlash (block 8, 4 layers) CONCURRENTLY on
#      the one GPU, each bounded by --max-minutes, exporting as they go (with DFLASH_ALSO_INIT, a
#      second DFlash run alongside them, sharing the GPU)
#   4. turbospec bench spec for each drafter: 32 held-out prompts x 128 tokens, greedy, with plain
#      decoding in the same process (acceptance length, tok/s of both, identical outputs)
#
# Writes exactly 7 files (4 with ONLY=eagle3 or ONLY=dflash; DFLASH_ALSO_INIT adds 3 unless ONLY=eagle3):
#   $OUT/train_log.txt
#   $OUT/codelm-12m-eagle3/{config.json, model.safetensors, training_info.json}
#   $OUT/codelm-12m-dflash/{config.json, model.safetensors, training_info.json}
#   $OUT/codelm-12m-dflash-cont/{config.json, model.safetensors, training_info.json}   (DFLASH_ALSO_INIT)
# Scratch (corpus, regenerated data, training states) goes to $WORK (default: a /tmp dir).
#
# Options (environment): ONLY=eagle3|dflash trains one drafter alone (the whole GPU); INIT_EAGLE3=DIR /
# INIT_DFLASH=DIR continue from an exported drafter (`--init-from`: new optimizer and schedule);
# LR (peak, default 6e-4; dry run 3e-3), WARMUP (--warmup-steps, default 100; dry run 5), TRAIN_MIN
# (minutes per drafter), DFLASH_LAYERS (default 4); PY (the Python that runs every stage; default the
# repo's .venv/bin/python, which `make venv` / `make demo` / `make test` build, else python3);
# DFLASH_DATA=regen trains DFlash on the regenerated continuations only, loss on the completions
# (default `all`: regenerated + raw stdlib, every position). Deep block slots are labeled with the
# target's prediction after the true prefix; on raw code that prefix is a human's, not the target's
# greedy one the drafter sees when serving, so those labels are noise for slots 2..B-1.
# DFLASH_ALSO_INIT=DIR (when DFlash is trained): a second DFlash run, concurrent with the first, with
# identical options except `--init-from DIR` (instead of INIT_DFLASH), exporting to
# $OUT/codelm-12m-dflash-cont; benched in stage 4 as well. Both DFlash runs then share the GPU.
# REGEN_SAMPLES (49152), REGEN_SECONDS (150: no new regeneration batch after it), REGEN_BATCH (256;
# above 256 regenerate caps it), REGEN_TOKENS (256). EXTRA_CORPUS: extra arguments to
# `turbospec train stdlib-corpus` (GPU default --include-tests: the stdlib's test suites too, as
# for the committed DFlash drafter's last run; EXTRA_CORPUS= for the library alone);
# the dry run defaults it to `--root <the json package's directory>` (a small corpus).
#
# CPU dry run of the very same path with tiny budgets (checks every stage end to end), with the
# quick-learning settings of docs/training.md (--warmup-steps 5 --lr 3e-3):
#   DRY_RUN=1 OUT=/tmp/dry bash bench/gpu_train.sh
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the output directory}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
# the interpreter: the repo's venv (README's `make demo` / `make test` install into it and never
# activate it) unless PY is set; every stage needs turbospec's dependencies, checked before anything runs
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY="$PWD/.venv/bin/python"; else PY=python3; fi
fi
PYINFO=$("$PY" -c 'import importlib.util as u, sys
print(sys.version.split()[0] + ":" + ", ".join(m for m in ("torch", "typer", "transformers", "tokenizers", "safetensors") if u.find_spec(m) is None))' 2>/dev/null) || {
  echo "FATAL: PY=$PY does not run ($("$PY" -V 2>&1 | tail -n 1)): run \`make venv\` (the repo's .venv, used by default when it exists) or set PY=/path/to/python"
  exit 1; }
if [ -n "${PYINFO#*:}" ]; then
  echo "FATAL: $PY (Python ${PYINFO%%:*}) lacks ${PYINFO#*:}, which every stage needs: run \`make venv\` (the repo's .venv, used by default when it exists), or set PY=/path/to/python of an environment with turbospec installed (pip install -e .)"
  exit 1
fi
MODEL=models/codelm-12m
PROMPTS=bench/prompts/heldout_code.jsonl
WORK=${WORK:-$(mktemp -d /tmp/turbospec-train.XXXXXX)}
mkdir -p "$OUT" "$WORK"
LOG="$OUT/train_log.txt"
exec > >(tee -a "$LOG") 2>&1
T_START=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - T_START )) s] $*"; }

if [ "${DRY_RUN:-0}" = 1 ]; then      # same commands, CPU-sized
  DEVICE=${DEVICE:-cpu}; REGEN_SAMPLES=${REGEN_SAMPLES:-8}; REGEN_SECONDS=${REGEN_SECONDS:-60}
  REGEN_BATCH=${REGEN_BATCH:-8}; REGEN_TOKENS=${REGEN_TOKENS:-16}; TRAIN_MIN=${TRAIN_MIN:-0.3}
  BATCH=${BATCH:-2}; RAW_LIMIT=${RAW_LIMIT:-24}; SEQ=${SEQ:-256}; EVAL_EVERY=${EVAL_EVERY:-5}
  BENCH_PROMPTS=${BENCH_PROMPTS:-2}; BENCH_TOKENS=${BENCH_TOKENS:-16}; EXTRA_CORPUS=${EXTRA_CORPUS:---root $(dirname "$("$PY" -c 'import json; print(json.__file__)')")}
  LR=${LR:-3e-3}; WARMUP=${WARMUP:-5}      # quick learning: a few steps reach the peak (docs/training.md)
else
  DEVICE=${DEVICE:-cuda}; REGEN_SAMPLES=${REGEN_SAMPLES:-49152}; REGEN_SECONDS=${REGEN_SECONDS:-150}
  REGEN_BATCH=${REGEN_BATCH:-256}; REGEN_TOKENS=${REGEN_TOKENS:-256}; TRAIN_MIN=${TRAIN_MIN:-4}
  BATCH=${BATCH:-32}; RAW_LIMIT=${RAW_LIMIT:-0}; SEQ=${SEQ:-1024}; EVAL_EVERY=${EVAL_EVERY:-250}
  BENCH_PROMPTS=${BENCH_PROMPTS:-32}; BENCH_TOKENS=${BENCH_TOKENS:-128}; EXTRA_CORPUS=${EXTRA_CORPUS---include-tests}
  LR=${LR:-6e-4}; WARMUP=${WARMUP:-100}
fi
ONLY=${ONLY:-both}; DFLASH_LAYERS=${DFLASH_LAYERS:-4}
INIT_E3=(); [ -n "${INIT_EAGLE3:-}" ] && INIT_E3=(--init-from "$INIT_EAGLE3")
INIT_DF=(); [ -n "${INIT_DFLASH:-}" ] && INIT_DF=(--init-from "$INIT_DFLASH")
DF_ALSO=${DFLASH_ALSO_INIT:-}; [ "$ONLY" = eagle3 ] && DF_ALSO=
TRAIN_TIMEOUT=$(awk "BEGIN{print int($TRAIN_MIN*60 + 150)}")

# the root CLI imports every subcommand family; fall back to bench+train alone if one of the others
# cannot import with this interpreter (its dependencies were checked above: the fallback needs the same)
if "$PY" -c "import turbospec.cli" 2>/dev/null; then
  TSCLI=("$PY" -m turbospec.cli)
else
  echo "note: 'import turbospec.cli' fails with $PY ($("$PY" -c "import turbospec.cli" 2>&1 | tail -n 1)):" \
       "using a CLI with only the bench and train commands"
  TSCLI=("$PY" -c 'import sys, typer
from turbospec.benchmarks.cli import register as bench
from turbospec.train.cli import register as train
app = typer.Typer(add_completion=False); bench(app); train(app); app(sys.argv[1:], prog_name="turbospec")')
fi

stamp "setting: device $DEVICE | $PY | $("$PY" -c 'import torch; print("torch", torch.__version__, "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA")') | OUT=$OUT WORK=$WORK"
git log -1 --format='commit %h %s' 2>/dev/null || true

stamp "1. stdlib corpus"
timeout 300 "${TSCLI[@]}" train stdlib-corpus --target $MODEL --out "$WORK/stdlib.jsonl" --overwrite --chunk-tokens "$SEQ" $EXTRA_CORPUS \
  || { echo "FATAL: corpus build failed"; exit 1; }
if [ "$RAW_LIMIT" -gt 0 ]; then head -n "$RAW_LIMIT" "$WORK/stdlib.jsonl" > "$WORK/raw.jsonl"; else cp "$WORK/stdlib.jsonl" "$WORK/raw.jsonl"; fi

stamp "2. regenerate with the target (greedy, $REGEN_SAMPLES prompts x $REGEN_TOKENS tokens, <= ${REGEN_SECONDS} s of generation)"
timeout $(( REGEN_SECONDS + 120 )) "${TSCLI[@]}" train regenerate --target $MODEL --data "$WORK/raw.jsonl" \
  --out "$WORK/regen.jsonl" --overwrite --num-samples "$REGEN_SAMPLES" --max-new-tokens "$REGEN_TOKENS" \
  --min-prompt 64 --max-prompt $(( SEQ / 2 )) --batch-size "$REGEN_BATCH" --max-seconds "$REGEN_SECONDS" \
  --device "$DEVICE" || echo "WARNING: regenerate failed or timed out; training on what exists"
# training data: regenerated samples (complete lines only, in case the stage was cut) + the raw corpus
"$PY" - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
n_regen = 0
with open(f"{w}/train.jsonl", "w") as out:
    try:
        for line in open(f"{w}/regen.jsonl"):
            try:
                json.loads(line)
            except ValueError:
                continue
            out.write(line if line.endswith("\n") else line + "\n")
            n_regen += 1
    except FileNotFoundError:
        pass
    n_raw = 0
    for line in open(f"{w}/raw.jsonl"):
        out.write(line)
        n_raw += 1
print(f"training data {w}/train.jsonl: {n_regen} regenerated + {n_raw} raw stdlib records")
EOF

stamp "3. train ($ONLY${DF_ALSO:+ + DFlash from $DF_ALSO}; ${TRAIN_MIN} min each, concurrently when several)"
DATA_E3=(--data "$WORK/train.jsonl" --loss-on-prompt)
DATA_DF=("${DATA_E3[@]}")
if [ "${DFLASH_DATA:-all}" = regen ] && [ -s "$WORK/regen.jsonl" ]; then
  grep -v '^$' "$WORK/regen.jsonl" | "$PY" -c 'import json,sys
for l in sys.stdin:
    try: json.loads(l); sys.stdout.write(l)
    except ValueError: pass' > "$WORK/regen_clean.jsonl"
  DATA_DF=(--data "$WORK/regen_clean.jsonl")
  echo "DFlash data: $(wc -l < "$WORK/regen_clean.jsonl") regenerated continuations, loss on completions only"
fi
COMMON=(--target $MODEL --max-seq-len "$SEQ" --batch-size "$BATCH"
        --max-minutes "$TRAIN_MIN" --lr "$LR" --warmup-steps "$WARMUP" --min-lr-ratio 0.05
        --target-layers 1,3,5 --eval-every "$EVAL_EVERY" --log-every 50 --save-every 500 --device "$DEVICE")
PID_E3=; PID_DF=; PID_DF2=
[ "$ONLY" != dflash ] && { (OMP_NUM_THREADS=4 timeout "$TRAIN_TIMEOUT" "${TSCLI[@]}" train eagle3 "${COMMON[@]}" "${DATA_E3[@]}" "${INIT_E3[@]}" --out "$OUT/codelm-12m-eagle3" \
   --checkpoint-dir "$WORK/state-eagle3" --num-layers 1 --intermediate-size 2048 --draft-length 7 \
   --draft-vocab-size 6144 2>&1 \
   | sed -u 's/^/[eagle3] /') & PID_E3=$!; }
[ "$ONLY" != eagle3 ] && { (OMP_NUM_THREADS=4 timeout "$TRAIN_TIMEOUT" "${TSCLI[@]}" train dflash "${COMMON[@]}" "${DATA_DF[@]}" "${INIT_DF[@]}" --out "$OUT/codelm-12m-dflash" \
   --checkpoint-dir "$WORK/state-dflash" --num-layers "$DFLASH_LAYERS" --block-size 8 --anchors-per-seq 64 2>&1 \
   | sed -u 's/^/[dflash] /') & PID_DF=$!; }
[ -n "$DF_ALSO" ] && { (OMP_NUM_THREADS=4 timeout "$TRAIN_TIMEOUT" "${TSCLI[@]}" train dflash "${COMMON[@]}" "${DATA_DF[@]}" --init-from "$DF_ALSO" --out "$OUT/codelm-12m-dflash-cont" \
   --checkpoint-dir "$WORK/state-dflash-cont" --num-layers "$DFLASH_LAYERS" --block-size 8 --anchors-per-seq 64 2>&1 \
   | sed -u 's/^/[dflash-cont] /') & PID_DF2=$!; }
wait $PID_E3 $PID_DF $PID_DF2      # (a bare `wait` would also wait for the log's tee)
TRAINED=(); [ "$ONLY" != dflash ] && TRAINED+=("eagle3:codelm-12m-eagle3")
[ "$ONLY" != eagle3 ] && TRAINED+=("dflash:codelm-12m-dflash")
[ -n "$DF_ALSO" ] && TRAINED+=("dflash:codelm-12m-dflash-cont")
for spec in "${TRAINED[@]}"; do echo "$OUT/${spec#*:}:"; ls -la "$OUT/${spec#*:}" 2>&1; done

stamp "4. acceptance on held-out code: turbospec bench spec, plain vs speculative, same process"
for spec in "${TRAINED[@]}"; do       # every drafter this run trained
  method=${spec%%:*}; dir="$OUT/${spec#*:}"
  if [ ! -f "$dir/model.safetensors" ]; then echo "no ${spec#*:} drafter exported: skipping its bench"; continue; fi
  cfg="{\"method\":\"$method\",\"model\":\"$dir\",\"num_speculative_tokens\":7}"
  echo "\$ turbospec bench spec --model $MODEL --speculative-config '$cfg' --prompts $PROMPTS --num-prompts $BENCH_PROMPTS --max-tokens $BENCH_TOKENS --device $DEVICE"
  timeout 240 "${TSCLI[@]}" bench spec --model $MODEL --speculative-config "$cfg" --prompts $PROMPTS \
    --num-prompts "$BENCH_PROMPTS" --max-tokens "$BENCH_TOKENS" --device "$DEVICE" \
    || echo "WARNING: bench spec for ${spec#*:} failed or timed out"
done
stamp "done"
