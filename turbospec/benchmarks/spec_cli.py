"""`turbospec bench spec`: plain vs speculative decoding in the same process, on a real model with a
prompts file (--model) or on a shape with random weights and the oracle proposer (--shape)."""
from __future__ import annotations

import json

import typer

from turbospec.spec.config_arg import parse_speculative_config
from turbospec.benchmarks.cli_args import (BANDWIDTH_NOTE, bandwidth_text, check_fits, check_max_model_len,
                                           check_out_path, device_name, dtype_name, echo_compiles, env_setting,
                                           env_vars, forward_warning, gemv_setting, shape_setting, warn_unknown_env)
from turbospec.benchmarks.spec_checks import _check_lossless, _warn_timing, timing_warning, verify_cost_warning

DEFAULT_NUM_PROMPTS = 32


def spec(
    ctx: typer.Context,
    speculative_config: str = typer.Option(..., "--speculative-config", help="JSON, vLLM's keys"),
    model: str = typer.Option(None, help="target model directory (real weights; needs --prompts)"),
    shape: str = typer.Option(None, help="or a model shape with random weights (oracle proposer only)"),
    prompts: str = typer.Option(None, help="JSONL file with a 'prompt' field per line (with --model)"),
    num_prompts: int = typer.Option(DEFAULT_NUM_PROMPTS, help="with --model: the first N prompts of the file"),
    max_tokens: int = typer.Option(128, help="generated tokens per request"),
    concurrency: int = typer.Option(1, help="requests in flight (batch size), with --model"),
    batch_sizes: str = typer.Option("1,4,16,64", help="with --shape"),
    prompt_len: int = typer.Option(512, help="with --shape"),
    dtype: str = typer.Option(None, help="bf16 | fp16 | fp32 (default: bf16 with --shape, the engine's with --model)"),
    temperature: float = typer.Option(0.0, help="with --model (0: greedy, and the outputs are compared to plain)"),
    device: str = typer.Option(None, help="cuda (default when available) or cpu"),
    quantization: str = typer.Option(None, help="fp8 = block-FP8 weights (128x128, quantized at load; with --model, of a bf16 checkpoint)"),
    max_model_len: int = typer.Option(None, help="with --shape: the engine's context limit, as a server's (default: "
                                      "what the run needs); CUDA graphs are captured for length buckets up to it"),
    json_out: str = typer.Option(None, help="also write the results as JSON here (the header's setting, each "
                                 "row's numbers, acceptance, identical outputs, the verify-cost table)"),
) -> None:
    """Plain vs speculative decoding in the same process: acceptance, tok/s of each, speedup."""
    if not speculative_config.strip():
        raise typer.BadParameter("--speculative-config is empty: bench spec compares a drafter with plain decoding, "
                                 'e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    try:
        spec_cfg = parse_speculative_config(speculative_config)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if (model is None) == (shape is None):
        raise typer.BadParameter("pass exactly one of --model DIR (with --prompts) or --shape NAME (oracle)")
    for flag, v in (("--max-tokens", max_tokens), ("--concurrency", concurrency)):     # --num-prompts: load_prompts
        if v < 1:
            raise typer.BadParameter(f"{flag} {v}: give a positive integer")
    if quantization not in (None, "fp8"):
        raise typer.BadParameter("--quantization must be fp8 (or omitted)")
    source = ctx.get_parameter_source("num_prompts")
    asked = source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")     # --num-prompts given
    # a flag of the other mode would be ignored: the run and its header would not be the ones asked for
    other = ((("--prompts", prompts is not None), ("--num-prompts", asked or num_prompts != DEFAULT_NUM_PROMPTS),
              ("--concurrency", concurrency
             != 1), ("--temperature", temperature != 0)) if shape is not None else
             (("--batch-sizes", batch_sizes != "1,4,16,64"), ("--prompt-len", prompt_len != 512)))
    for flag, given in other:
        if given:
            raise typer.BadParameter(f"{flag} goes with --{'model' if shape else 'shape'}; --shape runs the oracle, greedy, "
                                     "at --batch-sizes on --prompt-len random ids, --model the --prompts file")
    if shape is not None and prompt_len < 1:
        raise typer.BadParameter(f"--prompt-len {prompt_len}: give a positive integer")
    if shape is None and max_model_len is not None:
        raise typer.BadParameter("--max-model-len goes with --shape; with --model the engine's context "
                                 "limit is the model's")
    if shape is None and prompts is None:
        raise typer.BadParameter("--model needs --prompts FILE.jsonl")
    check_out_path(json_out, "--json-out")
    warn_unknown_env()
    if shape is not None:
        result = _spec_shape(shape, spec_cfg, batch_sizes, prompt_len, max_tokens, dtype or "bf16", device,
                             quantization, max_model_len)
    else:
        result = _spec_model(model, spec_cfg, prompts, num_prompts, max_tokens, concurrency, temperature, device,
                             dtype, quantization, asked)
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=1)


