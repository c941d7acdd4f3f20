"""`turbospec bench decode|spec`: every number printed with its setting and its ceiling (`bench spec`
lives in spec_cli.py)."""
from __future__ import annotations

import json

import typer

from turbospec.benchmarks.cli_args import (BANDWIDTH_NOTE, bandwidth_text, check_fits, check_max_model_len,
                                           check_out_path, device_name, dtype_name, echo_compiles, env_setting,
                                           env_vars, forward_warning, gemv_setting, shape_setting, warn_unknown_env)
from turbospec.benchmarks.spec_cli import spec

_WEIGHTS = {"fp8": "block-FP8 (128x128)", "fp8-channel": "FP8, one scale per row"}

bench_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True, help="Engine benchmarks (settings and roofline printed).")


@bench_app.command("decode")
def decode(
    shape: str = typer.Option("qwen3-8b", help="qwen3-8b | qwen3-30b-a3b | llama-3.1-8b | sarvam-30b | mixtral-8x7b | phi-4 | phi-4-mini | a model DIR (config only)"),
    dtype: str = typer.Option("bf16", help="bf16 | fp16 | fp32"),
    batch_sizes: str = typer.Option("1,4,16,64", help="comma-separated batch sizes"),
    prompt_len: int = typer.Option(512, help="prompt tokens per sequence"),
    gen_len: int = typer.Option(128, help="decode steps per sequence"),
    device: str = typer.Option(None, help="cuda (default when available) or cpu"),
    json_out: str = typer.Option(None, help="also write the results as JSON here"),
    profile: bool = typer.Option(False, help="also print the GPU kernels (on the CPU: the ops) of one decode "
                                             "step (at --profile-batch)"),
    profile_batch: int = typer.Option(1, help="with --profile: the batch size of the profiled step"),
    quantization: str = typer.Option(None, help="fp8: block-FP8 weights (128x128 blocks, quantized at load); "
                                     "fp8-channel: one scale per output row (as compressed-tensors / per-tensor "
                                     "FP8 checkpoints load)"),
    max_model_len: int = typer.Option(None, help="the engine's context limit, as a server's (default: prompt + gen "
                                      "+ 16); CUDA graphs are captured for length buckets up to it (2048, 8192, ...)"),
    temperature: float = typer.Option(0.0, help="sampling temperature of every request (0: greedy)"),
    top_p: float = typer.Option(1.0, help="top-p of every request (1: off)"),
    top_k: int = typer.Option(-1, help="top-k of every request (-1: off)"),
    min_p: float = typer.Option(0.0, help="min-p of every request (0: off)"),
    logprobs: int = typer.Option(None, help="every request also returns this many top logprobs per token "
                                 "(vLLM's `logprobs`; decode bursts hold up to 8 such requests)"),
) -> None:
    """Plain decoding tok/s of a model shape with random weights, vs the HBM roofline. Greedy by
    default; --temperature (with --top-p / --top-k / --min-p) times sampled decoding instead,
    --logprobs decoding that returns logprobs."""
    from turbospec.benchmarks.decode import bench_decode
    from turbospec.sampling_params import SamplingParams

    dev, name, cfg, dt, bss = shape_setting(shape, dtype, device, batch_sizes)
    check_fits(cfg.max_position_embeddings, prompt_len, gen_len, "--gen-len")
    check_max_model_len(max_model_len, cfg.max_position_embeddings, cfg.rope.limit_text(cfg.max_position_embeddings))
    if quantization not in (None, "fp8", "fp8-channel"):
        raise typer.BadParameter("--quantization must be fp8 or fp8-channel (or omitted)")
    if profile_batch != 1 and not profile:                # it was ignored: no profile, no word
        raise typer.BadParameter(f"--profile-batch {profile_batch} goes with --profile: add --profile")
    if not 1 <= profile_batch <= max(bss):
        raise typer.BadParameter(f"--profile-batch {profile_batch}: give a batch size from 1 to the largest "
                                 f"of --batch-sizes ({max(bss)}), which sizes the engine")
    if max_model_len is not None and max_model_len < prompt_len + gen_len:
        raise typer.BadParameter(f"--max-model-len {max_model_len} is shorter than prompt + gen "
                                 f"({prompt_len + gen_len}): give at least that, or leave it out")
    if prompt_len < 1 or gen_len < 1:
        raise typer.BadParameter(f"--prompt-len {prompt_len} and --gen-len {gen_len} must be at least 1")
    check_out_path(json_out, "--json-out")
    warn_unknown_env()
    sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p)
    if logprobs is not None:
        sampling["logprobs"] = logprobs
    try:
        SamplingParams(**sampling)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    how = "greedy" if temperature == 0 else \
        f"sampled: temperature {temperature}, top-p {top_p}, top-k {top_k}, min-p {min_p}"
    if logprobs is not None:
        how += ", all-vocabulary logprobs" if logprobs == -1 else f", {logprobs} logprobs per token"
    try:
        bw, results, engine = bench_decode(cfg, dev, dt, bss, prompt_len, gen_len, quantization, max_model_len,
                                           sampling)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    burst = engine.burst.n if engine.burst is not None else 1
    typer.echo(f"# bench decode | device {device_name(dev)} | shape {name} | dtype {dtype_name(dt)} | "
               f"weights {_WEIGHTS.get(quantization, dtype_name(dt))} | "
               f"prompt {prompt_len} + gen {gen_len} tokens (random ids, {how}) | max model len "
               f"{engine.max_model_len} | copy bandwidth {bandwidth_text(bw)} ({BANDWIDTH_NOTE}) | CUDA graphs "
               f"{'on' if engine.runner.graphs is not None else 'off'} | "
               f"{f'decode bursts of {burst} steps' if burst > 1 else 'no decode bursts'}{gemv_setting(engine)}"
               f"{env_setting()}")
    typer.echo(f"{'batch':>5} {'ms/step':>9} {'tok/s/seq':>10} {'tok/s total':>12} {'MB/step':>9} "
               f"{'roofline ms':>12} {'of roofline':>12}")
    for r in results:
        typer.echo(f"{r.batch:>5} {r.step_ms:>9.3f} {r.tok_s_per_seq:>10.1f} {r.tok_s_total:>12.1f} "
                   f"{r.bytes_per_step / 1e6:>9.1f} {r.roofline_ms:>12.3f} {100 * r.roofline_frac:>11.1f}%")
    echo_compiles((f"batch {r.batch}", r.compiles) for r in results)
    if logprobs is None:        # with logprobs a step also builds them on the host, which a bare forward does not
        for r in results:
            line = forward_warning(r.step_ms, r.forward_ms, f"batch {r.batch}", "decoding")
            if line:
                typer.echo(line, err=True)
    if profile:
        from turbospec.benchmarks.decode import profile_step
        typer.echo(profile_step(engine, profile_batch, prompt_len, cfg.vocab_size, sampling=sampling))
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"device": device_name(dev), "shape": name, "dtype": dtype_name(dt), "quantization": quantization,
                       "prompt_len": prompt_len, "max_model_len": engine.max_model_len,
                       "gen_len": gen_len, "sampling": sampling, "copy_bandwidth_Bps": bw, "env": env_vars(),
                       "results": [r.__dict__ | {"roofline_frac": r.roofline_frac} for r in results]}, f, indent=1)


bench_app.command("spec")(spec)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
