"""The offline API as a vLLM script calls it: LLM(...) constructor arguments and the per-call
arguments of generate / chat that vLLM has and turbospec does not implement are accepted at their
neutral values (a script or wrapper that forwards them runs unchanged) and refused by name,
with what to do instead, otherwise. A random-weight Qwen3 with codelm's tokenizer, float32 CPU."""
from __future__ import annotations

import pytest

from turbospec import LLM, SamplingParams

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"
MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "def add"}, {"type": "text", "text": "(a, b):"}]}]


@pytest.fixture(scope="module")
def llm(tiny_qwen3):
    return LLM(str(tiny_qwen3), device="cpu", dtype="float32", max_model_len=96, enable_chunked_prefill=True,
               swap_space=4, load_format="safetensors", task="generate", disable_custom_all_reduce=True)


def greedy() -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def test_neutral_call_arguments_change_nothing(llm):
    plain = llm.generate(["def f(x):", "import os"], greedy())
    same = llm.generate(["def f(x):", "import os"], greedy(), lora_request=None, priority=[0, 0])
    assert [o.outputs[0].token_ids for o in same] == [o.outputs[0].token_ids for o in plain]
    for kw in ({"lora_request": [None, None]}, {"tokenization_kwargs": None}, {"tokenization_kwargs": {}}):
        same = llm.generate(["def f(x):", "import os"], greedy(), **kw)
        assert [o.outputs[0].token_ids for o in same] == [o.outputs[0].token_ids for o in plain], kw
    chat = llm.chat(MESSAGES, greedy(), chat_template=TEMPLATE)
    for fmt in ("auto", "string"):
        again = llm.chat(MESSAGES, greedy(), chat_template=TEMPLATE, lora_request=None,
                         chat_template_content_format=fmt, mm_processor_kwargs=None)
        assert again[0].outputs[0].token_ids == chat[0].outputs[0].token_ids
        assert again[0].prompt == "<|user|>def add\n(a, b):\n<|assistant|>"


@pytest.mark.parametrize("call,words", [
    (lambda llm: llm.generate("x", greedy(), lora_request=object()), "merge the adapter"),
    (lambda llm: llm.generate(["x", "y"], greedy(), priority=[0, 1]),
     "prompt[1]: priority=1 needs priority scheduling, which is off: start the engine with scheduling_policy='priority'"),
    (lambda llm: llm.generate(["x", "y"], greedy(), priority=[0]), "got 2 prompts but 1 priorities"),
    (lambda llm: llm.chat(MESSAGES, greedy(), chat_template=TEMPLATE, chat_template_content_format="openai"),
     "one string"),
    (lambda llm: llm.chat(MESSAGES, greedy(), chat_template=TEMPLATE, lora_request=object()), "lora_request"),
    (lambda llm: llm.generate(["x", "y"], greedy(), lora_request=[None, object()]), "merge the adapter"),
    (lambda llm: llm.generate("x", greedy(), tokenization_kwargs={"truncation": True}),
     "tokenization_kwargs={'truncation': True} is not supported"),
    (lambda llm: llm.chat(MESSAGES, greedy(), chat_template=TEMPLATE, tokenization_kwargs={"max_length": 4}),
     "prompt_token_ids"),
])
def test_other_values_are_refused_by_name(llm, call, words):
    with pytest.raises(ValueError) as e:
        call(llm)
    assert words in str(e.value)


@pytest.mark.parametrize("kwargs,words", [({"tokenizer_mode": "slow"}, "tokenizer_mode='slow'"),
                                          ({"enable_lora": True}, "merge the adapter"),
                                          ({"cpu_offload_gb": 4}, "cpu_offload_gb=4")])
def test_vllm_constructor_arguments_refused_with_a_hint(tiny_qwen3, kwargs, words):
    with pytest.raises(ValueError) as e:
        LLM(str(tiny_qwen3), device="cpu", **kwargs)
    assert words in str(e.value) and "unknown argument" not in str(e.value)