def _spec_model(model, spec_cfg, prompts, num_prompts, max_tokens, concurrency, temperature, device, dtype,
                quantization=None, asked=False) -> dict:
    """Run --model; print the header and results; return them for --json-out. asked: --num-prompts
    was given (not the default)."""
    from turbospec import LLM, SamplingParams
    from turbospec.benchmarks.spec import compare, load_prompts

    if not spec_cfg:                                      # before the model loads (LLM refuses {} too)
        raise typer.BadParameter('--speculative-config {} names no method: e.g. {"method": "ngram", '
                                 '"num_speculative_tokens": 4}')
    try:
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)
        ps = load_prompts(prompts, num_prompts)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    if len(ps) < num_prompts:            # the file holds fewer: it ran them all, silently
        typer.echo(f"note: {prompts} holds {len(ps)} prompts ({'asked' if asked else '--num-prompts default'} "
                   f"{num_prompts}): running {len(ps)}", err=True)
    try:
        llm = LLM(model, device=device, dtype=dtype, speculative_config=spec_cfg, quantization=quantization,
                  seed=None)          # unseeded sampled requests draw afresh each run, as before LLM's seed 0
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    eng = llm.llm_engine
    if eng.tokenizer is None:                             # it was a ValueError traceback mid-run
        raise typer.BadParameter(f"{model} has no tokenizer files (tokenizer.json, tokenizer_config.json, ...): "
                                 "bench spec --model encodes the text of --prompts with them")
    from turbospec.engine.request_input import prompt_to_ids
    lens = []
    for i, p in enumerate(ps, 1):
        n = len(prompt_to_ids(p, eng.tokenizer, eng.model_config.vocab_size)[1])   # the engine's tokenization
        lens.append(n)
        if n + max_tokens > eng.max_model_len:
            fix = (f"lower --max-tokens to {eng.max_model_len - n} or shorten that prompt"
                   if n < eng.max_model_len else "shorten that prompt")
            raise typer.BadParameter(f"prompt {i} of {prompts} has {n} tokens: with --max-tokens {max_tokens} "
                                     f"it exceeds the context length {eng.max_model_len}; {fix}")
    mean_len = sum(lens) / len(lens)
    batch = min(concurrency, len(ps))
    plain, sp = compare(eng, eng.proposer, ps, params, concurrency,
                        forward_prompt_len=max(1, min(round(mean_len), eng.max_model_len - 9)))
    same = sum(a == b for a, b in zip(plain.outputs, sp.outputs))
    m = sp.metrics
    typer.echo(f"# bench spec | device {device_name(eng.device)} | model {model} | dtype {dtype_name(eng.dtype)} | "
               f"speculative_config {json.dumps(spec_cfg)} | prompts {prompts} x{len(ps)} | "
               f"max_tokens {max_tokens} | concurrency {concurrency} | temperature {temperature}"
               f"{gemv_setting(eng)}{env_setting()}")
    typer.echo(f"plain:       {plain.tokens} tokens in {plain.seconds:.2f} s = {plain.tok_s:.1f} tok/s "
               "(prefills included)")
    typer.echo(f"speculative: {sp.tokens} tokens in {sp.seconds:.2f} s = {sp.tok_s:.1f} tok/s "
               f"(prefills included; draft {m['draft_time_s']:.2f} s, verify {m['verify_time_s']:.2f} s)")
    if m["num_drafts"]:
        typer.echo(f"speedup {sp.tok_s / plain.tok_s:.2f}x | acceptance length {m['acceptance_length']:.3f} | "
                   f"acceptance rate {m['acceptance_rate']:.3f} | drafts {m['num_drafts']}")
        typer.echo("per-position acceptance: " + " ".join(f"{p:.3f}" for p in m["per_position_acceptance"]))
        _warn_timing(timing_warning(sp.tok_s / plain.tok_s, m["acceptance_length"], "the prompts"))
    else:                                 # it printed 'acceptance length None' and an empty per-position line
        typer.echo(f"speedup {sp.tok_s / plain.tok_s:.2f}x | drafts 0: the proposer drafted nothing for these "
                   "prompts, so there is no acceptance to report")
    forward_ms = plain.metrics.get("forward_ms")
    _warn_timing(forward_warning(plain.decode_ms or 0.0, forward_ms, "plain",
                                 f"plain decoding (its steps without a prefill, batch up to {batch})"))
    echo_compiles((f"{name} run", r.compiles) for name, r in (("plain", plain), ("speculative", sp)))
    if temperature == 0:
        typer.echo(f"greedy outputs identical to plain: {same}/{len(ps)}")
        # trees verify through the prefill attention kernel: not bit-identical yet (README)
        _check_lossless(same, len(ps), eng.bitwise_exact and "tree" not in spec_cfg, "the prompts")
    else:                                 # the line just disappeared
        typer.echo(f"sampled (temperature {temperature}): outputs not compared token for token")
    line, ceiling = model_ceiling(eng, batch, mean_len + max_tokens / 2, plain.tok_s)
    typer.echo(line)
    return {"mode": "model", "device": device_name(eng.device), "model": model, "dtype": dtype_name(eng.dtype),
            "quantization": quantization, "speculative_config": spec_cfg, "method": spec_cfg.get("method"),
            "k": spec_cfg.get("num_speculative_tokens"), "prompts": prompts, "num_prompts": len(ps),
            "prompt_tokens": lens, "max_tokens": max_tokens, "concurrency": concurrency, "temperature": temperature,
            "env": env_vars(), "copy_bandwidth_Bps": ceiling.get("copy_bandwidth_Bps"),
            "plain": _run_json(plain) | {"bare_forward_ms": forward_ms},
            "speculative": _run_json(sp) | {k: v for k, v in m.items()},
            "speedup": sp.tok_s / plain.tok_s,
            "acceptance_length": m["acceptance_length"], "per_position_acceptance": m["per_position_acceptance"],
            "identical": {"same": same, "total": len(ps)} if temperature == 0 else None,
            "ceiling": ceiling}


