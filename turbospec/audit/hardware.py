"""What the ceiling and the money figures assume about the hardware, said among the verdict's caveats
(report, results.json, console): a GPU nobody named (--gpu left out), and an endpoint on this machine
where no NVIDIA GPU is visible (a CPU server: an H200's ceiling and price describe nothing there)."""
from __future__ import annotations

from urllib.parse import urlparse

from turbospec.audit.cost import CostModel, format_money
from turbospec.audit.gpus import GPU
from turbospec.audit.telemetry import NOT_SAMPLED_NO_GPU


def assumed_gpu(gpu: GPU, cost: CostModel) -> str | None:
    if not gpu.assumed:
        return None
    return (f"GPU assumed: {gpu.key} at {format_money(cost.price_per_gpu_hour, cost.currency)}/h (--gpu not "
            "given): the ceiling and the cost figures are for that GPU; pass --gpu (and --gpu-price) for the "
            "endpoint's own")


def no_local_gpu(gpu: GPU, url: str, local: bool, runs: list[dict]) -> str | None:
    """A local endpoint whose levels' telemetry found no NVIDIA GPU here (telemetry off: nothing known)."""
    reasons = [(r.get("telemetry") or {}).get("reason") or "" for r in runs]
    reason = next((x for x in reasons if x.startswith(NOT_SAMPLED_NO_GPU)), None)
    if not local or reason is None:
        return None
    detail = reason.removeprefix("not sampled: ")
    return (f"the endpoint is on this machine ({urlparse(url).hostname}), but no NVIDIA GPU is visible here "
            f"(GPU telemetry: {detail}): the ceiling and the cost figures are for {gpu.name}, not this endpoint's "
            "hardware (unless its port forwards to a GPU host)")


def hardware_caveats(gpu: GPU, cost: CostModel, url: str, local: bool, runs: list[dict]) -> tuple[str, ...]:
    return tuple(c for c in (assumed_gpu(gpu, cost), no_local_gpu(gpu, url, local, runs)) if c)
