"""Structured outputs (turbospec/structured_outputs.py, engine/grammar.py) on codelm-12m, float32
CPU: every output matches its schema / regex / choice / grammar; greedy tokens equal a step-by-step
reference (transformers' model, logits masked by llguidance's own byte mask, argmax); the first
sampled token's law is the masked softmax; speculation and batch neighbours change nothing; the
reasoning gate leaves the think block free."""
from __future__ import annotations

import json
import re
import sys

import llguidance
import llguidance.hf
import pytest
import torch

from turbospec import LLM, SamplingParams
from turbospec.engine.grammar import GrammarCompiler, GrammarState, allowed_mask
from turbospec.structured_outputs import StructuredOutputsParams

PROMPT = "def parse(data):\n    return "
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}}


@pytest.fixture(scope="module")
def llm(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=256)


@pytest.fixture(scope="module")
def spec_llm(codelm_dir):
    return LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=256,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})


def so_params(temperature=0.0, max_tokens=64, **so) -> SamplingParams:
    return SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=0 if temperature else None,
                          structured_outputs=StructuredOutputsParams(**so))


def check_schema(obj) -> None:
    assert set(obj) == {"name", "age", "tags"}
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 10
    assert isinstance(obj["age"], int) and not isinstance(obj["age"], bool)
    assert isinstance(obj["tags"], list) and len(obj["tags"]) <= 2 and set(obj["tags"]) <= {"a", "b"}


# ---- the parameters ----------------------------------------------------------------------

@pytest.mark.parametrize("kw,msg", [({}, "exactly one"), ({"regex": "a", "choice": ["a"]}, "regex, choice"),
                                    ({"json": "{not json"}, "does not parse"), ({"choice": []}, "non-empty list"),
                                    ({"choice": ["a", 1]}, "non-empty list"), ({"regex": ""}, "non-empty string"),
                                    ({"json": [1]}, "JSON schema object")])
def test_params_refuse_what_is_not_one_constraint(kw, msg):
    with pytest.raises(ValueError, match=msg):
        StructuredOutputsParams(**kw)


def test_sampling_params_take_a_dict_and_vllms_old_field():
    p = SamplingParams(structured_outputs={"choice": ["yes", "no"]})
    assert isinstance(p.structured_outputs, StructuredOutputsParams) and p.structured_outputs.choice == ["yes", "no"]
    with pytest.raises(ValueError, match="no field 'jsn'"):
        SamplingParams(structured_outputs={"jsn": {}})
    old = SamplingParams(guided_decoding={"json": {}})          # vLLM's older name (tests/test_vllm_compat.py)
    assert isinstance(old.structured_outputs, StructuredOutputsParams) and old.structured_outputs.json == {}
    assert StructuredOutputsParams(json='{"type": "integer"}').json == {"type": "integer"}


def test_bad_regex_and_schema_are_value_errors_that_say_why(llm):
    with pytest.raises(ValueError, match="(?s)regex does not compile.*unclosed group"):
        llm.generate([PROMPT], so_params(regex="a(b"))
    with pytest.raises(ValueError, match="JSON schema does not compile"):
        llm.generate([PROMPT], so_params(json={"type": "no-such-type"}))
    assert not llm.llm_engine.has_unfinished_requests()


def test_missing_llguidance_is_a_value_error_saying_how_to_install(llm, monkeypatch):
    """An environment without llguidance (pip's dependency, absent from a hand-made one): the request is
    refused with the install line, not a ModuleNotFoundError from inside the engine."""
    for name in ("llguidance", "llguidance.hf", "llguidance.torch"):
        monkeypatch.setitem(sys.modules, name, None)          # `import llguidance` raises ImportError
    with pytest.raises(ValueError, match=r"llguidance package.*pip install 'llguidance>=1,<2'"):
        llm.generate([PROMPT], so_params(regex="[0-9]+"))
    assert not llm.llm_engine.has_unfinished_requests()
    monkeypatch.undo()
    assert re.fullmatch("[0-9]+", llm.generate([PROMPT], so_params(regex="[0-9]+", max_tokens=8))[0].outputs[0].text)


