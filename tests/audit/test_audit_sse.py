"""SSE framing and OpenAI chunk parsing: the quirks vLLM, SGLang and hosted providers send."""
import pytest

from turbospec.audit.sse import BadChunk, SSEDecoder, parse_chunk


def feed_all(lines):
    d = SSEDecoder()
    out = [p for p in (d.feed(line) for line in lines) if p is not None]
    tail = d.flush()
    return out + ([tail] if tail is not None else [])


def test_decoder_skips_comments_and_fields_and_joins_multiline_data():
    lines = [": keep-alive", "", "event: message", "id: 7", "retry: 100", 'data: {"a":', 'data: 1}', "",
             "data:[DONE]", ""]
    assert feed_all(lines) == ['{"a":\n1}', "[DONE]"]


def test_decoder_flushes_an_unterminated_last_event():
    assert feed_all(['data: {"x": 1}']) == ['{"x": 1}']


def test_chat_content_reasoning_and_null_content():
    c = parse_chunk('{"choices":[{"index":0,"delta":{"reasoning_content":"think ","content":null}}]}')
    assert c.text == "think " and not c.done
    assert parse_chunk('{"choices":[{"index":0,"delta":{"content":null}}]}').text == ""
    assert parse_chunk('{"choices":[{"index":0,"delta":{"reasoning":"r","content":"c"}}]}').text == "rc"
    role = parse_chunk('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}')
    assert role.text == ""


def test_tool_call_arguments_count_as_output():
    c = parse_chunk('{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\""}}]}}]}')
    assert c.text == '{"a"'


def test_completions_text_and_finish_reason():
    c = parse_chunk('{"choices":[{"index":0,"text":"def f","finish_reason":"length"}]}')
    assert (c.text, c.finish_reason) == ("def f", "length")


def test_turbospec_per_request_speculation_figures():
    c = parse_chunk('{"choices":[],"usage":{"completion_tokens":3},"speculative_decoding":{"num_drafts":2}}')
    assert c.speculative_decoding == {"num_drafts": 2}
    assert parse_chunk('{"choices":[]}').speculative_decoding is None


def test_usage_only_final_chunk_with_empty_choices():
    c = parse_chunk('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":31}}')
    assert c.text == "" and c.usage == {"prompt_tokens": 5, "completion_tokens": 31}
    assert parse_chunk('{"choices":[{"index":0,"delta":{"content":"x"}}],"usage":null}').usage is None


def test_other_choice_indices_are_ignored():
    c = parse_chunk('{"choices":[{"index":1,"delta":{"content":"no"}},{"index":0,"delta":{"content":"yes"}}]}')
    assert c.text == "yes"


def test_done_and_errors():
    assert parse_chunk(" [DONE] ").done
    assert parse_chunk('{"error":{"message":"overloaded","code":503}}').error == "overloaded"
    assert parse_chunk('{"object":"error","message":"bad","code":400}').error == "bad"


@pytest.mark.parametrize("payload", ['{"choices": [', "[1, 2]", "not json"])
def test_bad_json_raises_with_the_payload(payload):
    with pytest.raises(BadChunk) as e:
        parse_chunk(payload)
    assert payload[:5] in str(e.value)
