"""Bad data fails fast with a message that says what to fix, before any model is loaded."""
from __future__ import annotations

import json

import pytest

from tests.train.conftest import write_jsonl
from turbospec.train import loop
from turbospec.train.config import TrainConfig
from turbospec.train.data import load_dataset, load_tokenizer

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="module")
def tok(tiny_target):
    return load_tokenizer(str(tiny_target))


def _train_fails(tiny_target, data, tmp_path, monkeypatch, **kw) -> str:
    def no_model(*a, **k):
        raise AssertionError("the target was loaded before the data was validated")
    monkeypatch.setattr(loop, "TargetModel", no_model)
    with pytest.raises(ValueError) as e:          # some options are refused by TrainConfig already
        loop.train(TrainConfig(method="eagle3", target=str(tiny_target), data=str(data), out=str(tmp_path / "o"),
                               steps=1, **kw))
    return str(e.value)


def test_empty_file(tiny_target, tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "empty.jsonl", [])
    assert "holds no records" in _train_fails(tiny_target, data, tmp_path, monkeypatch)


def test_bad_json_names_the_line(tiny_target, tmp_path, monkeypatch):
    data = write_jsonl(tmp_path / "bad.jsonl", [{"text": "x = 1\n"}, '{"text": "unterminated'])
    msg = _train_fails(tiny_target, data, tmp_path, monkeypatch)
    assert "bad.jsonl:2" in msg and "not valid JSON" in msg


@pytest.mark.parametrize("row, needle", [
    ({"content": "x"}, "expected one of"),
    ({"text": 3}, "must be a string"),
    ({"messages": [{"role": "user"}]}, "'role' and 'content'"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn"),
    ({"conversations": [{"from": "robot", "value": "x"}]}, "unknown ShareGPT speaker"),
    ({"prompt_token_ids": [1, 99999]}, "outside the target vocabulary"),
    ([1, 2], "expected a JSON object"),
])
def test_wrong_schema(tiny_target, tmp_path, monkeypatch, row, needle):
    data = write_jsonl(tmp_path / "w.jsonl", [{"text": "ok = True\n"}, json.dumps(row)])
    msg = _train_fails(tiny_target, data, tmp_path, monkeypatch)
    assert needle in msg and "w.jsonl:2" in msg


def test_too_long_errors_or_truncates(tiny_target, tmp_path, monkeypatch, tok):
    long = "".join(f"value_{i} = {i} * {i}\n" for i in range(200))
    data = write_jsonl(tmp_path / "long.jsonl", [{"text": "a = 1\nb = 2\n"}, {"text": long}])
    msg = _train_fails(tiny_target, data, tmp_path, monkeypatch, max_seq_len=128)
    assert "longer than --max-seq-len 128" in msg and "line 2" in msg and "--truncate" in msg
    ds, rep = load_dataset(str(data), tok, 8192, 128, truncate=True)
    assert rep.num_truncated == 1 and int(ds.lengths.max()) == 128


def test_max_seq_len_beyond_target_context(tiny_target, code_jsonl, tmp_path, monkeypatch):
    msg = _train_fails(tiny_target, code_jsonl, tmp_path, monkeypatch, max_seq_len=4096)
    assert "exceeds the target's context 512" in msg


def test_chat_loss_only_on_assistant(tiny_target, tmp_path, tok):
    tpl = tmp_path / "chat.jinja"
    tpl.write_text(TEMPLATE)
    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "sum?"},
                          {"role": "assistant", "content": "def s(a, b): return a + b"}]},
            {"conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "print('hi')"}]}]
    data = write_jsonl(tmp_path / "chat.jsonl", rows)
    with pytest.raises(ValueError, match="no chat template"):
        load_dataset(str(data), tok, 8192, 256)
    tok2 = load_tokenizer(str(tiny_target), str(tpl))
    ds, rep = load_dataset(str(data), tok2, 8192, 256)
    assert rep.schemas == {"chat": 2}
    for i, answer in ((0, "def s(a, b): return a + b"), (1, "print('hi')")):
        ids, mask = ds.sample(i)
        trained = tok2.decode(ids[mask].tolist())
        assert answer in trained and "sum?" not in trained and "hello" not in trained


def test_prompt_completion_mask(tiny_target, tmp_path, tok):
    data = write_jsonl(tmp_path / "pc.jsonl", [{"prompt": "def f(x):\n", "completion": "    return x * 2\n"},
                                               {"prompt_token_ids": [5, 6, 7], "completion_token_ids": [8, 9]}])
    ds, _ = load_dataset(str(data), tok, 8192, 64)
    ids, mask = ds.sample(0)
    assert tok.decode(ids[mask].tolist()) == "    return x * 2\n"
    ids, mask = ds.sample(1)
    assert ids.tolist() == [5, 6, 7, 8, 9] and mask.tolist() == [False, False, False, True, True]
    ds, _ = load_dataset(str(data), tok, 8192, 64, loss_on_prompt=True)
    assert ds.sample(1)[1].tolist() == [False, True, True, True, True]


def test_every_bad_line_is_counted_and_the_first_named(tiny_target, tmp_path, monkeypatch):
    rows = ["\ufeff" + json.dumps({"text": "a = 1\n"}), {"text": 3}, "garbage"] + [{"foo": i} for i in range(6)]
    rows += [{"text": "b = 2\n"}, [1]]
    data = write_jsonl(tmp_path / "m.jsonl", rows)                       # BOM on line 1 is fine
    with open(data, "ab") as f:
        f.write(b'{"text": "caf\xe9"}\n')                                # latin-1, not UTF-8: line 12
    msg = _train_fails(tiny_target, data, tmp_path, monkeypatch)
    assert msg.startswith("10 bad lines in") and "m.jsonl:1:" not in msg
    assert "m.jsonl:2: field 'text' must be a string" in msg and "m.jsonl:3: not valid JSON" in msg
    assert "m.jsonl:6:" in msg and "m.jsonl:7:" not in msg               # the first five named
    assert "5 more bad line(s), e.g. line(s) [7, 8, 9, 11, 12]" in msg
    data = write_jsonl(tmp_path / "u.jsonl", [{"text": "ok = 1\n"}])
    with open(data, "ab") as f:
        f.write(b'{"text": "caf\xe9"}\n')
    assert "u.jsonl:2: not UTF-8 text" in _train_fails(tiny_target, data, tmp_path, monkeypatch)


def test_draft_vocab_keeps_the_always_ids_whatever_their_count():
    """The Vd most frequent label tokens, plus the target's EOS ids even when the data never has
    them (plain-text records): a drafter without EOS can never propose the end of a sequence."""
    import torch

    from turbospec.train.draft_vocab import build_draft_vocab
    counts = torch.tensor([0, 5, 9, 9, 1, 7, 0, 3])               # token 0 (EOS) never seen
    used, d2t, t2d = build_draft_vocab(counts, 3)
    assert used.tolist() == [2, 3, 5]                              # most frequent, the lower id on ties
    used, d2t, t2d = build_draft_vocab(counts, 3, always=(0, 99))  # an id outside the vocab is ignored
    assert used.tolist() == [0, 2, 3] and d2t.tolist() == [0, 1, 1]
    assert t2d.nonzero().flatten().tolist() == [0, 2, 3]
