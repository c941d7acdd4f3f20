"""`turbospec bench decode`: plain decoding speed of a model shape with random weights, against
the HBM roofline (bytes read per step / copy bandwidth measured in the same run)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from turbospec.benchmarks.roofline import kv_bytes_per_step, measure_copy_bandwidth, weight_bytes_per_step
from turbospec.config import EngineConfig, ModelConfig
from turbospec.engine.llm_engine import LLMEngine
from turbospec.kernels.jit_watch import JitEvents
from turbospec.models.registry import get_model_class
from turbospec.sampling_params import SamplingParams


@dataclass
class DecodeResult:
    batch: int
    step_ms: float
    tok_s_per_seq: float
    tok_s_total: float
    bytes_per_step: float
    roofline_ms: float
    compiles: str = ""          # Triton compilations inside the timed run ('' if none)
    forward_ms: float | None = None   # a bare decode forward at this batch (median), timed just after the run

    @property
    def roofline_frac(self) -> float:
        return self.roofline_ms / self.step_ms


CPU_MAX_WEIGHT_BYTES = 2 << 30


def check_fits(config: ModelConfig, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse, with the numbers, a shape whose weights cannot fit (e.g. qwen3-8b on a laptop CPU)."""
    with torch.device("meta"):
        n = sum(p.numel() for p in get_model_class(config.architecture)(config).parameters())
    need = n * dtype.itemsize
    what = f"this shape has {n / 1e9:.2f}B parameters = {need / 2**30:.1f} GiB in {dtype}"
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        if need > 0.9 * free:
            raise ValueError(f"{what}, but {device} has {free / 2**30:.1f} GiB free: free the GPU or pick a "
                             "smaller --shape")
    elif need > CPU_MAX_WEIGHT_BYTES:   # a CPU decodes a multi-GB model at seconds per token: it measures nothing
        raise ValueError(f"{what}: on the CPU the benchmarks take shapes up to "
                         f"{CPU_MAX_WEIGHT_BYTES / 2**30:.0f} GiB of weights; run it on a GPU (--device cuda) "
                         "or pick a smaller --shape (e.g. models/codelm-12m)")


def random_model(config: ModelConfig, device: torch.device, dtype: torch.dtype, seed: int = 0,
                 quantization: str | None = None):
    """Build the architecture directly on the device with small random weights (never zeros);
    `quantization="fp8"`: then quantize them per 128x128 block (layers/quant/fp8.py); "fp8-channel":
    one scale per output row, as per-channel / per-tensor FP8 checkpoints load (bench decode only)."""
    check_fits(config, device, dtype)
    torch.manual_seed(seed)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = get_model_class(config.architecture)(config)
    finally:
        torch.set_default_dtype(prev)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)          # norms
            else:
                p.normal_(0.0, 0.02)
    if quantization is not None:
        from turbospec.layers.quant.fp8 import Fp8Config, quantize_model_fp8, resolve_fp8_config
        quantize_model_fp8(model, Fp8Config(from_checkpoint=False, per_row=True) if quantization == "fp8-channel"
                           else resolve_fp8_config(None, quantization))
    return model.eval()


MAX_PREFILL_TOKENS = 1 << 16     # one prefill step's activations stay a few GB (qwen3-8b gate_up: 3.2 GB)


