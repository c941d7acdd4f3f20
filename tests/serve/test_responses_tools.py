"""Function tools and reasoning on /v1/responses with the official `openai` client.

A real server (codelm-12m, a template that renders tools): tool_choice named / "required" give
function_call items whose arguments hold to the tool's schema, streamed as argument deltas; the
next turn (the function_call item sent back, its function_call_output) is the chat conversation
with the assistant's tool_calls and the tool message, token for token. Scripted engines
(tool_engine.py, reasoning_engine.py): parsed `<tool_call>` blocks become function_call items after
the text, in order, streamed or not; with `--reasoning-parser` the think block is a reasoning item,
and one sent back is rendered as the earlier turn's reasoning."""
from __future__ import annotations

import json

import openai
import pytest

from .reasoning_engine import ThinkEngine
from .server_process import CODELM, MODEL_NAME, ServerProcess
from .test_tool_calls import TWO_CALLS
from .tool_engine import TOOLS_TEMPLATE, InProcessServer, ToolEngine

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city", "strict": True,
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                          "required": ["city"], "additionalProperties": False}}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
ASK = "What is the weather in Paris?"


def _chat_tool(t: dict) -> dict:
    return {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    d = tmp_path_factory.mktemp("responses_tools")
    (d / "tools.jinja").write_text(TOOLS_TEMPLATE)
    srv = ServerProcess(CODELM, d / "server.log", "--chat-template", str(d / "tools.jinja"))
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0) as c:
        yield c
    srv.terminate()


def _weather_args(arguments: str) -> dict:
    args = json.loads(arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str) and len(args["city"]) <= 20, args
    return args


