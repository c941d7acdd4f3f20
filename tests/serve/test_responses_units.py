"""/v1/responses request mapping without a server (serve/responses_input.py, responses_request.py):
input items -> chat messages, the Responses fields -> chat's, and the 400s naming the Responses
field; the output items built from chat deltas (serve/responses_output.py)."""
from __future__ import annotations

import pytest

from turbospec.serve.errors import APIError
from turbospec.serve.responses import DeltaFunctionCall, DeltaMessage, DeltaToolCall
from turbospec.serve.responses_input import input_messages
from turbospec.serve.responses_output import OutputItems
from turbospec.serve.responses_request import ResponsesRequest

CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}',
        "id": "fc_1", "status": "completed"}


def _error(fn, *args) -> APIError:
    with pytest.raises(APIError) as e:
        fn(*args)
    assert e.value.status == 400
    return e.value


def test_a_string_is_one_user_message_after_the_instructions():
    assert input_messages("Hi", "Be brief.") == [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": "Hi"}]
    assert input_messages("Hi", None) == input_messages("Hi", "") == [{"role": "user", "content": "Hi"}]


def test_items_become_chat_messages_in_order():
    items = [{"role": "developer", "content": "Use tools."},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                             {"type": "input_text", "text": "b"}]},
             {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
             {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
              "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}]},
             CALL, {**CALL, "call_id": "call_2", "name": "get_time", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
             {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
             {"role": "user", "content": "Thanks"}]
    assert input_messages(items, None) == [
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": "a\nb"},                  # parts joined as chat joins them
        {"role": "assistant", "content": "Checking.", "reasoning": "hmm", "tool_calls": [   # one turn
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "name": "get_time", "content": "noon"},
        {"role": "user", "content": "Thanks"}]


def test_a_call_after_a_tool_result_is_a_new_assistant_turn():
    items = [{"role": "user", "content": "x"}, CALL, {"type": "function_call_output", "call_id": "call_1",
                                                      "output": "1"}, {**CALL, "call_id": "call_2"}]
    roles = [m["role"] for m in input_messages(items, None)]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_reasoning_goes_to_the_assistant_turn_it_belongs_to():
    said = {"role": "assistant", "content": "t"}
    thought = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "r"}]}
    joined = input_messages([said, thought, CALL], None)                 # thinking before this turn's call
    assert [(m["role"], m.get("reasoning"), len(m.get("tool_calls", []))) for m in joined] == [("assistant", "r", 1)]
    nxt = input_messages([said, thought, {"role": "assistant", "content": "u"}], None)
    assert [m.get("reasoning") for m in nxt] == [None, "r"]
    assert input_messages([{"role": "user", "content": "x"}, thought], None) == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("items, param, words", [
    ([], "input", "empty list"),
    (["hi"], "input[0]", "item object"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}], "input[0].content[0]",
     "'input_image' part: this server serves text only"),
    ([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}], "input[0].content[0]", "text only"),
    ([{"role": "tool", "content": "x"}], "input[0].role", "must be one of user, system, developer, assistant"),
    ([{"role": "user"}], "input[0].content", "needs a 'content'"),
    ([{"role": "user", "content": "x", "name": "bob"}], "input[0].name", "unknown key(s) 'name'"),
    ([{**CALL, "arguments": "{city"}], "input[0].arguments", "must be a JSON string"),
    ([{"type": "function_call_output", "call_id": "call_9", "output": "x"}], "input[0].call_id",
     "no function_call item with that call_id"),
    ([{"type": "item_reference", "id": "msg_1"}], "input[0]", "stores no responses"),
    ([{"type": "web_search_call", "id": "ws_1"}], "input[0].type", "runs no built-in tools"),
])
def test_items_that_are_not_served_name_their_place(items, param, words):
    e = _error(input_messages, items, None)
    assert e.param == param and words in e.message, (e.param, e.message)


