"""A scripted stand-in engine for the tool-calling tests: the real codelm-12m tokenizer with a
Qwen-style template that renders tools (so prompts render exactly as in production), and a "model"
whose reply the test sets (`engine.reply`), streamed a few characters per step. Served by uvicorn
in a thread on 127.0.0.1, so that the official `openai` client talks to it over HTTP."""
from __future__ import annotations

import threading
import time

import uvicorn

from turbospec.outputs import CompletionOutput, RequestOutput
from turbospec.serve.app import build_app

from .fake_engine import FakeEngine
from .server_process import CODELM, free_port

# the shape of Qwen2.5 / Qwen3's template, reduced to what the tests need
TOOLS_TEMPLATE = """\
{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Call a function as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role == 'assistant' and m.tool_calls is defined %}<|im_start|>assistant
{{ m.content }}
{%- for tc in m.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

CHARS_PER_STEP = 3
STEP_S = 0.005


class ToolEngine(FakeEngine):
    def __init__(self):
        from transformers import AutoTokenizer
        super().__init__(max_model_len=1 << 20)
        self.tokenizer = AutoTokenizer.from_pretrained(CODELM)
        self.tokenizer.chat_template = TOOLS_TEMPLATE
        self.reply = "Hello."
        self.prompts: list[str] = []
        self.params: list = []

    def add_request(self, request_id, prompt, params, add_special_tokens=True) -> None:
        super().add_request(request_id, prompt, params)
        self.prompts.append(prompt)
        self.params.append(params)
        self.reqs[request_id]["reply"] = self.reply

    def step(self) -> list[RequestOutput]:
        time.sleep(STEP_S)                 # the client reads each step's delta: the stream is really split
        outputs = []
        for rid, r in list(self.reqs.items()):
            r["out"].append(len(r["out"]))
            n = len(r["out"])
            text = r["reply"][:n * CHARS_PER_STEP]
            reason = "stop" if len(text) == len(r["reply"]) else \
                "length" if r["params"].max_tokens and n >= r["params"].max_tokens else None
            comp = CompletionOutput(0, text, list(r["out"]), None, reason)
            outputs.append(RequestOutput(rid, r["text"], r["ids"], [comp], reason is not None, r["metrics"]))
            if reason is not None:
                del self.reqs[rid]
        return outputs


class InProcessServer:
    """`build_app(engine, name, **app_options)` under uvicorn in a daemon thread on 127.0.0.1."""

    def __init__(self, engine, name: str = "fake", **app_options):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(build_app(engine, name, **app_options), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the in-process server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
