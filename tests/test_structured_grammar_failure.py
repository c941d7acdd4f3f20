"""A grammar that compiles but that llguidance gives up on mid-generation (engine/llm_engine.py's
append_token): the request ends with vLLM's finish_reason "error" and llguidance's reason in
stop_reason, whether the limit is hit consuming a token (Earley row limit) or computing the mask
before one (then llguidance allows EOS alone and accepts it: before, that was a silent "stop"
with text the grammar does not match), in a single step or while masking a verify's draft rows;
a request in the same batch gets its tokens as alone."""
from __future__ import annotations

import pytest

import tests.test_structured_outputs as structured
from turbospec import SamplingParams
from turbospec.structured_outputs import StructuredOutputsParams

llm, spec_llm = structured.llm, structured.spec_llm     # its fixtures (module scope: this module's own engines)

PROMPT = "def parse(data):\n    return "
ROW_LIMIT = 'start: "hello" x\nx: ' + " | ".join(f'"w{i}x"' for i in range(3000)) + "\n"
MASK_LIMIT = ('start: "hello" x+\nx: ' + " | ".join(f"y{i}" for i in range(900)) + "\n"
              + "\n".join(f"y{i}: L" for i in range(900)) + "\nL: /[a-z ]/\n")
CASES = [(ROW_LIMIT, "Current row has 3001 items; max is 2000"), (MASK_LIMIT, "Too many items (limit 50000; mask)")]


def _check(out, words: str) -> None:
    assert out.finish_reason == "error", (out.finish_reason, out.text)
    assert out.stop_reason.startswith("structured outputs: llguidance could not follow the grammar at output token ")
    assert words in out.stop_reason and "<state>" not in out.stop_reason


def test_the_request_ends_with_error_and_why(llm):
    plain = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    alone = llm.generate([PROMPT], plain)[0].outputs[0].token_ids
    held = [SamplingParams(temperature=0.0, max_tokens=16, structured_outputs={"grammar": g}) for g, _ in CASES]
    *failed, beside = llm.generate([PROMPT] * 3, held + [plain])
    for out, (_, words) in zip(failed, CASES):
        _check(out.outputs[0], words)
    assert beside.outputs[0].token_ids == alone and beside.outputs[0].finish_reason == "length"
    assert not llm.llm_engine.has_unfinished_requests()


@pytest.mark.parametrize("repeat", ["x+", "x*"])
def test_under_speculation_the_mask_of_a_draft_path_fails_the_same_way(llm, spec_llm, repeat):
    """n-gram drafts the forced prefix (the prompt repeats it): the mask limit is hit while the
    verify rows are masked (engine/grammar.py verify_masks). The request ends at the token and with
    the message it ends with without drafts (it ended 3 tokens early when a draft path's error
    state stuck to the matcher). With x*, where the grammar may end at that point, the restored
    matcher would accept EOS: it still fails, as plain decoding does (it ended "stop")."""
    prefix = "hello world, the quick brown fox"
    prompt = f"{prefix} jumps\n" * 3
    plain = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    alone = spec_llm.generate([PROMPT], plain)[0].outputs[0].token_ids
    grammar, words = CASES[1][0].replace('"hello"', f'"{prefix}"').replace("x+", repeat), CASES[1][1]
    held = SamplingParams(temperature=0.0, max_tokens=24, structured_outputs={"grammar": grammar},
                          include_stop_str_in_output=True)
    want = llm.generate([prompt], held)[0].outputs[0]
    failed, beside = spec_llm.generate([prompt, PROMPT], [held, plain])
    _check(failed.outputs[0], words)
    assert failed.metrics.num_drafts > 0 and failed.outputs[0].text and prefix.startswith(failed.outputs[0].text)
    assert failed.outputs[0].token_ids == want.token_ids and failed.outputs[0].stop_reason == want.stop_reason
    assert "llguidance" not in want.text + failed.outputs[0].text    # the reason is no stop string
    assert beside.outputs[0].token_ids == alone
    assert not spec_llm.llm_engine.has_unfinished_requests()


def test_the_reason_is_llguidances_first_line_cut_to_300_characters():
    from turbospec.structured_outputs import grammar_failure
    params = StructuredOutputsParams(json={"type": "object"})
    msg = grammar_failure(params, "Parser Error: " + "x" * 400 + "\n<state>\nTokens: secret", 7)
    assert msg.startswith("structured outputs: llguidance could not follow the JSON schema at output token 7: "
                          "Parser Error: xxx")
    assert msg.endswith("...") and "secret" not in msg and len(msg.split(": ", 1)[1]) < 400
    assert grammar_failure(params, "", 1).endswith(": no error text")
