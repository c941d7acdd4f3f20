"""Incremental detokenization equals decoding everything at once, in both implementations,
including characters split across tokens; stop strings cut the text at the earliest match."""
from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from turbospec.engine.detokenizer import IncrementalDetokenizer

TEXT = "def f(x):\n    return x * 2  # नमस्ते दुनिया 🙂 café\n\nclass A:\n    pass\n"


@pytest.fixture(scope="module")
def tok(codelm_dir):
    return AutoTokenizer.from_pretrained(str(codelm_dir))


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("step", [1, 3])
def test_incremental_equals_full(tok, stream, step):
    ids = tok.encode(TEXT, add_special_tokens=False)
    d = IncrementalDetokenizer(tok)
    if not stream:
        d._stream = None
    for i in range(step, len(ids) + step, step):
        d.update(ids[:i])
        assert "\ufffd" not in d.text
    assert d.text == tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("step", [1, 3])
def test_prompt_prefixed_list_reads_only_the_output(tok, stream, step):
    """The engine hands the sequence's whole token list and its prompt length (no per-token
    slice of the output): the text is the output's alone, as with the output list."""
    ids = tok.encode(TEXT, add_special_tokens=False)
    prompt = tok.encode("import os\n", add_special_tokens=False)
    d = IncrementalDetokenizer(tok)
    if not stream:
        d._stream = None
    for i in range(step, len(ids) + step, step):
        d.update(prompt + ids[:i], len(prompt))
    assert d.text == tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("stream", [True, False])
def test_earliest_stop_string_wins(tok, stream):
    ids = tok.encode(TEXT, add_special_tokens=False)
    d = IncrementalDetokenizer(tok, stop=["class", "return"])
    if not stream:
        d._stream = None
    hit = None
    for i in range(1, len(ids) + 1):
        hit = d.update(ids[:i])
        if hit:
            break
    assert hit == "return" and d.text == "def f(x):\n    "
