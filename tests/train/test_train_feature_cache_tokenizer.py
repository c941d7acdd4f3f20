"""The feature cache's key covers the target's tokenizer: a new tokenizer.json, tokenizer_config.json
or chat template tokenizes the same data file into other samples (other ids, other lengths), so
`train-i` names other features. The key held the data file and the target's weights only: a cache
written before the tokenizer changed was reused without a word."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.train.conftest import write_jsonl
from turbospec.train.config import Eagle3Options, TrainConfig
from turbospec.train.feature_cache import FeatureCache, cache_key, check_cache_dir


def _key(target, data, out, template=None) -> dict:
    cfg = TrainConfig(method="eagle3", target=str(target), data=str(data), out=str(out), device="cpu",
                      max_seq_len=256, steps=1, chat_template=template and str(template),
                      eagle3=Eagle3Options(ttt_steps=2, draft_vocab_size=300))
    return cache_key(cfg, (1, 2, 3), __import__("torch").float32)


def _refusal(path, key) -> str:
    with pytest.raises(ValueError) as e:
        check_cache_dir(str(path), key)
    return str(e.value)


def test_changing_a_tokenizer_file_misses_the_cache(tiny_target, code_jsonl, tmp_path):
    target = shutil.copytree(tiny_target, tmp_path / "target")
    out, cache = tmp_path / "out", tmp_path / "fc"
    key = _key(target, code_jsonl, out)
    assert sorted(key["tokenizer"]["files"]) == ["tokenizer.json", "tokenizer_config.json"]
    FeatureCache(str(cache), key, 10, 24, 8, 4, log=lambda m: None)          # writes the manifest
    check_cache_dir(str(cache), _key(target, code_jsonl, out))              # unchanged: a hit
    head = f"--feature-cache {str(cache)!r} was written for another run (tokenizer {str(target.resolve())!r}: "
    tail = " changed since (content hash)): its features are not this run's; delete it or pass another directory"

    tok = target / "tokenizer.json"
    original = tok.read_bytes()
    tok.write_text(json.dumps(json.loads(original), indent=2))            # the same tokenizer, other bytes
    assert _refusal(cache, _key(target, code_jsonl, out)) == head + "tokenizer.json" + tail
    tok.write_bytes(original)
    check_cache_dir(str(cache), _key(target, code_jsonl, out))              # restored: a hit again

    cfg_file = target / "tokenizer_config.json"
    tc = json.loads(cfg_file.read_text())
    tc["chat_template"] = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    cfg_file.write_text(json.dumps(tc))
    assert _refusal(cache, _key(target, code_jsonl, out)) == head + "tokenizer_config.json" + tail
    del tc["chat_template"]
    cfg_file.write_text(json.dumps(tc))
    (target / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")   # the newer file layout
    assert _refusal(cache, _key(target, code_jsonl, out)) == head + "chat_template.jinja, tokenizer_config.json" \
        + tail


def test_editing_the_chat_template_file_misses_the_cache(tiny_target, code_jsonl, tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    cache = tmp_path / "fc"
    FeatureCache(str(cache), _key(tiny_target, code_jsonl, tmp_path / "o", template), 10, 24, 8, 4, log=print)
    template.write_text("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}")
    msg = _refusal(cache, _key(tiny_target, code_jsonl, tmp_path / "o", template))
    assert f"(tokenizer {str(tiny_target.resolve())!r}: --chat-template changed since (content hash))" in msg, msg


def test_a_cache_of_the_older_format_is_refused_by_name(tmp_path):
    cache = tmp_path / "fc"
    cache.mkdir()
    write_jsonl(cache / "manifest.json", [{"format": 1, "method": "eagle3"}])
    msg = _refusal(cache, {"format": 2, "method": "eagle3"})
    assert "(cache format 1 -> 2: written by another turbospec version)" in msg, msg