def test_a_named_tool_choice_gives_one_valid_function_call_then_the_next_turn_is_accepted(client):
    r = client.responses.create(model=MODEL_NAME, input=ASK, tools=[WEATHER, TIME], temperature=0,
                                tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=40)
    [call] = r.output
    assert (call.type, call.name, call.status, r.status) == ("function_call", "get_weather", "completed", "completed")
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    args = _weather_args(call.arguments)
    assert r.tool_choice.type == "function" and r.tool_choice.name == "get_weather"
    assert [t.name for t in r.tools] == ["get_weather", "get_time"] and r.tools[0].parameters == WEATHER["parameters"]

    follow_up = [{"role": "user", "content": ASK}, call.model_dump(exclude_none=True),
                 {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, sunny"}]
    nxt = client.responses.create(model=MODEL_NAME, input=follow_up, tools=[WEATHER, TIME], temperature=0,
                                  max_output_tokens=8)
    chat = client.chat.completions.create(model=MODEL_NAME, temperature=0, max_completion_tokens=8,
                                          tools=[_chat_tool(WEATHER), _chat_tool(TIME)], messages=[
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function",
             "function": {"name": "get_weather", "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "18 C, sunny"}])
    assert nxt.usage.input_tokens == chat.usage.prompt_tokens > r.usage.input_tokens
    assert nxt.output_text == (chat.choices[0].message.content or "") and args["city"] in call.arguments


def test_tool_choice_required_gives_calls_to_the_given_tools(client):
    r = client.responses.create(model=MODEL_NAME, input=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                temperature=0, max_output_tokens=80)
    assert r.status == "completed" and r.output and all(o.type == "function_call" for o in r.output)
    for call in r.output:
        assert call.name in ("get_weather", "get_time")
        if call.name == "get_weather":
            _weather_args(call.arguments)
        else:
            assert isinstance(json.loads(call.arguments), dict)
    assert r.tool_choice == "required"


def test_a_streamed_call_arrives_as_argument_deltas(client):
    with client.responses.stream(model=MODEL_NAME, input=ASK, tools=[WEATHER], temperature=0, max_output_tokens=40,
                                 tool_choice={"type": "function", "name": "get_weather"}) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    added = events[2].item
    assert (added.type, added.name, added.arguments) == ("function_call", "get_weather", "")
    assert added.status == "in_progress"
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    [call] = final.output
    assert len(deltas) > 1 and "".join(deltas) == events[-3].arguments == call.arguments
    assert call.id == added.id and call.call_id == added.call_id
    assert call.parsed_arguments == _weather_args(call.arguments)       # the client's own parsing


def test_a_bad_tool_or_tool_choice_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input=ASK, tools=[{**WEATHER, "parameters": "object"}])
    assert e.value.body["param"] == "tools" and "tools[0].parameters" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input=ASK, tools=[WEATHER],
                                tool_choice={"type": "function", "name": "get_time"})
    assert e.value.body["param"] == "tool_choice" and "not among the tools" in e.value.body["message"]


# ---- scripted engines ------------------------------------------------------------------------

class FailingToolEngine(ToolEngine):
    """step() raises once a request has run `fail_after` steps (None: never)."""
    fail_after: int | None = None

    def step(self):
        if self.fail_after is not None and any(len(r["out"]) >= self.fail_after for r in self.reqs.values()):
            raise RuntimeError("kaboom")
        return super().step()


@pytest.fixture(scope="module")
def tool_engine():
    engine = FailingToolEngine()
    srv = InProcessServer(engine)
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=30, max_retries=0) as c:
        yield engine, c
    srv.stop()


def _summary(output) -> list[tuple]:
    return [(o.type, o.content[0].text) if o.type == "message" else (o.type, o.name, o.arguments) for o in output]


def test_parsed_calls_follow_the_text_as_items_streamed_or_not(tool_engine):
    engine, c = tool_engine
    engine.reply = TWO_CALLS
    tools = [WEATHER, TIME]
    r = c.responses.create(model="fake", input=ASK, tools=tools)
    expected = [("message", "Let me check."), ("function_call", "get_weather", '{"city": "Paris"}'),
                ("function_call", "get_time", '{"tz": "Europe/Paris"}')]
    assert _summary(r.output) == expected and r.status == "completed"
    with c.responses.stream(model="fake", input=ASK, tools=tools) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert _summary(final.output) == expected
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3
    one = c.responses.create(model="fake", input=ASK, tools=tools, parallel_tool_calls=False)
    assert _summary(one.output) == expected[:2] and one.parallel_tool_calls is False
    none = c.responses.create(model="fake", input=ASK, tools=tools, tool_choice="none")
    assert _summary(none.output) == [("message", TWO_CALLS)]              # not parsed, as chat's "none"


def test_a_request_that_fails_mid_stream_ends_with_response_failed(tool_engine):
    engine, c = tool_engine
    engine.reply, engine.fail_after = "Hello there, a long answer.", 3
    try:
        events = list(c.responses.create(model="fake", input=ASK, stream=True))
        with pytest.raises(openai.InternalServerError) as e:
            c.responses.create(model="fake", input=ASK)
    finally:
        engine.fail_after = None
    assert "kaboom" in e.value.body["message"]
    kinds = [e.type for e in events]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.failed"]
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "engine_error" and "kaboom" in failed.error.message
    [msg] = failed.output
    assert msg.status == "incomplete" and msg.content[0].text == "Hello there,"[:len(msg.content[0].text)] != ""
    assert failed.usage is None


@pytest.fixture(scope="module")
def think():
    engine = ThinkEngine()
    srv = InProcessServer(engine, reasoning_parser="deepseek_r1")
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=30, max_retries=0) as c:
        yield engine, c
    srv.stop()


def test_reasoning_is_an_item_before_the_message_and_is_rendered_when_sent_back(think):
    engine, c = think
    engine.reply = "Two and two.</think>It is 4."
    r = c.responses.create(model="fake", input="2+2?")
    [reasoning, message] = r.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_") and reasoning.summary == []
    assert [(p.type, p.text) for p in reasoning.content] == [("reasoning_text", "Two and two.")]
    assert r.output_text == "It is 4." and message.status == "completed"
    with c.responses.stream(model="fake", input="2+2?") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == "Two and two."
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "It is 4."
    assert [o.type for o in final.output] == ["reasoning", "message"] and final.output_text == "It is 4."
    c.responses.create(model="fake", input=[{"role": "user", "content": "2+2?"},
                                            *[o.model_dump(exclude_none=True) for o in r.output],
                                            {"role": "user", "content": "And 3+3?"}])
    assert "<think>\nTwo and two.\n</think>\n\nIt is 4.<|im_end|>" in engine.prompts[-1]