def test_the_request_maps_onto_the_chat_body():
    req = ResponsesRequest(input="Hi", instructions="Sys", max_output_tokens=7, temperature=0.5, top_p=0.9,
                           tools=[{"type": "function", "name": "f", "description": "d",
                                   "parameters": {"type": "object"}, "strict": True}],
                           tool_choice={"type": "function", "name": "f"}, parallel_tool_calls=False,
                           text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"},
                                            "strict": True}, "verbosity": "low"},
                           store=True, metadata={"k": "v"}, user="u", include=["reasoning.encrypted_content"], truncation="disabled",
                           reasoning={"effort": "high", "summary": "auto"}, top_k=5, seed=3,
                           prompt_cache_key="p", top_logprobs=0)
    assert req.chat_body() == {
        "messages": [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"}], "stream": False,
        "temperature": 0.5, "top_p": 0.9, "parallel_tool_calls": False, "max_completion_tokens": 7,
        "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                                                    "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"},
                                                                   "strict": True}},
        "top_k": 5, "seed": 3, "prompt_cache_key": "p"}     # prompt_cache_key: chat's harmless field


@pytest.mark.parametrize("fields, param, words", [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no responses"),
    ({"conversation": "conv_1"}, "conversation", "stores no responses"),
    ({"background": True}, "background", "stores no responses"),
    ({"include": ["message.output_text.logprobs"]}, "include", "is not served"),
    ({"truncation": "auto"}, "truncation", "never cut"),
    ({"max_output_tokens": 0}, "max_output_tokens", "at least 1"),
    ({"tools": [{"type": "web_search_preview"}]}, "tools[0].type", "runs no built-in tools"),
    ({"tools": [{"type": "file_search", "vector_store_ids": []}]}, "tools[0].type", "only function tools"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools[0].function", "is flat"),
    ({"tools": [{"type": "function", "name": "f", "x": 1}]}, "tools[0].x", "unknown key(s) 'x'"),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", "is not served"),
    ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "needs a 'name'"),
    ({"text": {"format": {"type": "xml"}}}, "text.format", "must be"),
    ({"reasoning": {"effort": "low", "budget": 3}}, "reasoning.budget", "unknown key(s)"),
    ({"messages": [{"role": "user", "content": "x"}]}, "messages", "send the conversation as `input`"),
    ({"max_tokens": 5}, "max_tokens", "send max_output_tokens"),
    ({"response_format": {"type": "json_object"}}, "response_format", "text: {\"format\""),
    ({"top_logprobs": 3}, "top_logprobs", "is not served"),
    ({"stream_options": {"include_obfuscation": False}}, "stream_options", "only allowed when stream is true"),
])
def test_fields_that_are_not_served_are_named(fields, param, words):
    req = ResponsesRequest(**{"input": "Hi", **fields})
    e = _error(req.chat_body)
    assert e.param == param and words in e.message, (e.param, e.message)


def test_one_item_per_kind_of_text_in_order_and_an_empty_output_is_one_empty_message():
    items = OutputItems()
    events = []
    for d in [DeltaMessage(reasoning="think"), DeltaMessage(content="Hi "), DeltaMessage(content="there"),
              DeltaMessage(tool_calls=[DeltaToolCall(index=0, id="call_a", type="function",
                                                     function=DeltaFunctionCall(name="f", arguments=""))]),
              DeltaMessage(tool_calls=[DeltaToolCall(index=0, function=DeltaFunctionCall(arguments='{"a": 1}'))])]:
        events += items.feed(d)
    events += items.finish(incomplete=True)
    out = items.output()
    assert [(o["type"], o["status"]) for o in out] == [("reasoning", "completed"), ("message", "completed"),
                                                       ("function_call", "incomplete")]
    assert out[0]["content"] == [{"type": "reasoning_text", "text": "think"}] and out[0]["summary"] == []
    assert out[1]["content"][0]["text"] == "Hi there" and out[2]["arguments"] == '{"a": 1}'
    assert out[2]["call_id"] == "call_a" and out[2]["id"].startswith("fc_")
    kinds = [k for k, _ in events]
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 3
    assert [f["delta"] for k, f in events if k == "response.output_text.delta"] == ["Hi ", "there"]
    empty = OutputItems()
    empty.finish(incomplete=False)
    [msg] = empty.output()
    assert msg["type"] == "message" and msg["content"][0]["text"] == "" and msg["status"] == "completed"
