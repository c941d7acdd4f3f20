"""speculative_config is checked before anything loads: every key used, k in range, the benchmark
oracle refused outside `bench spec --shape`, each error naming the key and the fix."""
from __future__ import annotations

import pytest
import torch

from turbospec.spec.factory import MAX_K, build_proposer


def _build(spec):
    return build_proposer(spec, None, None, "", torch.device("cpu"), torch.float32)


@pytest.mark.parametrize("spec,fragment", [
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_maxx": 9}, "did you mean 'prompt_lookup_max'"),
    ({"method": "ngram", "num_speculative_tokens": 4, "bogus_key": 1}, "'bogus_key' is not used by method 'ngram'"),
    ({"method": "eagle3", "model": "d", "num_speculative_tokens": 4, "prompt_lookup_max": 3}, "prompt_lookup_max"),
    ({"method": "ngram", "num_speculative_tokens": True}, "from 1 to"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "from 1 to"),
    ({"method": "ngram", "num_speculative_tokens": 10**5}, f"from 1 to {MAX_K}"),
    ({"method": "oracle", "num_speculative_tokens": 4, "acceptance_length": 2}, "bench spec --shape"),
    ({"method": "medusa", "num_speculative_tokens": 4}, "is not one of ngram"),
    ({"method": "ngram", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 2}, "accepted: 1, None"),
    # 'x' was int()'s "invalid literal for int() with base 10", 2.7 ran as 2
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": "x"},
     "prompt_lookup_min='x' must be an integer"),
    ({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 2.7},
     "prompt_lookup_max=2.7 must be an integer"),
    # a TypeError that `generate` reported as "could not load" the target
    ({"method": "draft_model", "model": 5, "num_speculative_tokens": 4}, "model=5 must be the drafter's directory"),
    ({}, "speculative_config is empty: give a method"),
])
def test_bad_speculative_configs_name_the_problem(spec, fragment):
    with pytest.raises(ValueError) as e:
        _build(spec)
    assert fragment in str(e.value), str(e.value)


def test_good_ngram_config_builds():
    p = _build({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 5, "draft_length": "auto",
                "model": None, "bitwise_exact": False, "draft_tensor_parallel_size": 1, "disable_logprobs": True})   # vLLM's, neutral
    assert p.k == 3


def test_an_empty_config_is_refused_not_run_as_plain_decoding(codelm_dir):
    # `--speculative-config '{}'` (or speculative_config={}) ran plain decoding without a word
    from turbospec import LLM
    with pytest.raises(ValueError, match=r"speculative_config is empty: give a method.*or leave it out"):
        LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config={})
