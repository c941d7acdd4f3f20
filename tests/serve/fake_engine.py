"""A model-free stand-in for LLMEngine (same methods, RequestOutput shapes), for fast in-process
tests of the serving layer's failure paths. Token i decodes to the letter chr(97 + i % 26)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx

from turbospec.engine.request_input import BatchRefused
from turbospec.engine.sequence import RequestMetrics
from turbospec.outputs import CompletionOutput, RequestOutput


class FakeTokenizer:
    chat_template = "{{ messages }}"

    def decode(self, ids, skip_special_tokens=True) -> str:
        return "".join(chr(97 + i % 26) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False) -> str:
        return "|".join(m["content"] for m in messages)


class FakeEngine:
    """`boom` in a prompt makes step() raise while that request runs; `die=True` kills the loop."""

    def __init__(self, max_model_len: int = 64, total_blocks: int = 100):
        self.tokenizer = FakeTokenizer()
        self.model_config = SimpleNamespace(vocab_size=26, max_position_embeddings=max_model_len)
        self.max_model_len = max_model_len
        self.total_blocks = total_blocks
        self.reqs: dict[str, dict] = {}
        self.die = False
        self.steps = 0
        self.proposer = SimpleNamespace(k=2)      # a drafter: /metrics exports the spec_decode series it counts

    def add_request(self, request_id, prompt, params, add_special_tokens=True) -> None:
        text = prompt if isinstance(prompt, str) else None
        ids = [ord(c) % 26 for c in prompt] if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("the prompt is empty")
        if len(ids) + (params.max_tokens or 1) > self.max_model_len:
            raise ValueError(f"prompt + max_tokens exceeds the context length {self.max_model_len}")
        self.reqs[request_id] = dict(text=text or "", ids=ids, params=params, out=[], metrics=RequestMetrics())

    def add_requests(self, requests) -> None:
        """All or none, as LLMEngine's: a refusal is a BatchRefused giving the request's index."""
        for i, r in enumerate(requests):
            try:
                self.add_request(r.request_id, r.prompt, r.params, r.add_special_tokens)
            except ValueError as e:
                for taken in requests[:i]:
                    self.abort_request(taken.request_id)
                raise BatchRefused(i, e) from e

    def abort_request(self, request_id) -> None:
        self.reqs.pop(request_id, None)

    def has_unfinished_requests(self) -> bool:
        if self.die:
            raise SystemError("the fake engine died")
        return bool(self.reqs)

    def step(self) -> list[RequestOutput]:
        self.steps += 1
        if any("boom" in r["text"] for r in self.reqs.values()):
            raise RuntimeError("kaboom")
        outputs = []
        for rid, r in list(self.reqs.items()):
            r["out"].append(len(r["out"]) % 26)
            m = r["metrics"]
            m.num_drafts, m.num_draft_tokens, m.num_accepted_tokens = m.num_drafts + 1, m.num_draft_tokens + 2, \
                m.num_accepted_tokens + 1
            done = len(r["out"]) >= (r["params"].max_tokens or 8)
            comp = CompletionOutput(0, self.tokenizer.decode(r["out"]), list(r["out"]), None,
                                    "length" if done else None)
            outputs.append(RequestOutput(rid, r["text"], r["ids"], [comp], done, m))
            if done:
                del self.reqs[rid]
        return outputs

    def get_stats(self):
        n = len(self.reqs)
        return SimpleNamespace(num_running=n, num_waiting=0, num_free_blocks=self.total_blocks - n,
                               num_total_blocks=self.total_blocks, kv_cache_usage=n / self.total_blocks)

    def get_metrics(self) -> dict:
        return {"spec_decode_num_drafts": self.steps, "spec_decode_num_draft_tokens": 2 * self.steps,
                "spec_decode_num_accepted_tokens": self.steps,
                "spec_decode_num_accepted_tokens_per_pos": [self.steps, 0]}


def run_app(engine, scenario, timeout: float = 30):
    """Run `scenario(client)` against the server app around `engine` in this process (lifespan
    included, no socket) and return its result; the whole run is bounded at 60 s."""
    from turbospec.serve.app import build_app
    app = build_app(engine, "fake")

    async def main():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://fake", timeout=timeout) as c:
                return await scenario(c)
    return asyncio.run(asyncio.wait_for(main(), 60))
