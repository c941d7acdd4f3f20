"""Fixtures for the training tests: a tiny Qwen3 target (4 layers, hidden 64, vocab 8192 with the
demo model's tokenizer) written with transformers' save_pretrained, and small JSONL files."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
CODELM = REPO / "models" / "codelm-12m"

CODE = '''def add(a, b):
    """Return the sum of a and b."""
    return a + b


class Counter:
    def __init__(self):
        self.count = 0

    def increment(self, step=1):
        self.count += step
        return self.count


for i in range(10):
    print(i, add(i, i))
'''


def write_tiny_target(path: Path, num_layers: int = 4, seed: int = 0, hidden_size: int = 64) -> Path:
    import transformers
    cfg = transformers.Qwen3Config(
        vocab_size=8192, hidden_size=hidden_size, intermediate_size=128, num_hidden_layers=num_layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=1,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(seed)
    model = transformers.Qwen3ForCausalLM(cfg).to(torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * 0.1
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)
    model.save_pretrained(path)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(CODELM / fn, path / fn)
    return path


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory) -> Path:
    if not (CODELM / "tokenizer.json").is_file():
        pytest.skip("the demo model's tokenizer is missing")
    return write_tiny_target(tmp_path_factory.mktemp("tiny_target"))


def write_jsonl(path: Path, rows) -> Path:
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


@pytest.fixture()
def code_jsonl(tmp_path) -> Path:
    """24 small code records (variations of one snippet)."""
    rows = [{"text": CODE.replace("add", f"add{i}").replace("10", str(i + 3))} for i in range(24)]
    return write_jsonl(tmp_path / "code.jsonl", rows)
