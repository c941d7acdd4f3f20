"""vLLM's arguments that turbospec's `LLM` does not implement — of `LLM(...)`, of `generate` /
`chat`, and the keys of its prompt dicts: accepted where their value cannot change the output (a
script or wrapper that passes them runs unchanged), refused by name with what to do otherwise.
README "Python API" lists them."""
from __future__ import annotations

from typing import Any

from turbospec.structured_outputs import BACKENDS, check_backend

# vLLM's LLM(...) arguments: the values accepted (None: any value); anything else is refused by name.
LLM_ARGS: dict[str, tuple | None] = {
    "tensor_parallel_size": (1,), "pipeline_parallel_size": (1,), "data_parallel_size": (1,),
    "trust_remote_code": (False, True),     # turbospec never runs a checkpoint's own code
    "tokenizer_mode": ("auto",), "skip_tokenizer_init": (False,),
    "kv_cache_dtype": ("auto",), "calculate_kv_scales": (False,),
    # no prefix cache: every prompt is prefilled in full, which gives the tokens a cache would
    "enable_prefix_caching": (None, False, True),
    "disable_log_stats": (False, True),
    # prefills over max_num_batched_tokens are always chunked, and a preempted request recomputes
    # (no CPU swap); compilation, CUDA-graph sizes, async scheduling and the executor of one GPU:
    # these change speed and scheduling only, never the tokens
    "enable_chunked_prefill": None, "swap_space": None, "disable_custom_all_reduce": None,
    "max_seq_len_to_capture": None, "max_context_len_to_capture": None, "compilation_config": None,
    "cuda_graph_sizes": None, "max_cudagraph_capture_size": None, "async_scheduling": None,
    "disable_async_output_proc": None, "use_v2_block_manager": None, "distributed_executor_backend": None,
    "disable_cascade_attn": None, "tokenizer_pool_size": None, "served_model_name": None,
    "enable_expert_parallel": (False,), "worker_cls": ("auto",), "worker_extension_cls": (None, ""),
    "enable_sleep_mode": (False,),
    "cpu_offload_gb": (0,), "load_format": ("auto", "safetensors"), "model_impl": ("auto", "vllm"),
    "hf_overrides": (None, {}), "kv_cache_memory_bytes": (None,),
    "task": ("auto", "generate"), "runner": ("auto", "generate"),
    # turbospec's logprobs are the raw model's (vLLM's default mode)
    "logprobs_mode": ("raw_logprobs",),
    # LoRA: none here; the adapter limits are read only with enable_lora
    "enable_lora": (False,), "max_lora_rank": None, "max_loras": None, "max_cpu_loras": None,
    # text-only models: there is no image or audio for these to act on (a prompt's multi_modal_data is refused)
    "limit_mm_per_prompt": None, "mm_processor_kwargs": (None, {}), "mm_processor_cache_gb": None,
    "allowed_local_media_path": None, "allowed_media_domains": None,
    # the grammar backend: llguidance; the constraint, not its backend, decides what is allowed
    "guided_decoding_backend": BACKENDS, "structured_outputs_config": None,     # checked below
}
# vLLM's name -> turbospec's (the same meaning)
RENAMED = {"num_gpu_blocks_override": "num_kv_blocks"}
HINTS = {"tensor_parallel_size": "turbospec runs a model on one GPU",
         "pipeline_parallel_size": "turbospec runs a model on one GPU",
         "data_parallel_size": "start one server per GPU instead",
         "enable_lora": "merge the adapter into the base weights and load that directory",
         "skip_tokenizer_init": "turbospec loads the tokenizer when the model has one; pass token-id prompts and "
                                "read token_ids if you do not need text",
         "hf_overrides": "edit the checkpoint's config.json (a copy of the directory) instead",
         "logprobs_mode": "turbospec returns the raw model's logprobs, before any logit processing",
         "kv_cache_memory_bytes": "size the KV cache with gpu_memory_utilization or num_kv_blocks",
         "enable_sleep_mode": "turbospec has no sleep / wake_up; delete the LLM to free the GPU",
         "enable_expert_parallel": "turbospec runs a model on one GPU",
         "cpu_offload_gb": "turbospec keeps the weights on the GPU",
         "kv_cache_dtype": "the KV cache is kept in the model's dtype",
         "guided_decoding_backend": "turbospec's structured-output backend is llguidance"}
