"""SarvamMoE as a user meets it: a checkpoint in the published layout (sarvam-30b's config keys,
`auto_map` to its remote code included; Bailing tensor names; bf16 safetensors; a real tokenizer)
loaded, generated from, speculated on and served through the public API only. Numerics against a
reference are tests/test_sarvam.py's; here: no terminal prompt, lossless speculation, the server."""
from __future__ import annotations

import json
import shutil

import httpx
import openai
import pytest
import torch
from safetensors.torch import save_file

from tests.conftest import CODELM_DIR, TOKENIZER_FILES
from turbospec import LLM, SamplingParams

H, NH, NKV, D, I_DENSE, E, K, I_MOE, V, L = 64, 4, 2, 16, 128, 8, 2, 32, 8192, 3
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
pytestmark = pytest.mark.usefixtures("one_thread")      # tiny tensors: one intra-op thread is faster
PROMPTS = ["def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n",
           "import os\n", "class Foo:\n    def __init__(self):\n        self.x = 1\n        self.y = 2\n",
           "for i in range(10):\n    print(i)\nfor j in range(10):\n"]


def published_config(num_layers: int = L) -> dict:
    """sarvam-30b's config.json keys (shapes shrunk; codelm's token ids). The published config sets
    n_group = topk_group = 1 (a copy of it, huggingface.co/mygitphase/guhan-30b, read 2026-12-04);
    here 4 / 2, so that group-limited routing is exercised too."""
    return {"architectures": ["SarvamMoEForCausalLM"], "model_type": "sarvam_moe",
            "auto_map": {"AutoConfig": "configuration_sarvam_moe.SarvamMoEConfig",
                         "AutoModelForCausalLM": "modeling_sarvam_moe.SarvamMoEForCausalLM"},
            "vocab_size": V, "hidden_size": H, "intermediate_size": I_DENSE, "num_hidden_layers": num_layers,
            "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": D, "hidden_act": "silu",
            "use_qkv_bias": False, "use_bias": False, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
            "embedding_dropout": 0.0, "attention_dropout": 0.0, "output_dropout": 0.0, "initializer_range": 0.006,
            "max_position_embeddings": 4096, "rope_theta": 8000000.0, "rope_scaling": None, "use_cache": True,
            "max_window_layers": num_layers, "pad_token_id": 1, "eos_token_id": 0, "num_experts": E, "num_shared_experts": 1,
            "num_experts_per_tok": K, "n_group": 4, "topk_group": 2, "moe_intermediate_size": I_MOE,
            "first_k_dense_replace": 1, "output_router_logits": False, "use_qk_norm": True,
            "moe_router_enable_expert_bias": True, "routed_scaling_factor": 2.5, "score_function": "sigmoid",
            "norm_topk_prob": True, "router_dtype": "fp32", "torch_dtype": "bfloat16"}


def published_tensors(seed: int = 0, num_layers: int = L) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape, std=0.1):
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    def norm(n):
        return (1 + torch.randn(n, generator=g) * 0.1).to(torch.bfloat16)
    t = {"model.word_embeddings.weight": w(V, H, std=0.5), "model.norm.weight": norm(H),
         "lm_head.weight": w(V, H, std=0.5)}
    for layer in range(num_layers):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"], t[p + "post_attention_layernorm.weight"] = norm(H), norm(H)
        t[p + "attention.query_key_value.weight"] = w((NH + 2 * NKV) * D, H)     # q, then k, then v rows
        t[p + "attention.dense.weight"] = w(H, NH * D)
        t[p + "attention.query_layernorm.weight"], t[p + "attention.key_layernorm.weight"] = norm(D), norm(D)
        m = p + "mlp."
        if layer == 0:                                                          # first_k_dense_replace
            t[m + "gate_proj.weight"], t[m + "up_proj.weight"] = w(I_DENSE, H), w(I_DENSE, H)
            t[m + "down_proj.weight"] = w(H, I_DENSE)
            continue
        t[m + "gate.weight"] = w(E, H).float()                                 # router and bias in fp32
        t[m + "gate.expert_bias"] = torch.randn(E, generator=g) * 0.3
        for e in range(E):
            t[m + f"experts.{e}.gate_proj.weight"], t[m + f"experts.{e}.up_proj.weight"] = w(I_MOE, H), w(I_MOE, H)
            t[m + f"experts.{e}.down_proj.weight"] = w(H, I_MOE)
        t[m + "shared_experts.gate_proj.weight"], t[m + "shared_experts.up_proj.weight"] = w(I_MOE, H), w(I_MOE, H)
        t[m + "shared_experts.down_proj.weight"] = w(H, I_MOE)
    return t


