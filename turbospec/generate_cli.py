"""`turbospec generate MODEL --prompt ...`: one-off generation from the command line.

stdout: per prompt, the prompt, a `--- completion ---` line, the completion and its
`[finish_reason: ...]` (the prompt and the marks dimmed on a terminal, plain text in a pipe);
stderr: one summary line (tokens/s, device, dtype, method, k)."""
from __future__ import annotations

import inspect
import re
import time

import typer
from safetensors import SafetensorError

from turbospec.spec.config_arg import EXAMPLE, parse_speculative_config

COMPLETION_MARK = "--- completion ---"


def generate(
    model: str = typer.Argument(..., help="Hugging Face model directory (config.json + *.safetensors) or "
                                "Hugging Face id"),
    prompt: list[str] = typer.Option(..., "--prompt", "-p", help="prompt text (each -p one prompt of the batch)"),
    max_tokens: int = typer.Option(128, help="tokens to generate per prompt (at most)"),
    temperature: float = typer.Option(0.0, help="0 = greedy"),
    top_p: float = typer.Option(1.0, help="(0, 1]: sample from the smallest set of tokens with this probability; "
                                "1 = off"),
    top_k: int = typer.Option(-1, help="sample from the k most likely tokens; -1 or 0 = no top-k"),
    seed: int = typer.Option(None, help="per-request seed (same seed, same output)"),
    stop: list[str] = typer.Option([], "--stop", help="stop string, left out of the text"),
    ignore_eos: bool = typer.Option(False, help="keep generating past the end-of-sequence token"),
    repetition_penalty: float = typer.Option(1.0, help="> 1 discourages tokens already in the prompt or output"),
    frequency_penalty: float = typer.Option(0.0, help="[-2, 2], per occurrence among the generated tokens"),
    presence_penalty: float = typer.Option(0.0, help="[-2, 2], once for a token already generated"),
    min_p: float = typer.Option(0.0, help="[0, 1]: drop tokens below min_p x the top token's probability"),
    device: str = typer.Option(None, help="cuda, cuda:N or cpu (default: cuda if available)"),
    dtype: str = typer.Option(None, help="auto (default: on a GPU the checkpoint's dtype, a float32 checkpoint in bfloat16; on CPU float32), bfloat16, float16 or float32"),
    speculative_config: str = typer.Option(None, "--speculative-config",
                                           help=f"JSON, e.g. {EXAMPLE}; leave it out for plain decoding"),
    quantization: str = typer.Option(None, help="fp8: quantize the checkpoint's linear weights to block-FP8 (128 x 128) at load; an FP8 checkpoint (quantization_config) is detected by itself"),
    tokenizer: str = typer.Option(None, help="tokenizer directory or Hugging Face id (default: MODEL)"),
    revision: str = typer.Option(None, help="branch, tag or commit of MODEL when it is a Hugging Face id"),
    tokenizer_revision: str = typer.Option(None, help="revision of --tokenizer when it is a Hugging Face id"),
    download_dir: str = typer.Option(None, help="Hugging Face cache directory for ids (default: HF_HUB_CACHE)"),
    max_model_len: int = typer.Option(None, help="context length cap (default: the model's)"),
) -> None:
    """Generate text: each prompt, its completion and why it stopped; tokens/s on stderr."""
    from turbospec import LLM, SamplingParams

    spec = _speculative_config(speculative_config)
    _check_flags(max_tokens, max_model_len, quantization, stop)
    try:
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens,
                                seed=seed, stop=stop or None, ignore_eos=ignore_eos,
                                repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, min_p=min_p)
    except ValueError as e:
        _fail(as_flags(str(e)))
    if device is not None and device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            build = "a CPU-only build of torch" if torch.version.cuda is None else f"torch {torch.__version__}"
            _fail(f"--device {device} but no CUDA GPU is visible ({build}): pass --device cpu, or leave "
                  "--device out to use a GPU when there is one")
    try:
        llm = LLM(model, device=device, dtype=dtype, speculative_config=spec, quantization=quantization,
                  tokenizer=tokenizer, max_model_len=max_model_len, revision=revision,
                  tokenizer_revision=tokenizer_revision, download_dir=download_dir,
                  seed=None)          # without --seed a sampled run differs from the last (LLM's default is 0)
    except KeyboardInterrupt:
        typer.echo("turbospec generate: interrupted while loading the model; nothing was generated", err=True)
        raise typer.Exit(130) from None
    except ValueError as e:
        _fail(as_flags(str(e), dtype))
    except (OSError, SafetensorError, RuntimeError) as e:   # a bad file, CUDA out of memory, a build that failed
        _fail(f"could not load {model!r}: {type(e).__name__}: {e}")
    except Exception as e:
        # anything else is turbospec's to catch and explain: say so, and keep the traceback for the report
        typer.echo(f"error: could not load {model!r}: {type(e).__name__}: {e}\nThis looks like a bug in "
                   "turbospec, not a problem with the model: please report it with the traceback below.", err=True)
        raise
    note = getattr(llm.llm_engine.model, "quant_note", None)
    if note:
        typer.echo(f"weights: {note}", err=True)
    if llm.get_tokenizer() is None:
        where = f"--tokenizer {tokenizer!r}" if tokenizer else repr(model)
        _fail(f"{where} has no tokenizer files (tokenizer.json, tokenizer_config.json, ...), so --prompt "
              f"cannot be encoded: pass {'a --tokenizer DIR that has them' if tokenizer else '--tokenizer DIR'}")
    t0 = time.perf_counter()
    try:
        outs = llm.generate(prompt, params)
        dt = time.perf_counter() - t0
    except (ValueError, RuntimeError) as e:
        _fail(as_flags(str(e)))
    except KeyboardInterrupt as e:                    # print what each prompt had so far: nothing is lost
        _print_partial(prompt, getattr(e, "partial", None) or [None] * len(prompt))
        typer.echo(f"turbospec generate: interrupted after {time.perf_counter() - t0:.1f} s; above, what each "
                   "prompt had generated so far", err=True)
        raise typer.Exit(130) from None
    for i, o in enumerate(outs):
        why = finish_reason(o.outputs[0], max_tokens, llm.llm_engine.max_model_len,
                            llm.llm_engine.model_config.max_position_embeddings)
        _echo_completion(i, o.prompt, o.outputs[0].text, why)
    typer.echo(summary(llm, spec, sum(len(o.outputs[0].token_ids) for o in outs), dt, quantization), err=True)


