"""NVML sampling: summarised from a fake pynvml (no GPU here); absent NVML is reported, not fatal."""
import sys
import time
import types

import pytest

from turbospec.audit.telemetry import GpuSampler, load_nvml, start_sampling


def fake_nvml(util_seq):
    calls = {"n": 0}

    def rates(_h):
        u = util_seq[min(calls["n"], len(util_seq) - 1)]
        calls["n"] += 1
        return types.SimpleNamespace(gpu=u[0], memory=u[1])

    return types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetName=lambda h: b"NVIDIA H200", nvmlDeviceGetUtilizationRates=rates,
        nvmlDeviceGetPowerUsage=lambda h: 500_000, nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=70e9))


def test_sampler_summarises_utilisation_power_and_memory():
    nvml = fake_nvml([(0, 0), (80, 60), (100, 90), (100, 90)])
    sampler = GpuSampler(nvml, interval_s=0.01).start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(sampler._samples[0]) < 20:
        time.sleep(0.01)
    out = sampler.stop()
    d = out["devices"][0]
    assert out["sampled"] and d["name"] == "NVIDIA H200" and d["samples"] >= 20
    assert d["sm_util_pct"]["max"] == 100 and d["sm_util_pct"]["p50"] == 100
    assert d["idle_fraction"] == pytest.approx(1 / d["samples"]) and d["busy_fraction"] == pytest.approx(1 - 1 / d["samples"])
    assert d["power_w"]["mean"] == pytest.approx(500.0) and d["memory_used_gb"]["max"] == pytest.approx(70.0)


def test_without_nvml_the_reason_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)            # import pynvml -> ImportError
    nvml, reason = load_nvml()
    # without the package nothing is known of a GPU: not "no local NVIDIA GPU" (a false verdict caveat)
    assert nvml is None and reason == "not sampled: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    assert start_sampling("auto", any_local_endpoint=True)[1] == reason
    assert "remote" in start_sampling("auto", any_local_endpoint=False)[1]
    assert start_sampling("off", True) == (None, "not sampled: --telemetry off")


def test_with_a_local_gpu_sampling_starts(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([(50, 40)]))
    sampler, reason = start_sampling("on", any_local_endpoint=False, interval_s=0.01)
    assert reason is None
    time.sleep(0.05)
    assert sampler.stop()["devices"][0]["sm_util_pct"]["mean"] == 50


def test_report_shows_the_gpu_breakdown(monkeypatch, scripted_base, run_audit_here, tmp_path):
    import turbospec.audit.runner as runner
    monkeypatch.setattr(runner, "start_sampling",
                        lambda mode, local: (GpuSampler(fake_nvml([(0, 0), (90, 70)]), 0.01).start(), None))
    res, _ = run_audit_here([f"{scripted_base}/s/ttft=20,gap=10,gpu=1"], num_prompts=2, warmup=0, max_tokens=10,
                            out=tmp_path, write=True)
    assert res["runs"][0]["telemetry"]["devices"][0]["samples"] > 0
    md = (tmp_path / "report.md").read_text()
    assert "SM util % (mean)" in md and "NVIDIA H200" in md