def _with_stored_dtype(src, dst, stored: str | None):
    """`src` (weights symlinked) with config.json's torch_dtype / dtype set to `stored` (None: neither)."""
    import json
    import os
    dst.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            os.symlink(f, dst / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("torch_dtype", None), cfg.pop("dtype", None)
    if stored is not None:
        cfg["torch_dtype" if stored != "bfloat16" else "dtype"] = stored
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("stored,on_gpu", [("float16", "float16"), ("bfloat16", "bfloat16"),
                                           ("float32", "bfloat16"), (None, "bfloat16")])
def test_dtype_auto_follows_the_checkpoint(tiny_qwen3, tmp_path, stored, on_gpu):
    """vLLM's dtype "auto": on GPU the checkpoint's torch_dtype (float32 ones in bfloat16); on CPU
    float32 whatever it stores (docs/serving.md), and an explicit dtype always wins."""
    import torch

    from turbospec.config import ModelConfig, resolve_dtype
    model = _with_stored_dtype(tiny_qwen3, tmp_path / "m", stored)
    cfg = ModelConfig.from_pretrained(str(model))
    assert resolve_dtype("auto", cfg.dtype, torch.device("cuda")) == getattr(torch, on_gpu)
    assert resolve_dtype(None, cfg.dtype, torch.device("cuda")) == getattr(torch, on_gpu)
    assert resolve_dtype("float32", cfg.dtype, torch.device("cuda")) == torch.float32
    assert resolve_dtype("auto", cfg.dtype, torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", cfg.dtype, torch.device("cpu")) == torch.bfloat16
    if stored == "float16":                      # the LLM API on CPU: auto (its default) is float32
        auto = LLM(str(model), device="cpu", max_model_len=64)
        explicit = LLM(str(model), device="cpu", dtype="float32", max_model_len=64)
        assert auto.llm_engine.dtype == torch.float32
        assert next(auto.llm_engine.runner.model.parameters()).dtype == torch.float32
        assert auto.generate(["def f(x):"], greedy())[0].outputs[0].token_ids == \
            explicit.generate(["def f(x):"], greedy())[0].outputs[0].token_ids
        with pytest.raises(ValueError, match="float32, bfloat16, float16"):
            LLM(str(model), device="cpu", dtype="int8")


@pytest.mark.parametrize("rope,theta", [({}, 1e6), ({"rope_parameters": {"rope_type": "default"}}, 1e6),
                                        ({"rope_theta": 10000.0}, 10000.0),
                                        ({"rope_parameters": {"rope_theta": 5e5}}, 5e5)])
def test_dflash_drafter_without_rope_theta_gets_vllms_default(codelm_dir, tmp_path, rope, theta):
    """vLLM's DFlash loader gives a drafter whose config.json has no rope_theta 1e6 (Qwen3's), not
    transformers' 10000; a theta given (either spelling) is kept. Loaded as `LLM` loads it."""
    import json
    import os

    import torch
    src = codelm_dir.parent / "codelm-12m-dflash"
    if not (src / "config.json").is_file():
        pytest.skip(f"no DFlash drafter at {src}")
    draft = tmp_path / "dflash"
    draft.mkdir()
    for f in src.iterdir():
        if f.name != "config.json":
            os.symlink(f, draft / f.name)
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("rope_theta"), cfg.pop("rope_parameters", None)
    (draft / "config.json").write_text(json.dumps({**cfg, **rope}))
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=128,
              speculative_config={"method": "dflash", "model": str(draft), "num_speculative_tokens": 7})
    model = llm.llm_engine.proposer.draft
    assert model.config.rope.theta == theta
    head_dim = model.config.head_dim
    want = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    assert torch.allclose(model.inv_freq.float().cpu(), want)


def test_use_tqdm_may_be_vllms_factory(llm):
    """vLLM's use_tqdm: bool or a callable making the bar; the callable is called as tqdm and updated per request."""
    made = []

    class Bar:
        def __init__(self, **kw):
            made.append(kw)
            self.n = 0

        def update(self, k):
            self.n += k

        def close(self):
            made.append(self.n)
    llm.generate(["def f(x):", "import os"], greedy(), use_tqdm=Bar)
    assert made == [{"total": 2, "desc": "generate", "unit": "req"}, 2]
