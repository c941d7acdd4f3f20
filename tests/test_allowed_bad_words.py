"""vLLM's allowed_token_ids, bad_words and truncate_prompt_tokens through the engine on
models/codelm-12m: greedy output equals a reference loop (a full transformers forward per token,
vLLM's rules written out here); speculative decoding (n-gram, EAGLE-3 chain and tree) equals plain
decoding; sampled tokens stay in the allowed set; bad input is a ValueError naming the field."""
from __future__ import annotations

import pytest
import torch

from turbospec import LLM, SamplingParams

PROMPT = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
          "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n")
OTHER = "for i in range(10):\n    for j in range(10):\n        print(i, j)\n"
EAGLE3 = "codelm-12m-eagle3"
# plain greedy continues PROMPT with "def div(a, b):\n    return a * b\n\n\ndef div(a, ...":
# " a * b" is three tokens there, "return" one (" return" too)
BAD = ["a * b", "return"]
ALLOWED = list(range(100, 400)) + [294, 410, 311]


def _greedy(max_tokens=24, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True, **kw)


@pytest.fixture(scope="module")
def llm(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32")


def _ids(llm_, prompts, params):
    return [o.outputs[0].token_ids for o in llm_.generate(prompts, params)]


def _word_ids(tok, words):
    """vLLM's encodings of each bad word: as written (leading spaces stripped) and, when it gives
    another first token and as many tokens, with one leading space."""
    out = []
    for w in words:
        a = tok.encode(w.lstrip(), add_special_tokens=False)
        b = tok.encode(" " + w.lstrip(), add_special_tokens=False)
        out += [a] + ([b] if b[0] != a[0] and len(b) == len(a) else [])
    return out


def _reference_greedy(hf, prompt_ids, params, words_ids):
    ids = list(prompt_ids)
    for _ in range(params.max_tokens):
        with torch.no_grad():
            x = hf(torch.tensor([ids])).logits[0, -1].float()
        out = ids[len(prompt_ids):]
        if params.allowed_token_ids is not None:
            keep = torch.full_like(x, float("-inf"))
            keep[params.allowed_token_ids] = 0
            x = x + keep
        for w in words_ids:
            if len(w) - 1 <= len(out) and (len(w) == 1 or out[len(out) - len(w) + 1:] == w[:-1]):
                x[w[-1]] = float("-inf")
        ids.append(int(x.argmax()))
    return ids[len(prompt_ids):]


def _contains(seq, sub):
    return any(seq[i:i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


@pytest.mark.parametrize("case", ["bad_words", "allowed", "both"])
def test_greedy_matches_a_reference_loop(llm, codelm_dir, hf_model_factory, case):
    tok = llm.get_tokenizer()
    kw = {"bad_words": dict(bad_words=BAD), "allowed": dict(allowed_token_ids=ALLOWED),
          "both": dict(bad_words=BAD, allowed_token_ids=ALLOWED)}[case]
    plain = _ids(llm, [PROMPT], _greedy())[0]
    got = _ids(llm, [PROMPT], _greedy(**kw))[0]
    words = _word_ids(tok, BAD) if "bad_words" in kw else []
    if words:
        assert any(_contains(plain, w) for w in words if len(w) > 1)     # the test bans what plain decoding says
        assert not any(_contains(got, w) for w in words)
    if "allowed_token_ids" in kw:
        assert set(got) <= set(ALLOWED)
    assert got != plain
    prompt_ids = tok.encode(PROMPT, add_special_tokens=False)
    assert got == _reference_greedy(hf_model_factory(codelm_dir), prompt_ids, _greedy(**kw), words)


@pytest.mark.parametrize("spec", ["ngram", "eagle3-chain", "eagle3-tree"])
def test_speculative_equals_plain(llm, codelm_dir, spec):
    """A batch mixing bad words of several tokens, an allowed set, and a plain greedy sequence:
    token for token the plain engine's output. The verify rows after drafts " a *" must ban " b"
    where plain decoding would have."""
    cfg = {"ngram": {"method": "ngram", "num_speculative_tokens": 4},
           "eagle3-chain": {"method": "eagle3", "model": str(codelm_dir.parent / EAGLE3), "num_speculative_tokens": 4},
           "eagle3-tree": {"method": "eagle3", "model": str(codelm_dir.parent / EAGLE3), "num_speculative_tokens": 6,
                           "tree": {"topk": 2, "depth": 3, "budget": 6}}}[spec]
    prompts = [PROMPT, PROMPT, PROMPT, OTHER]
    params = [_greedy(32, bad_words=["a * b"]), _greedy(32, allowed_token_ids=ALLOWED, bad_words=["return"]),
              _greedy(32), _greedy(32, bad_words=["print(i"])]
    want = _ids(llm, prompts, params)
    spec_llm = LLM(str(codelm_dir), device="cpu", dtype="float32", speculative_config=cfg)
    outs = spec_llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert sum(o.metrics.num_accepted_tokens for o in outs) > 0


def test_seeded_sampling_with_speculation_equals_plain(llm, codelm_dir):
    """Seeded sampled rows through the rejection sampler (n-gram drafts): the allowed set and the
    bad words' bans hold in every verify row, so the tokens are plain decoding's."""
    params = [SamplingParams(temperature=0.9, top_k=40, seed=s, max_tokens=32, ignore_eos=True, **kw)
              for s, kw in ((1, dict(bad_words=["a * b", "return"])), (2, dict(allowed_token_ids=ALLOWED)),
                            (3, dict(bad_words=["print(i"], allowed_token_ids=list(range(2000)))))]
    prompts = [PROMPT, PROMPT, OTHER]
    want = _ids(llm, prompts, params)
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32",
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    outs = spec.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert sum(o.metrics.num_accepted_tokens for o in outs) > 0


def test_sampled_tokens_stay_allowed_and_avoid_bad_words(llm):
    tok = llm.get_tokenizer()
    allowed = list(range(200, 260))
    params = SamplingParams(temperature=1.5, seed=7, max_tokens=40, ignore_eos=True, allowed_token_ids=allowed)
    outs = llm.generate([PROMPT, OTHER], params)
    assert all(set(o.outputs[0].token_ids) <= set(allowed) for o in outs)
    bad = SamplingParams(temperature=0.8, seed=3, max_tokens=40, ignore_eos=True, bad_words=BAD, n=4)
    for o in llm.generate([PROMPT], bad)[0].outputs:
        assert not any(_contains(o.token_ids, w) for w in _word_ids(tok, BAD))


@pytest.mark.parametrize("k", [5, 40, -1])
def test_truncate_prompt_tokens_keeps_the_last_k(llm, k):
    tok = llm.get_tokenizer()
    ids = tok.encode(PROMPT, add_special_tokens=False)
    kept = ids if k == -1 else ids[-k:]
    out = llm.generate([PROMPT], _greedy(12, truncate_prompt_tokens=k))[0]
    assert out.prompt_token_ids == kept
    assert out.outputs[0].token_ids == _ids(llm, [{"prompt_token_ids": kept}], _greedy(12))[0]


def test_truncate_lets_a_prompt_longer_than_the_context_run(codelm_dir):
    small = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=64)
    long_prompt = PROMPT * 6                                   # > 64 tokens
    with pytest.raises(ValueError, match="maximum context length is 64"):
        small.generate([long_prompt], _greedy(8))
    out = small.generate([long_prompt], _greedy(8, truncate_prompt_tokens=40))[0]
    assert len(out.prompt_token_ids) == 40 and len(out.outputs[0].token_ids) == 8


@pytest.mark.parametrize("kw,words", [
    (dict(allowed_token_ids=[]), "leaves no token"),
    (dict(allowed_token_ids=[1, -2]), "non-negative integers"),
    (dict(allowed_token_ids="12"), "must be a list of token ids"),
    (dict(bad_words="return"), "bad_words=['return']"),
    (dict(bad_words=["ok", " "]), "non-empty strings"),
    (dict(bad_words=["ok", "a\ud800"]), "bad_words[1] holds a lone UTF-16 surrogate ('\\ud800') at character 1"),
    (dict(stop=["x", "\udfff"]), "stop[1] holds a lone UTF-16 surrogate"),
    (dict(truncate_prompt_tokens=0), "truncate_prompt_tokens=0 must be a positive integer"),
    (dict(truncate_prompt_tokens=2.5), "truncate_prompt_tokens=2.5"),
])
def test_bad_values_name_the_field(kw, words):
    with pytest.raises(ValueError) as e:
        SamplingParams(**kw)
    assert words in str(e.value)


def test_ids_outside_the_vocabulary_are_refused_before_any_step(llm):
    with pytest.raises(ValueError, match=r"allowed_token_ids \[9000\] are outside the vocabulary \[0, 8192\)"):
        llm.generate([PROMPT], _greedy(4, allowed_token_ids=[5, 9000]))
    assert SamplingParams(bad_words=[]).bad_words is None and not SamplingParams(bad_words=[]).modifies_logits


def test_decode_bursts_hold_allowed_ids_and_leave_bad_words_to_single_steps(llm, codelm_dir):
    """allowed_token_ids is a fixed mask: it decodes in bursts (the penalized variant's bias) and
    gives single steps' tokens. So are bad words of one token each: they burst, with single steps'
    tokens. A longer bad word's ban depends on the tokens before it, which the host checks token by
    token: such a batch decodes in single steps, with the same tokens."""
    b = LLM(str(codelm_dir), device="cpu", dtype="float32", num_scheduler_steps=4)
    counters = b.llm_engine.counters
    allowed = [_greedy(24, allowed_token_ids=ALLOWED), _greedy(24),
               SamplingParams(temperature=0.9, seed=5, max_tokens=24, ignore_eos=True, allowed_token_ids=ALLOWED)]
    before = counters["num_burst_tokens"]
    assert _ids(b, [PROMPT, OTHER, PROMPT], allowed) == _ids(llm, [PROMPT, OTHER, PROMPT], allowed)
    assert counters["num_burst_tokens"] - before >= 48
    tok = b.get_tokenizer()
    single = [w for w in ("return", "print", "self") if all(len(x) == 1 for x in _word_ids(tok, [w]))][:2]
    assert single, "no one-token word found for the test"
    one_token = [_greedy(24, bad_words=single), _greedy(24, bad_words=single[:1], allowed_token_ids=ALLOWED)]
    before = counters["num_burst_tokens"]
    got = _ids(b, [PROMPT, OTHER], one_token)
    assert got == _ids(llm, [PROMPT, OTHER], one_token)
    assert counters["num_burst_tokens"] - before >= 32                     # one-token words burst
    banned = {x[0] for x in _word_ids(tok, single)}
    assert not banned & set(got[0])
    bad = [_greedy(24, bad_words=["a * b"]), _greedy(24, bad_words=single)]
    before = counters["num_burst_tokens"]
    assert _ids(b, [PROMPT, OTHER], bad) == _ids(llm, [PROMPT, OTHER], bad)
    assert counters["num_burst_tokens"] == before


def test_banned_ids_read_the_output_then_the_draft_path():
    """A word's last token is banned where its other tokens end output + path, across the seam."""
    from turbospec.engine.bad_words import banned_ids, verify_row_bans
    words = [[5], [1, 2, 3], [7, 8]]
    assert banned_ids(words, []) == [5]
    assert banned_ids(words, [0, 1, 2]) == [5, 3]
    assert banned_ids(words, [0, 1], [2]) == [5, 3]            # 1 from the output, 2 a draft
    assert banned_ids(words, [1], [2, 7]) == [5, 8]
    assert banned_ids(words, [], [1]) == [5]
    # chain drafts [2, 7] after output [1]: rows after [1], [1, 2], [1, 2, 7]
    assert verify_row_bans(words, [1], [2, 7], None) == [[5], [5, 3], [5, 8]]
    # tree: node 1's parent is the root (not node 0): its row sees [1] + [7] only
    anc = [[True, False], [False, True]]
    assert verify_row_bans(words, [1], [2, 7], anc) == [[5], [5, 3], [5, 8]]
    assert verify_row_bans(words, [0, 1], [9, 2], [[True, False], [False, True]]) == [[5], [5], [5, 3]]


def test_verify_rows_of_a_tree_see_only_their_own_branch():
    """PenaltyTensors.build with tree drafts: output [1], two sibling nodes (2 and 7, both children
    of the root), a grandchild 9 under node 0, and words [1, 2, 3] and [1, 7, 8]: row 1 (after 2)
    bans 3 only, row 2 (after 7) bans 8 only, row 3 (after 2, 9) neither; the allowed set holds in
    every row, and a sequence without words is untouched."""
    from turbospec.engine.sequence import Sequence
    from turbospec.layers.penalties import PenaltyTensors
    V = 16
    s = Sequence("a", None, [4, 5], SamplingParams(bad_words=["x"], allowed_token_ids=list(range(12))), "cpu", 64)
    s.token_ids.append(1)
    s.bad_words_ids = [[1, 2, 3], [1, 7, 8]]
    t = Sequence("b", None, [4], SamplingParams(), "cpu", 64)
    drafts = torch.tensor([[2, 7, 9], [0, 0, 0]])
    parents = torch.tensor([[-1, -1, 0], [-1, 0, 1]])
    pt = PenaltyTensors.build([s, t], V, "cpu", drafts=drafts, parents=parents)
    banned = [set(torch.nonzero(row == float("-inf")).flatten().tolist()) for row in pt.bias]   # [2 * 4 rows]
    outside = set(range(12, V))
    assert banned[:4] == [outside, outside | {3}, outside | {8}, outside]
    assert banned[4:] == [set()] * 4


def test_truncation_keeps_a_bos_first(codelm_dir):
    """Hugging Face's left truncation (vLLM's) keeps the special tokens a tokenizer puts first: a
    tokenizer that adds a BOS keeps it, and it counts among the k."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    from turbospec.engine.request_input import truncated
    tok = AutoTokenizer.from_pretrained(str(codelm_dir))
    bos = 3
    tok._tokenizer.post_processor = TemplateProcessing(single=f"{tok.convert_ids_to_tokens(bos)} $A",
                                                       special_tokens=[(tok.convert_ids_to_tokens(bos), bos)])
    ids = tok.encode(PROMPT, add_special_tokens=True)
    assert ids[0] == bos and ids[1:] == tok.encode(PROMPT, add_special_tokens=False)
    assert truncated(ids, 6, 100, tok) == [bos] + ids[-5:]
    assert truncated(ids, 6, 100, None) == ids[-6:]                      # token ids as given: the last k
    assert truncated(ids, 1, 100, tok) == ids[-1:]
    assert truncated(ids, 999, 1000, tok) == ids
    with pytest.raises(ValueError, match="truncate_prompt_tokens=200 is more than the context length max_model_len=100"):
        truncated(ids, 200, 100, tok)


def test_requests_that_leave_no_token_are_refused(llm):
    eos = llm.llm_engine.model_config.eos_token_ids[0]
    with pytest.raises(ValueError, match="all banned by bad_words"):
        llm.generate([PROMPT], _greedy(4, allowed_token_ids=[368, 1567], bad_words=["return"]))
    with pytest.raises(ValueError, match="which min_tokens=3 bans until then"):
        llm.generate([PROMPT], SamplingParams(max_tokens=4, min_tokens=3, allowed_token_ids=[eos]))
    out = llm.generate([PROMPT], SamplingParams(max_tokens=4, min_tokens=3, allowed_token_ids=[eos], ignore_eos=True))
    assert out[0].outputs[0].token_ids == [eos] * 4
    assert len(llm.get_tokenizer().encode(PROMPT * 60)) > llm.llm_engine.max_model_len
    with pytest.raises(ValueError, match="truncate_prompt_tokens=-1 keeps .* no room is left"):
        llm.generate([PROMPT * 60], _greedy(4, truncate_prompt_tokens=-1))     # -1: the whole context
