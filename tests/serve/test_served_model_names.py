"""`turbospec serve` takes vLLM's `--served-model-name a b` (several names after one flag) as well
as the flag repeated, and its start-up log names the dtype it chose (`--dtype auto`)."""
from __future__ import annotations

import openai
import pytest
import typer

from turbospec.cli import app

from .server_process import CODELM, ServerProcess


def _parse(*args: str) -> tuple[str, list[str]]:
    """What the real `serve` command line parses to (MODEL, names), without running it."""
    ctx = typer.main.get_command(app).commands["serve"].make_context("serve", list(args))
    return ctx.params["model"], list(ctx.params["served_model_name"] or [])


@pytest.mark.parametrize("args,names", [
    (["M", "--served-model-name", "a", "b"], ["a", "b"]),                        # vLLM's form
    (["M", "--served-model-name", "a", "b", "c", "--port", "9"], ["a", "b", "c"]),
    (["--served-model-name", "a", "b", "M"], ["a", "b"]),                        # MODEL last
    (["--served-model-name", "a", "M", "--port", "9"], ["a"]),                   # as before
    (["M", "--served-model-name", "a", "--served-model-name", "b"], ["a", "b"]),  # repeated
    (["M", "--served-model-name=a", "--enforce-eager", "--served-model-name", "b", "c"], ["a", "b", "c"]),
    (["M", "--port", "9"], []),
])
def test_served_model_name_takes_several_values(args, names):
    assert _parse(*args) == ("M", names)


def test_a_server_answers_to_every_name(tmp_path):
    if not (CODELM / "config.json").is_file():
        pytest.skip(f"codelm-12m not found at {CODELM}")
    srv = ServerProcess(CODELM, tmp_path / "server.log", "--served-model-name", "beta", "gamma", name="alpha")
    try:
        with openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", timeout=60, max_retries=0) as client:
            assert [m.id for m in client.models.list().data] == ["alpha", "beta", "gamma"]
            for name in ("alpha", "gamma"):
                r = client.completions.create(model=name, prompt="def f(x):", max_tokens=2, temperature=0)
                assert r.model == name and r.usage.completion_tokens == 2
        log = srv.log()
        assert "as alpha, beta, gamma" in log
        assert "dtype float32 (--dtype auto: float32 on CPU; the checkpoint is bfloat16)" in log, log[-2000:]
    finally:
        srv.terminate()