# vLLM's speculative-decoding arguments before 0.8, now keys of speculative_config
OLD_SPEC_ARGS = {"speculative_model": "model", "num_speculative_tokens": "num_speculative_tokens",
                 "ngram_prompt_lookup_max": "prompt_lookup_max", "ngram_prompt_lookup_min": "prompt_lookup_min",
                 "speculative_draft_tensor_parallel_size": "draft_tensor_parallel_size",
                 "speculative_max_model_len": "max_model_len",
                 "speculative_disable_by_batch_size": "disable_by_batch_size",
                 "spec_decoding_acceptance_method": None, "typical_acceptance_sampler_posterior_threshold": None,
                 "typical_acceptance_sampler_posterior_alpha": None, "disable_logprobs_during_spec_decoding": None,
                 "speculative_disable_mqa_scorer": None, "num_lookahead_slots": None}


def check_llm_kwargs(kwargs: dict[str, Any], known: list[str]) -> dict[str, Any]:
    """Check vLLM's LLM(...) arguments that are not turbospec's own (`known`, for the message);
    returns those that are turbospec's under another name ({turbospec name: value})."""
    renamed: dict[str, Any] = {}
    old_spec = {k: v for k, v in kwargs.items() if k in OLD_SPEC_ARGS}
    if old_spec:
        raise ValueError(_old_spec_message(old_spec))
    for name, value in kwargs.items():
        if name in RENAMED:
            if value is not None:                       # None: vLLM's default, unset
                renamed[RENAMED[name]] = value
            continue
        if name not in LLM_ARGS:
            raise ValueError(f"LLM() got an unknown argument {name!r}: it takes {', '.join(known)}, and vLLM's "
                             f"{', '.join(sorted(LLM_ARGS))} where their value changes nothing here")
        if name == "structured_outputs_config":
            _check_structured_outputs_config(value)
            continue
        allowed = LLM_ARGS[name]
        if allowed is not None and not any(value == v and type(value) is type(v) for v in allowed):
            hint = HINTS.get(name, "turbospec does not implement it")
            raise ValueError(f"LLM({name}={value!r}) is not supported ({hint}); accepted: "
                             f"{' or '.join(repr(v) for v in allowed)}")
    return renamed


