"""GPU table: HBM bandwidth (the decode ceiling), memory, dense bf16 compute, a typical hourly price.

Bandwidth and compute are vendor peak figures (dense, no sparsity); achieved copy bandwidth is
lower (an H200 measured 4.24 of 4.8 TB/s). Prices are indicative on-demand rates per GPU-hour,
late 2026 — an assumption to override with --gpu-price; INR prices are Indian clouds' list prices
where one is cited, otherwise the USD price converted at the audit's exchange rate.
Every field can be overridden from the CLI (--gpu-bandwidth-tbs, --gpu-price).
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    mem_bandwidth_tbs: float          # TB/s, vendor peak
    memory_gb: float
    bf16_tflops: float                # dense
    price_usd_per_hour: float
    price_inr_per_hour: float | None  # None: convert the USD price
    price_source: str
    assumed: bool = False             # not stated (--gpu left out): the report says so
    alias: str | None = None          # the --gpu name as given when it was an alias ("h100" for h100-sxm)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


GPUS: dict[str, GPU] = {g.key: g for g in (
    GPU("h100-sxm", "NVIDIA H100 SXM 80GB", 3.35, 80, 989, 4.50, 219.0,
        "USD: the H100 rental of the 213 tok/s field report; INR: Cyfuture AI list price"),
    GPU("h100-pcie", "NVIDIA H100 PCIe 80GB", 2.0, 80, 756, 2.50, None,
        "USD: typical on-demand rate (assumption); INR converted"),
    GPU("h200", "NVIDIA H200 SXM 141GB", 4.8, 141, 989, 3.80, 300.0,
        "USD: typical on-demand rate (assumption); INR: E2E Networks list price"),
    GPU("b200", "NVIDIA B200 180GB", 8.0, 180, 2250, 6.00, 624.0,
        "USD: typical on-demand rate (assumption); INR: E2E Networks list price"),
    GPU("a100", "NVIDIA A100 SXM 80GB", 2.039, 80, 312, 1.80, None,
        "USD: typical on-demand rate (assumption); INR converted"),
    GPU("l40s", "NVIDIA L40S 48GB", 0.864, 48, 362, 1.00, None,
        "USD: typical on-demand rate (assumption); INR converted"),
)}

DEFAULT_GPU = "h200"

ALIASES = {"h100": "h100-sxm", "h100sxm": "h100-sxm", "h100pcie": "h100-pcie", "a100-80gb": "a100",
           "a100-sxm": "a100", "h200-sxm": "h200", "l40": "l40s"}


def gpu_names() -> str:
    """Every --gpu name with its aliases: 'h100-sxm (or h100, h100sxm), h100-pcie (or h100pcie), ...'."""
    return ", ".join(k + (f" (or {', '.join(a)})" if a else "")
                     for k, a in ((k, [a for a, c in ALIASES.items() if c == k]) for k in GPUS))


def get_gpu(key: str, bandwidth_tbs: float | None = None, memory_gb: float | None = None) -> GPU:
    given = key.lower().strip()
    k = ALIASES.get(given, ALIASES.get(given.replace("-", ""), given))
    if k not in GPUS:
        raise ValueError(f"unknown --gpu {key!r}: use one of {gpu_names()} "
                         "(or the closest one with --gpu-bandwidth-tbs and --gpu-price set)")
    gpu = GPUS[k] if k == given else replace(GPUS[k], alias=key.strip())
    if bandwidth_tbs is not None:
        if bandwidth_tbs <= 0:
            raise ValueError("--gpu-bandwidth-tbs must be positive, e.g. 4.8 for an H200")
        gpu = replace(gpu, mem_bandwidth_tbs=bandwidth_tbs)
    if memory_gb is not None:
        gpu = replace(gpu, memory_gb=memory_gb)
    return gpu
