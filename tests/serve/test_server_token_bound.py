"""The tokenizer worker (serve/tokenizer_worker.py) and its byte-count bound (serve/token_bound.py),
in-process on codelm-12m's tokenizer: the bound never exceeds the real token count (it equals it
on a run of the longest token), it is off for tokenizers where a token may cover unbounded text,
the worker encodes with its own copy exactly as the engine would, and the engine takes its ids
(or its refusal) unchanged."""
from __future__ import annotations

import asyncio
import json
import random
import threading
from types import SimpleNamespace

import pytest
from tokenizers import Tokenizer

from turbospec.engine.request_input import TokenizedText, build_sequence, load_tokenizer, prompt_to_ids
from turbospec.sampling_params import SamplingParams
from turbospec.serve.token_bound import TokenBound
from turbospec.serve.tokenizer_worker import TokenizerWorker

from .server_process import CODELM

VOCAB = 8192


@pytest.fixture(scope="module")
def tok():
    if not (CODELM / "tokenizer.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    return load_tokenizer(str(CODELM))


def _texts(tok) -> list[str]:
    rng = random.Random(0)
    vocab = list(tok.get_vocab())
    longest = max(vocab, key=len)
    out = [tok.convert_tokens_to_string([longest]) * 40, "<|endoftext|>" * 50, "é中😀 \n\t" * 300]
    for _ in range(60):
        out.append("".join(rng.choice(" \n\tabcxyz(){}=_-0123456789é中😀\u0301") for _ in range(rng.randint(1, 4000))))
        out.append("".join(tok.convert_tokens_to_string([rng.choice(vocab)]) for _ in range(rng.randint(1, 400))))
    return out


def test_the_bound_never_exceeds_the_count(tok):
    bound = TokenBound.of(tok)
    assert bound == TokenBound(max_token_bytes=193, shrink=1)
    for text in _texts(tok):
        assert bound.min_tokens(text) <= len(tok.encode(text, verbose=False)), text[:80]
    run = tok.convert_tokens_to_string([max(tok.get_vocab(), key=len)]) * 40
    assert bound.min_tokens(run) == len(tok.encode(run)) == 40              # tight where it matters


def _drop_token(spec: dict, token: str) -> None:
    model = spec["model"]
    model["vocab"].pop(token)
    model["merges"] = [m for m in model["merges"] if token not in (m.split(" ") if isinstance(m, str) else m)]


def _variant(edit) -> SimpleNamespace:
    spec = json.loads((CODELM / "tokenizer.json").read_text())
    edit(spec)
    return SimpleNamespace(backend_tokenizer=Tokenizer.from_str(json.dumps(spec)))


@pytest.mark.parametrize("edit", [
    lambda s: s.update(normalizer={"type": "Lowercase"}),                   # unknown normalizer
    lambda s: s.update(normalizer={"type": "Strip", "strip_left": True, "strip_right": True}),
    lambda s: s.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, s["pre_tokenizer"]]}),                 # removes whitespace
    lambda s: _drop_token(s, "\u0100"),                                    # byte 0: no token covers it
    lambda s: s["added_tokens"][0].update(lstrip=True),                     # swallows the spaces before it
    lambda s: s["model"].update(dropout=0.1),
], ids=["lowercase", "strip", "whitespace-split", "missing-byte", "lstrip", "dropout"])
def test_the_bound_is_off_where_a_token_may_cover_more(edit):
    assert TokenBound.of(_variant(edit)).min_tokens("x" * 10_000) == 0


def test_nfc_divides_the_bound(tok):
    nfc = _variant(lambda s: s.update(normalizer={"type": "NFC"}))
    bound = TokenBound.of(nfc)
    assert bound.shrink == 4
    for text in ["e\u0301" * 2000, "\u1100\u1161\u11a8" * 1000, "A\u030a" * 3000] + _texts(tok)[:20]:
        assert bound.min_tokens(text) <= len(nfc.backend_tokenizer.encode(text).ids), text[:40]


def test_the_worker_encodes_with_its_own_copy_as_the_engine_would(tok):
    worker = TokenizerWorker(tok, VOCAB, 2048)
    params = SamplingParams(max_tokens=4)
    text = {"prompt": "def fib(n):\n    return", "add_special_tokens": True}
    big = {"prompt": "abcdefgh " * 50_000}                                  # 450 KB: refused by its size alone
    over = {"prompt": "abcdefgh " * 1_000}                                  # encoded: 4000 tokens
    after = {"prompt": "def f():"}                                          # past a refusal: left as it is
    messages = [{"role": "user", "content": "hi"}]
    tok.chat_template = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"

    async def prepare():
        first = await worker.prepare([("a0", params, text), ("a1", params, text), ("c", params, over),
                                      ("e", params, after),
                                      ("d", params, {"messages": messages, "template_kwargs": None})])
        return first + await worker.prepare([("b", params, big)])
    stop, decoded = threading.Event(), []

    def decode_meanwhile():             # the engine thread keeps using the original
        while not stop.is_set():
            decoded.append(tok.decode(list(range(100, 600))))
    other = threading.Thread(target=decode_meanwhile)
    other.start()
    try:
        out = asyncio.run(prepare())
    finally:
        stop.set()
        other.join()
        worker.shutdown()
    assert worker._own is not tok and len(set(decoded)) == 1
    (_, _, a0), (_, _, a1), (_, _, c), (_, _, e), (_, _, d), (_, _, b) = out
    assert a0 is a1                                                         # n samples: encoded once
    assert isinstance(a0["prompt"], TokenizedText) and a0["prompt"] == text["prompt"]
    assert a0["prompt"].token_ids == tok.encode(text["prompt"])
    assert b["prompt"].refusal == ("This model's maximum context length is 2048 tokens, and the prompt has at "
                                   "least 2332: shorten the prompt (it needs room for at least one generated token)")
    assert c["prompt"].refusal.startswith("This model's maximum context length is 2048 tokens, and the prompt has 4000:")
    assert e is after and type(e["prompt"]) is str
    assert "messages" not in d and d["add_special_tokens"] is False
    assert d["prompt"] == "<|user|>hi" and d["prompt"].token_ids == tok.encode("<|user|>hi", add_special_tokens=False)
    # the engine thread takes the ids, or raises the refusal, where it would have encoded
    assert prompt_to_ids(a0["prompt"], None, VOCAB) == (text["prompt"], tok.encode(text["prompt"]))
    seq = build_sequence("a0", a0["prompt"], params, None, SimpleNamespace(vocab_size=VOCAB), "cpu", 2048)
    assert seq.prompt == text["prompt"] and type(seq.prompt) is str
    with pytest.raises(ValueError, match="has at least 2332: shorten the prompt"):
        build_sequence("b", b["prompt"], params, None, SimpleNamespace(vocab_size=VOCAB), "cpu", 2048)