# ---- the mask ------------------------------------------------------------------------------

def test_mask_is_llguidances_own_and_never_allows_padding_ids(codelm_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(codelm_dir)
    vocab = 8192 + 40                                   # a model whose embedding is padded past the tokenizer
    gc = GrammarCompiler(tok, vocab, [0])
    m = gc.matcher(StructuredOutputsParams(json=SCHEMA))
    ref = llguidance.LLMatcher(llguidance.hf.from_tokenizer(tok, n_vocab=vocab, eos_token=[0]),
                               StructuredOutputsParams(json=SCHEMA).to_grammar())
    for text in ["", '{"name": "Al', '{"name": "Al", "age": 3', '{"name": "Al", "age": 3, "tags": ["a"]}']:
        if text:
            ids = tok.encode(text, add_special_tokens=False)
            assert m.consume_tokens(ids) and ref.consume_tokens(ids)
        got = allowed_mask([GrammarState(m), None], vocab, torch.device("cpu"))   # [2, vocab] bool
        want = torch.tensor(list(ref.compute_logit_bias()), dtype=torch.int32)[:vocab] > 0
        assert torch.equal(got[0], want), text
        assert got[1].all() and not got[0, 8192:].any()
        m.rollback(len(ids) if text else 0)
        ref.rollback(len(ids) if text else 0)
    assert m.is_stopped() is False


# ---- outputs that match ----------------------------------------------------------------------

@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_output_matches_its_constraint(llm, temperature):
    cases = [
        (dict(json=SCHEMA), lambda t: check_schema(json.loads(t))),
        (dict(json=SCHEMA, disable_any_whitespace=True), lambda t: (check_schema(json.loads(t)), " " not in t)),
        (dict(json_object=True), lambda t: isinstance(json.loads(t), dict)),
        (dict(regex=r"[0-9]{3}-[a-z]{2,5}"), lambda t: re.fullmatch(r"[0-9]{3}-[a-z]{2,5}", t)),
        (dict(choice=["True", "False", "None"]), lambda t: t in ("True", "False", "None")),
        (dict(grammar='start: "def " NAME "(" NAME? ")" ":"\nNAME: /[a-z_]{1,12}/'),
         lambda t: re.fullmatch(r"def [a-z_]{1,12}\(([a-z_]{1,12})?\):", t)),
    ]
    params = [so_params(temperature, max_tokens=96, **kw) for kw, _ in cases]
    outs = llm.generate([PROMPT] * len(cases), params)
    tok = llm.get_tokenizer()
    for (kw, check), out in zip(cases, outs):
        o = out.outputs[0]
        assert o.finish_reason == "stop", (kw, o.text)
        assert check(o.text) is not False, (kw, o.text)
        assert o.text == tok.decode(o.token_ids), "the grammar's last token is part of the text"
        assert 0 not in o.token_ids                                      # stopped by the grammar, not EOS


def test_greedy_equals_a_masked_argmax_reference(llm, codelm_dir, hf_model_factory):
    """transformers' model, the whole sequence each step, llguidance's byte mask, argmax."""
    hf = hf_model_factory(codelm_dir)
    tok = llm.get_tokenizer()
    so = StructuredOutputsParams(json=SCHEMA)
    m = llguidance.LLMatcher(llguidance.hf.from_tokenizer(tok, n_vocab=8192, eos_token=[0]), so.to_grammar())
    ids = tok.encode(PROMPT)
    want = []
    with torch.no_grad():
        while not m.is_stopped() and len(want) < 64:
            logits = hf(torch.tensor([ids + want])).logits[0, -1]              # [V]
            bias = torch.tensor(list(m.compute_logit_bias()), dtype=torch.int32)[:logits.shape[0]]
            t = int(logits.masked_fill(bias == 0, float("-inf")).argmax())
            assert m.consume_token(t)
            want.append(t)
    got = llm.generate([PROMPT], so_params(json=SCHEMA))[0].outputs[0].token_ids
    assert got == want


def test_cut_by_max_tokens_is_length_with_a_prefix_of_the_full_output(llm):
    full = llm.generate([PROMPT], so_params(json=SCHEMA))[0].outputs[0]
    cut = llm.generate([PROMPT], so_params(json=SCHEMA, max_tokens=5))[0].outputs[0]
    assert cut.finish_reason == "length" and cut.token_ids == full.token_ids[:5]


def test_first_sampled_token_follows_the_masked_softmax(llm, codelm_dir, hf_model_factory):
    """n = 600 seeded samples under a 4-way choice: the first token's counts against softmax(logits
    / T) over the tokens the grammar allows there (every prefix of a choice: "r", "ret", "return",
    ...), bins with fewer than 5 expected merged, chi-square at p = 0.001."""
    from scipy.stats import chi2
    hf = hf_model_factory(codelm_dir)
    tok = llm.get_tokenizer()
    choices = ["return", "yield", "pass", "raise"]
    m = llguidance.LLMatcher(llguidance.hf.from_tokenizer(tok, n_vocab=8192, eos_token=[0]),
                             StructuredOutputsParams(choice=choices).to_grammar())
    allowed = torch.tensor(list(m.compute_logit_bias()), dtype=torch.int32)[:8192] > 0       # [V]
    with torch.no_grad():
        logits = hf(torch.tensor([tok.encode(PROMPT)])).logits[0, -1]                       # [V]
    p = torch.softmax(logits.masked_fill(~allowed, float("-inf")).double() / 1.5, dim=0)
    outs = llm.generate([PROMPT], SamplingParams(temperature=1.5, max_tokens=4, n=600, seed=7,
                                                 structured_outputs={"choice": choices}))
    assert {o.text for o in outs[0].outputs} <= set(choices)
    firsts = torch.tensor([o.token_ids[0] for o in outs[0].outputs])
    assert allowed[firsts].all()
    counts = torch.bincount(firsts, minlength=8192).double()
    expected = p * len(firsts)
    big = expected >= 5
    assert big.sum() >= 2
    rest = expected[~big].sum()
    obs = torch.cat([counts[big], counts[~big].sum().view(1)]) if rest > 0 else counts[big]
    exp = torch.cat([expected[big], rest.view(1)]) if rest > 0 else expected[big]
    stat = float(((obs - exp) ** 2 / exp).sum())
    assert stat < chi2.ppf(0.999, len(obs) - 1), (obs.tolist(), exp.tolist())


# ---- the rest of the engine ------------------------------------------------------------------

JSON_PROMPT = 'people = [\n    {"name": "Ann", "age": 31, "tags": ["a"]},\n    {"name": "Bob", "age": 4, "tags": ["b"]},\n    '


def test_speculation_and_neighbours_change_nothing(llm, spec_llm):
    """Greedy and seeded: plain rows beside grammar rows, and n-gram speculation (whose drafts
    the grammar rows verify under their masks), give each request its tokens alone."""
    plain = [SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True)] * 2
    so = [so_params(json=SCHEMA), so_params(regex=r"(ab|cd){1,8}x"), so_params(1.0, json=SCHEMA),
          so_params(0.7, json_object=True)]
    prompts = [PROMPT, "import os\n", JSON_PROMPT, "class A:\n", JSON_PROMPT, JSON_PROMPT]
    alone = [o.outputs[0].token_ids for o in llm.generate(prompts[:2], plain)] + \
        [o.outputs[0].token_ids for o in llm.generate(prompts[2:], so)]
    mixed = [o.outputs[0].token_ids for o in llm.generate(prompts, plain + so)]
    spec = spec_llm.generate(prompts, plain + so)
    assert mixed == alone and [o.outputs[0].token_ids for o in spec] == alone
    assert all(o.metrics.num_drafts > 0 for o in spec[2:5:2])              # the grammar rows did verify drafts
    assert all(o.metrics.num_accepted_tokens > 0 for o in spec[2:5:2])