def _check_structured_outputs_config(value) -> None:
    """vLLM's StructuredOutputsConfig as a dict: its backend (any that vLLM names: llguidance serves
    them all); a key that changes what is allowed is refused."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError(f"LLM(structured_outputs_config={value!r}): pass a dict such as {{'backend': 'auto'}} "
                         "(turbospec reads its backend only)")
    for key, v in value.items():
        if key == "backend":
            check_backend(v, "structured_outputs_config['backend']")
        elif key not in ("reasoning_parser", "enable_in_reasoning") or v not in (None, "", False):
            raise ValueError(f"LLM(structured_outputs_config) key {key!r}={v!r} is not supported: set "
                             "disable_any_whitespace / disable_additional_properties per request on "
                             "StructuredOutputsParams, and leave the rest out")


def _old_spec_message(old: dict[str, Any]) -> str:
    spec: dict[str, Any] = {}
    for name, value in old.items():
        key = OLD_SPEC_ARGS[name]
        if key == "model" and str(value).strip("[]") == "ngram":
            spec["method"] = "ngram"
        elif key is not None:
            spec[key] = value
    given = ", ".join(f"{k}={v!r}" for k, v in old.items())
    return (f"LLM({given}) is vLLM's spelling before 0.8: pass speculative_config={spec!r} (method 'ngram', "
            "'draft_model', 'eagle3', 'dflash' or 'mtp'; README 'Speculative methods')")


def check_call_args(lora_request, tokenization_kwargs=None) -> None:
    """vLLM's per-call `lora_request` / `tokenization_kwargs`: turbospec has no LoRA adapters and
    tokenizes as vLLM's defaults do, so only their neutral values pass (None, or one None per prompt;
    None or {}: a wrapper forwarding them runs unchanged). `priority` is implemented (LLM.generate)."""
    if tokenization_kwargs:
        raise ValueError(f"tokenization_kwargs={tokenization_kwargs!r} is not supported: turbospec tokenizes with "
                         "the tokenizer's defaults (text prompts get its special tokens); for anything else tokenize "
                         "yourself and pass {'prompt_token_ids': [...]}")
    if isinstance(lora_request, (list, tuple)) and all(r is None for r in lora_request):
        lora_request = None
    if lora_request is not None:
        raise ValueError("lora_request is not supported: turbospec serves no LoRA adapters; merge the adapter "
                         "into the base weights (peft's merge_and_unload, then save_pretrained) and load that "
                         "directory")


# vLLM's prompt-dict keys (TextPrompt / TokensPrompt) besides prompt and prompt_token_ids: the
# values accepted (None: any). cache_salt only scopes prefix-cache sharing (there is none here).
PROMPT_KEYS: dict[str, tuple | None] = {"multi_modal_data": (None, {}), "mm_processor_kwargs": (None, {}),
                                        "multi_modal_uuids": (None, {}), "cache_salt": None,
                                        "token_type_ids": (None,)}


def normalize_prompt(prompt):
    """(what the engine takes, the text to report as RequestOutput.prompt or None). A dict prompt
    (vLLM's TextPrompt / TokensPrompt) has its keys checked: multimodal data and prompt embeddings
    are refused (text-only models), an unknown key is refused by name; TokensPrompt's optional
    `prompt` text is reported as the output's prompt, as vLLM does. Other prompts pass unchanged
    (the engine checks them)."""
    if not isinstance(prompt, dict) or not {"prompt", "prompt_token_ids"} & set(prompt):
        return prompt, None                # the engine says what a prompt needs
    if "prompt_embeds" in prompt:
        raise ValueError("prompt_embeds (vLLM's EmbedsPrompt) is not supported: pass the text or its token ids "
                         "({'prompt_token_ids': [...]})")
    for key, value in prompt.items():
        if key in ("prompt", "prompt_token_ids"):
            continue
        if key not in PROMPT_KEYS:
            raise ValueError(f"a dict prompt has no key {key!r}: it takes 'prompt' (text) or 'prompt_token_ids' "
                             f"(and vLLM's {', '.join(PROMPT_KEYS)} where they change nothing here)")
        allowed = PROMPT_KEYS[key]
        if allowed is not None and not any(value == v and type(value) is type(v) for v in allowed):
            raise ValueError(f"a prompt's {key}={value!r} is not supported: turbospec serves text-only models; "
                             f"leave {key} out")
    if "prompt_token_ids" in prompt:
        text = prompt.get("prompt")
        if text is not None and not isinstance(text, str):
            raise ValueError(f"a TokensPrompt's 'prompt' (the text of its ids) must be a string, not "
                             f"{type(text).__name__}")
        return {"prompt_token_ids": prompt["prompt_token_ids"]}, text
    if isinstance(prompt.get("prompt"), str):
        return prompt["prompt"], None
    return prompt, None


def normalize_prompts(prompts: list, label: str) -> tuple[list, list[str | None]]:
    """The prompts as the engine takes them, and the text each TokensPrompt names (vllm_args)."""
    out = []
    for i, prompt in enumerate(prompts):
        try:
            out.append(normalize_prompt(prompt))
        except ValueError as e:
            if len(prompts) == 1:
                raise
            raise ValueError(f"{label.format(i)}: {e}") from None
    return [p for p, _ in out], [t for _, t in out]


def override_generation_defaults(defaults: dict[str, Any], override: dict[str, Any] | None) -> dict[str, Any]:
    """vLLM's override_generation_config: generation_config.json's sampling keys (max_new_tokens
    as max_tokens), set over the file's (generation_config "auto") or alone ("vllm")."""
    from turbospec.generation_defaults import KEYS
    from turbospec.sampling_params import SamplingParams
    if not override:
        return defaults
    if not isinstance(override, dict):
        raise ValueError(f"override_generation_config={override!r} must be a dict such as {{'temperature': 0.6}}")
    unknown = sorted(set(override) - set(KEYS) - {"max_new_tokens"})
    if unknown:
        raise ValueError(f"override_generation_config key {unknown[0]!r} is not read: it takes "
                         f"{', '.join(KEYS)} and max_new_tokens")
    merged = {**defaults, **{("max_tokens" if k == "max_new_tokens" else k): v for k, v in override.items()}}
    try:
        SamplingParams(**merged)
    except ValueError as e:
        raise ValueError(f"override_generation_config={override!r}: {e}") from None
    return merged
