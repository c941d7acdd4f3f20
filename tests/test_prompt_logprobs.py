"""SamplingParams.prompt_logprobs (vLLM's field; what `echo` + `logprobs` serve, and what
lm-eval-style log-likelihood scoring reads): one entry per prompt token, None for the first, equal
to transformers' log-softmax of the same checkpoint, whether the prompt is prefilled in one step or
in chunks, with or without speculation."""
from __future__ import annotations

import pytest
import torch

from turbospec import LLM, SamplingParams

PROMPT = "import os\nimport sys\n\n\ndef main(argv):\n    for name in os.listdir(argv[1]):\n        print(name)\n"


@pytest.fixture(scope="module")
def reference(codelm_dir):
    """transformers' log-softmax over the prompt (fp32, CPU): [n-1, V] for positions 0..n-2."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(codelm_dir))
    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(str(codelm_dir), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return ids, torch.log_softmax(logits, dim=-1)[:-1]


def _check(out, ids, ref, k):
    plp = out.prompt_logprobs
    assert out.prompt_token_ids == ids and len(plp) == len(ids) and plp[0] is None
    for p in range(1, len(ids)):
        entry = plp[p]
        assert next(iter(entry)) == ids[p]                          # the prompt token first
        assert abs(entry[ids[p]].logprob - ref[p - 1, ids[p]].item()) < 1e-4, p
        assert entry[ids[p]].rank == int((ref[p - 1] > ref[p - 1, ids[p]]).sum()) + 1
        top = sorted(((v.rank, t) for t, v in entry.items() if t != ids[p] or v.rank <= k))
        assert [t for _, t in top][:k] == ref[p - 1].topk(k).indices.tolist()


@pytest.mark.parametrize("chunk,lm_head_rows", [(8192, 256), (16, 256), (8192, 5)])
def test_prompt_logprobs_match_transformers(codelm_dir, reference, chunk, lm_head_rows, monkeypatch):
    """Prefill in one step or in chunks of 16 tokens; the LM head over 256 or 5 rows at a time."""
    monkeypatch.setattr("turbospec.engine.spec_step.PROMPT_LOGPROBS_ROWS", lm_head_rows)
    ids, ref = reference
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", max_num_batched_tokens=chunk)
    out = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=3, prompt_logprobs=2))[0]
    _check(out, ids, ref, 2)
    plain = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=3))[0]
    assert plain.prompt_logprobs is None and plain.outputs[0].token_ids == out.outputs[0].token_ids


def test_prompt_logprobs_with_speculation(codelm_dir, reference):
    ids, ref = reference
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32",
              speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    outs = llm.generate([PROMPT, "x = 1\n"], SamplingParams(temperature=0.0, max_tokens=8, prompt_logprobs=0))
    _check(outs[0], ids, ref, 0)
    assert len(outs[1].prompt_logprobs) == len(outs[1].prompt_token_ids)


def test_prompt_logprobs_is_checked():
    for bad in (-2, 1.5, True):                  # -1: every token of the vocabulary (vLLM's)
        with pytest.raises(ValueError, match="prompt_logprobs"):
            SamplingParams(prompt_logprobs=bad)
