"""The chat template as clients drive it, against a real server and transformers' own
`apply_chat_template` on the repo tokenizer: every message shape renders to the same prompt,
assistant prefill (`continue_final_message`), `add_generation_prompt`, `chat_template_kwargs`,
messages echoed back from earlier responses, and `--chat-template` for a model that has none."""
from __future__ import annotations

import openai
import pytest
from transformers import AutoTokenizer

from .server_process import CODELM, MODEL_NAME, ServerProcess

# a ChatML template that knows continue_final_message and a Qwen3-style enable_thinking switch
CHATML = ("{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] }}"
          "{%- if not (loop.last and continue_final_message) %}{{- '<|im_end|>\\n' }}{%- endif %}"
          "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
          "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}"
          "{%- endif %}{%- endif %}")

SHAPES = {
    "system": [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def fib(n):"}],
    "developer": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    "text_parts": [{"role": "user", "content": [{"type": "text", "text": "def "}, {"type": "text", "text": "fib(n):"}]}],
    "multi_turn": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "c"}],
    "empty": [{"role": "user", "content": ""}],
    "trailing_assistant": [{"role": "user", "content": "fib"}, {"role": "assistant", "content": "def fib(n):"}],
}


def _ids(tok, messages, **kwargs) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, **kwargs)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.fixture(scope="module")
def tok(chat_model_dir):
    return AutoTokenizer.from_pretrained(chat_model_dir)


def _greedy(client, **kw):
    return client.chat.completions.create(model=MODEL_NAME, max_tokens=6, temperature=0, **kw)


def _completion_of(client, tok, messages, **template_kw) -> str:
    """The same prompt sent to /v1/completions as the rendered template text."""
    text = tok.apply_chat_template(messages, tokenize=False, **template_kw)
    return client.completions.create(model=MODEL_NAME, prompt=text, max_tokens=6, temperature=0).choices[0].text


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_message_shape_renders_like_transformers(client, tok, shape):
    messages = SHAPES[shape]
    r = _greedy(client, messages=messages)
    ref = [{**m, "content": m["content"] if isinstance(m["content"], str)
            else "\n".join(p["text"] for p in m["content"])} for m in messages]   # vLLM's join
    assert r.usage.prompt_tokens == len(_ids(tok, ref, add_generation_prompt=True))
    assert r.choices[0].message.content == _completion_of(client, tok, ref, add_generation_prompt=True)


def test_assistant_prefill_continues_the_final_message(client, tok):
    messages = SHAPES["trailing_assistant"]
    r = _greedy(client, messages=messages, extra_body={"continue_final_message": True})
    ref = _ids(tok, messages, continue_final_message=True, add_generation_prompt=False)
    assert r.usage.prompt_tokens == len(ref)
    assert tok.decode(ref).endswith("def fib(n):")           # no end-of-turn after the prefill
    assert r.choices[0].message.content == _completion_of(client, tok, messages, continue_final_message=True)
    # the default opens a new assistant turn instead (as OpenAI and vLLM do)
    plain = _greedy(client, messages=messages)
    assert plain.usage.prompt_tokens == len(_ids(tok, messages, add_generation_prompt=True)) > len(ref)


def test_add_generation_prompt_false(client, tok):
    messages = SHAPES["system"]
    r = _greedy(client, messages=messages, extra_body={"add_generation_prompt": False})
    assert r.usage.prompt_tokens == len(_ids(tok, messages, add_generation_prompt=False))


@pytest.mark.parametrize("extra, word", [
    ({"continue_final_message": True, "add_generation_prompt": True}, "add_generation_prompt=false"),
    ({"chat_template_kwargs": {"tokenize": True}}, "tokenize"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "top-level"),
    ({"chat_template_kwargs": "enable_thinking"}, "chat_template_kwargs"),
])
def test_contradictory_template_options_are_400(client, extra, word):
    with pytest.raises(openai.BadRequestError) as e:
        _greedy(client, messages=SHAPES["trailing_assistant"], extra_body=extra)
    assert word in e.value.body["message"]


def test_continuing_a_user_message_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        _greedy(client, messages=SHAPES["system"], extra_body={"continue_final_message": True})
    assert "role 'user'" in e.value.body["message"] and e.value.body["param"] == "continue_final_message"


def test_messages_echoed_from_a_previous_response(client, tok):
    """Apps append the previous response's message object, or its dict with every field."""
    first = _greedy(client, messages=SHAPES["system"])
    again = _greedy(client, messages=[*SHAPES["system"], first.choices[0].message,
                                      {"role": "user", "content": "more"}])
    as_dict = {**first.choices[0].message.model_dump(), "refusal": None, "annotations": [], "tool_calls": None}
    same = _greedy(client, messages=[*SHAPES["system"], as_dict, {"role": "user", "content": "more"}])
    assert same.choices[0].message.content == again.choices[0].message.content
    ref = [*SHAPES["system"], {"role": "assistant", "content": first.choices[0].message.content},
           {"role": "user", "content": "more"}]
    assert again.usage.prompt_tokens == len(_ids(tok, ref, add_generation_prompt=True))
    tool = _greedy(client, messages=[{"role": "user", "content": "hi"},
                                     {"role": "tool", "content": "42", "tool_call_id": "call_1"}])
    assert tool.choices[0].finish_reason == "length"


@pytest.fixture(scope="module")
def chatml_server(tmp_path_factory):
    """codelm-12m as shipped (no template) with `--chat-template FILE`."""
    d = tmp_path_factory.mktemp("chatml")
    (d / "chatml.jinja").write_text(CHATML)
    srv = ServerProcess(CODELM, d / "server.log", "--chat-template", str(d / "chatml.jinja"))
    yield srv
    srv.terminate()


def test_chat_template_flag_and_template_kwargs(chatml_server):
    tok = AutoTokenizer.from_pretrained(CODELM)
    tok.chat_template = CHATML
    with openai.OpenAI(base_url=f"{chatml_server.url}/v1", api_key="unused", timeout=60, max_retries=0) as c:
        messages = SHAPES["system"]
        r = _greedy(c, messages=messages)
        assert r.usage.prompt_tokens == len(_ids(tok, messages, add_generation_prompt=True))
        off = _greedy(c, messages=messages, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        ref = _ids(tok, messages, add_generation_prompt=True, enable_thinking=False)
        assert off.usage.prompt_tokens == len(ref) > r.usage.prompt_tokens
        assert off.choices[0].message.content == _completion_of(c, tok, messages, add_generation_prompt=True,
                                                                enable_thinking=False)


def test_chat_template_flag_that_is_no_template_is_refused(tmp_path):
    from typer.testing import CliRunner

    from turbospec.cli import app
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu",
                                 "--chat-template", str(tmp_path / "missing.jinja")])
    assert r.exit_code == 2
    assert "neither a file nor a Jinja template" in " ".join(r.output.replace("│", " ").split())
    assert r.exception is None or isinstance(r.exception, SystemExit)
