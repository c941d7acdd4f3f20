"""`turbospec serve` with a model it cannot load: one line saying why and what to do, exit 2, no
traceback (a Hugging Face id, a corrupt safetensors file)."""
from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from turbospec.cli import app

CODELM = Path(__file__).resolve().parents[2] / "models" / "codelm-12m"


def _serve(model: str):
    r = CliRunner().invoke(app, ["serve", model, "--device", "cpu"])
    return r, " ".join(r.output.replace("│", " ").split())


def test_a_hugging_face_id_gets_the_download_command():
    r, out = _serve("Qwen/Qwen3-8B")
    assert r.exit_code == 2 and "hf download Qwen/Qwen3-8B --local-dir models/Qwen3-8B" in out
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_a_corrupt_checkpoint_names_the_file(tmp_path):
    d = tmp_path / "broken"
    d.mkdir()
    shutil.copy(CODELM / "config.json", d / "config.json")
    (d / "model.safetensors").write_text("x")
    r, out = _serve(str(d))
    assert r.exit_code == 2 and "cannot read" in out and "model.safetensors" in out and "corrupt" in out
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_vllm_tool_flags_are_accepted_and_other_parsers_refused():
    """A vLLM launch line's `--enable-auto-tool-choice --tool-call-parser hermes` is accepted (it
    gets as far as loading the model: here a Hugging Face id, refused with the download command);
    a parser turbospec lacks is refused by name before anything loads."""
    r = CliRunner().invoke(app, ["serve", "Qwen/Qwen3-8B", "--device", "cpu", "--enable-auto-tool-choice",
                                 "--tool-call-parser", "hermes"])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and "hf download Qwen/Qwen3-8B" in out
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--tool-call-parser", "deepseek_v3"])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and "'deepseek_v3' is not a tool call parser turbospec has: use hermes" in out
    assert "llama3_json" in out and "mistral" in out


def test_a_busy_port_is_refused_before_the_model_loads(monkeypatch):
    """The port is checked first: a 30B model must not load for minutes and then fail to bind."""
    import socket

    import turbospec.serve.startup as startup
    loads = []
    monkeypatch.setattr(startup, "build_engine", lambda *a, **k: loads.append(1))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--host", "127.0.0.1",
                                     "--port", str(port)])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in out and "--port" in out, out
    assert loads == []


def test_a_vllm_launch_line_reaches_the_engine_config(monkeypatch, tmp_path):
    """`vllm serve MODEL --gpu-memory-utilization 0.5 --max-num-batched-tokens 1024 --tokenizer DIR
    -tp 1 --trust-remote-code` runs unchanged: the values reach the engine (no 'No such option');
    a tensor-parallel size over 1 is refused by name before anything loads."""
    import turbospec.serve.startup as startup
    seen = {}

    def fake_build_engine(model, **kwargs):
        seen.update(kwargs)
        raise ValueError("stopped by the test")
    monkeypatch.setattr(startup, "build_engine", fake_build_engine)
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--gpu-memory-utilization", "0.5",
                                 "--max-num-batched-tokens", "1024", "--tokenizer", str(CODELM), "-tp", "1",
                                 "--trust-remote-code", "--port", "0"])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and "stopped by the test" in out, out
    ec = seen["engine_config"]
    assert ec.gpu_memory_utilization == 0.5 and ec.max_num_batched_tokens == 1024
    assert seen["tokenizer"] == str(CODELM)
    seen.clear()
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--tensor-parallel-size", "2"])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and "one GPU" in out and seen == {}, out
    r = CliRunner().invoke(app, ["serve", str(CODELM), "--device", "cpu", "--tokenizer", str(tmp_path / "none"),
                                 "--port", "0"])
    out = " ".join(r.output.replace("│", " ").split())
    assert r.exit_code == 2 and "tokenizer path" in out and "does not exist" in out and seen == {}, out