def build_engine(model, config: ModelConfig, device: torch.device, dtype: torch.dtype, max_len: int,
                 max_batch: int, speculative_proposer=None, graph_query_lens: list[int] | None = None,
                 auto_draft_length: bool = False, bitwise_exact: bool = True,
                 max_model_len: int | None = None) -> LLMEngine:
    """An engine whose KV pool holds max_batch sequences of max_len tokens. max_model_len (default
    max_len + 16): the context limit a server would be started with; the CUDA graphs are captured
    for length buckets up to it (2048, 8192, ...), so a larger one runs short contexts in the
    graphs a server would use (the pool grows to hold one sequence of that length).
    The token budget holds every prompt at once (up to MAX_PREFILL_TOKENS), so a batch is
    prefilled in one step and its sequences decode in lockstep: with a smaller budget the prompts
    prefilled first decode during the later prefills, and the timed phase (after the last prefill)
    ends with steps in which only the late sequences still run (qwen3-8b, batch 64, 512 + 64: 64
    GPU steps for 60 tokens)."""
    bs = 16
    model_len = max_model_len or max_len + 16
    blocks = max(max_batch * (-(-(max_len + 16) // bs)), -(-(model_len + 16) // bs)) + 8
    ec = EngineConfig(block_size=bs, num_kv_blocks=blocks, max_num_seqs=max_batch,
                      max_num_batched_tokens=max(8192, min(max_batch * max(max_len, 64), MAX_PREFILL_TOKENS)),
                      max_model_len=model_len)
    return LLMEngine(None, model, config, None, device, dtype, ec, proposer=speculative_proposer,
                     graph_query_lens=graph_query_lens, auto_draft_length=auto_draft_length,
                     bitwise_exact=bitwise_exact)


def run_decode(engine: LLMEngine, batch: int, prompt_len: int, gen_len: int, vocab: int,
               seed: int = 0, compiles=None, sampling: dict | None = None) -> tuple[float, int]:
    """Seconds per decode step (one token per sequence) over the decode phase, and the number of
    tokens per sequence decoded in it. Time runs from the step after the last prefill to the end;
    with decode bursts one engine step produces several tokens per sequence. compiles (a JitEvents):
    receives the Triton compilations inside the timed phase. sampling: SamplingParams fields
    (temperature, top_p, top_k, min_p, seed; default greedy), the same for every request."""
    from turbospec.benchmarks.oracle import run_batch
    g = torch.Generator().manual_seed(seed)
    params = SamplingParams(**{"temperature": 0.0, **(sampling or {})}, max_tokens=gen_len, ignore_eos=True)
    prompts = [torch.randint(0, vocab, (prompt_len,), generator=g).tolist() for _ in range(batch)]
    _, seconds, tokens = run_batch(engine, prompts, params, compiles)
    steps = tokens / batch
    return seconds / steps, int(steps)


def bench_decode(config: ModelConfig, device: torch.device, dtype: torch.dtype, batch_sizes: list[int],
                 prompt_len: int, gen_len: int, quantization: str | None = None,
                 max_model_len: int | None = None,
                 sampling: dict | None = None) -> tuple[float, list[DecodeResult], LLMEngine]:
    bw = measure_copy_bandwidth(device)
    model = random_model(config, device, dtype, quantization=quantization)
    engine = build_engine(model, config, device, dtype, prompt_len + gen_len, max(batch_sizes),
                          max_model_len=max_model_len)
    from turbospec.benchmarks.oracle import verify_cost
    # warm-up: a sampled variant's burst graph is captured at its first use per batch. The first batch
    # size runs the real prompt length once (one prefill of that batch, the timed run's own size):
    # the long-context paths and their length bucket are then not first used inside a timed run
    # (on the CPU the first batch size listed was timed cold); the others a short prompt, as before.
    for i, b in enumerate(batch_sizes):
        run_decode(engine, b, prompt_len if i == 0 else min(prompt_len, 16), 4, config.vocab_size,
                   sampling=sampling)
    results = []
    for b in batch_sizes:
        jit = JitEvents()
        step_s, _ = run_decode(engine, b, prompt_len, gen_len, config.vocab_size, compiles=jit, sampling=sampling)
        # the cross-check: bare decode forwards at the same batch and prompt length, just after the run
        # (a busy machine made a row 15x slow with no sign; cli.py compares the two)
        forward_ms = verify_cost(engine, b, [0], prompt_len, config.vocab_size, iters=FORWARD_ITERS)[0]
        ctx = [prompt_len + gen_len // 2] * b                                  # mean context over the run
        nbytes = weight_bytes_per_step(model, config, b) + kv_bytes_per_step(config, dtype, ctx)
        results.append(DecodeResult(b, step_s * 1e3, 1 / step_s, b / step_s, nbytes, nbytes / bw * 1e3,
                                    jit.summary(), forward_ms))
    return bw, results, engine


FORWARD_ITERS = 8         # bare decode forwards timed per batch size (after 3 untimed), the median kept


def profile_step(engine: LLMEngine, batch: int, prompt_len: int, vocab: int, top: int = 25,
                 sampling: dict | None = None) -> str:
    """torch.profiler table of one decode step's GPU kernels (after the prefills and two decode steps), and the
    time of the step's CUDA-graph replay alone (the GPU-only time, without host overhead); on the CPU
    the step's ops. The requests decode up to 64 tokens, fewer if the engine's context (sized by the
    bench's gen-len) has less room. sampling: as run_decode's (default greedy)."""
    from torch.profiler import ProfilerActivity, profile
    g = torch.Generator().manual_seed(3)
    room = engine.max_model_len - prompt_len             # the bench sizes the context for its own gen-len
    params = SamplingParams(**{"temperature": 0.0, **(sampling or {})}, max_tokens=min(64, room), ignore_eos=True)
    for i in range(batch):
        engine.add_request(f"prof{i}", {"prompt_token_ids": torch.randint(0, vocab, (prompt_len,), generator=g).tolist()}, params)
    sched = engine.scheduler
    while sched.waiting or any(s.num_computed_tokens < s.num_prompt_tokens for s in sched.running):
        engine.step()                           # every prompt prefilled (a batch of 64 takes several steps)
    for _ in range(2):
        engine.step()
    cuda = engine.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda) as prof:
        engine.step()
        sync()
    table = prof.key_averages().table(sort_by="cuda_time_total" if cuda else "cpu_time_total", row_limit=top)
    lines = [table] + (_gpu_notes(engine, batch) if cuda else [])
    while engine.has_unfinished_requests():         # the engine is reused: run the requests out
        engine.step()
    return "\n".join(lines)


def _gpu_notes(engine: LLMEngine, batch: int) -> list[str]:
    """What the profile table needs said on a GPU (PDL), and the time of the step's graph replay."""
    from turbospec.kernels.pdl import pdl_enabled          # imports Triton: CUDA only
    lines = []
    if pdl_enabled(engine.device):
        lines.append("programmatic dependent launch is on: a kernel's time above includes waiting for its "
                     "predecessor (an elementwise kernel after a GEMM shows the GEMM's tail); "
                     "TURBOSPEC_PDL=0 attributes each kernel its own time")
    graphs = engine.runner.graphs
    if graphs is not None:
        key = next((k for k in graphs.graphs if k[0] == graphs.bucket(batch) and k[1] == 1), None)
        if key is not None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            for _ in range(3):
                graphs.graphs[key].replay()
            a.record()
            for _ in range(20):
                graphs.graphs[key].replay()
            b.record()
            b.synchronize()
            lines.append(f"graph replay only (GPU time of one decode forward, batch bucket {key[0]}, "
                         f"len bucket {key[2]}): {a.elapsed_time(b) / 20:.3f} ms")
    return lines
