"""dtype "auto" on CUDA follows the checkpoint as vLLM does: a float16 checkpoint runs in float16
(the Triton kernels, graphs and bursts included) and decodes what dtype="float16" decodes; a
bfloat16 one runs in bfloat16."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs CUDA", allow_module_level=True)

from safetensors.torch import load_file, save_file  # noqa: E402

from turbospec import LLM, SamplingParams  # noqa: E402

from tests.conftest import CODELM_DIR  # noqa: E402

PROMPTS = ["def fibonacci(n):\n", "import os\nimport sys\n", "class Stack:\n    def __init__(self):\n"]


def _float16_copy(dst):
    dst.mkdir()
    for f in CODELM_DIR.iterdir():
        if f.suffix == ".safetensors":
            save_file({k: v.to(torch.float16) for k, v in load_file(f).items()}, dst / f.name, metadata={"format": "pt"})
        else:
            shutil.copy(f, dst / f.name)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.pop("dtype", None)
    cfg["torch_dtype"] = "float16"
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_auto_follows_a_float16_checkpoint(tmp_path):
    model = str(_float16_copy(tmp_path / "fp16"))
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    auto = LLM(model, device="cuda", num_kv_blocks=64)
    assert auto.llm_engine.dtype == torch.float16
    got = [o.outputs[0].token_ids for o in auto.generate(PROMPTS, params)]
    assert auto.llm_engine.counters["num_burst_tokens"] > 0
    del auto
    explicit = LLM(model, device="cuda", dtype="float16", num_kv_blocks=64)
    assert [o.outputs[0].token_ids for o in explicit.generate(PROMPTS, params)] == got
    assert LLM(str(CODELM_DIR), device="cuda", num_kv_blocks=64).llm_engine.dtype == torch.bfloat16