def _run_json(r) -> dict:
    """A timed run's numbers for --json-out (prefills included in seconds and tok_s)."""
    return {"seconds": r.seconds, "tokens": r.tokens, "tok_s": r.tok_s, "decode_ms_per_token": r.decode_ms,
            "compiles": r.compiles}


def model_ceiling(eng, concurrency: int, mean_context: float, plain_tok_s: float) -> tuple[str, dict]:
    """The HBM roofline of plain decoding for this run: a step at `concurrency` sequences (at most
    the number of prompts) reads the weights once and every sequence's KV (at the run's mean
    context), at the copy bandwidth measured now; and the share of it the plain run reached (its
    tok/s include prefills and the batch draining at the end: a lower bound of a step's efficiency).
    Returns the line and its numbers (for --json-out)."""
    from turbospec.benchmarks.roofline import kv_bytes_per_step, measure_copy_bandwidth, weight_bytes_per_step
    try:
        bw = measure_copy_bandwidth(eng.device)
    except RuntimeError as e:            # out of memory beside the model (the probe copies 1 GiB)
        return f"ceiling: not measured (the copy-bandwidth probe failed: {str(e).splitlines()[0]})", {}
    ctx = [round(mean_context)] * concurrency
    nbytes = weight_bytes_per_step(eng.model, eng.model_config, concurrency) + kv_bytes_per_step(
        eng.model_config, eng.dtype, ctx)
    ceiling = concurrency * bw / nbytes
    return (f"ceiling: plain decoding at concurrency {concurrency}, mean context {ctx[0]} tokens, reads "
            f"{nbytes / 1e6:.1f} MB per step; at {bandwidth_text(bw)} copy bandwidth ({BANDWIDTH_NOTE}) that is "
            f"{ceiling:.1f} tok/s: plain reached {plain_tok_s / ceiling:.1%} of it (prefills included)"), \
        {"copy_bandwidth_Bps": bw, "concurrency": concurrency, "mean_context": ctx[0], "bytes_per_step": nbytes,
         "tok_s": ceiling, "plain_frac": plain_tok_s / ceiling}


