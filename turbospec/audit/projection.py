"""The decode ceiling, and the projected speedup from speculation, on the roofline.

Roofline time of a decode step feeding B sequences t tokens each:
    R(B, t) = max(bytes_per_step(B, t) / (bandwidth x bw_eff), 2 x active_params x B x t / (bf16 peak x compute_eff))
A plain step takes T_plain (per output token of each sequence): the measured median TPOT at that
concurrency when there is one, else R(B, 1). Whatever the engine spends above the roofline (launches,
scheduling) is paid per step, so a speculative step verifying k+1 tokens per sequence costs
    T_spec = T_plain x (1 + verify_overhead) + R(B, k+1) - R(B, 1)
and yields tau tokens (tokens per decode step: for an endpoint that speculates, measured over every
decode step, those without a draft too — decode_steps.py; assumed, every step drafts), so
    speedup = tau x T_plain / T_spec = tau / (1 + verify_overhead + batch_overhead),
    batch_overhead = (R(B, k+1) - R(B, 1)) / T_plain
`verify_overhead` (drafter forward, verify bookkeeping) is an assumption (--verify-overhead). The
batch term is why speculation pays at low concurrency and fades as the batch fills: more tokens per
step turn decode compute-bound, and an MoE step touches more experts. When the endpoint already
speculates, the measured TPOT is a step's time / tau and the same relation is solved for T_plain:
then speedup = tau / (1 + verify_overhead + batch_overhead) with the measured TPOT entering only
through batch_overhead (nothing measures a plain step there: it rests on the assumed verify
overhead). Without a model shape the batch term is 0 (stated in the report).
"""
from __future__ import annotations

from dataclasses import dataclass

from turbospec.audit.gpus import GPU
from turbospec.audit.roofline import ModelBytes

BW_EFFICIENCY = 0.85          # achievable share of peak HBM bandwidth (H200: 4.24 of 4.8 TB/s measured)
COMPUTE_EFFICIENCY = 0.6      # achievable share of peak dense bf16 FLOPs in verify GEMMs
EXPERT_REUSE = 0.5            # consecutive tokens' expert overlap (see roofline.py), an assumption


@dataclass(frozen=True)
class SpecAssumption:
    acceptance_length: float          # tau: tokens per decode step (every step drafted: the acceptance length)
    source: str                       # where tau comes from: measured / estimated / assumed
    num_speculative_tokens: int = 4   # k
    verify_overhead: float = 0.3

    def __post_init__(self) -> None:
        if self.acceptance_length < 1:
            raise ValueError("--acceptance-length must be >= 1 (tokens per verify step, bonus included)")
        if self.num_speculative_tokens < 1:
            raise ValueError("--num-speculative-tokens must be >= 1")
        if self.acceptance_length > self.num_speculative_tokens + 1:
            raise ValueError(f"acceptance length {self.acceptance_length:g} exceeds k+1 = "
                             f"{self.num_speculative_tokens + 1}: raise --num-speculative-tokens")
        if self.verify_overhead < 0:
            raise ValueError("--verify-overhead must be >= 0 (0.3: a speculative step costs 1.3 plain steps)")


def roofline_step_s(model: ModelBytes, gpu: GPU, num_seqs: int, tokens_per_seq: int, context: float,
                    bw_eff: float = BW_EFFICIENCY, compute_eff: float = COMPUTE_EFFICIENCY) -> tuple[float, str]:
    """(seconds, "memory" | "compute") for one step of num_seqs x tokens_per_seq tokens."""
    nbytes = model.bytes_per_step(num_seqs, tokens_per_seq, context, EXPERT_REUSE)
    mem = nbytes / (gpu.mem_bandwidth_tbs * 1e12 * bw_eff)
    flops = 2.0 * model.active_params * num_seqs * tokens_per_seq / (gpu.bf16_tflops * 1e12 * compute_eff)
    return (mem, "memory") if mem >= flops else (flops, "compute")


def ceiling(model: ModelBytes, gpu: GPU, concurrency: int, context: float) -> dict:
    """Roofline ceilings at vendor peak: per-sequence and aggregate decode tok/s at this concurrency
    (at concurrency 1: bandwidth / bytes read per token)."""
    t, bound = roofline_step_s(model, gpu, concurrency, 1, context, bw_eff=1.0, compute_eff=1.0)
    return {"per_sequence_tokens_per_s": 1.0 / t, "aggregate_tokens_per_s": concurrency / t, "bound": bound,
            "bytes_per_step": model.bytes_per_step(concurrency, 1, context), "context_tokens": context}


def projected_speedup(a: SpecAssumption, concurrency: float, model: ModelBytes | None, gpu: GPU | None,
                      context: float, measured_tpot_s: float | None = None, speculating: bool = False) -> dict:
    out = {"acceptance_length": a.acceptance_length, "acceptance_source": a.source,
           "num_speculative_tokens": a.num_speculative_tokens, "verify_overhead": a.verify_overhead,
           "concurrency": concurrency, "model_aware": model is not None and gpu is not None,
           "step_time_basis": None, "batch_overhead": 0.0, "verify_step_bound": None}
    if model is None or gpu is None:
        out["speedup"] = a.acceptance_length / (1.0 + a.verify_overhead)
        return out
    b = max(int(round(concurrency)), 1)
    r1, _ = roofline_step_s(model, gpu, b, 1, context)
    rk, bound = roofline_step_s(model, gpu, b, a.num_speculative_tokens + 1, context)
    extra = rk - r1
    if measured_tpot_s and speculating:                  # measured = T_spec / tau; solve for T_plain
        t_spec = measured_tpot_s * a.acceptance_length
        t_plain = max((t_spec - extra) / (1.0 + a.verify_overhead), r1)
        basis = "measured TPOT of a speculating endpoint"
    elif measured_tpot_s:
        t_plain = measured_tpot_s
        t_spec = t_plain * (1.0 + a.verify_overhead) + extra
        basis = "measured TPOT"
    else:
        t_plain = r1
        t_spec = t_plain * (1.0 + a.verify_overhead) + extra
        basis = "roofline (no measurement)"
    out.update(speedup=a.acceptance_length * t_plain / t_spec, batch_overhead=extra / t_plain,
               verify_step_bound=bound, step_time_basis=basis,
               plain_step_ms=t_plain * 1e3, speculative_step_ms=t_spec * 1e3)
    return out
