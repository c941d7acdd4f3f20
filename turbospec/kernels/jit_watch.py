"""Triton compilations seen while a block of code runs.

A Triton kernel compiles on the first launch of each specialization (its constexprs, each
integer argument's "is 1" / "divisible by 16", each pointer's 16-byte alignment), typically 0.1-1 s with the disk cache cold. A
benchmark whose timed region contains one measures the compiler, not the engine: a 0.5-s run of
qwen3-8b at batch 16 doubles. `bench spec` / `bench decode` report the compilations inside their
timed runs so that a reader can tell. Safe to import without Triton (nothing is ever seen then).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class JitEvents:
    compiles: list[tuple[str, float, float]] = field(default_factory=list)   # (kernel, perf_counter start, seconds)

    @property
    def count(self) -> int:
        return len(self.compiles)

    @property
    def seconds(self) -> float:
        return sum(s for _, _, s in self.compiles)

    def since(self, t0: float) -> JitEvents:
        """The compilations that started at perf_counter() >= t0 (inside a timed region)."""
        return JitEvents([c for c in self.compiles if c[1] >= t0])

    def summary(self) -> str:
        """'' when nothing compiled, else e.g. '2 Triton compiles (0.61 s: _greedy_chain_kernel x2)'."""
        if not self.compiles:
            return ""
        names: dict[str, int] = {}
        for n, _, _ in self.compiles:
            names[n] = names.get(n, 0) + 1
        what = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.items())
        return f"{self.count} Triton compile{'s' if self.count > 1 else ''} ({self.seconds:.2f} s: {what})"


@contextmanager
def watch_jit():
    """with watch_jit() as ev: ... -> ev.compiles lists every kernel compiled inside the block
    (other hooks installed before are kept and still called)."""
    events = JitEvents()
    try:
        from triton import knobs
    except ImportError:
        yield events
        return
    rt = knobs.runtime
    prev_pre, prev_post = rt.jit_cache_hook, rt.jit_post_compile_hook
    started: list[float] = []

    def pre(**kw):
        started.append(time.perf_counter())
        return prev_pre(**kw) if prev_pre is not None else None

    def post(**kw):
        t0 = started.pop() if started else time.perf_counter()
        events.compiles.append((kw["fn"].name, t0, time.perf_counter() - t0))
        return prev_post(**kw) if prev_post is not None else None

    rt.jit_cache_hook, rt.jit_post_compile_hook = pre, post
    try:
        yield events
    finally:
        rt.jit_cache_hook, rt.jit_post_compile_hook = prev_pre, prev_post
