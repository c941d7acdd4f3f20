"""The files around the weights, as Hugging Face checkpoints ship them: generation_config.json's
eos_token_id list; a tokenizer that adds a BOS (Llama's post-processor) and a chat template that
renders it. Real codelm-12m weights and tokenizer, float32 CPU, against transformers."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.config import ModelConfig

PROMPT = "def fibonacci(n):\n"


BOS_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
MESSAGES = [{"role": "user", "content": "Write fibonacci."}]


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.fixture(scope="module")
def bos_model_dir(codelm_dir, tmp_path_factory):
    """codelm-12m whose tokenizer prepends <|endoftext|> (id 0) as Llama's prepends <|begin_of_text|>,
    with a chat template that renders `bos_token` itself (as Llama-3's does)."""
    model_dir = _copy(codelm_dir, tmp_path_factory.mktemp("bos") / "codelm")
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    bos = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tok["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}}
    (model_dir / "tokenizer.json").write_text(json.dumps(tok))
    cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    (model_dir / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": BOS_TEMPLATE}))
    return model_dir


def _llm(model_dir) -> LLM:
    return LLM(str(model_dir), device="cpu", dtype="float32", max_model_len=128, num_kv_blocks=16)


def _hf_greedy(model_dir, ids: list[int], n: int) -> list[int]:
    """transformers' generate, which stops at generation_config.json's eos_token_id(s)."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, pad_token_id=1)
    return out[0, len(ids):].tolist()


def test_generation_config_eos_list_stops_generation(codelm_dir, tmp_path):
    # Llama-3 / Qwen instruct checkpoints list their end-of-turn token in generation_config.json's
    # eos_token_id, not (only) in config.json's; transformers and vLLM stop on every one of them
    model_dir = _copy(codelm_dir, tmp_path / "codelm")
    plain = _llm(model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))[0]
    ids = plain.outputs[0].token_ids                         # codelm's own greedy continuation
    stop_at = next(i for i in range(3, len(ids)) if ids[i] not in ids[:i] and ids[i] != 0)
    gen = json.loads((model_dir / "generation_config.json").read_text())
    gen["eos_token_id"] = [0, ids[stop_at]]                  # config.json keeps eos_token_id 0
    (model_dir / "generation_config.json").write_text(json.dumps(gen))

    assert ModelConfig.from_pretrained(str(model_dir)).eos_token_ids == (0, ids[stop_at])
    out = _llm(model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0]
    assert out.finish_reason == "stop"
    assert list(out.token_ids) == list(ids[:stop_at + 1])
    assert list(out.token_ids) == _hf_greedy(model_dir, plain.prompt_token_ids, 12)


def test_tokenizer_eos_stops_generation(codelm_dir, tmp_path):
    # vLLM stops on the tokenizer's eos_token as well as on the config's eos_token_id(s)
    model_dir = _copy(codelm_dir, tmp_path / "codelm")
    llm = _llm(model_dir)
    plain = llm.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))[0]
    ids = plain.outputs[0].token_ids
    stop_at = next(i for i in range(3, len(ids)) if ids[i] not in ids[:i] and ids[i] != 0)
    eos_tok = llm.get_tokenizer().convert_ids_to_tokens(ids[stop_at])
    cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    (model_dir / "tokenizer_config.json").write_text(json.dumps({**cfg, "eos_token": eos_tok}))
    out = _llm(model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0]
    assert out.finish_reason == "stop" and list(out.token_ids) == list(ids[:stop_at + 1])
    ignored = _llm(model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))
    assert list(ignored[0].outputs[0].token_ids) == list(ids)


def test_text_prompt_dict_as_vllm_takes_it(codelm_dir):
    llm = _llm(codelm_dir)
    params = SamplingParams(temperature=0.0, max_tokens=6)
    a = llm.generate({"prompt": PROMPT}, params)[0]
    b = llm.generate(PROMPT, params)[0]
    assert a.prompt_token_ids == b.prompt_token_ids and a.outputs[0].token_ids == b.outputs[0].token_ids
    with pytest.raises(ValueError, match=r"'prompt_token_ids' list.*or a 'prompt' string"):
        llm.generate({"text": PROMPT}, params)


def test_broken_generation_config_is_named(codelm_dir, tmp_path):
    model_dir = _copy(codelm_dir, tmp_path / "codelm")
    (model_dir / "generation_config.json").write_text('{"eos_token_id": [0,')
    with pytest.raises(ValueError, match=r"generation_config\.json is not valid JSON .*re-download or delete"):
        ModelConfig.from_pretrained(str(model_dir))


def test_text_prompt_gets_the_tokenizer_bos_like_transformers(bos_model_dir):
    from transformers import AutoTokenizer
    ids = AutoTokenizer.from_pretrained(str(bos_model_dir))(PROMPT)["input_ids"]
    assert ids[0] == 0 and ids[1] != 0                       # the tokenizer really adds the BOS
    out = _llm(bos_model_dir).generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True))[0]
    assert out.prompt_token_ids == ids
    assert list(out.outputs[0].token_ids) == _hf_greedy(bos_model_dir, ids, 12)


def test_chat_prompt_keeps_the_template_s_single_bos(bos_model_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(bos_model_dir))
    ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    assert ids[0] == 0 and ids[1] != 0
    out = _llm(bos_model_dir).chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))[0]
    assert out.prompt_token_ids == ids                       # not [0, 0, ...]


def test_server_adds_the_bos_to_completions_but_not_to_chat(bos_model_dir, tmp_path):
    import httpx
    from transformers import AutoTokenizer

    from tests.serve.server_process import ServerProcess
    tok = AutoTokenizer.from_pretrained(str(bos_model_dir))
    chat_ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"]
    srv = ServerProcess(bos_model_dir, tmp_path / "server.log")
    try:
        body = {"model": "codelm", "max_tokens": 2, "temperature": 0.0}
        r = httpx.post(f"{srv.url}/v1/completions", json={**body, "prompt": PROMPT}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == len(tok(PROMPT)["input_ids"])
        r = httpx.post(f"{srv.url}/v1/chat/completions", json={**body, "messages": MESSAGES}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == len(chat_ids)
    finally:
        srv.terminate()


def test_tokenizer_with_ids_past_the_vocabulary_is_a_clear_error(codelm_dir, tmp_path):
    # a tokenizer from another model (here: one added token, id 8192 = vocab_size) used to reach the
    # embedding lookup: IndexError on CPU, a device-side assert (a dead server) on CUDA
    model_dir = _copy(codelm_dir, tmp_path / "codelm")
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    tok["added_tokens"].append({"id": 8192, "content": "<|extra|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    (model_dir / "tokenizer.json").write_text(json.dumps(tok))
    llm = _llm(model_dir)
    with pytest.raises(ValueError, match=r"token ids \[8192\] \(\['<\|extra\|>'\]\), outside the model's "
                                         r"vocabulary \[0, 8192\).*model's own tokenizer"):
        llm.generate("x = <|extra|>", SamplingParams(max_tokens=2))
    out = llm.generate("x = 1", SamplingParams(temperature=0.0, max_tokens=2))[0]     # the engine still serves
    assert len(out.outputs[0].token_ids) == 2
