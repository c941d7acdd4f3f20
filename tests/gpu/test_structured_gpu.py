"""Structured outputs on CUDA (codelm-12m, bf16, CUDA graphs on): outputs match their constraint,
a request held to a grammar beside plain ones changes none of their tokens (they keep their decode
bursts once it finishes), and n-gram speculation gives the same tokens as plain decoding."""
from __future__ import annotations

import json
import re

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

pytest.importorskip("llguidance", reason="structured outputs need llguidance (a dependency the GPU image may lack)")

from turbospec import LLM, SamplingParams  # noqa: E402

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}}}
PROMPTS = ["def parse(data):\n    return ", "import os\n", "class A:\n", "x = "]


def _params():
    plain = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    return [plain, plain,
            SamplingParams(temperature=0.0, max_tokens=64, structured_outputs={"json": SCHEMA}),
            SamplingParams(temperature=0.8, seed=1, max_tokens=32, structured_outputs={"regex": "[0-9]{2,6}"})]


def test_structured_on_cuda(codelm_dir):
    llm = LLM(str(codelm_dir), device="cuda", dtype="bfloat16")
    assert llm.llm_engine.runner.graphs is not None
    outs = [o.outputs[0] for o in llm.generate(PROMPTS, _params())]
    obj = json.loads(outs[2].text)
    assert set(obj) == {"name", "age"} and isinstance(obj["age"], int) and outs[2].finish_reason == "stop"
    assert re.fullmatch("[0-9]{2,6}", outs[3].text) and outs[3].finish_reason == "stop"
    alone = [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:2], _params()[:2])]
    assert [o.token_ids for o in outs[:2]] == alone
    spec = LLM(str(codelm_dir), device="cuda", dtype="bfloat16",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    assert [o.outputs[0].token_ids for o in spec.generate(PROMPTS, _params())] == [o.token_ids for o in outs]
