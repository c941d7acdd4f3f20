"""min_tokens on CUDA: EOS and stop ids banned until min_tokens, stop strings ignored before it,
and the same tokens with n-gram speculation and with decode bursts (graphs) as with single steps.

    PYTHONPATH=. python3 bench/min_tokens_gpu_check.py
"""
import torch

from turbospec import LLM, SamplingParams

M = "models/codelm-12m"
PROMPT = "def add(a, b):\n    return"
plain = LLM(M, device="cuda", dtype="bfloat16", enforce_eager=True)
eos = plain.llm_engine.model_config.eos_token_ids[0]
greedy = [o.outputs[0].token_ids for o in plain.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8))][0]
stop_id = greedy[2]
params = [SamplingParams(temperature=0, max_tokens=12, logit_bias={eos: 100.0}, min_tokens=5),
          SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[stop_id], min_tokens=6),
          SamplingParams(temperature=0, max_tokens=12, stop=[plain.get_tokenizer().decode(greedy[:1])], min_tokens=6)]
want = [o.outputs[0].token_ids for o in plain.generate([PROMPT] * 3, params)]
assert eos not in want[0][:5] and want[0][5:] == [eos], want[0]
assert stop_id not in want[1][:6] and len(want[2]) >= 6, want
for kw in ({}, {"speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}):
    other = LLM(M, device="cuda", dtype="bfloat16", **kw)          # graphs and decode bursts on
    got = [o.outputs[0].token_ids for o in other.generate([PROMPT] * 3, params)]
    assert got == want, (kw, got, want)
    got = [o.outputs[0].token_ids for o in other.generate([PROMPT] * 2, params[1:])]   # no bias: bursts
    assert got == want[1:], (kw, got, want[1:])
print("min_tokens on CUDA: OK", torch.cuda.get_device_name(), want)
