"""The reasoning parsers (turbospec/reasoning_parser.py, vLLM's `qwen3` and `deepseek_r1`) on
strings: whole outputs against the expected (reasoning, content), and every stream split of them
(one cut at every character boundary, two cuts at every pair, one character at a time) giving the
same reasoning and content as the whole, so that no piece of a `<think>` / `</think>` tag reaches
either field whatever the token boundaries."""
from __future__ import annotations

import pytest

from turbospec.reasoning_parser import (REASONING_PARSERS, ReasoningParser, check_reasoning_parser,
                                        extract_reasoning)

OPENS = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"      # newer templates, R1
CLOSES = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"   # enable_thinking false
PLAIN = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"              # Qwen3's original template

# id -> (parser, prompt, enable_thinking, output, reasoning, content)
CASES = {
    "r1_prompt_opened": ("deepseek_r1", OPENS, None, "Let me think.\n</think>\n\nThe answer is 4.",
                         "Let me think.\n", "\n\nThe answer is 4."),
    "r1_model_opens": ("deepseek_r1", PLAIN, None, "<think>\nabc\n</think>\n\nHi", "\nabc\n", "\n\nHi"),
    "r1_truncated": ("deepseek_r1", OPENS, None, "still thinking about it", "still thinking about it", None),
    "r1_nothing_after": ("deepseek_r1", OPENS, None, "abc</think>", "abc", None),
    "r1_empty_reasoning": ("deepseek_r1", OPENS, None, "</think>rest", "", "rest"),
    "r1_empty_output": ("deepseek_r1", OPENS, None, "", "", None),
    "r1_whitespace_before_think": ("deepseek_r1", None, None, "\n<think>X</think>\nY", "X", "\nY"),
    "r1_second_end_is_text": ("deepseek_r1", OPENS, None, "a</think>b</think>c", "a", "b</think>c"),
    "r1_later_think_is_text": ("deepseek_r1", OPENS, None, "x <think> y</think>z", "x <think> y", "z"),
    "r1_near_tags": ("deepseek_r1", OPENS, None, "<thin>k </thinking> </ think></think>ok",
                     "<thin>k </thinking> </ think>", "ok"),
    "r1_partial_end_at_the_end": ("deepseek_r1", OPENS, None, "a </thi", "a </thi", None),
    "r1_partial_start_only": ("deepseek_r1", OPENS, None, " <thi", " <thi", None),
    "r1_whitespace_only": ("deepseek_r1", OPENS, None, " \n ", " \n ", None),
    "r1_prompt_closed": ("deepseek_r1", CLOSES, None, "Hi </think> there", None, "Hi </think> there"),
    "r1_unicode": ("deepseek_r1", OPENS, None, "Zürich? 思考</think>答え: 42 ✓", "Zürich? 思考", "答え: 42 ✓"),
    "q3_model_opens": ("qwen3", PLAIN, None, "<think>\nabc\n</think>\n\nHi", "\nabc\n", "\n\nHi"),
    "q3_prompt_opened": ("qwen3", OPENS, None, "abc\n</think>\n\nHi", "abc\n", "\n\nHi"),
    "q3_prompt_opened_trailing_ws": ("qwen3", OPENS + "\n", None, "abc</think>Hi", "abc", "Hi"),
    "q3_no_block": ("qwen3", PLAIN, None, "Hello there.", None, "Hello there."),
    "q3_no_block_empty": ("qwen3", PLAIN, None, "", None, ""),
    "q3_no_block_end_tag_is_text": ("qwen3", PLAIN, None, "abc</think>Hi", None, "abc</think>Hi"),
    "q3_unknown_prompt": ("qwen3", None, None, "Hello <think>", None, "Hello <think>"),
    "q3_leading_ws_no_block": ("qwen3", PLAIN, None, "\n\nHello", None, "\n\nHello"),
    "q3_near_start_tag": ("qwen3", PLAIN, None, "  <thinking> is a tag", None, "  <thinking> is a tag"),
    "q3_partial_start_only": ("qwen3", PLAIN, None, " <thi", None, " <thi"),
    "q3_truncated_in_block": ("qwen3", PLAIN, None, "<think>abc", "abc", None),
    "q3_prompt_opened_truncated": ("qwen3", OPENS, None, "abc </thi", "abc </thi", None),
    "q3_empty_block": ("qwen3", PLAIN, None, "<think>\n\n</think>\n\nOK", "\n\n", "\n\nOK"),
    "q3_prompt_closed": ("qwen3", CLOSES, None, "Hi", None, "Hi"),
    "q3_thinking_disabled": ("qwen3", PLAIN, False, "<think>a</think>b", None, "<think>a</think>b"),
    "q3_thinking_enabled": ("qwen3", OPENS, True, "a</think>b", "a", "b"),
    "q3_tool_call_after": ("qwen3", OPENS, None, 'Need weather.</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call>',
                           "Need weather.", '\n\n<tool_call>\n{"name": "f"}\n</tool_call>'),
}


