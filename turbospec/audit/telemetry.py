"""GPU telemetry during a run, from NVML (nvidia-ml-py), when the GPU is on this machine.

Sampled every `interval_s` in a background thread, per device:
  sm_util_pct       share of time a kernel was running (NVML "gpu" utilization)
  mem_bw_util_pct   share of time device memory was read or written (NVML "memory" utilization)
  power_w, memory_used_gb
The breakdown reports busy (SM > 0) vs idle samples. NVML is imported lazily and is optional: without
it, or without a device, the summary says why nothing was sampled.
"""
from __future__ import annotations

import threading
from types import ModuleType

import numpy as np

NOT_SAMPLED_NO_GPU = "not sampled: no local NVIDIA GPU"
NOT_SAMPLED_NO_NVML = "not sampled: nvidia-ml-py is not installed (pip install nvidia-ml-py)"


def load_nvml() -> tuple[ModuleType | None, str | None]:
    """(pynvml, None) when NVML answers with at least one device, else (None, reason)."""
    try:
        import pynvml
    except ImportError:
        return None, NOT_SAMPLED_NO_NVML                 # says nothing about whether a GPU is here
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() == 0:
            return None, NOT_SAMPLED_NO_GPU
    except Exception as e:                      # pynvml raises NVMLError subclasses, or OSError without driver
        return None, f"{NOT_SAMPLED_NO_GPU} ({e})"
    return pynvml, None


class GpuSampler:
    def __init__(self, nvml: ModuleType, interval_s: float = 0.1) -> None:
        self._nvml = nvml
        self._interval = interval_s
        self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self._samples: list[list[tuple[float, float, float, float]]] = [[] for _ in self._handles]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)

    def start(self) -> "GpuSampler":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            for i, h in enumerate(self._handles):
                try:
                    u = self._nvml.nvmlDeviceGetUtilizationRates(h)
                    power = self._nvml.nvmlDeviceGetPowerUsage(h) / 1e3
                    mem = self._nvml.nvmlDeviceGetMemoryInfo(h).used / 1e9
                except Exception:               # a transient NVML error loses one sample, not the run
                    continue
                self._samples[i].append((float(u.gpu), float(u.memory), power, mem))
            self._stop.wait(self._interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=5)
        devices = []
        for i, (h, rows) in enumerate(zip(self._handles, self._samples)):
            name = self._nvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else str(name)
            if not rows:
                devices.append({"index": i, "name": name, "samples": 0})
                continue
            a = np.asarray(rows)
            devices.append({
                "index": i, "name": name, "samples": len(rows),
                "sm_util_pct": _summary(a[:, 0]), "mem_bw_util_pct": _summary(a[:, 1]),
                "power_w": _summary(a[:, 2]), "memory_used_gb": _summary(a[:, 3]),
                "busy_fraction": float((a[:, 0] > 0).mean()), "idle_fraction": float((a[:, 0] == 0).mean()),
            })
        return {"sampled": True, "interval_s": self._interval, "devices": devices}


def _summary(x: np.ndarray) -> dict:
    return {"mean": float(x.mean()), "p50": float(np.median(x)), "max": float(x.max())}


def start_sampling(mode: str, any_local_endpoint: bool, interval_s: float = 0.1) -> tuple[GpuSampler | None, str | None]:
    """mode auto: sample when an endpoint is on this machine; on: always try; off: never."""
    if mode == "off":
        return None, "not sampled: --telemetry off"
    if mode == "auto" and not any_local_endpoint:
        return None, "not sampled: the endpoint is remote (NVML sees only local GPUs; --telemetry on to force)"
    nvml, reason = load_nvml()
    if nvml is None:
        return None, reason
    return GpuSampler(nvml, interval_s).start(), None
