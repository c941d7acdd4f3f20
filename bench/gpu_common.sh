# Sourced by the bench/gpu_*.sh scripts after setting LOG_NAME: the repo root as working directory,
# $OUT (default out/gpu), PYTHONPATH=., and run TIMEOUT CMD... (appends CMD's output to $OUT/$LOG_NAME,
# echoes its start and exit status).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-out/gpu}; mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
log="$OUT/$LOG_NAME"
run() { local t=$1; shift; echo "### $* (timeout $t s, $(date -u +%T))" | tee -a "$log"; timeout "$t" "$@" >>"$log" 2>&1; echo "### rc=$?" | tee -a "$log"; }
