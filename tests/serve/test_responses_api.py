"""POST /v1/responses through a real `turbospec serve` (codelm-12m on CPU with the conftest chat
template, behind an API key) and the official `openai` client: the Responses request is the chat
request it maps onto, token for token (text, usage, the length limit); streamed events are the
shapes the client parses and add up to the whole response; text.format holds the output to a
schema; what is not served is a 400 naming the field; a client that hangs up frees its request."""
from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest

from .server_process import API_KEY, MODEL_NAME
from .test_load_and_disconnect import _wait_for_idle

AUTH = {"Authorization": f"Bearer {API_KEY}"}
PROMPT = "def fib(n):"


def _chat(client, messages, **kw):
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0, **kw)
    return r.choices[0], r.usage


def _usage(r) -> tuple[int, int, int]:
    return r.usage.input_tokens, r.usage.output_tokens, r.usage.total_tokens


def test_a_string_input_is_the_chat_request_token_for_token(client):
    r = client.responses.create(model=MODEL_NAME, input=PROMPT, max_output_tokens=12, temperature=0)
    choice, usage = _chat(client, [{"role": "user", "content": PROMPT}], max_completion_tokens=12)
    assert r.output_text and r.output_text == choice.message.content
    assert _usage(r) == (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
    assert usage.completion_tokens == 12
    assert choice.finish_reason == "length"
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.id.startswith("resp_") and r.object == "response" and r.model == MODEL_NAME and r.error is None
    [msg] = r.output
    assert (msg.type, msg.role, msg.status) == ("message", "assistant", "incomplete") and msg.id.startswith("msg_")
    assert [(p.type, p.annotations) for p in msg.content] == [("output_text", [])]
    assert (r.max_output_tokens, r.temperature, r.top_p, r.tools, r.tool_choice, r.parallel_tool_calls) == \
        (12, 0.0, 1.0, [], "auto", True)
    assert r.usage.input_tokens_details.cached_tokens == 0 and r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.text.format.type == "text" and r.truncation == "disabled" and r.store is False


def test_an_item_list_with_instructions_is_the_same_chat_conversation(client):
    items = [{"role": "user", "content": [{"type": "input_text", "text": "Hello"},
                                          {"type": "input_text", "text": "there"}]},
             {"type": "message", "role": "assistant", "id": "msg_0", "status": "completed",
              "content": [{"type": "output_text", "text": "Hi.", "annotations": []}]},
             {"role": "developer", "content": "Answer in Python."},
             {"type": "message", "role": "user", "content": PROMPT}]
    messages = [{"role": "system", "content": "You write code."}, {"role": "user", "content": "Hello\nthere"},
                {"role": "assistant", "content": "Hi."}, {"role": "developer", "content": "Answer in Python."},
                {"role": "user", "content": PROMPT}]
    r = client.responses.create(model=MODEL_NAME, input=items, instructions="You write code.", max_output_tokens=10,
                                temperature=0, metadata={"run": "1"}, store=True, user="u1", include=[],
                                reasoning={"effort": "low"}, truncation="disabled")
    choice, usage = _chat(client, messages, max_completion_tokens=10)
    assert r.output_text == choice.message.content and _usage(r)[:2] == (usage.prompt_tokens, usage.completion_tokens)
    without = client.responses.create(model=MODEL_NAME, input=items, max_output_tokens=1, temperature=0)
    assert without.usage.input_tokens < r.usage.input_tokens                  # the system message is rendered
    assert (r.instructions, r.metadata, r.user, r.store) == ("You write code.", {"run": "1"}, "u1", False)


def _stopping(client) -> tuple[str, str]:
    """A stop string the greedy output meets, and the text before it (chat's)."""
    text = client.responses.create(model=MODEL_NAME, input=PROMPT, max_output_tokens=12, temperature=0).output_text
    stop = text.strip()[len(text.strip()) // 2]
    choice, _ = _chat(client, [{"role": "user", "content": PROMPT}], max_completion_tokens=12, stop=[stop])
    assert choice.finish_reason == "stop"
    return stop, choice.message.content


def test_a_stopped_output_is_completed_and_the_sampling_extras_reach_the_engine(client):
    stop, text = _stopping(client)
    r = client.responses.create(model=MODEL_NAME, input=PROMPT, max_output_tokens=12, temperature=0,
                                extra_body={"stop": [stop]})
    assert r.status == "completed" and r.incomplete_details is None and r.completed_at >= r.created_at
    assert r.output_text == text and r.output[0].status == "completed"


def test_streamed_deltas_add_up_to_the_whole_response(client):
    whole = client.responses.create(model=MODEL_NAME, input=PROMPT, max_output_tokens=12, temperature=0)
    events = list(client.responses.create(model=MODEL_NAME, input=PROMPT, max_output_tokens=12, temperature=0,
                                          stream=True))
    kinds = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]                   # cut by max_output_tokens, as OpenAI says it
    assert events[0].response.status == "in_progress" and events[0].response.output == []
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(e.delta for e in deltas) == whole.output_text
    final = events[-1].response
    item_id = final.output[0].id
    assert all(e.item_id == item_id and e.output_index == 0 and e.content_index == 0 for e in deltas)
    assert events[-4].text == whole.output_text and events[-2].item.status == "incomplete"
    assert final.id == events[0].response.id and final.output_text == whole.output_text
    assert final.status == "incomplete" and final.incomplete_details.reason == "max_output_tokens"
    assert _usage(final) == _usage(whole)


def test_the_stream_helper_gets_a_completed_response(client):
    stop, text = _stopping(client)
    with client.responses.stream(model=MODEL_NAME, input=PROMPT, max_output_tokens=12, temperature=0,
                                 extra_body={"stop": [stop]}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == text and final.status == "completed"
    u = final.usage
    assert u.output_tokens > 0 and u.total_tokens == u.input_tokens + u.output_tokens


SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0,
                                                                               "maximum": 150}}}


