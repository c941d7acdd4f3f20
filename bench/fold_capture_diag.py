"""Why a CUDA-graph capture fails with the norms folded (TURBOSPEC_NORM_EPILOGUE=1) and EAGLE-3 on
codelm-12m (tests/gpu/test_engine_gpu.py::test_cuda_bf16_spec_bitwise_equal_plain[cfg1], 2026-12-06):
every Triton compilation is logged with whether the stream was capturing and the engine frames that
launched it, then the LLM is built and run; the first exception's traceback is printed.

    TURBOSPEC_NORM_EPILOGUE=1 PYTHONPATH=. python3 bench/fold_capture_diag.py [ngram|eagle3]
"""
import sys
import time
import traceback

import torch
from triton import knobs

T0 = time.perf_counter()


def _post(**kw):
    cap = torch.cuda.is_current_stream_capturing()
    print(f"[jit] {time.perf_counter() - T0:7.2f} s {kw['fn'].name} capturing={cap}", flush=True)
    if cap:
        print("      " + kw["repr"][:300])
        for f in [f for f in traceback.extract_stack()[:-1] if "turbospec" in f.filename][-8:]:
            print(f"      {f.filename.split('turbospec/')[-1]}:{f.lineno} {f.name}")


knobs.runtime.jit_post_compile_hook = _post
# a synchronizing op (.item(), a host copy) under capture raises where it is, not at a later launch
_begin, _end = torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.capture_end


def _capture_begin(self, *a, **kw):
    _begin(self, *a, **kw)
    torch.cuda.set_sync_debug_mode("error")


def _capture_end(self, *a, **kw):
    torch.cuda.set_sync_debug_mode(0)
    _end(self, *a, **kw)


torch.cuda.CUDAGraph.capture_begin, torch.cuda.CUDAGraph.capture_end = _capture_begin, _capture_end
from turbospec import LLM, SamplingParams  # noqa: E402

method = sys.argv[1] if len(sys.argv) > 1 else "eagle3"
cfg = ({"method": "eagle3", "model": "models/codelm-12m-eagle3", "num_speculative_tokens": 7}
       if method == "eagle3" else {"method": "ngram", "num_speculative_tokens": 4})
try:
    llm = LLM("models/codelm-12m", device="cuda", dtype="bfloat16", speculative_config=cfg)
    out = llm.generate(["def parse_args(argv):\n"] * 8, SamplingParams(temperature=0.0, max_tokens=32))
    print("OK", out[0].outputs[0].token_ids[:8])
except Exception:
    torch.cuda.set_sync_debug_mode(0)
    traceback.print_exc(limit=-16)
