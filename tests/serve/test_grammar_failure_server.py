"""A constraint that compiles but that llguidance gives up on while generating (its Earley row
limit hit on a token, or its per-mask item limit hit in the mask before one) ends its request the
way vLLM ends a request with finish_reason "error", saying why: not streamed, a 500 `grammar_error`
whose message carries llguidance's reason; streamed, an error event before `[DONE]` (the `openai`
client raises it). It counts in request_success_total{finished_reason="error"}, and a request
running beside it gets the tokens it gets alone. Before, both were HTTP 200 with finish_reason
"abort" (the row limit) or even "stop" with text that breaks the grammar (the mask limit), the
reason only in the server log."""
from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest

from .server_process import API_KEY, MODEL_NAME

PROMPT = "def parse(data):\n    return "
MESSAGES = [{"role": "user", "content": "Write a word."}]
# an alternation of 3,000 strings after "hello": the Earley row after the first token holds 3,001
# items, over llguidance's max_items_in_row (2,000); it compiles (validate_grammar passes)
ROW_LIMIT = 'start: "hello" x\nx: ' + " | ".join(f'"w{i}x"' for i in range(3000)) + "\n"
ROW_ERROR = "Current row has 3001 items; max is 2000"
# 900 rules for one one-character lexeme, repeated: the mask after "hello" walks the token trie
# through more than 50,000 Earley items (step_max_items); the failed mask allows EOS alone
MASK_LIMIT = ('start: "hello" x+\nx: ' + " | ".join(f"y{i}" for i in range(900)) + "\n"
              + "\n".join(f"y{i}: L" for i in range(900)) + "\nL: /[a-z ]/\n")
MASK_ERROR = "Too many items (limit 50000; mask)"
# a JSON schema: `a` is any of 2,500 one-key objects, a row of 2,501 items once `{"a":` is written
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["a"], "properties": {"a": {"anyOf": [
    {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]} for i in range(2500)]}}}
SCHEMA_ERROR = "Current row has 2501 items; max is 2000"
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "many", "schema": SCHEMA}}


def _finished(server, reason: str) -> float:
    try:
        return server.metric("vllm:request_success_total", finished_reason=reason)
    except KeyError:                      # a reason with no series yet (the "error" one before this fix)
        return 0.0


def _counts(server) -> dict[str, float]:
    out = {r: _finished(server, r) for r in ("stop", "length", "abort", "error")}
    return {**out, "running": server.metric("vllm:num_requests_running")}


def _settled(server, want: dict[str, float], timeout: float = 10.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while (got := _counts(server)) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def _check_error(message: str, words: str, what: str = "grammar") -> None:
    assert message.startswith(f"structured outputs: llguidance could not follow the {what} at output token "), message
    assert words in message and "<state>" not in message and len(message) < 500, message


@pytest.mark.parametrize("call,words,what", [
    (lambda c: c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0,
                                    extra_body={"structured_outputs": {"grammar": ROW_LIMIT}}), ROW_ERROR, "grammar"),
    (lambda c: c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0,
                                    extra_body={"guided_grammar": MASK_LIMIT}), MASK_ERROR, "grammar"),
    (lambda c: c.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=32, temperature=0,
                                         response_format=RESPONSE_FORMAT), SCHEMA_ERROR, "JSON schema"),
], ids=["row-limit", "mask-limit", "json-schema"])
def test_not_streamed_is_a_500_that_says_why(server, client, call, words, what):
    before = _counts(server)
    with pytest.raises(openai.InternalServerError) as e:
        call(client)
    assert e.value.status_code == 500 and e.value.code == "grammar_error"
    assert e.value.body["type"] == "server_error"
    _check_error(e.value.body["message"], words, what)
    assert _settled(server, {**before, "error": before["error"] + 1}) == {**before, "error": before["error"] + 1}


@pytest.mark.parametrize("grammar,words", [(ROW_LIMIT, ROW_ERROR), (MASK_LIMIT, MASK_ERROR)],
                         ids=["row-limit", "mask-limit"])
def test_streamed_ends_with_an_error_event_before_done(server, client, grammar, words):
    before = _counts(server)
    chunks = []
    with pytest.raises(openai.APIError) as e:
        for chunk in client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=16,
                                                    temperature=0, stream=True, extra_body={"guided_grammar": grammar}):
            chunks.append(chunk)
    _check_error(e.value.message, words)
    assert chunks and all(c.choices[0].finish_reason is None for c in chunks)   # no "abort" / "stop" chunk
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": 16, "temperature": 0, "stream": True,
            "structured_outputs": {"grammar": grammar}}
    with httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        r = c.post("/v1/completions", json=body)
    events = [e for e in r.text.split("\n\n") if e]
    assert r.status_code == 200 and events[-1] == "data: [DONE]", r.text
    assert events[-2].startswith('data: {"error": {') and '"code": "grammar_error"' in events[-2], r.text
    assert '"finish_reason": "abort"' not in r.text and '"finish_reason":"abort"' not in r.text
    want = {**before, "error": before["error"] + 2}
    assert _settled(server, want) == want


def test_a_request_beside_it_is_unaffected(server):
    """A long greedy stream runs while the failing request starts and ends: same text as alone."""
    plain = dict(model=MODEL_NAME, prompt="class Stack:", max_tokens=160, temperature=0,
                 extra_body={"ignore_eos": True})

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=60, max_retries=0) as c:
            alone = (await c.completions.create(**plain)).choices[0].text
            started = asyncio.Event()

            async def stream() -> tuple[str, str, float]:
                text, reason = "", None
                async for chunk in await c.completions.create(**plain, stream=True):
                    text += chunk.choices[0].text if chunk.choices else ""
                    reason = (chunk.choices[0].finish_reason if chunk.choices else None) or reason
                    started.set()
                return text, reason, time.monotonic()

            async def failing() -> float:
                await started.wait()
                with pytest.raises(openai.InternalServerError):
                    await c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0,
                                               extra_body={"structured_outputs": {"grammar": ROW_LIMIT}})
                return time.monotonic()
            (text, reason, plain_done), failed_at = await asyncio.wait_for(asyncio.gather(stream(), failing()), 120)
            return alone, text, reason, plain_done, failed_at
    alone, text, reason, plain_done, failed_at = asyncio.run(main())
    assert failed_at < plain_done, "the plain request ended before the failing one: no overlap"
    assert text == alone and reason == "length"


def test_the_openai_client_does_not_send_it_again(server):
    """The `openai` client retries a 500 twice by default; the 500 says x-should-retry: false, so the
    server sees the failing request once."""
    before = _counts(server)
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=60) as c:   # default retries (2)
        assert c.max_retries == 2
        with pytest.raises(openai.InternalServerError) as e:
            c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=0,
                                 extra_body={"structured_outputs": {"grammar": ROW_LIMIT}})
    assert e.value.response.headers["x-should-retry"] == "false"
    want = {**before, "error": before["error"] + 1}
    assert _settled(server, want) == want