def write_published_sarvam(path, num_layers: int = L):
    """A tiny SarvamMoE checkpoint in the published layout with codelm's tokenizer (+ a chat template)."""
    if not (CODELM_DIR / "tokenizer.json").is_file():
        pytest.skip(f"the demo model's tokenizer is missing at {CODELM_DIR}")
    save_file(published_tensors(num_layers=num_layers), str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(published_config(num_layers), indent=2))
    for fn in TOKENIZER_FILES:
        shutil.copy(CODELM_DIR / fn, path / fn)
    tok_cfg = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "chat_template": CHAT_TEMPLATE}))
    return path


@pytest.fixture(scope="module")
def sarvam_dir(tmp_path_factory):
    return write_published_sarvam(tmp_path_factory.mktemp("sarvam_published"))


@pytest.fixture(scope="module")
def plain(sarvam_dir):
    return LLM(str(sarvam_dir), device="cpu", dtype="float32")


def test_published_layout_loads_without_asking_to_run_its_code(sarvam_dir, capfd):
    # its config's auto_map made transformers' tokenizer loader ask "Do you wish to run the custom
    # code? [y/N]" on the terminal (and wait 15 s for an answer) at every start
    llm = LLM(str(sarvam_dir), device="cpu", dtype="float32")
    out = llm.generate(PROMPTS[0], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))[0].outputs[0]
    captured = capfd.readouterr()
    assert "custom code" not in captured.out + captured.err
    assert len(out.token_ids) == 8 and out.text == llm.get_tokenizer().decode(out.token_ids)
    layers = llm.llm_engine.model.model.layers                          # first_k_dense_replace = 1
    assert type(layers[0].mlp).__name__ == "LlamaMLP" and layers[1].mlp.shared_experts is not None
    assert layers[1].mlp.experts.routing.n_group == 4 and layers[1].mlp.gate.weight.dtype == torch.float32


@pytest.mark.parametrize("spec", [{"method": "ngram", "num_speculative_tokens": 4},
                                  {"method": "ngram", "num_speculative_tokens": 3, "draft_length": "auto"},
                                  {"method": "draft_model", "num_speculative_tokens": 3}],
                         ids=["ngram", "ngram-auto", "draft_model"])
def test_speculation_on_sarvam_is_lossless(sarvam_dir, plain, tiny_qwen3, spec):
    if spec["method"] == "draft_model":
        spec = {**spec, "model": str(tiny_qwen3)}                   # a Qwen3 drafter with the same tokenizer
    llm = LLM(str(sarvam_dir), device="cpu", dtype="float32", speculative_config=spec)
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    seeded = [SamplingParams(temperature=0.8, top_p=0.9, seed=7 + i, max_tokens=24, ignore_eos=True)
              for i in range(len(PROMPTS))]
    for prompts, params in ((PROMPTS[:1], greedy), (PROMPTS, greedy), (PROMPTS, seeded)):
        ref = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
        got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
        assert got == ref
    assert llm.get_metrics()["spec_decode_num_drafts"] > 0


def test_mtp_on_sarvam_is_refused_by_name(sarvam_dir):
    with pytest.raises(ValueError, match="no MTP layers"):
        LLM(str(sarvam_dir), device="cpu", dtype="float32",
            speculative_config={"method": "mtp", "num_speculative_tokens": 2})


def test_serve_sarvam_with_speculation(sarvam_dir, tmp_path):
    from tests.serve.server_process import ServerProcess
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4})
    srv = ServerProcess(sarvam_dir, tmp_path / "server.log", "--speculative-config", spec, name="sarvam")
    try:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", timeout=60, max_retries=0)
        r = client.completions.create(model="sarvam", prompt=PROMPTS[0], max_tokens=16, temperature=0, logprobs=2)
        assert r.usage.completion_tokens == len(r.choices[0].logprobs.tokens) and r.choices[0].text
        assert all(len(top) >= 1 for top in r.choices[0].logprobs.top_logprobs)
        stream = client.completions.create(model="sarvam", prompt=PROMPTS[0], max_tokens=16, temperature=0,
                                           stream=True)
        assert "".join(c.choices[0].text for c in stream if c.choices) == r.choices[0].text
        n2 = client.completions.create(model="sarvam", prompt=PROMPTS[1], max_tokens=8, temperature=0.8, n=2, seed=1)
        assert sorted(c.index for c in n2.choices) == [0, 1] and n2.usage.completion_tokens == 16
        chat = client.chat.completions.create(model="sarvam", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=8, temperature=0, logprobs=True, top_logprobs=2)
        assert chat.usage.completion_tokens == len(chat.choices[0].logprobs.content)
        assert srv.metric("vllm:spec_decode_num_drafts_total") > 0
        assert srv.metric("vllm:generation_tokens_total") >= 16 + 16 + 16 + chat.usage.completion_tokens
        assert httpx.get(f"{srv.url}/health", timeout=10).status_code == 200
        assert "custom code" not in srv.log()
    finally:
        srv.terminate()
