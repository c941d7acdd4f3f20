"""Fixtures for the HTTP tests (helpers live in server_process.py).

- `chat_model_dir`: codelm-12m with a chat template added (weights symlinked, not copied).
- `server`: session-wide, serves `chat_model_dir` as "codelm" behind API key "test-key".
- `spec_server`: session-wide, codelm-12m as shipped (no template) with n-gram speculation, no key.
- `client`: the official `openai` client on `server` (per module).
- `llm`: the in-process `LLM` on `chat_model_dir` (CPU, float32), what a served request is compared with.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import openai
import pytest

from .server_process import API_KEY, CODELM, ServerProcess

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory) -> Path:
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    dst = tmp_path_factory.mktemp("codelm_chat")
    for f in CODELM.iterdir():
        if f.suffix == ".safetensors":
            os.symlink(f, dst / f.name)
        elif f.is_file():
            shutil.copy(f, dst / f.name)
    cfg_path = dst / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2))
    return dst


@pytest.fixture(scope="session")
def server(chat_model_dir, tmp_path_factory):
    srv = ServerProcess(chat_model_dir, tmp_path_factory.mktemp("logs") / "server.log", api_key=API_KEY)
    yield srv
    srv.terminate()


@pytest.fixture(scope="session")
def spec_server(tmp_path_factory):
    """codelm-12m as shipped (no chat template) with n-gram speculation, no API key."""
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4})
    srv = ServerProcess(CODELM, tmp_path_factory.mktemp("logs") / "spec_server.log",
                        "--speculative-config", spec)
    yield srv
    srv.terminate()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, timeout=60, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def llm(chat_model_dir):
    from turbospec import LLM
    return LLM(str(chat_model_dir), device="cpu", dtype="float32")
