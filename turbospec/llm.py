"""`LLM`: the offline entry point, vLLM's shape — `LLM(model=...).generate(prompts, params)` and
`LLM.chat(messages, params)`."""
from __future__ import annotations

import itertools
import os
from dataclasses import replace
from typing import Any, Callable

from turbospec.config import EngineConfig
from turbospec.engine.llm_engine import LLMEngine
from turbospec.engine.request_input import BatchRefused, NewRequest
from turbospec.generation_defaults import read_sampling_defaults
from turbospec.hub import resolve_model
from turbospec.llm_outputs import finalize
from turbospec.outputs import GenerationInterrupted, RequestOutput
from turbospec.sampling_params import SamplingParams
from turbospec.vllm_args import check_call_args, check_llm_kwargs, normalize_prompts, override_generation_defaults


class LLM:
    def __init__(self, model: str | os.PathLike, device: str | None = None, dtype: str | None = "auto",
                 quantization: str | None = None, speculative_config: dict[str, Any] | None = None,
                 tokenizer: str | None = None, block_size: int = 16, num_kv_blocks: int | None = None,
                 gpu_memory_utilization: float = 0.85, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 8192, max_model_len: int | None = None,
                 enforce_eager: bool = False, num_scheduler_steps: int | None = None,
                 seed: int | None = 0, generation_config: str = "auto", revision: str | None = None,
                 tokenizer_revision: str | None = None, download_dir: str | None = None,
                 max_logprobs: int | None = None, override_generation_config: dict[str, Any] | None = None,
                 scheduling_policy: str = "fcfs", **vllm_kwargs):
        """`model` / `tokenizer`: a local directory or a Hugging Face id (fetched through the Hub
        cache, vLLM's `revision`, `tokenizer_revision` and `download_dir`: turbospec/hub.py).
        `dtype` "auto" (vLLM's default): config.resolve_dtype. `seed` (vLLM's, default 0 as in
        vLLM V1): seeds the random draws of requests without their own SamplingParams.seed, so a
        script's samples repeat from run to run; None: fresh randomness each run.
        `generation_config` (vLLM's): "auto" makes the model's generation_config.json sampling
        settings the defaults of `generate` / `chat` called without SamplingParams
        (`get_default_sampling_params`); "vllm" ignores them; `override_generation_config` (vLLM's)
        sets or overrides them. `max_logprobs` (vLLM's): the most `logprobs` / `prompt_logprobs` a
        request may ask for (None: no cap, vLLM's default is 20; -1: no cap, and a request may
        ask for -1, every token of the vocabulary, as vLLM allows only then). `scheduling_policy`
        (vLLM's): "fcfs", or "priority" for `generate(..., priority=[...])` (lower values first).
        Other vLLM arguments: turbospec/vllm_args.py."""
        import inspect
        known = [p for p in inspect.signature(LLM.__init__).parameters if p not in ("self", "vllm_kwargs")]
        for name, value in check_llm_kwargs(vllm_kwargs, known).items():       # vLLM's names for ours
            if name == "num_kv_blocks" and num_kv_blocks is not None and value != num_kv_blocks:
                raise ValueError(f"num_gpu_blocks_override={value} and num_kv_blocks={num_kv_blocks} disagree: "
                                 "pass one of them")
            num_kv_blocks = value if name == "num_kv_blocks" else num_kv_blocks
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError(f"seed={seed!r} must be an integer (or None)")
        if max_logprobs is not None and (not isinstance(max_logprobs, int) or isinstance(max_logprobs, bool)
                                         or max_logprobs < -1):
            raise ValueError(f"max_logprobs={max_logprobs!r} must be a non-negative integer, or -1 / None for no cap")
        self._max_logprobs = None if max_logprobs == -1 else max_logprobs
        self._all_logprobs = max_logprobs == -1          # vLLM's rule: a request's -1 needs max_logprobs=-1
        model = os.fspath(model) if isinstance(model, os.PathLike) else model          # a pathlib.Path too
        if speculative_config is not None:
            from turbospec.spec.factory import check_speculative_config
            check_speculative_config(speculative_config)              # a typo: before any download or load
        ec = EngineConfig(block_size=block_size, num_kv_blocks=num_kv_blocks,
                          gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                          enforce_eager=enforce_eager, num_scheduler_steps=num_scheduler_steps,
                          generation_config=generation_config, scheduling_policy=scheduling_policy)
        ec.validate()                          # a bad value before the model loads
        model_dir = resolve_model(model, revision=revision, download_dir=download_dir)
        self._sampling_defaults = override_generation_defaults(read_sampling_defaults(model_dir, generation_config),
                                                               override_generation_config)
        self.model = model
        self.llm_engine = LLMEngine.from_config(model_dir, device=device, dtype=dtype,
                                                speculative_config=speculative_config,
                                                engine_config=ec, quantization=quantization,
                                                tokenizer=tokenizer, tokenizer_revision=tokenizer_revision,
                                                download_dir=download_dir)
        if seed is not None:
            import torch
            torch.manual_seed(seed)            # after start-up, which may draw samples itself
        self._ids = itertools.count()

    def get_tokenizer(self):
        return self.llm_engine.tokenizer

    def reset_prefix_cache(self, device=None) -> bool:
        """vLLM's: turbospec keeps no prefix cache, so there is nothing to reset (True: done)."""
        return True

    def get_default_sampling_params(self) -> SamplingParams:
        """What `generate` / `chat` use without SamplingParams: the model's generation_config.json
        sampling settings (generation_config="auto"), else SamplingParams()'s defaults."""
        return SamplingParams(**self._sampling_defaults)

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool | Callable = False, *, lora_request=None, priority: list[int] | None = None,
                 tokenization_kwargs: dict | None = None) -> list[RequestOutput]:
        """One RequestOutput per prompt, in prompt order, with `n` completions (index 0..n-1: one
        engine sequence each, sample j seeded with seed + j). Every prompt is validated before any
        work starts, so a bad one fails the call without running the others or moving a counter
        (a ValueError naming it, `prompt[3]: ...`, among several prompts; prompt + max_tokens
        past the context is not an error: that request stops at the context with finish_reason
        "length", as vLLM's LLM does; a min_tokens the context cannot hold still is); if the call is
        interrupted (Ctrl-C, an error), its requests are aborted and their KV cache freed. Text
        prompts get the tokenizer's special tokens (a Llama BOS), as transformers' and vLLM's do.
        `priority` (vLLM's): one integer per prompt, lower values scheduled first; other than zeros
        only with LLM(scheduling_policy="priority"). vLLM's `lora_request` and `tokenization_kwargs`
        are accepted at their neutral values (None or a None per prompt; None or {}). `use_tqdm`: True
        for tqdm's bar, or vLLM's callable that makes one (called as tqdm is: total=, desc=, unit=)."""
        check_call_args(lora_request, tokenization_kwargs)
        return self._generate(prompts, sampling_params, use_tqdm, add_special_tokens=True, priority=priority)

    def _generate(self, prompts, sampling_params, use_tqdm, add_special_tokens: bool,
                  label: str = "prompt[{}]", priority: list[int] | None = None) -> list[RequestOutput]:
        """`label`: how a refusal names the prompt it is about, when there are several."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        if not hasattr(prompts, "__iter__"):
            raise ValueError(f"prompts must be a string, a {{'prompt_token_ids': [...]}} dict or a list of them, "
                             f"not {type(prompts).__name__}")
        prompts, texts = normalize_prompts(list(prompts), label)
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params = list(sampling_params) if isinstance(sampling_params, (list, tuple)) \
            else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams: pass one, "
                             "or one per prompt")
        priority = [0] * len(prompts) if priority is None else list(priority)
        if len(priority) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(priority)} priorities: pass one per prompt "
                             "(or none)")
        for p in params:
            if not isinstance(p, SamplingParams):
                raise ValueError(f"sampling_params must be a SamplingParams (or a list of them), not "
                                 f"{type(p).__name__}: e.g. SamplingParams(temperature=0.0, max_tokens=64)")
        checked = {id(p): replace(p) for p in params}   # validated again (a field set after construction
        params = [checked[id(p)] for p in params]       # too), once per distinct object: [sp] * 10k is one
        for p in checked.values():
            self._resolve_logprobs(p)
        eng = self.llm_engine
        groups = [[f"gen-{next(self._ids)}" for _ in range(p.n)] for p in params]     # per prompt: its n ids
        ids = [rid for g in groups for rid in g]
        finals: dict[str, RequestOutput] = {}
        latest: dict[str, RequestOutput] = {}          # each request's output so far (steps return them whole)
        bar = None
        try:
            try:                               # all or none: a refusal takes nothing, moves no counter
                eng.add_requests([NewRequest(rid, prompt, p.for_sample(j), add_special_tokens, cap_to_context=True,
                                             priority=pr)
                                  for g, prompt, p, pr in zip(groups, prompts, params, priority)
                                  for j, rid in enumerate(g)])
            except BatchRefused as e:
                if len(prompts) == 1:
                    raise
                owner = next(k for k, g in enumerate(groups) if ids[e.index] in g)
                raise ValueError(f"{label.format(owner)}: {e}") from e
            if use_tqdm:
                from tqdm.auto import tqdm
                bar = (use_tqdm if callable(use_tqdm) else tqdm)(total=len(ids), desc="generate", unit="req")
            while len(finals) < len(ids):
                outs = eng.step()
                if not outs and not eng.scheduler.running:     # nothing can be scheduled: never spin
                    raise RuntimeError(f"{len(ids) - len(finals)} requests cannot be scheduled (KV pool "
                                       f"of {eng.block_manager.num_usable_blocks} blocks): raise num_kv_blocks")
                for out in outs:
                    latest[out.request_id] = out
                    if out.finished:
                        finals[out.request_id] = out
                        if bar is not None:
                            bar.update(1)
        except KeyboardInterrupt:
            raise GenerationInterrupted(self._per_prompt(groups, params, texts, latest)) from None
        finally:
            for rid in ids:                    # a failed or interrupted call leaves nothing behind
                if rid not in finals:
                    eng.abort_request(rid)
            if bar is not None:
                bar.close()
        return self._per_prompt(groups, params, texts, finals)

    def _per_prompt(self, groups: list[list[str]], params: list[SamplingParams], texts: list,
                    latest: dict[str, RequestOutput]) -> list[RequestOutput | None]:
        """Per prompt, its output as `generate` returns it (vLLM's conventions applied), from each
        sample's latest output: the samples that have one (each at its own index; all of them once
        finished); None where none has yet (an interrupted call)."""
        tokenizer, out = self.get_tokenizer(), []
        for g, p, text in zip(groups, params, texts):
            got = [(j, latest[r]) for j, r in enumerate(g) if r in latest]
            if not got:
                out.append(None)
                continue
            o = finalize([o for _, o in got], p, tokenizer, [j for j, _ in got])
            out.append(o if text is None else replace(o, prompt=text))
        return out

    def _resolve_logprobs(self, p: SamplingParams) -> None:
        """vLLM's logprobs / prompt_logprobs -1 (every token of the vocabulary) as the vocabulary
        size, and LLM(max_logprobs=...)'s cap (vLLM's refusal, with what to do)."""
        for name in ("logprobs", "prompt_logprobs"):
            k = getattr(p, name)
            if k == -1:
                k = self.llm_engine.model_config.vocab_size
                if not self._all_logprobs:
                    raise ValueError(f"{name}=-1 asks for all {k:,} tokens' logprobs at every position (a dict of "
                                     f"{k:,} entries per token): construct the LLM with max_logprobs=-1 to allow it, "
                                     "as vLLM requires, or ask for a number of top logprobs")
                setattr(p, name, k)
            if k is not None and self._max_logprobs is not None and k > self._max_logprobs:
                raise ValueError(f"{name}={k} is more than LLM(max_logprobs={self._max_logprobs}) allows: ask for "
                                 "fewer, or construct the LLM with a larger max_logprobs (-1: no cap)")

    def chat(self, messages, sampling_params: SamplingParams | list[SamplingParams] | None = None,
             use_tqdm: bool = False, chat_template: str | None = None, add_generation_prompt: bool = True,
             continue_final_message: bool = False,
             chat_template_kwargs: dict[str, Any] | None = None,
             tools: list[dict[str, Any]] | None = None, *, lora_request=None,
             chat_template_content_format: str = "auto", mm_processor_kwargs: dict | None = None,
             tokenization_kwargs: dict | None = None) -> list[RequestOutput]:
        """vLLM's `LLM.chat`: one conversation (a list of {"role", "content"} messages) or a list
        of them, rendered with the tokenizer's chat template (or `chat_template`, the Jinja text
        or a file), then generated as `generate` does. One RequestOutput per conversation.
        `tools` (OpenAI's function schemas) are rendered by the template, which must read them;
        the output is not parsed: `turbospec.tool_parser.extract_tool_calls(text, parser)` does
        that (a --tool-call-parser name: "hermes", "qwen3_coder", "llama3_json", "mistral",
        "phi4_mini_json" or "pythonic").
        Text content parts reach the template joined into one string (vLLM's
        `chat_template_content_format="string"`, which "auto" picks for text-only templates)."""
        check_call_args(lora_request, tokenization_kwargs)
        if chat_template_content_format not in ("auto", "string"):
            raise ValueError(f"chat_template_content_format={chat_template_content_format!r} is not supported: "
                             "turbospec renders message content as one string (text parts joined); use "
                             "'auto' or 'string'")
        if mm_processor_kwargs:
            raise ValueError("mm_processor_kwargs is not supported: turbospec serves text-only models")
        prompts = _render_conversations(self.get_tokenizer(), self.model, messages, chat_template,
                                        add_generation_prompt, continue_final_message, chat_template_kwargs,
                                        tools)
        # the template renders the BOS itself: its text is tokenized without special tokens (vLLM)
        return self._generate(prompts, sampling_params, use_tqdm, add_special_tokens=False, label="conversation {}")

    def get_metrics(self) -> dict[str, Any]:
        return self.llm_engine.get_metrics()


def _render_conversations(tokenizer, model: str, messages, chat_template: str | None,
                          add_generation_prompt: bool, continue_final_message: bool,
                          chat_template_kwargs: dict[str, Any] | None,
                          tools: list[dict[str, Any]] | None = None) -> list[str]:
    """Each conversation's prompt text, rendered by the chat template (turbospec/chat_template.py:
    the server's rules). ValueError, with the fix, for a model without a tokenizer or template, a
    malformed conversation or tools, tools with a template that ignores them, or a template error."""
    from turbospec.chat_template import (check_tool_call_ids, load_chat_template, message_for_template, render_chat,
                                         template_kwargs)
    from turbospec.tools import check_tools, template_uses_tools
    if tokenizer is None:
        raise ValueError(f"{model!r} has no tokenizer, so it has no chat template: add tokenizer files "
                         "(or pass LLM(tokenizer=DIR)), or use LLM.generate with token-id prompts")
    template = load_chat_template(chat_template) if chat_template is not None else \
        getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError(f"the tokenizer of {model!r} has no chat template (tokenizer_config.json sets no "
                         "`chat_template`): pass LLM.chat(..., chat_template=JINJA_TEXT_OR_FILE), or use "
                         "LLM.generate with a plain text prompt")
    tools = check_tools(tools)
    if tools and not template_uses_tools(template):
        raise ValueError("tools were given but the chat template does not render them (it never reads the "
                         "`tools` variable), so the model would not see them: pass "
                         "LLM.chat(..., chat_template=...) with a template that renders tools (the Qwen2.5 / "
                         "Qwen3 templates do), or leave tools out")
    if isinstance(messages, (list, tuple)) and messages and isinstance(messages[0], dict):
        conversations = [messages]
    elif isinstance(messages, (list, tuple)) and messages:
        conversations = list(messages)
    else:
        raise ValueError("messages must be a conversation (a non-empty list of {'role': ..., 'content': ...} "
                         "dicts) or a list of conversations")
    prompts = []
    for i, conv in enumerate(conversations):
        conv = conv if isinstance(conv, (list, tuple)) else [conv]      # not a list: a bad message
        if not conv:
            raise ValueError(f"conversation {i} is empty: pass at least one message")
        try:
            msgs = [message_for_template(m) for m in conv]
            check_tool_call_ids(msgs, template)
            kwargs = template_kwargs(msgs, add_generation_prompt, continue_final_message, chat_template_kwargs,
                                     tools)
            prompts.append(render_chat(tokenizer, msgs, kwargs, template))
        except ValueError as e:
            raise ValueError(f"conversation {i}: {e}") from e
    return prompts
