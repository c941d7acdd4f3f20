"""`turbospec generate MODEL --prompt ...`: one-off generation from the command line."""
from __future__ import annotations

import json
import time

import typer


def generate(
    model: str = typer.Argument(..., help="Hugging Face model directory (config.json + *.safetensors) or Hugging Face id"),
    prompt: list[str] = typer.Option(..., "--prompt", "-p", help="prompt text (repeat for a batch)"),
    max_tokens: int = typer.Option(128, help="tokens to generate per prompt"),
    temperature: float = typer.Option(0.0, help="0 = greedy"),
    top_p: float = typer.Option(1.0, help="(0, 1]: sample from the smallest set of tokens with this probability; 1 = off"),
    top_k: int = typer.Option(-1, help="-1 = no top-k"),
    seed: int = typer.Option(None, help="per-request seed (same seed, same output)"),
    stop: list[str] = typer.Option([], "--stop", help="stop string, left out of the text (repeatable)"),
    ignore_eos: bool = typer.Option(False, help="keep generating past the end-of-sequence token"),
    repetition_penalty: float = typer.Option(1.0, help="> 1 discourages tokens already in the prompt or output"),
    frequency_penalty: float = typer.Option(0.0, help="[-2, 2], per occurrence among the generated tokens"),
    presence_penalty: float = typer.Option(0.0, help="[-2, 2], once for a token already generated"),
    min_p: float = typer.Option(0.0, help="[0, 1]: drop tokens below min_p x the top token's probability"),
    device: str = typer.Option(None, help="cuda or cpu (default: cuda if available)"),
    dtype: str = typer.Option(None, help="auto (default: on a GPU the checkpoint's dtype, a float32 checkpoint in bfloat16; on CPU float32), bfloat16, float16 or float32"),
    speculative_config: str = typer.Option(None, "--speculative-config",
                                           help='JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\''),
    quantization: str = typer.Option(None, help="fp8: quantize the checkpoint's linear weights to block-FP8 (128 x 128) at load; an FP8 checkpoint (quantization_config) is detected by itself"),
    tokenizer: str = typer.Option(None, help="tokenizer directory or Hugging Face id (default: MODEL)"),
    revision: str = typer.Option(None, help="branch, tag or commit of MODEL when it is a Hugging Face id"),
    tokenizer_revision: str = typer.Option(None, help="revision of --tokenizer when it is a Hugging Face id"),
    download_dir: str = typer.Option(None, help="Hugging Face cache directory for ids (default: HF_HUB_CACHE)"),
    max_model_len: int = typer.Option(None, help="context length cap (default: the model's)"),
) -> None:
    """Generate text and print it with tokens/s."""
    from turbospec import LLM, SamplingParams

    spec = None
    if speculative_config:
        try:
            spec = json.loads(speculative_config)
        except json.JSONDecodeError as e:
            _fail(f"--speculative-config is not valid JSON ({e}): write e.g. "
                  '\'{"method": "ngram", "num_speculative_tokens": 4}\'')
        if not isinstance(spec, dict):
            _fail('--speculative-config must be a JSON object, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    try:
        params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens,
                                seed=seed, stop=stop or None, ignore_eos=ignore_eos,
                                repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
                                presence_penalty=presence_penalty, min_p=min_p)
    except ValueError as e:
        _fail(str(e))
    if device is not None and device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            build = "a CPU-only build of torch" if torch.version.cuda is None else f"torch {torch.__version__}"
            _fail(f"--device {device} but no CUDA GPU is visible ({build}): pass --device cpu, or leave "
                  "--device out to use a GPU when there is one")
    try:
        llm = LLM(model, device=device, dtype=dtype, speculative_config=spec, quantization=quantization,
                  tokenizer=tokenizer, max_model_len=max_model_len, revision=revision,
                  tokenizer_revision=tokenizer_revision, download_dir=download_dir)
    except ValueError as e:
        _fail(str(e))
    except Exception as e:  # noqa: BLE001 - a corrupt file or an odd checkpoint: one line, not a traceback
        _fail(f"could not load {model!r}: {type(e).__name__}: {e}")
    note = getattr(llm.llm_engine.model, "quant_note", None)
    if note:
        typer.echo(f"weights: {note}", err=True)
    if llm.get_tokenizer() is None:
        where = f"--tokenizer {tokenizer!r}" if tokenizer else repr(model)
        _fail(f"{where} has no tokenizer files (tokenizer.json, tokenizer_config.json, ...), so --prompt "
              f"cannot be encoded: pass {'a --tokenizer DIR that has them' if tokenizer else '--tokenizer DIR'}")
    try:
        t0 = time.perf_counter()
        outs = llm.generate(prompt, params)
        dt = time.perf_counter() - t0
    except (ValueError, RuntimeError) as e:
        _fail(str(e))
    n = sum(len(o.outputs[0].token_ids) for o in outs)
    for o in outs:
        typer.echo(o.prompt + o.outputs[0].text)
        typer.echo("-" * 40)
    line = f"{n} tokens in {dt:.2f} s: {n / dt:.1f} tok/s"
    m = llm.get_metrics()
    if m.get("acceptance_length"):
        line += f", acceptance length {m['acceptance_length']:.2f}"
    typer.echo(line, err=True)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("generate")(generate)
