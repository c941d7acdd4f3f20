"""Where OpenAI's API is stricter than vLLM's, the server follows vLLM (docs/serving.md, "Where
OpenAI is stricter"): more than 4 `stop` strings and a `temperature` over 2 are served; `seed`
is an integer, and -1 is no seed (a random draw, vLLM's), while other negative seeds are seeds;
a `tool` message without `tool_call_id` is accepted unless the chat template reads the id. A real
server on codelm-12m with `--chat-template` set to a template that reads `tool_call_id` (as
Mistral's do), and the official `openai` client."""
from __future__ import annotations

import openai
import pytest

from .server_process import CODELM, MODEL_NAME, ServerProcess

# renders a tool reply with the id of the call it answers (Mistral's [TOOL_RESULTS] shape)
TOOL_ID_TEMPLATE = (
    "{%- for m in messages %}{%- if m['role'] == 'tool' %}"
    "{{- '[TOOL_RESULTS]{\"call_id\": \"' + m['tool_call_id'] + '\", \"content\": ' + m['content'] + '}[/TOOL_RESULTS]' }}"
    "{%- else %}{{- '<|' + m['role'] + '|>\\n' + m['content'] + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- endif %}")
PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    d = tmp_path_factory.mktemp("tool_id")
    (d / "tool_id.jinja").write_text(TOOL_ID_TEMPLATE)
    s = ServerProcess(CODELM, d / "server.log", "--chat-template", str(d / "tool_id.jinja"))
    yield s
    s.terminate()


@pytest.fixture(scope="module")
def c(srv):
    with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0) as client:
        yield client


def _sample(c, **kw) -> list[str]:
    r = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=16, temperature=1.5,
                             extra_body={"ignore_eos": True}, **kw)
    return [ch.text for ch in r.choices]


def test_seed_minus_one_is_a_random_draw(c):
    """vLLM's: seed -1 is no seed. It was seed 2**64 - 1: the same text every time."""
    texts = {_sample(c, seed=-1)[0] for _ in range(3)}
    assert len(texts) > 1, texts


def test_other_negative_seeds_are_seeds(c):
    """-2 is a seed like any other; with n=2 its second sample draws with seed -2 + 1 = -1, which
    is that sample's seed, not "unseeded": the request repeats exactly."""
    a, b = _sample(c, seed=-2, n=2), _sample(c, seed=-2, n=2)
    assert a == b and a[0] != a[1]
    assert _sample(c, seed=-3)[0] != a[0]


def test_seed_must_be_an_integer(c):
    for bad in (1.5, "7"):
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2, seed=bad)
        assert e.value.body["param"] == "seed", e.value.body


def test_more_than_four_stop_strings_are_served(c):
    """OpenAI caps `stop` at 4; vLLM does not, and neither does turbospec (up to 64)."""
    full = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0).choices[0].text
    cut = full[6:9]
    assert cut and cut not in full[:6], full
    stops = ["@@never-1", "@@never-2", "@@never-3", "@@never-4", "@@never-5", cut]
    r = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, stop=stops)
    assert r.choices[0].text == full[:full.index(cut)] and r.choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2, stop=[f"s{i}" for i in range(65)])
    assert e.value.body["param"] == "stop"


def test_temperature_over_two_is_served(c):
    """OpenAI caps temperature at 2; vLLM does not (turbospec: up to 1e30)."""
    r = c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=5.0, seed=1,
                             extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 8
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2, temperature=-0.5)
    assert e.value.body["param"] == "temperature"


def test_a_tool_message_needs_its_id_when_the_template_reads_it(c):
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "42"}]
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=2)
    body = e.value.body
    assert body["param"] == "messages.2.tool_call_id" and "tool_call_id" in body["message"], body
    messages[2]["tool_call_id"] = "call_1"
    r = c.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=2)
    assert r.usage.completion_tokens == 2


def test_a_tool_message_without_id_is_accepted_when_the_template_ignores_it(client):
    """The session server's template renders role and content only: nothing would use the id."""
    r = client.chat.completions.create(model=MODEL_NAME, max_tokens=2, temperature=0,
                                       messages=[{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
