"""Run `python -m turbospec.cli ARGS` with every Triton compilation logged to stderr (seconds
since start, kernel, compile seconds; with JIT_LOG_WHERE=1 also the specialisation and the
engine frames that launched it): for trees that predate kernels/jit_watch.py, e.g. an A/B
against `git archive`d code (PYTHONPATH=out/base python3 bench/jit_log.py bench spec ...)."""
import os
import runpy
import sys
import time
import traceback

from triton import knobs

T0 = time.perf_counter()
_start: list[float] = []


def _pre(**kw):
    _start.append(time.perf_counter())


def _post(**kw):
    t = _start.pop() if _start else time.perf_counter()
    print(f"[jit] {t - T0:8.2f} s  {kw['fn'].name}  {time.perf_counter() - t:.2f} s", file=sys.stderr, flush=True)
    if os.environ.get("JIT_LOG_WHERE"):          # the specialisation and the engine frames that launched it
        frames = [f for f in traceback.extract_stack()[:-1] if "turbospec" in f.filename][-4:]
        print("      " + kw["repr"][:400], file=sys.stderr)
        for f in frames:
            print(f"      {f.filename.split('turbospec/')[-1]}:{f.lineno} {f.name}", file=sys.stderr)


knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = _pre, _post
sys.argv = ["turbospec"] + sys.argv[1:]
runpy.run_module("turbospec.cli", run_name="__main__")