def test_tree_drafts_under_a_grammar_equal_plain(llm, codelm_dir):
    """EAGLE-3 tree drafts: each node's row is masked by the grammar after its path."""
    tree = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=256, speculative_config={
        "method": "eagle3", "model": str(codelm_dir.parent / "codelm-12m-eagle3"), "num_speculative_tokens": 6,
        "tree": {"topk": 2, "depth": 3, "budget": 6}})
    params = [so_params(json=SCHEMA), so_params(1.0, json=SCHEMA), so_params(regex="[a-z]{2,8}\\([a-z]{0,6}\\)")]
    prompts = [JSON_PROMPT, JSON_PROMPT, PROMPT]
    want = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    got = tree.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in got] == want
    assert sum(o.metrics.num_accepted_tokens for o in got) > 0


def test_verify_masks_follow_each_path(codelm_dir):
    """Row 1 + n is the grammar after the path to node n; a refused draft's subtree allows all."""
    from transformers import AutoTokenizer
    from turbospec.engine.grammar import unpack_mask, verify_masks
    from turbospec.engine.sequence import Sequence
    tok = AutoTokenizer.from_pretrained(codelm_dir)
    gc = GrammarCompiler(tok, 8192, [0])
    so = StructuredOutputsParams(choice=["abc", "abd", "xyz"])
    seq = Sequence("r", None, [1, 2], SamplingParams(), torch.device("cpu"), 64)
    seq.grammar = gc.state(so, [1, 2])
    a, b, c, d, x, y = (tok.convert_tokens_to_ids(t) for t in ("a", "b", "c", "d", "x", "y"))
    # chain a, b, x: row 2 after "ab" allows c / d only, row 3 (after the refused x) everything
    rows = unpack_mask(verify_masks(seq.grammar, [a, b, x], None, 5, 8192), 8192, torch.device("cpu"))
    assert rows[0, a] and rows[0, x] and not rows[0, b]
    assert rows[1, b] and not rows[1, a] and not rows[1, c]
    assert rows[2, c] and rows[2, d] and not rows[2, x]
    assert rows[3].all() and rows[4].all()
    # tree: node 0 "a", node 1 "x" (both children of the root), node 2 "b" under node 0
    rows = unpack_mask(verify_masks(seq.grammar, [a, x, b], [-1, -1, 0], 4, 8192), 8192, torch.device("cpu"))
    assert rows[1, b] and not rows[1, y]
    assert rows[2, y] and not rows[2, b]
    assert rows[3, c] and rows[3, d] and rows[3].sum() < 8192
    m = seq.grammar.matcher                                        # rolled back: "abd" still fits whole
    assert m.consume_tokens(tok.encode("abd", add_special_tokens=False)) and m.is_stopped()


