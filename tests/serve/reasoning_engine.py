"""A scripted stand-in engine for the reasoning tests: the real codelm-12m tokenizer, a Qwen3-style
template (tools; an earlier turn's reasoning_content; the generation prompt as Qwen3's original
template leaves it, or opening `<think>` when `chat_template_kwargs.think_in_prompt` is set, as
newer Qwen3 and DeepSeek-R1 templates do, or closing an empty block for `enable_thinking: false`),
and a "model" whose reply the test sets (`engine.reply`). The reply is tokenized with the real
tokenizer (codelm splits `<think>` into `<`, `th`, `ink`, `>`) and streamed `pattern[i % len]`
tokens per step, the text of each step decoded from the token ids, so that tags are cut wherever
the token boundaries fall."""
from __future__ import annotations

import time

from turbospec.engine.sequence import RequestMetrics
from turbospec.outputs import CompletionOutput, RequestOutput

from .fake_engine import FakeEngine
from .server_process import CODELM

THINK_TEMPLATE = """\
{%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' %}<|im_start|>assistant
{% if m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif %}{{ m.content }}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% elif think_in_prompt is defined and think_in_prompt %}<think>
{% endif %}
{%- endif %}"""

STEP_S = 0.003


class ThinkEngine(FakeEngine):
    def __init__(self):
        from transformers import AutoTokenizer
        super().__init__(max_model_len=1 << 20)
        self.tokenizer = AutoTokenizer.from_pretrained(CODELM)
        self.tokenizer.chat_template = THINK_TEMPLATE
        self.reply = "Hello."
        self.pattern: tuple[int, ...] = (1, 2, 3)     # tokens per step, cycled
        self.prompts: list[str] = []

    def reply_ids(self, reply: str | None = None) -> list[int]:
        return self.tokenizer.encode(self.reply if reply is None else reply, add_special_tokens=False)

    def add_request(self, request_id, prompt, params, add_special_tokens=True) -> None:
        ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        self.prompts.append(prompt)
        self.reqs[request_id] = dict(text=prompt, ids=ids, params=params, out=[], steps=0,
                                     reply=self.reply_ids(), pattern=self.pattern, metrics=RequestMetrics())

    def step(self) -> list[RequestOutput]:
        time.sleep(STEP_S)                 # the client reads each step's delta: the stream is really split
        outputs = []
        for rid, r in list(self.reqs.items()):
            n = r["pattern"][r["steps"] % len(r["pattern"])]
            r["steps"] += 1
            limit = r["params"].max_tokens or len(r["reply"])
            r["out"] = r["reply"][:min(len(r["out"]) + n, limit)]
            reason = "stop" if len(r["out"]) == len(r["reply"]) else "length" if len(r["out"]) >= limit else None
            comp = CompletionOutput(0, self.tokenizer.decode(r["out"]), list(r["out"]), None, reason)
            outputs.append(RequestOutput(rid, r["text"], r["ids"], [comp], reason is not None, r["metrics"]))
            if reason is not None:
                del self.reqs[rid]
        return outputs
