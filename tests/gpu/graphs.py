"""CUDA-graph capture for the GPU tests: warm up on a side stream (Triton compiles there), then
capture one call; returns the graph and the call's output (static: replays write into it)."""
from __future__ import annotations

import torch


def capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()                                                # warm-up: Triton compiles here
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def graph_replays_as_eager(fn) -> bool:
    """fn() captured in a CUDA graph and replayed gives, bit for bit, what it gave run eagerly."""
    eager = fn()
    torch.cuda.synchronize()
    g, out = capture(fn)
    g.replay()
    torch.cuda.synchronize()
    return torch.equal(out, eager)
