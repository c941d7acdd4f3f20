"""`--reasoning-parser` through the command line: vLLM's launch-line flags accepted
(`--reasoning-parser qwen3`, the deprecated `--enable-reasoning`), an unknown parser refused with
the list before anything loads, and a real `turbospec serve` (codelm-12m on CPU, a ChatML template
that opens `<think>` in the prompt, as DeepSeek-R1's does) whose output, which never closes the
block, is all reasoning: equal to the plain completion of the same prompt, with usage, finish
reason and logprobs as without the parser."""
from __future__ import annotations

import openai
import pytest
from typer.testing import CliRunner

from turbospec.cli import app

from .server_process import CODELM, MODEL_NAME, ServerProcess

R1_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


def _run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["serve", *args])
    return r.exit_code, " ".join(r.output.replace("│", " ").split())


def test_vllm_reasoning_flags_are_accepted():
    """It gets as far as loading the model (a Hugging Face id: refused with the download command)."""
    code, out = _run("Qwen/Qwen3-8B", "--device", "cpu", "--reasoning-parser", "qwen3", "--enable-reasoning")
    assert code == 2 and "hf download Qwen/Qwen3-8B" in out
    code, out = _run("Qwen/Qwen3-8B", "--device", "cpu", "--reasoning-parser", "deepseek_r1")
    assert code == 2 and "hf download Qwen/Qwen3-8B" in out


def test_an_unknown_parser_is_refused_with_the_list_before_loading():
    code, out = _run(str(CODELM), "--device", "cpu", "--reasoning-parser", "nope")
    assert code == 2
    assert out == ("turbospec serve: --reasoning-parser: 'nope' is not a reasoning parser turbospec has: "
                   "use deepseek_r1 or qwen3")


def test_enable_reasoning_alone_is_a_no_op_and_help_says_so():
    code, out = _run("Qwen/Qwen3-8B", "--device", "cpu", "--enable-reasoning")
    assert code == 2 and "--enable-reasoning does nothing without --reasoning-parser" in out
    code, out = _run("--help")
    assert code == 0 and "--reasoning-parser" in out and "qwen3 or deepseek_r1" in out
    assert "--enable-reasoning" in out and "Deprecated, does nothing" in out


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    d = tmp_path_factory.mktemp("reasoning")
    (d / "r1.jinja").write_text(R1_TEMPLATE)
    srv = ServerProcess(CODELM, d / "server.log", "--chat-template", str(d / "r1.jinja"),
                        "--enable-reasoning", "--reasoning-parser", "deepseek_r1")
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0) as c:
        yield c
    assert "reasoning parser deepseek_r1" in srv.log()
    srv.terminate()


def test_unclosed_thinking_is_all_reasoning_on_a_real_server(client):
    messages = [{"role": "user", "content": "def fib(n):"}]
    prompt = "<|im_start|>user\ndef fib(n):<|im_end|>\n<|im_start|>assistant\n<think>\n"
    plain = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=12, temperature=0)
    text = plain.choices[0].text
    assert "</think>" not in text and text.strip()
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=12, temperature=0,
                                       logprobs=True)
    m = r.choices[0].message
    assert (m.reasoning, m.reasoning_content, m.content) == (text, text, None)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == plain.usage.prompt_tokens and r.usage.completion_tokens == 12
    assert "".join(t.token for t in r.choices[0].logprobs.content) == text     # logprobs: every token
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=12,
                                                 temperature=0, logprobs=True, stream=True,
                                                 stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.model_extra.get("reasoning") or "" for d in deltas) == text
    assert "".join(d.model_extra.get("reasoning_content") or "" for d in deltas) == text
    assert "".join(d.content or "" for d in deltas) == ""
    assert "".join(t.token for c in chunks if c.choices and c.choices[0].logprobs
                   for t in c.choices[0].logprobs.content) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    assert chunks[-1].usage.completion_tokens == 12


def test_a_constraint_without_a_think_gate_is_content(client):
    """codelm's tokenizer splits <think> / </think>, so the server cannot hold the constraint to the
    content alone: it holds from the first token, and that output is returned as content (the
    deepseek_r1 parser would call it all reasoning), streamed or not."""
    messages = [{"role": "user", "content": "def fib(n):"}]
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=24, temperature=0,
                                       response_format={"type": "json_object"})
    m = r.choices[0].message
    assert m.content.startswith("{") and getattr(m, "reasoning", None) is None      # cut by max_tokens
    chunks = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=24, temperature=0,
                                            response_format={"type": "json_object"}, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == m.content
