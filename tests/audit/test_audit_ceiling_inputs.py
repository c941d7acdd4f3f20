"""What the ceiling and the money figures rest on is said where they are used: a GPU nobody named, a
local endpoint with no NVIDIA GPU visible, the GPU an alias was read as, and where the weights' dtype
came from (config.json, a preset, or --weight-dtype: the served dtype the audit cannot see)."""
import inspect
import json
import os

import pytest
from typer.testing import CliRunner

from tests.audit.test_audit_cli import OK, cli
from turbospec.audit import telemetry
from turbospec.audit.cli import audit
from turbospec.audit.gpus import get_gpu
from turbospec.audit.hardware import no_local_gpu
from turbospec.audit.presets import preset_config
from turbospec.audit.roofline import load_model_bytes, model_bytes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODELM = os.path.join(REPO, "models", "codelm-12m")
FAST = "ttft=5,gap=5"
ASSUMED = ("GPU assumed: h200 at $3.80/h (--gpu not given): the ceiling and the cost figures are for that GPU; "
           "pass --gpu (and --gpu-price) for the endpoint's own")
NO_GPU = ("the endpoint is on this machine (127.0.0.1), but no NVIDIA GPU is visible here (GPU telemetry: no local "
          "NVIDIA GPU): the ceiling and the cost figures are for NVIDIA H200 SXM 141GB, not this endpoint's hardware "
          "(unless its port forwards to a GPU host)")


def _audit(url: str, out, *extra: str):
    return CliRunner().invoke(cli(), [
        "audit", "--endpoint", url, "--model", "scripted", "--concurrency", "1", "--num-prompts", "2",
        "--max-tokens", "7", "--warmup", "0", "--model-config", CODELM, "--out", str(out), "--no-progress", *extra])


def test_an_assumed_gpu_and_a_gpu_less_local_endpoint_are_caveats(scripted_base, tmp_path, monkeypatch):
    monkeypatch.setattr(telemetry, "load_nvml", lambda: (None, telemetry.NOT_SAMPLED_NO_GPU))   # a CPU box
    res = _audit(f"{scripted_base}/s/{FAST},tag=assumedgpu", tmp_path)
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "results.json").read_text())
    assert r["verdict"]["caveats"][-2:] == [ASSUMED, NO_GPU]
    assert f"  ! {ASSUMED}\n" in res.output and f"  ! {NO_GPU}\n" in res.output          # the console summary
    md = (tmp_path / "report.md").read_text()
    assert f"**Caveat**: {ASSUMED}" in md and f"**Caveat**: {NO_GPU}" in md
    # the dtype is config.json's, and said to be
    assert r["model"]["weight_dtype"] == "bfloat16" and r["model"]["weight_dtype_source"] == "config.json"
    assert ("bfloat16 weights (per config.json; the served dtype is not known to the audit: "
            "--weight-dtype states it)") in md


def test_a_named_gpu_alias_and_the_served_dtype_are_reported(scripted_base, tmp_path):
    res = _audit(f"{scripted_base}/s/{FAST},tag=aliasgpu", tmp_path, "--gpu", "h100", "--weight-dtype", "float32",
                 "--telemetry", "off")
    assert res.exit_code == 0, res.output
    r = json.loads((tmp_path / "results.json").read_text())
    assert not any(c.startswith(("GPU assumed", "the endpoint is on this machine")) for c in r["verdict"]["caveats"])
    assert "GPU assumed" not in res.output
    assert r["gpu"]["key"] == "h100-sxm" and r["gpu"]["alias"] == "h100"
    md = (tmp_path / "report.md").read_text()
    assert "GPU: NVIDIA H100 SXM 80GB (--gpu h100, read as h100-sxm), 3.35 TB/s" in md
    assert r["model"]["weight_dtype"] == "float32" and r["model"]["weight_dtype_source"] == "--weight-dtype"
    assert "float32 weights (the served dtype, as --weight-dtype states)" in md
    bf16 = load_model_bytes(CODELM, "scripted").weight_bytes_per_token
    assert r["model"]["weight_bytes_per_token"] == pytest.approx(2 * bf16)                # 4 bytes a weight, not 2


def test_no_local_gpu_is_said_only_of_a_local_endpoint_whose_telemetry_found_none():
    gpu = get_gpu("h200")
    none_here = [{"telemetry": {"sampled": False, "reason": f"{telemetry.NOT_SAMPLED_NO_GPU} (NVML Shared Library "
                                                              "Not Found)"}}]
    text = no_local_gpu(gpu, "http://localhost:8000/v1", True, none_here)
    assert text.startswith("the endpoint is on this machine (localhost), but no NVIDIA GPU is visible here (GPU "
                           "telemetry: no local NVIDIA GPU (NVML Shared Library Not Found))")
    no_nvml = [{"telemetry": {"sampled": False, "reason": telemetry.NOT_SAMPLED_NO_NVML}}]   # an H200 without pynvml
    assert no_local_gpu(gpu, "http://localhost:8000/v1", True, no_nvml) is None
    assert no_local_gpu(gpu, "http://gpu-a:8000", False, none_here) is None                  # remote
    assert no_local_gpu(gpu, "http://127.0.0.1:8000", True,
                        [{"telemetry": {"sampled": False, "reason": "not sampled: --telemetry off"}}]) is None
    assert no_local_gpu(gpu, "http://127.0.0.1:8000", True, [{"telemetry": {"sampled": True, "devices": []}}]) is None


def test_gpu_aliases_are_listed_and_recorded():
    assert get_gpu("h100").alias == "h100" and get_gpu("h100").key == "h100-sxm"
    assert get_gpu("h100-sxm").alias is None and get_gpu("H200").alias is None
    res = CliRunner().invoke(cli(), OK + ["--gpu", "tpu"])
    assert res.exit_code == 2
    assert "use one of h100-sxm (or h100, h100sxm), h100-pcie (or h100pcie), h200 (or h200-sxm), b200, a100 (or " \
           "a100-80gb, a100-sxm), l40s (or l40)" in res.output.replace("\n", " ")
    gpu_help = inspect.signature(audit).parameters["gpu"].default.help
    assert "h100-sxm (or h100, h100sxm)" in gpu_help


def test_the_weight_dtype_says_where_it_came_from():
    assert load_model_bytes("qwen3-8b", "x").weight_dtype_source == "preset"
    no_dtype = {k: v for k, v in preset_config("qwen3-8b").items() if k != "torch_dtype"}
    assert model_bytes(no_dtype).weight_dtype_source == "default"
    fp8 = load_model_bytes("qwen3-8b", "Qwen/Qwen3-8B", weight_dtype="fp8")
    assert (fp8.weight_dtype, fp8.bytes_per_weight, fp8.weight_dtype_source) == ("fp8", 1.0, "--weight-dtype")
    assert fp8.mismatch is None                  # the served dtype, stated: not another model's weights
    guessed = load_model_bytes(None, "Qwen/Qwen3-8B", weight_dtype="float32")   # the shape the name names
    assert guessed.bytes_per_weight == 4.0 and guessed.weight_dtype == "float32"
    with pytest.raises(ValueError, match="--weight-dtype 'fp64': use one of"):
        load_model_bytes("qwen3-8b", "x", weight_dtype="fp64")


def test_a_weight_dtype_without_a_model_shape_is_refused():
    res = CliRunner().invoke(cli(), OK + ["--weight-dtype", "fp32"])
    assert res.exit_code == 2
    assert "--weight-dtype fp32 needs a model shape: pass --model-config" in res.output.replace("\n", " ")
