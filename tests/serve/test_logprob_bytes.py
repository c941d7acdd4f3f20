"""Logprob tokens that hold part of a UTF-8 character (codelm-12m is a byte-level BPE: 日 is three
tokens) through a real server and the `openai` client, as OpenAI shows them: chat `bytes` are the
token's own bytes (they were the UTF-8 of U+FFFD), a token not valid UTF-8 alone is
"bytes:\\xe8\\xaa" (every such token was '\ufffd', so completions' top_logprobs dicts lost entries
to the shared key), streamed as whole; the text is what the `LLM` API generates."""
from __future__ import annotations

import pytest

from turbospec.serve.token_bytes import TokenStrings

from .server_process import MODEL_NAME

ASK = [{"role": "user", "content": "# コメント: 日本語"}]      # greedy reply: "# コン", 8 tokens
PROMPT = "# 日本語のコメント"                                 # greedy continuation: "ンン", 6 tokens


def shown(raw: bytes) -> str:
    """OpenAI's convention, written out independently of the server's code."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join("\\x%02x" % b for b in raw)


def raw_of(token: str) -> bytes:
    """A completions token string back to its bytes."""
    if token.startswith("bytes:"):
        return bytes(int(h, 16) for h in token[len("bytes:"):].split("\\x")[1:])
    return token.encode("utf-8")


def test_chat_logprob_bytes_rebuild_the_characters(client, llm):
    from turbospec import SamplingParams
    kw = dict(model=MODEL_NAME, messages=ASK, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    r = client.chat.completions.create(**kw)
    content, lps = r.choices[0].message.content, r.choices[0].logprobs.content
    ref = llm.chat(ASK, SamplingParams(temperature=0.0, max_tokens=8))[0].outputs[0].text
    assert content == ref and any(ord(c) > 127 for c in content), content        # the text is unchanged
    assert bytes(b for t in lps for b in t.bytes).decode("utf-8") == content
    split = [t for t in lps if t.token.startswith("bytes:")]
    assert split and all(t.bytes != [239, 191, 189] for t in lps), [(t.token, t.bytes) for t in lps]
    for t in lps:
        assert t.token == shown(bytes(t.bytes)), (t.token, t.bytes)
        tops = [(e.token, bytes(e.bytes)) for e in t.top_logprobs]
        assert len(tops) == 3 and len({tok for tok, _ in tops}) == 3, tops      # distinct tokens, distinct strings
        assert all(tok == shown(raw) for tok, raw in tops), tops
        assert (t.token, bytes(t.bytes)) == tops[0]                              # greedy: the top token
    chunks = list(client.chat.completions.create(**kw, stream=True))
    streamed = [(t.token, t.bytes, t.logprob, [(e.token, e.bytes) for e in t.top_logprobs])
                for c in chunks for ch in c.choices if ch.logprobs for t in ch.logprobs.content]
    assert streamed == [(t.token, t.bytes, t.logprob, [(e.token, e.bytes) for e in t.top_logprobs]) for t in lps]


def test_completion_top_logprobs_keep_every_token(client, llm):
    """The reviewer's request: each top_logprobs dict has the sampled token and the top 2 as the
    engine ranks them (they collapsed to one '\ufffd' key); the tokens' bytes join to the text."""
    from turbospec import SamplingParams
    kw = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    r = client.completions.create(**kw)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    ref = llm.generate([PROMPT], SamplingParams(temperature=0.0, max_tokens=6, logprobs=2))[0].outputs[0]
    assert text == ref.text and any(ord(c) > 127 for c in text), text
    tok = TokenStrings(llm.get_tokenizer())
    assert lp.tokens == [tok(t).text for t in ref.token_ids] and "\ufffd" not in "".join(lp.tokens)
    assert b"".join(raw_of(t) for t in lp.tokens).decode("utf-8") == text
    for top, ids in zip(lp.top_logprobs, ref.logprobs):
        assert sorted(top) == sorted(tok(t).text for t in ids), (top, ids)      # no entry lost to a shared key
    assert lp.text_offset == [len(b"".join(raw_of(t) for t in lp.tokens[:i]).decode("utf-8", "ignore"))
                              for i in range(len(lp.tokens))]
    chunks = [c.choices[0] for c in client.completions.create(**kw, stream=True) if c.choices]
    assert "".join(c.text for c in chunks) == text
    for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert sum((getattr(c.logprobs, field) for c in chunks if c.logprobs), []) == getattr(lp, field), field


@pytest.mark.parametrize("stream", [False, True])
def test_echo_prompt_tokens_alike(client, llm, stream):
    """echo's prompt tokens go through the same strings; text_offset counts characters of the
    text (every token of a split character points at it), and reaches the completion at the
    prompt's length."""
    from turbospec import SamplingParams
    prompt = "# 日本語 😀 café\ndef f():"
    r = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=3, temperature=0, echo=True,
                                  logprobs=1, stream=stream)
    if stream:
        chunks = [c.choices[0] for c in r if c.choices]
        text = "".join(c.text for c in chunks)
        lp = {f: sum((getattr(c.logprobs, f) for c in chunks if c.logprobs), [])
              for f in ("tokens", "top_logprobs", "text_offset")}
    else:
        text, lp = r.choices[0].text, vars(r.choices[0].logprobs)
    ref = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=3, prompt_logprobs=1))[0]
    ids = ref.prompt_token_ids
    tok = TokenStrings(llm.get_tokenizer())
    assert text.startswith(prompt) and lp["tokens"][:len(ids)] == [tok(t).text for t in ids]
    assert any(t.startswith("bytes:") for t in lp["tokens"][:len(ids)])
    assert b"".join(raw_of(t) for t in lp["tokens"]).decode("utf-8") == text
    for p in range(1, len(ids)):                 # the prompt token first, then the top 1: no key shared
        assert sorted(lp["top_logprobs"][p]) == sorted(tok(t).text for t in ref.prompt_logprobs[p])
    assert lp["text_offset"] == [len(b"".join(raw_of(t) for t in lp["tokens"][:i]).decode("utf-8", "ignore"))
                                 for i in range(len(lp["tokens"]))]
    assert lp["text_offset"][len(ids)] == len(prompt)


def test_token_strings_of_other_tokenizers():
    """SentencePiece byte tokens (`<0xE8>`) and tiktoken-style byte names map to their bytes;
    special tokens show their text; no tokenizer: token_id:N."""
    class SentencePiece:
        added_tokens_decoder = {0: "<s>"}
        pieces = {0: "<s>", 5: "<0xE8>", 6: "<0xAA>", 7: "▁hello"}

        def convert_ids_to_tokens(self, i):
            return self.pieces[i]

        def decode(self, ids, skip_special_tokens=False):
            return {5: "\ufffd", 6: "\ufffd", 7: "hello", 0: "<s>"}[ids[0]]

    class TikToken(SentencePiece):
        def convert_ids_to_tokens(self, i):
            return {5: b"\xe8\xaa", 7: b" hello"}[i]

    sp = TokenStrings(SentencePiece())
    assert (sp(5).text, sp(5).bytes) == ("bytes:\\xe8", b"\xe8") and sp(6).text == "bytes:\\xaa"
    assert (sp(7).text, sp(0).text) == ("hello", "<s>")              # no byte mapping: decoded alone
    tt = TokenStrings(TikToken())
    assert (tt(5).text, tt(7).text) == ("bytes:\\xe8\\xaa", " hello")
    assert TokenStrings(None)(42).text == "token_id:42"