def test_text_format_json_schema_gives_schema_valid_json(client):
    r = client.responses.create(model=MODEL_NAME, input="A person:", max_output_tokens=60, temperature=0,
                                text={"format": {"type": "json_schema", "name": "person", "schema": SCHEMA,
                                                 "strict": True}})
    value = json.loads(r.output_text)
    assert set(value) == {"name", "age"} and isinstance(value["name"], str) and len(value["name"]) <= 12
    assert type(value["age"]) is int and 0 <= value["age"] <= 150
    assert r.status == "completed" and r.text.format.name == "person" and r.text.format.schema_ == SCHEMA
    obj = client.responses.create(model=MODEL_NAME, input="JSON:", max_output_tokens=40, temperature=0,
                                  text={"format": {"type": "json_object"}})
    assert obj.status == "completed" and isinstance(json.loads(obj.output_text), dict)


@pytest.mark.parametrize("kw, param, words", [
    ({"previous_response_id": "resp_abc"}, "previous_response_id", "stores no responses"),
    ({"extra_body": {"conversation": "conv_1"}}, "conversation", "stores no responses"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                             {"type": "input_image", "image_url": "https://example.com/a.png"}]}]},
     "input[0].content[1]", "'input_image' part: this server serves text only"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "runs no built-in tools"),
    ({"include": ["reasoning.encrypted_content", "message.output_text.logprobs"]}, "include",
     "['message.output_text.logprobs'] is not served"),
    ({"extra_body": {"frobnicate": 1}}, "frobnicate", "unknown parameter"),
    ({"extra_body": {"best_of": 3}}, "best_of", "unsupported parameter"),
    ({"max_output_tokens": 5000}, "max_output_tokens", "lower max_output_tokens"),        # the engine's refusal
    ({"text": {"format": {"type": "json_schema", "name": "no spaces!", "schema": SCHEMA}}}, "text.format",
     "text.format.name="),                                                            # the chat path's check, renamed
])
def test_what_is_not_served_is_a_400_naming_the_field(client, kw, param, words):
    kw.setdefault("input", "Hi")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, **kw)
    err = e.value.body
    assert err["param"] == param and words in err["message"], err


def test_the_api_key_and_the_model_name_are_checked(server):
    body = {"model": MODEL_NAME, "input": "Hi", "max_output_tokens": 1}
    assert httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).status_code == 401
    r = httpx.post(f"{server.url}/v1/responses/", json={**body, "model": "gpt-4o"}, headers=AUTH, timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_a_closed_stream_frees_its_request(server):
    aborts = server.metric("vllm:request_success_total", finished_reason="abort")

    async def main() -> list[str]:
        kinds = []
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            body = {"model": MODEL_NAME, "input": PROMPT, "max_output_tokens": 1500, "ignore_eos": True, "stream": True}
            async with c.stream("POST", "/v1/responses", json=body, headers=AUTH) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: "):
                        kinds.append(json.loads(line[6:])["type"])
                        if kinds.count("response.output_text.delta") == 3:
                            return kinds              # leaving the block closes the connection
        return kinds
    kinds = asyncio.run(asyncio.wait_for(main(), 60))
    assert kinds[-1] == "response.output_text.delta"
    idle = _wait_for_idle(server)
    assert idle == {"vllm:kv_cache_usage_perc": 0.0, "vllm:num_requests_running": 0.0,
                    "vllm:num_requests_waiting": 0.0}, idle
    assert server.metric("vllm:request_success_total", finished_reason="abort") - aborts == 1


def test_a_client_that_gives_up_on_a_whole_response_frees_it(server):
    aborts = server.metric("vllm:request_success_total", finished_reason="abort")

    async def main() -> bool:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            body = {"model": MODEL_NAME, "input": PROMPT, "max_output_tokens": 1500, "ignore_eos": True}
            try:
                await asyncio.wait_for(c.post("/v1/responses", json=body, headers=AUTH), 1.5)
            except asyncio.TimeoutError:
                return True
            return False
    assert asyncio.run(main()), "a 1500-token response finished in 1.5 s: the test needs a longer one"
    idle = _wait_for_idle(server)
    assert idle["vllm:kv_cache_usage_perc"] == 0.0 and idle["vllm:num_requests_running"] == 0.0, idle
    assert server.metric("vllm:request_success_total", finished_reason="abort") - aborts == 1
