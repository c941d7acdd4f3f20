"""`turbospec bench decode|spec`: every number printed with its setting and its ceiling."""
from __future__ import annotations

import json
import platform

import torch
import typer

bench_app = typer.Typer(no_args_is_help=True, help="Engine benchmarks (settings and roofline printed).")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def _parse_ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise typer.BadParameter(f"{what} must be comma-separated integers, e.g. 1,4,16") from e
    if not vals or any(v <= 0 for v in vals):
        raise typer.BadParameter(f"{what} must be positive integers, e.g. 1,4,16")
    return vals


@bench_app.command("decode")
def decode(
    shape: str = typer.Option("qwen3-8b", help="qwen3-8b | qwen3-30b-a3b | llama-3.1-8b | a model DIR (config only)"),
    dtype: str = typer.Option("bf16", help="bf16 | fp32"),
    batch_sizes: str = typer.Option("1,4,16,64", help="comma-separated batch sizes"),
    prompt_len: int = typer.Option(512, help="prompt tokens per sequence"),
    gen_len: int = typer.Option(128, help="decode steps per sequence"),
    device: str = typer.Option(None, help="cuda (default when available) or cpu"),
    json_out: str = typer.Option(None, help="also write the results as JSON here"),
) -> None:
    """Plain decoding tok/s of a model shape with random weights, vs the HBM roofline."""
    from turbospec.benchmarks.decode import bench_decode
    from turbospec.benchmarks.shapes import resolve_shape
    from turbospec.config import parse_dtype

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        name, cfg = resolve_shape(shape)
        dt = parse_dtype(dtype)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    bss = _parse_ints(batch_sizes, "--batch-sizes")
    bw, results = bench_decode(cfg, dev, dt, bss, prompt_len, gen_len)
    typer.echo(f"# bench decode | device {_device_name(dev)} | shape {name} | dtype {dt} | "
               f"prompt {prompt_len} + gen {gen_len} tokens (random ids, greedy) | "
               f"copy bandwidth {bw / 1e12:.2f} TB/s (measured now)")
    typer.echo(f"{'batch':>5} {'ms/step':>9} {'tok/s/seq':>10} {'tok/s total':>12} {'MB/step':>9} "
               f"{'roofline ms':>12} {'of roofline':>12}")
    for r in results:
        typer.echo(f"{r.batch:>5} {r.step_ms:>9.3f} {r.tok_s_per_seq:>10.1f} {r.tok_s_total:>12.1f} "
                   f"{r.bytes_per_step / 1e6:>9.1f} {r.roofline_ms:>12.3f} {100 * r.roofline_frac:>11.1f}%")
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"device": _device_name(dev), "shape": name, "dtype": str(dt), "prompt_len": prompt_len,
                       "gen_len": gen_len, "copy_bandwidth_Bps": bw,
                       "results": [r.__dict__ | {"roofline_frac": r.roofline_frac} for r in results]}, f, indent=1)


@bench_app.command("spec")
def spec(
    model: str = typer.Option(..., help="target model directory"),
    speculative_config: str = typer.Option(..., "--speculative-config", help="JSON, vLLM's keys"),
    prompts: str = typer.Option(..., help="JSONL file with a 'prompt' field per line"),
    num_prompts: int = typer.Option(32),
    max_tokens: int = typer.Option(128),
    concurrency: int = typer.Option(1, help="requests in flight (batch size)"),
    temperature: float = typer.Option(0.0),
    device: str = typer.Option(None),
    dtype: str = typer.Option(None),
) -> None:
    """Plain vs speculative decoding on the same prompts, same process: acceptance and speedup."""
    from turbospec import LLM, SamplingParams
    from turbospec.benchmarks.spec import compare, load_prompts

    try:
        spec_cfg = json.loads(speculative_config)
    except json.JSONDecodeError as e:
        raise typer.BadParameter(f"--speculative-config is not valid JSON ({e})") from e
    try:
        ps = load_prompts(prompts, num_prompts)
        llm = LLM(model, device=device, dtype=dtype, speculative_config=spec_cfg)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    eng = llm.llm_engine
    params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)
    plain, sp = compare(eng, eng.proposer, ps, params, concurrency)
    same = sum(a == b for a, b in zip(plain.outputs, sp.outputs))
    m = sp.metrics
    typer.echo(f"# bench spec | device {_device_name(eng.device)} | model {model} | dtype {eng.dtype} | "
               f"speculative_config {json.dumps(spec_cfg)} | prompts {prompts} x{len(ps)} | "
               f"max_tokens {max_tokens} | concurrency {concurrency} | temperature {temperature}")
    typer.echo(f"plain:       {plain.tokens} tokens in {plain.seconds:.2f} s = {plain.tok_s:.1f} tok/s")
    typer.echo(f"speculative: {sp.tokens} tokens in {sp.seconds:.2f} s = {sp.tok_s:.1f} tok/s "
               f"(draft {m['draft_time_s']:.2f} s, verify {m['verify_time_s']:.2f} s)")
    al = m["acceptance_length"]
    typer.echo(f"speedup {sp.tok_s / plain.tok_s:.2f}x | acceptance length {al if al is None else round(al, 3)} "
               f"| acceptance rate {m['acceptance_rate'] and round(m['acceptance_rate'], 3)} | drafts {m['num_drafts']}")
    typer.echo("per-position acceptance: " + " ".join(f"{p:.3f}" for p in m["per_position_acceptance"]))
    if temperature == 0:
        typer.echo(f"greedy outputs identical to plain: {same}/{len(ps)}")


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
