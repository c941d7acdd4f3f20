"""`--quantization fp8` on `turbospec generate` and `turbospec serve`: a bf16/fp32 checkpoint is
quantized at load, as `LLM(quantization="fp8")` does (the same output), and a value other than fp8
stops with the supported values named (by `generate` in its flag's words)."""
from __future__ import annotations

from typer.testing import CliRunner

from turbospec import LLM, SamplingParams
from turbospec.cli import app

runner = CliRunner()


def test_generate_quantizes_at_load(codelm_dir):
    prompt = "def add(a, b):"
    r = runner.invoke(app, ["generate", str(codelm_dir), "--prompt", prompt, "--max-tokens", "48", "--device", "cpu",
                            "--quantization", "fp8"])
    assert r.exit_code == 0, r.output
    params = SamplingParams(temperature=0.0, max_tokens=48)
    want = LLM(str(codelm_dir), device="cpu", dtype="float32", quantization="fp8").generate([prompt], params)[0]
    plain = LLM(str(codelm_dir), device="cpu", dtype="float32").generate([prompt], params)[0]
    assert want.outputs[0].text != plain.outputs[0].text          # FP8 weights change this continuation
    assert f"{prompt}\n--- completion ---\n{want.outputs[0].text}\n" in r.stdout
    assert ("weights: 24 linear / expert modules quantized to block-FP8 [128, 128] at load (weights only, lossy); "
            "router, embeddings, norms and LM head kept") in r.output           # 6 layers x qkv, o, gate_up, down


def test_bad_quantization_is_refused(codelm_dir):
    r = runner.invoke(app, ["generate", str(codelm_dir), "--prompt", "x", "--device", "cpu", "--quantization", "int4"])
    assert r.exit_code == 2, r.output            # in the command line's words (it said "None and 'fp8'")
    assert r.output == ("error: --quantization int4: the only value is fp8 (leave it out for the checkpoint's own "
                        "weights, or name their method: compressed-tensors)\n")
    r = runner.invoke(app, ["serve", str(codelm_dir), "--device", "cpu", "--port", "1", "--quantization", "int4"])
    assert r.exit_code == 2, r.output
    assert r.output == ("turbospec serve: --quantization int4: the only value is fp8 (leave it out for the "
                        "checkpoint's own weights, or name their method: compressed-tensors)\n")   # as generate says it
