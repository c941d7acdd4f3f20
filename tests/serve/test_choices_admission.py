"""A request of several choices (n, or a batch of prompts) reaches a busy engine in one inbox pass,
not one choice per engine step; a refused choice aborts the others. In-process, on the fake
engine."""
from __future__ import annotations

import asyncio
import time


from .fake_engine import FakeEngine, run_app


class _BusyEngine(FakeEngine):
    """Each step takes 20 ms (as a loaded engine's do); records the step each request arrived at."""

    def __init__(self):
        super().__init__(max_model_len=400)
        self.added_at: dict[str, int] = {}

    def add_request(self, request_id, prompt, params, add_special_tokens=True) -> None:
        super().add_request(request_id, prompt, params)
        self.added_at[request_id] = self.steps

    def step(self):
        time.sleep(0.02)
        return super().step()


def _run(engine, scenario):
    return run_app(engine, scenario, timeout=30)


async def _busy(c, engine) -> asyncio.Task:
    """A long request that keeps the engine stepping; returns once it runs."""
    task = asyncio.ensure_future(c.post("/v1/completions", json={"model": "fake", "prompt": "long",
                                                                 "max_tokens": 300}))
    while engine.steps < 3:
        await asyncio.sleep(0.01)
    return task


def test_n_choices_join_a_busy_engine_in_one_step():
    """n = 16 while another request runs: all 16 engine requests are added between the same two
    steps (they were added one per step: n = 64 waited 64 steps, 27 s on codelm-12m under load)."""
    engine = _BusyEngine()

    async def scenario(c):
        busy = await _busy(c, engine)
        r = await c.post("/v1/completions", json={"model": "fake", "prompt": "hi", "max_tokens": 2, "n": 16})
        batch = await c.post("/v1/completions", json={"model": "fake", "prompt": ["a", "b", "c", "d"],
                                                      "max_tokens": 2, "n": 2})
        busy.cancel()
        return r, batch
    r, batch = _run(engine, scenario)
    assert r.status_code == 200 and len(r.json()["choices"]) == 16
    assert batch.status_code == 200 and [c["index"] for c in batch.json()["choices"]] == list(range(8))
    n_steps = {s for rid, s in engine.added_at.items() if rid.startswith("cmpl-") and rid.count("-") == 2}
    assert len(n_steps) == 2, engine.added_at          # one step for the n = 16, one for the batch
    # the choices reached the engine in choice order
    order = [rid for rid in engine.added_at if rid.count("-") == 2]
    assert [int(rid.rsplit("-", 1)[1]) for rid in order] == list(range(16)) + list(range(8))


def test_a_refused_choice_aborts_the_others():
    """A batch whose third prompt is over the context length: a 400 naming the prompt, and none of
    the other choices is left running in the engine."""
    engine = _BusyEngine()

    async def scenario(c):
        busy = await _busy(c, engine)
        r = await c.post("/v1/completions", json={"model": "fake", "prompt": ["a", "b", "x" * 500, "d"],
                                                  "max_tokens": 50, "n": 2})
        for _ in range(100):
            if set(engine.reqs) <= {rid for rid in engine.reqs if rid.count("-") == 1}:
                break
            await asyncio.sleep(0.02)
        left = [rid for rid in engine.reqs if rid.count("-") == 2]
        busy.cancel()
        return r, left
    r, left = _run(engine, scenario)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert left == []
