"""kernels/jit_watch.py on any machine: the events' arithmetic, and hooks chained and restored
(Triton's own calls into the hooks are exercised by tests/gpu/test_no_compile_in_steps.py)."""
from __future__ import annotations

import types

import pytest

from turbospec.kernels.jit_watch import JitEvents, watch_jit


def test_summary_and_since():
    ev = JitEvents([("_a", 1.0, 0.25), ("_b", 2.0, 0.5), ("_a", 3.0, 0.125)])
    assert ev.count == 3 and ev.seconds == pytest.approx(0.875)
    assert ev.summary() == "3 Triton compiles (0.88 s: _a x2, _b)"
    late = ev.since(2.0)
    assert [c[0] for c in late.compiles] == ["_b", "_a"]
    assert late.since(3.5).summary() == ""
    assert JitEvents([("_k", 0.0, 0.1)]).summary() == "1 Triton compile (0.10 s: _k)"


def test_hooks_chain_and_restore():
    knobs = pytest.importorskip("triton").knobs
    rt = knobs.runtime
    calls = []
    prev_pre = lambda **kw: calls.append(("pre", kw["fn"].name))      # noqa: E731
    prev_post = lambda **kw: calls.append(("post", kw["fn"].name))    # noqa: E731
    rt.jit_cache_hook, rt.jit_post_compile_hook = prev_pre, prev_post
    try:
        fn = types.SimpleNamespace(name="_kern")
        with watch_jit() as ev:
            assert rt.jit_cache_hook(fn=fn) is None          # a truthy return would skip the compile
            rt.jit_post_compile_hook(fn=fn)
        assert [c[0] for c in ev.compiles] == ["_kern"] and ev.compiles[0][2] >= 0
        assert calls == [("pre", "_kern"), ("post", "_kern")]
        assert rt.jit_cache_hook is prev_pre and rt.jit_post_compile_hook is prev_post
    finally:
        rt.jit_cache_hook = rt.jit_post_compile_hook = None
