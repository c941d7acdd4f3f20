"""LLM.chat as a vLLM user calls it: the template renders the conversation (text parts, refusals,
tools and tool turns), a missing template or a bad message is a ValueError that says how to fix it.
A random-weight Qwen3 with codelm's tokenizer (tiny_qwen3), float32 CPU."""
from __future__ import annotations

import pytest

from turbospec import LLM, SamplingParams

CHAT_TEMPLATE = ("{% for m in messages %}# {{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}def {% endif %}")


@pytest.fixture(scope="module")
def llm(tiny_qwen3):
    return LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96)


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, **{"max_tokens": 24, "ignore_eos": True, **kw})


def test_chat_without_a_template_says_how_to_fix_it(llm):
    assert not getattr(llm.get_tokenizer(), "chat_template", None)
    with pytest.raises(ValueError, match="has no chat template.*chat_template="):
        llm.chat([{"role": "user", "content": "hi"}])


def test_chat_renders_the_template_and_generates(llm, tmp_path):
    conv = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "add "}, {"type": "text", "text": "two"}]}]
    rendered = "# system: be brief\n# user: add \ntwo\ndef "            # text parts joined by "\n" (vLLM's)
    out = llm.chat(conv, greedy(), chat_template=CHAT_TEMPLATE)
    assert len(out) == 1 and out[0].prompt == rendered
    assert out[0].outputs[0].token_ids == llm.generate(rendered, greedy())[0].outputs[0].token_ids
    f = tmp_path / "t.jinja"
    f.write_text(CHAT_TEMPLATE)
    two = llm.chat([conv, [{"role": "user", "content": "x"}]], greedy(), chat_template=str(f),
                   add_generation_prompt=False)
    assert [o.prompt for o in two] == [rendered[:-4], "# user: x\n"]


@pytest.mark.parametrize("messages,kw,fragment", [
    ([], {}, "messages must be a conversation"),
    ([[]], {}, "conversation 0 is empty"),
    (["hello"], {}, "a message is a dict with a 'role'"),
    ([{"role": "user", "content": [{"type": "image_url"}]}], {}, "only text content parts"),
    ([{"role": "user", "content": "x"}], {"continue_final_message": True}, "add_generation_prompt=false"),
    ([{"role": "user", "content": "x"}], {"continue_final_message": True, "add_generation_prompt": False},
     "the last message has role 'user'"),
    ([{"role": "user", "content": "x"}], {"chat_template_kwargs": {"tokenize": True}}, "may not set 'tokenize'"),
])
def test_chat_bad_input(llm, messages, kw, fragment):
    with pytest.raises(ValueError) as e:
        llm.chat(messages, greedy(), chat_template=CHAT_TEMPLATE, **kw)
    assert fragment in str(e.value)


def test_chat_refusal_and_input_text_parts_render_as_text(llm):
    # OpenAI's message format: an assistant turn may carry a refusal part; vLLM renders it (and
    # 'input_text' parts) as text
    parts = [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "text", "text": "b"}]},
             {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
             {"role": "user", "content": "c"}]
    plain = [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "no"}, {"role": "user", "content": "c"}]
    out = llm.chat(parts, greedy(), chat_template=CHAT_TEMPLATE)[0]
    assert out.prompt == llm.chat(plain, greedy(), chat_template=CHAT_TEMPLATE)[0].prompt and "# assistant: no" in out.prompt
    with pytest.raises(ValueError, match=r"a refusal content part needs a string 'refusal'"):
        llm.chat([{"role": "assistant", "content": [{"type": "refusal"}]}], greedy(), chat_template=CHAT_TEMPLATE)


TOOLS_TEMPLATE = ("{% for t in tools %}# tool: {{ t.function.name }}\n{% endfor %}{% for m in messages %}"
                  "# {{ m['role'] }}: {{ m['content'] }}{% for c in m.tool_calls or [] %} -> "
                  "{{ c.function.name }}({{ c.function.arguments.city }}){% endfor %}{{ '\\n' }}{% endfor %}def ")


def test_chat_renders_tools_and_the_tool_turns(llm):
    """vLLM's LLM.chat(tools=...): the template gets the tools, and an assistant turn's JSON-string
    arguments as a dict; a template that ignores tools, or a bad schema, is a ValueError."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    conv = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    out = llm.chat(conv, greedy(), chat_template=TOOLS_TEMPLATE, tools=tools)
    assert out[0].prompt == "# tool: get_weather\n# user: weather?\n# assistant:  -> get_weather(Paris)\n# tool: sunny\ndef "
    with pytest.raises(ValueError, match="does not render them"):
        llm.chat(conv[:1], greedy(), chat_template=CHAT_TEMPLATE, tools=tools)
    with pytest.raises(ValueError, match=r"tools\[0\]\.type must be 'function'"):
        llm.chat(conv[:1], greedy(), chat_template=TOOLS_TEMPLATE, tools=[{"type": "x", "function": {"name": "f"}}])


def test_a_tool_message_needs_its_id_only_where_the_template_reads_it(llm):
    """A template that renders `tool_call_id` (Mistral's do) refuses a tool message without one,
    naming it; one that never reads it renders the message as sent (vLLM's)."""
    reads_id = ("{% for m in messages %}{% if m['role'] == 'tool' %}[{{ m['tool_call_id'] }}] {% endif %}"
                "{{ m['content'] }}\n{% endfor %}")
    conv = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}]
    with pytest.raises(ValueError, match=r"^conversation 0: message 1 is a 'tool' message without a tool_call_id"):
        llm.chat(conv, greedy(max_tokens=2), chat_template=reads_id)
    out = llm.chat([*conv[:1], {**conv[1], "tool_call_id": "c1"}], greedy(max_tokens=2), chat_template=reads_id)
    assert out[0].prompt == "hi\n[c1] 42\n"
    out = llm.chat(conv, greedy(max_tokens=2), chat_template=CHAT_TEMPLATE)
    assert out[0].prompt.endswith("# tool: 42\ndef ") and len(out[0].outputs[0].token_ids) == 2