def _spec_shape(shape, spec_cfg, batch_sizes, prompt_len, gen_len, dtype, device, quantization=None,
                max_model_len=None):
    from turbospec.benchmarks.oracle import bench_oracle, oracle_setting
    from turbospec.engine.draft_length import candidate_ks
    from turbospec.spec.factory import bitwise_exact

    if spec_cfg.get("method") != "oracle":
        raise typer.BadParameter("--shape runs random weights: only the oracle proposer makes sense there "
                                 '(e.g. {"method": "oracle", "num_speculative_tokens": 7, "acceptance_length": 4})')
    try:
        k, al = oracle_setting(spec_cfg)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    dev, name, cfg, dt, bss = shape_setting(shape, dtype, device, batch_sizes)
    check_fits(cfg.max_position_embeddings, prompt_len, gen_len, "--max-tokens", k)
    check_max_model_len(max_model_len, cfg.max_position_embeddings, cfg.rope.limit_text(cfg.max_position_embeddings))
    need = prompt_len + gen_len + k + 1
    if max_model_len is not None and max_model_len < need:
        raise typer.BadParameter(f"--max-model-len {max_model_len} is shorter than prompt + max tokens + k + 1 "
                                 f"({need}): give at least that, or leave it out")
    cost_ks = candidate_ks(k)               # the verify-cost table: k = 0 (decode), 1, 2, 3, 4 and k
    auto = spec_cfg.get("draft_length") == "auto"
    try:
        exact = bitwise_exact(spec_cfg)
        rows, costs, engine = bench_oracle(cfg, dev, dt, bss, k, float(al), prompt_len, gen_len, cost_ks, auto,
                                           quantization, exact, max_model_len)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    model_len = min(max_model_len or need + 16, cfg.max_position_embeddings)
    bound = engine.exact_rows               # 16 where a CUDA GEMV serves the linears (fp8_gemv / bf16_gemv.prepare)
    typer.echo(f"# bench spec (oracle) | device {device_name(dev)} | shape {name} (random weights) | "
               f"dtype {dtype_name(dt)} | weights {'block-FP8 (128x128)' if quantization else dtype_name(dt)} | "
               f"k {k}{' (auto)' if auto else ''} | "
               f"bitwise_exact {exact}{f' (verify rows <= {bound} per step)' if exact and dev.type == 'cuda' else ''} | "
               f"target acceptance length {al} | prompt {prompt_len} random ids + gen {gen_len} | greedy | "
               f"max model len {model_len}{gemv_setting(engine)}{env_setting()}")
    typer.echo(f"{'batch':>5} {'plain tok/s total':>18} {'spec tok/s total':>17} {'speedup':>8} {'accept len':>11} "
               f"{'same as plain':>14} {'mean k':>7} {'k next':>7}")
    for r in rows:
        typer.echo(f"{r.batch:>5} {r.plain_tok_s:>18.1f} {r.spec_tok_s:>17.1f} {r.speedup:>7.2f}x "
                   f"{_num(r.acceptance_length, 11)} {r.identical:>14} {_num(r.mean_k, 7)} {r.chosen_k:>7}")
    echo_compiles((f"batch {r.batch}", r.compiles) for r in rows)
    for r in rows:
        same, total = (int(x) for x in r.identical.split("/"))
        _check_lossless(same, total, exact and dev.type == "cuda", f"batch {r.batch}")
        _warn_timing(timing_warning(r.speedup, r.acceptance_length, f"batch {r.batch}",
                                    r.batch / r.plain_tok_s * 1e3 if r.plain_tok_s else None,
                                    costs.get(r.batch, {}).get(0)))
        _warn_timing(verify_cost_warning(costs.get(r.batch, {}), f"batch {r.batch}"))
    typer.echo("verify cost: ms per target forward with k drafts per sequence (ratio to k=0 decode)")
    typer.echo(f"{'batch':>5} " + " ".join(f"{'k=' + str(kk):>14}" for kk in cost_ks))
    for b, c in costs.items():
        typer.echo(f"{b:>5} " + " ".join(f"{c[kk]:>7.3f} ({c[kk] / c[0]:.2f})" for kk in cost_ks))
    return {"mode": "shape", "device": device_name(dev), "shape": name, "dtype": dtype_name(dt),
            "quantization": quantization, "speculative_config": spec_cfg, "method": "oracle", "k": k,
            "draft_length": "auto" if auto else "fixed", "bitwise_exact": exact, "target_acceptance_length": al,
            "prompts": "random ids", "prompt_len": prompt_len, "gen_len": gen_len, "max_model_len": model_len,
            "env": env_vars(), "copy_bandwidth_Bps": None,         # the oracle prints no roofline
            "results": [{"batch": r.batch, "plain_tok_s_total": r.plain_tok_s, "spec_tok_s_total": r.spec_tok_s,
                         "speedup": r.speedup, "acceptance_length": r.acceptance_length,
                         "identical": dict(zip(("same", "total"), (int(x) for x in r.identical.split("/")))),
                         "mean_k": r.mean_k, "k_next": r.chosen_k, "compiles": r.compiles} for r in rows],
            "verify_cost_ms": {str(b): {str(kk): c[kk] for kk in cost_ks} for b, c in costs.items()}}




def _num(x: float | None, width: int) -> str:
    """A column value, or '-' when there is none (no draft step: the automatic length stayed plain)."""
    return f"{x:>{width}.2f}" if x else f"{'-':>{width}}"