def test_reasoning_gate_leaves_the_think_block_free(codelm_dir):
    """With think ids set (as --reasoning-parser does): a prompt without tags lets the first token
    open a block (here `start` := the token plain greedy writes first), whose text up to `end`
    (:= its third token) is free, the grammar holding after it; a prompt that closed a block holds
    the output to the grammar from the first token, `start` refused; one that ends inside a
    block waits for `end`."""
    llm = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=256)
    tok = llm.get_tokenizer()
    free = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8))[0].outputs[0].token_ids
    start, end = free[0], free[2]
    assert len({start, free[1], end}) == 3
    grammars = llm.llm_engine.grammars
    grammars.think_ids = (start, end)
    ids = tok.encode(PROMPT)
    so = StructuredOutputsParams(regex="[0-9]{4}")
    assert (grammars.state(so, ids).wait, grammars.state(so, ids).opener) == (None, (start, end))
    assert grammars.state(so, ids + [start]).wait == end
    closed = grammars.state(so, ids + [start, 5, end] + tok.encode("\n\n", add_special_tokens=False))
    assert (closed.wait, closed.opener) == (None, None)
    out = llm.generate([PROMPT], so_params(regex="[0-9]{4}"))[0].outputs[0]
    assert out.token_ids[:3] == free[:3] and out.finish_reason == "stop"
    assert re.fullmatch("[0-9]{4}", tok.decode(out.token_ids[3:]))
    spec = LLM(str(codelm_dir), device="cpu", dtype="float32", max_model_len=256,
               speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    spec.llm_engine.grammars.think_ids = (start, end)           # drafts across the gate: verify_masks' walk
    assert spec.generate([PROMPT + PROMPT], so_params(regex="[0-9]{4}"))[0].outputs[0].token_ids == \
        llm.generate([PROMPT + PROMPT], so_params(regex="[0-9]{4}"))[0].outputs[0].token_ids
    out = llm.generate([{"prompt_token_ids": ids + [start, 5, end]}], so_params(regex="[0-9]{4}"))[0].outputs[0]
    assert re.fullmatch("[0-9]{4}", out.text) and start not in out.token_ids


def test_a_schema_sent_again_is_copied_not_compiled(codelm_dir):
    from transformers import AutoTokenizer
    gc = GrammarCompiler(AutoTokenizer.from_pretrained(codelm_dir), 8192, [0])
    a = gc.matcher(StructuredOutputsParams(json=SCHEMA))
    assert a.consume_tokens([gc.tokenizer.convert_tokens_to_ids("{")])
    b = gc.matcher(StructuredOutputsParams(json=dict(SCHEMA)))        # equal schema: the cached one, fresh
    assert len(gc._compiled) == 1 and b is not a
    assert b.validate_tokens([gc.tokenizer.convert_tokens_to_ids("{")]) == 1     # b starts at the start
    for i in range(70):
        gc.matcher(StructuredOutputsParams(regex=f"x{i}"))
    assert len(gc._compiled) == 64


def test_required_tool_schema_lifts_defs_and_rewrites_refs(codelm_dir):
    """forced_tool_schema("required"): each tool's $defs / definitions move to the top renamed
    per tool, and "#", "#/$defs/..", "#/definitions/..", "#/properties/.." refs still point at
    the same subschemas: llguidance accepts a valid array of calls and refuses a wrong one."""
    from transformers import AutoTokenizer
    from turbospec.serve.forced_tool_calls import forced_tool_schema
    ship = {"type": "object", "required": ["to"], "additionalProperties": False,
            "properties": {"to": {"$ref": "#/$defs/Addr"}, "back": {"$ref": "#/properties/to"}},
            "$defs": {"Addr": {"type": "object", "required": ["zip"], "additionalProperties": False,
                               "properties": {"zip": {"type": "integer"}}}}}
    node = {"type": "object", "required": ["n"], "additionalProperties": False,
            "properties": {"n": {"$ref": "#/definitions/Addr"}, "kid": {"$ref": "#"}},
            "definitions": {"Addr": {"type": "string", "maxLength": 3}}}        # the same name, another schema
    tools = [{"type": "function", "function": {"name": "ship", "parameters": ship}},
             {"type": "function", "function": {"name": "node", "parameters": node}}]
    schema = forced_tool_schema(tools, "required", None)
    assert set(schema["$defs"]) == {"t0_Addr", "t1_Addr"} and '"$defs": {' not in json.dumps(schema["items"])
    tok = AutoTokenizer.from_pretrained(codelm_dir)
    gc = GrammarCompiler(tok, 8192, [0])

    def accepts(value) -> bool:
        m = gc.matcher(StructuredOutputsParams(json=schema, disable_any_whitespace=True))
        ids = tok.encode(json.dumps(value, separators=(",", ":")), add_special_tokens=False)
        return m.validate_tokens(ids) == len(ids) and m.consume_tokens(ids) and m.is_accepting()

    good = [{"name": "ship", "parameters": {"to": {"zip": 7}, "back": {"zip": 8}}},
            {"name": "node", "parameters": {"n": "abc", "kid": {"n": "x"}}}]
    assert accepts(good)
    assert not accepts([{"name": "ship", "parameters": {"to": {"zip": "7"}}}])           # Addr of ship: integer
    assert not accepts([{"name": "node", "parameters": {"n": "abcd"}}])                   # Addr of node: 3 chars
    assert not accepts([{"name": "node", "parameters": {"n": "a", "kid": {"to": {"zip": 1}}}}])   # "#": node
