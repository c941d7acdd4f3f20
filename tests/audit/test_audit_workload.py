"""Built-in prompt sets, custom JSONL and random prompts."""
import json
import re

import pytest

from turbospec.audit.workload import BUILTIN_DOMAINS, builtin_prompts, load_workload, random_prompts, take


@pytest.mark.parametrize("domain", BUILTIN_DOMAINS)
def test_builtin_sets_have_16_distinct_real_prompts(domain):
    prompts = builtin_prompts(domain)
    texts = [p.prompt for p in prompts]
    assert len(texts) >= 16 and len(set(texts)) == len(texts)
    assert all(len(t) > 40 for t in texts)
    assert all(p.domain == domain for p in prompts)


def test_hindi_is_in_devanagari():
    texts = [p.prompt for p in builtin_prompts("hindi")]
    assert all(re.search(r"[\u0900-\u097F]", t) for t in texts)
    devanagari = sum(len(re.findall(r"[\u0900-\u097F]", t)) for t in texts)
    letters = sum(len(re.findall(r"\w", t)) for t in texts)
    assert devanagari > 0.9 * letters          # one prompt quotes an English sentence to translate


def test_all_interleaves_domains():
    prompts = load_workload("all", 10)
    assert [p.domain for p in prompts[:5]] == list(BUILTIN_DOMAINS)
    assert len(prompts) >= 80


def test_jsonl_prompt_and_messages(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text(json.dumps({"prompt": "hi", "max_tokens": 5}) + "\n\n" +
                 json.dumps({"messages": [{"role": "user", "content": "yo"}], "domain": "support", "id": "x"}) + "\n")
    a, b = load_workload(str(f), 2)
    assert (a.domain, a.max_tokens, a.as_messages()) == ("mine", 5, [{"role": "user", "content": "hi"}])
    assert (b.id, b.domain, b.as_messages()) == ("x", "support", [{"role": "user", "content": "yo"}])
    with pytest.raises(ValueError, match="--api chat"):
        b.as_text()


@pytest.mark.parametrize("line,match", [
    ('{"text": "x"}', "exactly one of"),
    ('{"prompt": "x", "messages": []}', "exactly one of"),
    ('{"messages": [{"content": "no role"}]}', "role"),
    ('{"prompt": "x", "max_tokens": 0}', "max_tokens"),
    ("not json", "not valid JSON"),
])
def test_jsonl_errors_name_the_line_and_the_fix(tmp_path, line, match):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(ValueError, match=match) as e:
        load_workload(str(f), 1)
    assert "bad.jsonl:2" in str(e.value)


def test_jsonl_saved_by_windows_tools(tmp_path):
    # Notepad's UTF-8 byte order mark was 'not valid JSON (Unexpected UTF-8 BOM ...)'; a UTF-16 file
    # (Windows PowerShell's `>`) a bare "'utf-8' codec can't decode byte 0xff" without the file's name
    f = tmp_path / "mine.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + b'{"prompt": "hi"}\r\n{"prompt": "yo", "max_tokens": 3}\r\n')
    assert [(p.prompt, p.max_tokens) for p in load_workload(str(f), 2)] == [("hi", None), ("yo", 3)]
    f.write_bytes('{"prompt": "hi"}\n'.encode("utf-16"))
    with pytest.raises(ValueError, match=r"mine.jsonl is not UTF-8 text .*save it as UTF-8"):
        load_workload(str(f), 1)
    f.write_text('{"prompt": "hi", "max_tokens": true}\n')
    with pytest.raises(ValueError, match="mine.jsonl:1: `max_tokens` must be a positive integer"):
        load_workload(str(f), 1)


def test_random_prompts_lengths_and_errors():
    ps = random_prompts("random:64:32", 5, seed=1)
    assert len(ps) == 5 and len({p.prompt for p in ps}) == 5
    assert all(p.max_tokens == 32 and 60 <= len(p.prompt.split()) <= 70 for p in ps)
    assert random_prompts("random:64:32", 5, seed=1) == ps
    for bad in ("random:64", "random:x:3", "random:0:3", "random:1:2:3"):
        with pytest.raises(ValueError, match="random:IN:OUT"):
            random_prompts(bad, 1, 0)


def test_unknown_dataset_and_cycling():
    with pytest.raises(ValueError, match="use one of"):
        load_workload("poetry", 1)
    with pytest.raises(ValueError, match="does not exist"):
        load_workload("/nope/x.jsonl", 1)
    code = builtin_prompts("code")
    assert [p.id for p in take(code, len(code) + 2)][-2:] == [code[0].id, code[1].id]
