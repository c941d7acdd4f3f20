"""Cold start, measured: build the engine, warm it up with one tiny request, print where the time
went (weights, engine init incl. graph capture, warm-up) and how big the KV cache came out."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

from turbospec.sampling_params import SamplingParams


@dataclass
class ColdStart:
    total_s: float = 0.0
    weights_gb: float | None = None
    weights_s: float | None = None
    init_s: float | None = None            # from_config minus weight loading: tokenizer, drafter, KV, graphs
    warmup_s: float | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    kv_tokens: int | None = None
    max_model_len: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def _reserved(self) -> str:
        """The null block (block_manager.NULL_BLOCK: padding writes there) is in the pool, not in its tokens."""
        if None in (self.kv_blocks, self.kv_tokens, self.block_size):
            return ""
        reserved = self.kv_blocks - self.kv_tokens // self.block_size
        return f" ({self.kv_blocks - reserved} usable, {reserved} reserved for padding)" if reserved else ""

    def lines(self) -> list[str]:
        def f(x, fmt):
            return "?" if x is None else format(x, fmt)
        out = [f"  weights loaded      {f(self.weights_gb, '.3f')} GB in {f(self.weights_s, '.2f')} s",
               f"  engine init         {f(self.init_s, '.2f')} s (tokenizer, drafter, KV allocation, "
               "graph capture, kernel warm-up)",
               f"  warm-up request     {f(self.warmup_s, '.2f')} s (one 2-token request)",
               f"  KV cache            {f(self.kv_blocks, 'd')} blocks{self._reserved()} x {f(self.block_size, 'd')} "
               f"tokens = {f(self.kv_tokens, 'd')} tokens; max_model_len {f(self.max_model_len, 'd')}"]
        out += [f"  {_LABELS.get(k, k):<19} {v}" for k, v in self.extra.items()]
        out.append(f"  total               {self.total_s:.2f} s")
        return out


# engine.startup's keys as the cold start prints them (the seconds are parts of engine init)
_LABELS = {"graph_capture_seconds": "  graph capture", "decode_burst_steps": "  decode burst", "warmup_seconds":
           "  kernel warm-up", "num_cuda_graphs": "  CUDA graphs"}


def build_engine(model: str, *, device: str | None, dtype: str | None,
                 speculative_config: dict | None, engine_config,
                 quantization: str | None = None, tokenizer: str | None = None,
                 download_dir: str | None = None) -> tuple[Any, ColdStart]:
    """`model` / `tokenizer`: local directories (hub.resolve_model); `tokenizer` other than the
    model's (vLLM's --tokenizer); `download_dir`: the Hub cache for the drafter's id."""
    from turbospec.engine.llm_engine import LLMEngine

    cs = ColdStart()
    t0 = time.perf_counter()
    engine = LLMEngine.from_config(model, device=device, dtype=dtype, speculative_config=speculative_config,
                                   engine_config=engine_config, quantization=quantization, tokenizer=tokenizer,
                                   download_dir=download_dir)
    built = time.perf_counter() - t0
    info = dict(getattr(engine, "startup", {}) or {})
    cs.weights_gb = info.pop("weights_gb", None)
    cs.weights_s = info.pop("weights_seconds", None)
    cs.kv_blocks = info.pop("kv_blocks", None)
    cs.kv_tokens = info.pop("kv_tokens", None)
    cs.init_s = built - (cs.weights_s or 0.0)
    cs.block_size = getattr(getattr(engine, "engine_config", None), "block_size", None)
    cs.max_model_len = getattr(engine, "max_model_len", None)
    cs.extra = {k: (f"{v:.2f} s" if isinstance(v, float) and k.endswith("seconds") else v)
                for k, v in info.items()}
    t1 = time.perf_counter()
    warm_up(engine)
    cs.warmup_s = time.perf_counter() - t1
    cs.total_s = time.perf_counter() - t0
    return engine, cs


def warm_up(engine, max_steps: int = 64) -> None:
    """One 2-token greedy request on token ids (works without a tokenizer), then check it freed
    everything: a leak at start-up is a bug worth refusing to serve with."""
    vocab = engine.model_config.vocab_size
    ids = [min(i, vocab - 1) for i in (1, 2, 3, 4)]
    engine.add_request("turbospec-warmup", {"prompt_token_ids": ids},
                       SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True))
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        engine.step()
    else:
        engine.abort_request("turbospec-warmup")
        raise RuntimeError(f"the warm-up request did not finish within {max_steps} steps")
    stats = engine.get_stats()
    if stats.num_free_blocks != stats.num_total_blocks:
        raise RuntimeError(f"the warm-up request leaked KV blocks ({stats.num_free_blocks} of "
                           f"{stats.num_total_blocks} free after it finished)")


def install_chat_template(engine, template: str) -> None:
    """`--chat-template`: replace the tokenizer's template, after checking that it renders a
    one-message conversation (a broken template is refused at start-up, not on every request)."""
    from turbospec.chat_template import render_chat

    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        raise ValueError("--chat-template needs a tokenizer, and the model directory has none")
    tokenizer.chat_template = template
    try:
        render_chat(tokenizer, [{"role": "user", "content": "hi"}])
    except ValueError as e:
        raise ValueError(f"--chat-template does not render a one-message conversation: {e}") from None


def dtype_note(engine, requested: str | None) -> str:
    """The dtype the weights run in, and why when the server chose it (`--dtype auto`, the default)."""
    chosen = str(getattr(engine, "dtype", "?")).removeprefix("torch.")
    quant = getattr(getattr(engine, "model", None), "quant_note", None)
    chosen += f"; {quant}" if quant else ""
    if requested not in (None, "auto"):
        return chosen
    stored = str(getattr(getattr(engine, "model_config", None), "dtype", "?")).removeprefix("torch.")
    if getattr(getattr(engine, "device", None), "type", None) == "cpu":
        why = f"float32 on CPU; the checkpoint is {stored}"
    else:
        why = f"the checkpoint's {stored}" + (", run in bfloat16" if stored == "float32" else "")
    return f"{chosen} (--dtype auto: {why})"


def print_cold_start(model: str, device: str, cs: ColdStart, speculative: dict | None, dtype: str = "?") -> None:
    spec = f", speculative {speculative.get('method')}" if speculative else ""
    print(f"turbospec serve: {model} on {device}, dtype {dtype}{spec} ready; cold start:", file=sys.stdout)
    for line in cs.lines():
        print(line, file=sys.stdout)
    sys.stdout.flush()
