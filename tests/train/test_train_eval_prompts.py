"""`--eval-prompts`: the help said "JSONL of held-out prompts" without the field it needs, and a wrong
file gave "prompts.jsonl:1 needs a string field 'prompt'" (a training-data file, a JSON array or a
non-UTF-8 file: a bare codec error with no file or line). The help now states the format, and every
error names the option, the file, the line and the expected format."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from turbospec.cli import app
from turbospec.train.config import TrainConfig
from turbospec.train.eval_prompts import FORMAT, load_eval_prompts


def test_the_help_states_the_format():
    out = " ".join(CliRunner().invoke(app, ["train", "eagle3", "--help"]).output.split())
    assert ('--eval-prompts TEXT JSONL, one JSON object per line with a non- empty string field "prompt" (other '
            'fields ignored; the format of `bench spec --prompts`), e.g. {"prompt": "def fib(n):"}') in out, out
    assert FORMAT == ('one JSON object per line with a non-empty string field "prompt", e.g. {"prompt": '
                      '"def fib(n):"} (other fields are ignored)')


@pytest.mark.parametrize("content, line, what", [
    (b'{"text": "def f():"}\n', 1, "no field \"prompt\" (it has 'text': training data is not read here)"),
    (b'{"prompt": "a"}\n\n{"messages": []}\n', 3, "no field \"prompt\" (it has 'messages': training data is not "
                                                  "read here)"),
    (b'[{"prompt": "a"}]\n', 1, "a JSON list, not an object"),
    (b'{"prompt": "a"}\n{"prompt": 3}\n', 2, "\"prompt\" is a int, not a string"),
    (b'{"prompt": "  "}\n', 1, "\"prompt\" is empty (remove the line)"),
    (b'{"prompt": "a"}\n{prompt: "b"}\n', 2, "not valid JSON (Expecting property name enclosed in double quotes "
                                            "at column 2)"),
    (b'{"prompt": "caf\xe9"}\n', 1, "not UTF-8 text (byte 15 of the line)"),
])
def test_a_wrong_file_names_the_file_line_and_format(tmp_path, content, line, what):
    path = tmp_path / "p.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError) as e:
        load_eval_prompts(str(path), 8)
    assert str(e.value) == f"--eval-prompts {path}:{line}: {what}; expected {FORMAT}"


def test_good_files_read_whole_and_limited(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "a", "id": 1}\n\n{"prompt": "b"}\n{"prompt": "c"}\n')   # BOM, blank
    assert load_eval_prompts(str(path)) == ["a", "b", "c"] and load_eval_prompts(str(path), 2) == ["a", "b"]
    path.write_text("\n")
    with pytest.raises(ValueError, match=r"--eval-prompts .*p.jsonl holds no prompts: write one JSON object"):
        load_eval_prompts(str(path))
    with pytest.raises(ValueError, match=r"--eval-prompts '.*none.jsonl' does not exist: pass a JSONL file with one"):
        load_eval_prompts(str(tmp_path / "none.jsonl"))


def test_a_bad_line_after_the_first_n_is_refused_at_start(tiny_target, code_jsonl, tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}\n{"text": "c"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:3: no field \"prompt\""):
        TrainConfig(method="eagle3", target=str(tiny_target), data=str(code_jsonl), out=str(tmp_path / "o"),
                    device="cpu", eval_prompts=str(path), eval_num_prompts=2)
    assert not (tmp_path / "o").exists()