def _echo_completion(i: int, prompt: str, text: str, why: str) -> None:
    """One prompt's block on stdout: the prompt, the completion mark, the text, `[finish_reason: why]`."""
    if i:
        typer.echo()
    typer.secho(prompt, dim=True)                        # click drops the style when stdout is no terminal
    typer.secho(COMPLETION_MARK, dim=True)
    typer.echo(text)
    typer.secho(f"[finish_reason: {why}]", dim=True)


def _print_partial(prompts: list[str], partial: list) -> None:
    """The completions so far of an interrupted run, each marked `[finish_reason: interrupted, N tokens]`."""
    for i, (p, o) in enumerate(zip(prompts, partial)):
        n = len(o.outputs[0].token_ids) if o is not None else 0
        reason = "interrupted" if o is None or not o.finished else o.outputs[0].finish_reason
        _echo_completion(i, p, o.outputs[0].text if o is not None else "", f"{reason}, {n} token{'s' * (n != 1)}")


def finish_reason(out, max_tokens: int, max_model_len: int, model_limit: int | None = None) -> str:
    """`length (--max-tokens 40 reached), 40 tokens`: the reason and what caused it. model_limit: the
    model's own context (max_position_embeddings, or what its rope scaling serves): at it, raising
    --max-model-len cannot help."""
    n, why = len(out.token_ids), None
    if out.finish_reason == "stop":
        why = ("end-of-sequence token" if out.stop_reason is None else f"stop string {out.stop_reason!r}"
               if isinstance(out.stop_reason, str) else f"stop token {out.stop_reason}")
    elif out.finish_reason == "length":
        why = (f"--max-tokens {max_tokens} reached" if n >= max_tokens else
               f"the model's own context length {max_model_len} reached: shorten the prompt"
               if model_limit is not None and max_model_len >= model_limit else
               f"the context length {max_model_len} reached: raise --max-model-len or shorten the prompt")
    elif out.finish_reason == "error":        # the engine's reason (a grammar llguidance failed on)
        why = out.stop_reason
    return f"{out.finish_reason}{f' ({why})' if why else ''}, {n} token{'s' * (n != 1)}"


