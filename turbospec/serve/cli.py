"""`turbospec serve MODEL`: an OpenAI-compatible server on uvicorn.

The port is bound and listening before the model loads, and uvicorn serves on that socket
(serve/listen.py); `listening on` names the port bound (the kernel's pick for --port 0) once the
server is up.

SIGINT/SIGTERM shut down gracefully: stop accepting, let in-flight requests finish for up to
--shutdown-timeout seconds, end the rest with a 503 (freeing their KV blocks), exit 0
(serve/shutdown.py).
"""
from __future__ import annotations

import functools
import gc
import inspect
import logging
import sys

import typer

from turbospec.serve.cli_checks import as_serve_flags, flag_error
from turbospec.serve.listen import ListenError, announce_when_serving, listen_sockets, listen_url, port_error
from turbospec.spec.config_arg import parse_speculative_config

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")     # uvicorn's


def _parse_spec_config(raw: str | None) -> dict | None:
    try:
        return parse_speculative_config(raw)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def _quiet_interrupt(fn):
    """Ctrl-C during start-up (imports, model load; uvicorn handles it once listening): one line
    and exit 130, not a KeyboardInterrupt traceback. typer reads the wrapped signature."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            typer.echo("turbospec serve: interrupted during start-up; nothing was served", err=True)
            raise typer.Exit(130) from None
    return wrapper


@_quiet_interrupt
def serve(
    model: str = typer.Argument(..., help="Hugging Face model directory (config.json + *.safetensors), or a "
                                "Hugging Face id such as Qwen/Qwen3-8B (fetched through the Hub cache)."),
    speculative_config: str = typer.Option(None, "--speculative-config",
                                           help='JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'.'),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (0.0.0.0 exposes the server)."),
    port: int = typer.Option(8000, help="TCP port (0-65535; 0: any free port)."),
    device: str = typer.Option(None, help="cuda, cuda:N or cpu (default: cuda when available)."),
    dtype: str = typer.Option("auto", help="auto, float32, bfloat16, float16. auto (vLLM's): on GPU the checkpoint's "
                              "torch_dtype (a float32 checkpoint runs in bfloat16); on CPU float32."),
    quantization: str = typer.Option(None, help="fp8: quantize the checkpoint's linear weights to block-FP8 (128 x 128) at load; an FP8 checkpoint (quantization_config) is detected by itself."),
    api_key: str = typer.Option(None, envvar="TURBOSPEC_API_KEY",
                                help="Require `Authorization: Bearer KEY` on /v1 routes."),
    served_model_name: list[str] = typer.Option(None, help="Name(s) clients use as `model` (default: MODEL as "
                                                "given): `--served-model-name a b`, as vLLM, or the flag repeated."),
    chat_template: str = typer.Option(None, help="A Jinja chat template (a file, or the template text) "
                                      "for /v1/chat/completions, replacing the tokenizer's own; needed "
                                      "for a model that has none."),
    enable_auto_tool_choice: bool = typer.Option(
        False, "--enable-auto-tool-choice",
        help="Accepted for vLLM launch lines: tool calling is always on here when a chat request sends "
             "`tools` (tool_choice auto, none, required or a named function; docs/serving.md)."),
    tool_call_parser: str = typer.Option("hermes", help="How tool calls are read from the output, as vLLM: hermes "
                                         "(<tool_call>{json}</tool_call>: Qwen2.5 / Qwen3), qwen3_coder "
                                         "(Qwen3-Coder's <function=...> XML), llama3_json (Llama 3.1-3.3's "
                                         "JSON replies), mistral ([TOOL_CALLS]), phi4_mini_json (functools[...]) "
                                         "or pythonic ([f(a=1)]: Llama 3.2 1B/3B)."),
    reasoning_parser: str = typer.Option(
        None, help="Split chat outputs' <think>...</think> into message.reasoning (and reasoning_content) "
                   "and content, as vLLM: qwen3 or deepseek_r1 (default: none, the think text stays in content)."),
    enable_reasoning: bool = typer.Option(
        False, "--enable-reasoning",
        help="Deprecated, does nothing: old vLLM launch lines need it next to --reasoning-parser, which "
             "alone turns reasoning parsing on here (as in current vLLM)."),
    generation_config: str = typer.Option(
        "auto", help="auto: requests that leave temperature / top_p / top_k / min_p / repetition_penalty unset "
                     "get the model's generation_config.json values (vLLM's default); vllm: the API defaults."),
    tokenizer: str = typer.Option(None, help="Tokenizer directory or Hugging Face id (default: MODEL's), as "
                                  "vLLM's --tokenizer."),
    revision: str = typer.Option(None, help="Branch, tag or commit of MODEL when it is a Hugging Face id."),
    tokenizer_revision: str = typer.Option(None, help="Revision of --tokenizer when it is a Hugging Face id."),
    download_dir: str = typer.Option(None, help="Hugging Face cache directory for ids (default: HF_HUB_CACHE, "
                                     "~/.cache/huggingface/hub); HF_TOKEN for gated models, HF_HUB_OFFLINE=1 "
                                     "for the cache alone."),
    max_model_len: int = typer.Option(None, help="Context length cap (default: the model's)."),
    gpu_memory_utilization: float = typer.Option(
        0.85, help="Fraction of GPU memory (0-1] the weights and the KV cache may use; the KV pool is sized "
                   "from it unless --num-kv-blocks is given."),
    num_kv_blocks: int = typer.Option(None, help="KV cache blocks (default: sized from memory)."),
    max_num_seqs: int = typer.Option(256, help="Most requests batched in one step."),
    max_num_batched_tokens: int = typer.Option(8192, help="Token budget per engine step (longer prefills "
                                               "are chunked)."),
    scheduling_policy: str = typer.Option(
        "fcfs", help="fcfs: requests run in arrival order; priority: by each request's `priority` field, lower "
                     "values first (then arrival), the last in that order preempted when KV blocks run out. "
                     "A request's nonzero priority needs priority (vLLM's rule)."),
    tensor_parallel_size: int = typer.Option(
        1, "--tensor-parallel-size", "-tp", help="Accepted for vLLM launch lines at 1 only: turbospec serves "
                                                 "a model on one GPU (start one server per GPU)."),
    trust_remote_code: bool = typer.Option(
        False, "--trust-remote-code", help="Accepted for vLLM launch lines; does nothing: turbospec never "
                                           "runs a checkpoint's own code."),
    block_size: int = typer.Option(16, help="Tokens per KV block."),
    enforce_eager: bool = typer.Option(False, help="Never use CUDA graphs."),
    num_scheduler_steps: int = typer.Option(
        None, help="Decode steps per burst (1-64) when every running request can take one (greedy or "
                   "sampled, seeded or not, penalties, logit bias and min_tokens too; logprobs for at most 8): one launch, no host round "
                   "trip between the steps. Default 8 with CUDA graphs, else 1. A request that arrives during bursts "
                   "waits for up to two of them before its prefill: 1 trades throughput for that latency."),
    allowed_origins: list[str] = typer.Option(["*"], help="CORS origins a browser page may call the API "
                                              "from (repeat; default any, as with vLLM; '' for none)."),
    max_request_bytes: int = typer.Option(4 * 1024 * 1024, help="Largest accepted request body, in bytes (>= 1)."),
    max_logprob_entries: int = typer.Option(
        None, help="Most logprob entries one request may ask for (each token position with logprobs k counts "
                   "k + 1; echo and prompt_logprobs count the prompt, a whole response its max_tokens, every "
                   "choice its own): more is a 400 naming what to lower. About 100 bytes of JSON each. Default: "
                   "the larger of 1048576 and 21 x max_model_len (one choice always fits)."),
    shutdown_timeout: float = typer.Option(10.0, help="Seconds in-flight requests get to finish on shutdown "
                                           "(>= 0; 0 ends them at once)."),
    log_level: str = typer.Option("info", help="uvicorn log level: critical, error, warning, info, debug or trace."),
) -> None:
    """Serve MODEL over an OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions,
    /v1/responses, /v1/models, /health, /metrics)."""
    if port_error(port) is not None:     # before the imports and the model load
        typer.echo(f"turbospec serve: {port_error(port)}", err=True)
        raise typer.Exit(2)
    from turbospec.chat_template import load_chat_template
    from turbospec.config import EngineConfig
    from turbospec.reasoning_parser import check_reasoning_parser
    from turbospec.tool_parser import check_tool_call_parser

    spec = _parse_spec_config(speculative_config)
    if tensor_parallel_size != 1:
        raise typer.BadParameter(f"{tensor_parallel_size}: turbospec serves a model on one GPU; drop the flag "
                                 "(or pass 1), and start one server per GPU for more throughput",
                                 param_hint="--tensor-parallel-size")
    if num_scheduler_steps is not None and not 1 <= num_scheduler_steps <= 64:
        raise typer.BadParameter(f"{num_scheduler_steps} is not in 1-64 (1: no decode bursts)",
                                 param_hint="--num-scheduler-steps")
    if max_logprob_entries is not None and max_logprob_entries < 1:
        raise typer.BadParameter(f"{max_logprob_entries} must be at least 1", param_hint="--max-logprob-entries")
    if log_level.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"{log_level!r}: use one of {', '.join(LOG_LEVELS)}", param_hint="--log-level")
    log_level = log_level.lower()
    if reasoning_parser is not None:
        try:
            check_reasoning_parser(reasoning_parser)
        except ValueError as e:
            typer.echo(f"turbospec serve: --reasoning-parser: {e}", err=True)
            raise typer.Exit(2)
    elif enable_reasoning:
        typer.echo("turbospec serve: --enable-reasoning does nothing without --reasoning-parser "
                   "(qwen3 or deepseek_r1); serving without reasoning parsing", err=True)
    try:
        check_tool_call_parser(tool_call_parser)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--tool-call-parser")
    try:
        template = load_chat_template(chat_template, "--chat-template") if chat_template is not None else None
    except (OSError, ValueError) as e:
        raise typer.BadParameter(str(e), param_hint="--chat-template")
    names = list(served_model_name or []) or [model]
    bad = flag_error(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                     num_kv_blocks=num_kv_blocks, max_model_len=max_model_len, quantization=quantization,
                     max_request_bytes=max_request_bytes, shutdown_timeout=shutdown_timeout)
    if bad is not None:
        typer.echo(f"turbospec serve: {bad}", err=True)
        raise typer.Exit(2)
    try:
        engine_config = EngineConfig(block_size=block_size, num_kv_blocks=num_kv_blocks,
                                     gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs,
                                     max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                                     enforce_eager=enforce_eager, num_scheduler_steps=num_scheduler_steps,
                                     generation_config=generation_config, scheduling_policy=scheduling_policy)
        engine_config.validate()
    except ValueError as e:
        typer.echo(f"turbospec serve: {as_serve_flags(str(e), SERVE_FLAGS, dtype)}", err=True)
        raise typer.Exit(2)
    try:
        sockets = listen_sockets(host, port)      # held from before a model that may take minutes to load
    except ListenError as e:
        typer.echo(f"turbospec serve: {e}", err=True)
        raise typer.Exit(2)
    try:
        _load_and_serve(sockets, model=model, spec=spec, host=host, device=device, dtype=dtype,
                        quantization=quantization, api_key=api_key, names=names, template=template,
                        reasoning_parser=reasoning_parser, tool_call_parser=tool_call_parser,
                        generation_config=generation_config, tokenizer=tokenizer, revision=revision,
                        tokenizer_revision=tokenizer_revision, download_dir=download_dir,
                        engine_config=engine_config, allowed_origins=allowed_origins,
                        max_request_bytes=max_request_bytes, max_logprob_entries=max_logprob_entries,
                        shutdown_timeout=shutdown_timeout, log_level=log_level)
    finally:
        for sock in sockets:                      # uvicorn closes them on shutdown; not on a failed start
            sock.close()


def _load_and_serve(sockets, *, model, spec, host, device, dtype, quantization, api_key, names, template,
                    reasoning_parser, tool_call_parser, generation_config, tokenizer, revision,
                    tokenizer_revision, download_dir, engine_config, allowed_origins, max_request_bytes,
                    max_logprob_entries, shutdown_timeout, log_level) -> None:
    import uvicorn

    from turbospec.generation_defaults import read_sampling_defaults
    from turbospec.serve.app import build_app
    from turbospec.serve.shutdown import GracefulServer, graceful_timeout
    from turbospec.serve.startup import build_engine, dtype_note, install_chat_template, print_cold_start
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        from turbospec.hub import resolve_model
        from turbospec.spec.factory import check_speculative_config
        if spec is not None:
            check_speculative_config(spec)                 # a typo: before any download or load
        model_dir = resolve_model(model, revision=revision, download_dir=download_dir)   # an id: the Hub cache
        if tokenizer is not None:
            tokenizer = resolve_model(tokenizer, "tokenizer", revision=tokenizer_revision,
                                      download_dir=download_dir, files="tokenizer")
        engine, cold = build_engine(model_dir, device=device, dtype=dtype, speculative_config=spec,
                                    engine_config=engine_config, quantization=quantization, tokenizer=tokenizer,
                                    download_dir=download_dir)
        if template is not None:
            install_chat_template(engine, template)
        sampling_defaults = read_sampling_defaults(model_dir, generation_config)
    except ValueError as e:
        typer.echo(f"turbospec serve: cannot start: {as_serve_flags(str(e), SERVE_FLAGS, dtype)}", err=True)
        raise typer.Exit(2)
    print_cold_start(model, str(getattr(engine, "device", device)), cold, spec, dtype_note(engine, dtype))
    if sampling_defaults:
        print(f"turbospec serve: requests that leave them unset get the model's generation_config.json sampling "
              f"defaults {sampling_defaults} (--generation-config vllm: the API defaults)", flush=True)
    app = build_app(engine, names, api_key, max_body_bytes=max_request_bytes,
                    shutdown_timeout_s=shutdown_timeout,
                    allowed_origins=[o for o in allowed_origins or [] if o.strip()],
                    reasoning_parser=reasoning_parser, sampling_defaults=sampling_defaults,
                    model_root=model, tool_call_parser=tool_call_parser,          # /v1/models' root: MODEL as given (an id, not its cache path)
                    max_logprob_entries=max_logprob_entries)
    config = uvicorn.Config(app, host=host, port=sockets[0].getsockname()[1], log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=graceful_timeout(shutdown_timeout),
                            access_log=log_level == "debug")
    server = GracefulServer(config, app.state.engine, shutdown_timeout)
    split_tags = reasoning_parser and not app.state.think_gate
    announce_when_serving(   # once uvicorn serves, with the port bound (the kernel's pick for --port 0)
        server, f"turbospec serve: listening on {listen_url(host, sockets[0])} as {', '.join(names)}"
                f"{' (API key required)' if api_key else ''}"
                f"{f'; reasoning parser {reasoning_parser}' if reasoning_parser else ''}"
                f"{f'; tool call parser {tool_call_parser}' if tool_call_parser != 'hermes' else ''}"
                f"{' (the tokenizer splits <think> / </think>: structured outputs hold from the first token)' if split_tags else ''}")
    gc.collect()          # the start-up heap (model, tokenizer, kernels), never garbage, kept out of the
    gc.freeze()           # collector's full passes, which otherwise walk it mid-request (as vLLM does)
    server.run(sockets=sockets)
    if not server.started:            # e.g. the app's start-up failed: uvicorn logged why
        sys.exit(1)
    print("turbospec serve: shut down cleanly", flush=True)


SERVE_FLAGS = set(inspect.signature(serve).parameters) - {"model"}     # num_kv_blocks -> --num-kv-blocks, ...


def register(app: typer.Typer) -> None:
    from turbospec.serve.cli_args import ServeCommand
    app.command("serve", cls=ServeCommand)(serve)
