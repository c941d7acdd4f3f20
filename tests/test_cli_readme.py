"""README.md as a newcomer follows it: every `turbospec ...` line of its command-line block is
accepted by the real CLI (flags and values parsed, nothing run), and its Python API block runs as
written and gives plain decoding's tokens (speculation is lossless)."""
from __future__ import annotations

import re
import shlex

from tests.conftest import REPO
from tests.test_recipes import _parse
from turbospec import LLM, SamplingParams

README = (REPO / "README.md").read_text()


def _block(after: str, lang: str) -> str:
    start = README.index(after)
    m = re.compile(rf"```{lang}\n(.*?)```", re.S).search(README, start)
    assert m, f"no ```{lang} block after {after!r}"
    return m.group(1)


def test_every_readme_command_line_parses():
    text = _block("## Command line", "bash").replace("\\\n", " ")
    lines = [line.split("  #")[0] for line in text.splitlines() if line.startswith("turbospec ")]
    assert len(lines) >= 10
    for line in lines:
        line = re.sub(r"\[[^\]]*\]", "", line)            # optional parts: [--api-key KEY]
        argv = shlex.split(line)[1:]
        _parse(argv)                                      # raises on an unknown flag or a bad value


def test_readme_python_block_runs_as_written(monkeypatch):
    monkeypatch.chdir(REPO)
    scope: dict = {}
    exec(compile(_block("## Python API", "python"), "README.md", "exec"), scope)
    outs, llm = scope["outs"], scope["llm"]
    assert llm.llm_engine.proposer is not None
    plain = LLM("models/codelm-12m", device="cpu", dtype="float32")
    want = plain.generate(["def fib(n):"], SamplingParams(temperature=0.0, max_tokens=64))[0].outputs[0]
    assert outs[0].outputs[0].token_ids == want.token_ids and outs[0].outputs[0].text == want.text
    assert llm.get_metrics()["spec_decode_num_drafts"] > 0