def summary(llm, spec: dict | None, n: int, dt: float, quantization: str | None = None) -> str:
    """`120 tokens in 0.58 s: 205.1 tok/s, acceptance length 3.25 | cpu, float32, ngram k=4` (and the FP8
    weights after the dtype: `float32 activations, fp8 weights (quantized at load)`)."""
    engine = llm.llm_engine
    line = f"{n} tokens in {dt:.2f} s: {n / dt:.1f} tok/s"
    m = llm.get_metrics()
    if m.get("acceptance_length"):
        line += f", acceptance length {m['acceptance_length']:.2f}"
    method = "plain decoding"
    if spec is not None and engine.proposer is not None:
        k = engine.proposer.k
        method = (f"{spec['method']} tree (budget {k})" if getattr(engine.proposer, "tree", None) else
                  f"{spec['method']} k=auto (up to {k})" if getattr(engine, "adaptive", None) else
                  f"{spec['method']} k={k}")
    dtype = str(engine.dtype).removeprefix("torch.")
    qc = engine.model_config.quantization_config or {}
    if qc.get("quant_method"):                        # the checkpoint's own wins over --quantization
        dtype += f" activations, {qc['quant_method']} weights (the checkpoint's)"
    elif quantization:
        dtype += f" activations, {quantization} weights (quantized at load)"
    return f"{line} | {engine.device}, {dtype}, {method}"


def _speculative_config(raw: str | None) -> dict | None:
    try:
        return parse_speculative_config(raw)
    except ValueError as e:
        _fail(str(e))


def _check_flags(max_tokens: int, max_model_len: int | None, quantization: str | None, stop: list[str]) -> None:
    """The flags whose Python-API errors speak of None: checked here in the command line's words."""
    if max_tokens < 1:
        _fail(f"--max-tokens {max_tokens}: give a positive number of tokens (the most each prompt generates)")
    bad = load_flag_error(max_model_len, quantization)
    if bad is not None:
        _fail(bad)
    if any(not s for s in stop):
        _fail("--stop '': give a non-empty stop string")


def load_flag_error(max_model_len: int | None, quantization: str | None) -> str | None:
    """--max-model-len / --quantization values no model loads with, in the command line's words (the
    Python API's messages speak of None), or None; `generate` and `serve` check them before loading."""
    if max_model_len is not None and max_model_len < 2:
        return (f"--max-model-len {max_model_len}: give at least 2 tokens (a prompt token and a generated one), "
                "or leave it out for the model's own context length")
    from turbospec.layers.quant.fp8_formats import QUANTIZATION_NAMES
    if quantization is not None and quantization not in QUANTIZATION_NAMES:
        return (f"--quantization {quantization}: the only value is fp8 (leave it out for the checkpoint's own "
                "weights, or name their method: compressed-tensors)")
    return None


def as_flags(message: str, dtype: str | None = None) -> str:
    """SamplingParams' / LLM's error in the command line's words: `top_p=0.0 must ...` ->
    `--top-p 0.0 must ...` (the Python API's messages name its parameters)."""
    if dtype is not None and message.startswith(f"unknown dtype {dtype!r}"):
        return f"--dtype {dtype}: " + message.split(": ", 1)[-1] + " (or auto)"
    m = re.match(r"(\w+)=('[^']*'|\S+?)(:? )", message)
    if m and m.group(1) in _FLAGS:
        return f"--{m.group(1).replace('_', '-')} {m.group(2).strip(chr(39))}{m.group(3)}{message[m.end():]}"
    return message


_FLAGS = set(inspect.signature(generate).parameters) - {"model", "prompt"}     # top_p -> --top-p, ...


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
