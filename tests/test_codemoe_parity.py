"""A trained MoE (codemoe-13m: Qwen3-MoE, 8 experts top-2, skewed learned routing) equals
transformers' Qwen3MoeForCausalLM token for token on held-out code, in one batch of mixed prompt
lengths. Random-weight MoE parity is test_generate_parity.py's; trained routing puts near-ties
between experts' gate scores where random weights rarely do. Skipped without the model (it is not
in the repository: models/codemoe-13m, or the shared folder beside the checkout)."""
from __future__ import annotations

import json

import pytest

from tests.conftest import REPO
from tests.test_generate_parity import check_parity

CANDIDATES = (REPO / "models" / "codemoe-13m", REPO.parent / "shared" / "models" / "codemoe-13m")


@pytest.fixture(scope="module")
def codemoe_dir():
    for path in CANDIDATES:
        if (path / "config.json").is_file():
            return path
    pytest.skip(f"codemoe-13m not found at {' or '.join(map(str, CANDIDATES))}")


def test_codemoe_heldout_greedy_tokens_match_transformers(codemoe_dir, hf_model_factory, one_thread):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(codemoe_dir))
    with open(REPO / "bench" / "prompts" / "heldout_code.jsonl") as f:
        texts = [json.loads(line)["prompt"] for line in f][:4]
    prompts = [tok.encode(t, add_special_tokens=False)[-(20 + 60 * i):] for i, t in enumerate(texts)]   # 20..200
    check_parity(codemoe_dir, hf_model_factory, prompts, steps=32)