def _stream(name, prompt, enable_thinking, pieces: list[str]) -> tuple[str, str, ReasoningParser]:
    parser = ReasoningParser(name, prompt, enable_thinking)
    reasoning = content = ""
    for p in pieces:
        r, c = parser.feed(p)
        assert not (c and parser.thinking and not parser.ended), "content before </think>"
        assert not (r and content), "reasoning after content"
        reasoning, content = reasoning + r, content + c
    r, c = parser.finish()
    return reasoning + r, content + c, parser


@pytest.mark.parametrize("case", list(CASES))
def test_whole_output(case):
    name, prompt, thinking, text, reasoning, content = CASES[case]
    got = extract_reasoning(text, name, prompt, thinking)
    assert (got.reasoning, got.content) == (reasoning, content)


@pytest.mark.parametrize("case", list(CASES))
def test_every_split_streams_the_same_reasoning_and_content(case):
    name, prompt, thinking, text, reasoning, content = CASES[case]
    n = len(text)
    splits = [[text[:i], text[i:]] for i in range(n + 1)]
    splits += [[text[:i], text[i:j], text[j:]] for i in range(n + 1) for j in range(i, n + 1)]
    splits.append(list(text))
    for pieces in splits:
        r, c, parser = _stream(name, prompt, thinking, pieces)
        assert r == (reasoning or ""), pieces
        assert c == (content or ""), pieces
        assert parser.thinking == (reasoning is not None), pieces


def test_text_is_released_as_soon_as_it_cannot_be_a_tag():
    p = ReasoningParser("deepseek_r1", OPENS)
    assert p.feed("Let me") == ("Let me", "")
    assert p.feed(" think </th") == (" think ", "")          # '</th' could end the block: held
    assert p.feed("eory> ok <") == ("</theory> ok ", "")     # it did not; '<' held
    assert p.feed("/think>\n\nAns") == ("", "\n\nAns")
    assert p.feed("wer </think>") == ("", "wer </think>")     # content is never held
    assert p.finish() == ("", "")
    q = ReasoningParser("qwen3", PLAIN)
    assert q.feed("\n") == ("", "") and q.feed("<thi") == ("", "")     # could still open a block
    assert q.feed("nk>a") == ("a", "") and q.thinking
    q = ReasoningParser("qwen3", PLAIN)
    assert q.feed("\n") == ("", "") and q.feed("Hi") == ("", "\nHi") and not q.thinking
    assert ReasoningParser("qwen3", CLOSES).feed("<think>") == ("", "<think>")   # nothing held at all


def test_unknown_parser_names_the_supported_ones():
    assert REASONING_PARSERS == ("deepseek_r1", "qwen3")
    assert check_reasoning_parser("qwen3") == "qwen3"
    with pytest.raises(ValueError, match="'nope' is not a reasoning parser turbospec has: use deepseek_r1 or qwen3"):
        check_reasoning_parser("nope")
    with pytest.raises(ValueError):
        ReasoningParser("granite")
