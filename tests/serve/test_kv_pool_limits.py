"""An explicit max_model_len that the KV pool (or the model) cannot hold is capped with a warning
that says by how much and how to fix it; it used to be capped silently, so a server started with
`--max-model-len 2048 --num-kv-blocks 24` refused every prompt over 367 tokens with nothing in its
log to say why."""
from __future__ import annotations

import warnings

import pytest

from .server_process import CODELM
from turbospec.config import EngineConfig
from turbospec.engine.llm_engine import LLMEngine


def _engine(**ec) -> LLMEngine:
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    return LLMEngine.from_config(str(CODELM), device="cpu", engine_config=EngineConfig(**ec))


def test_max_model_len_over_the_kv_pool_warns_with_the_fix():
    with pytest.warns(UserWarning, match=r"max_model_len=2048 does not fit the KV cache \(368 tokens\): requests "
                                         r"are limited to 367 tokens; raise num_kv_blocks to at least 130"):
        engine = _engine(num_kv_blocks=24, max_model_len=2048)
    assert engine.max_model_len == 367
    engine = _engine(num_kv_blocks=130, max_model_len=2048)      # the suggested pool is enough
    assert engine.max_model_len == 2048


def test_max_model_len_that_fits_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _engine(num_kv_blocks=24, max_model_len=300).max_model_len == 300
