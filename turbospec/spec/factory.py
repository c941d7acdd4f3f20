"""`speculative_config` (vLLM's keys) → a Proposer."""
from __future__ import annotations

import difflib
from typing import Any

import torch

from turbospec.config import ModelConfig

METHODS = ("ngram", "draft_model", "eagle3", "dflash", "mtp")
MAX_K = 128                 # drafts per step: acceptance rarely passes ~10; more only shrinks the context
# the keys each method reads (plus the common ones); anything else is a typo or a vLLM option not
# implemented here, refused by name rather than ignored
COMMON_KEYS = ("method", "model", "num_speculative_tokens", "draft_length", "bitwise_exact")
# `revision`: of `model` when it is a Hugging Face id (turbospec/hub.py)
METHOD_KEYS = {"ngram": ("prompt_lookup_min", "prompt_lookup_max"), "draft_model": ("revision",),
               "eagle3": ("tree", "revision"), "dflash": ("revision",), "mtp": ("tree", "revision")}
# vLLM keys a copied config may carry: accepted at these values (they change nothing here; None as
# the accepted set: any value). disable_by_batch_size turns drafting off above a batch size in vLLM:
# speculation is lossless, so that changes speed only (turbospec's own rule: draft_length "auto").
VLLM_NEUTRAL = {"draft_tensor_parallel_size": (1, None), "quantization": (None,), "revision": (None,),
                "code_revision": (None,), "disable_by_batch_size": None, "disable_logprobs": (True, False)}
_NEUTRAL_HINTS = {"draft_tensor_parallel_size": "turbospec runs the drafter on the target's GPU",
                  "quantization": "turbospec runs the drafter in the target's dtype",
                  "code_revision": "turbospec never runs a checkpoint's own code"}
# vLLM's other method names, and what to use here
_METHOD_HINTS = {"eagle": "EAGLE-1/2 heads are not supported; for an EAGLE-3 head use 'eagle3'",
                 "medusa": "Medusa heads are not supported; train an EAGLE-3 or DFlash drafter (turbospec train)",
                 "mlp_speculator": "MLP speculators are not supported; train an EAGLE-3 or DFlash drafter",
                 "suffix": "suffix decoding is not implemented; 'ngram' is the model-free method here"}


def bitwise_exact(spec: dict[str, Any]) -> bool:
    """speculative_config["bitwise_exact"] (default true), checked to be a bool."""
    value = spec.get("bitwise_exact", True)
    if not isinstance(value, bool):
        raise ValueError(f"speculative_config bitwise_exact={value!r}: use true (default: each step verifies "
                         "at most 64 rows (16 where a CUDA GEMV serves the linears: engines of max_num_seqs 1 "
                         "on Hopper, or TURBOSPEC_*_GEMV=1), so greedy output is bit for bit plain decoding's) or "
                         "false (k as asked at any batch; rounding may then differ from plain decoding at near-ties)")
    return value


def _check_keys(spec: dict[str, Any], method: str) -> None:
    """Refuse a key `method` does not read, with the nearest known one."""
    known = COMMON_KEYS + METHOD_KEYS[method]
    for key in spec:
        if key in known:
            continue
        if key in VLLM_NEUTRAL:
            if key == "disable_by_batch_size" and spec[key] is not None and (
                    not isinstance(spec[key], int) or isinstance(spec[key], bool) or spec[key] < 1):
                raise ValueError(f"speculative_config disable_by_batch_size={spec[key]!r} must be a positive "
                                 "integer (or null)")
            if VLLM_NEUTRAL[key] is not None and spec[key] not in VLLM_NEUTRAL[key]:
                raise ValueError(f"speculative_config {key}={spec[key]!r} is not supported (accepted: "
                                 f"{', '.join(map(repr, VLLM_NEUTRAL[key]))}; {_NEUTRAL_HINTS.get(key, 'it changes nothing else here')})")
        else:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"speculative_config key {key!r} is not used by method {method!r}{hint}: its keys "
                             f"are {', '.join(known)}")


def check_speculative_config(spec: dict[str, Any]) -> tuple[dict[str, Any], str, int | None]:
    """(a copy of `spec`, its method, k) after every check that needs no model: so a typo is refused
    before a target of many GB is downloaded or loaded."""
    if not isinstance(spec, dict):
        raise ValueError("speculative_config must be a dict such as "
                         '{"method": "ngram", "num_speculative_tokens": 4}')
    if not spec:            # '{}' from a command line: plain decoding would run with no word of it
        raise ValueError("speculative_config is empty: give a method, e.g. "
                         '{"method": "ngram", "num_speculative_tokens": 4}, or leave it out for plain decoding')
    spec = dict(spec)
    method = spec.get("method")
    if method in ("ngram", "[ngram]", None) and spec.get("model") in ("ngram", "[ngram]"):
        spec.pop("model")                  # vLLM's older spelling of the n-gram method: model "[ngram]"
        method = "ngram"
    if method == "[ngram]":
        method = "ngram"
    if method is not None:
        spec["method"] = method
    if method is None and spec.get("model"):
        method = "eagle3" if "eagle3" in str(spec["model"]).lower() else "draft_model"
    if method == "oracle":
        raise ValueError("speculative_config method 'oracle' is a benchmark proposer: it replays the target's "
                         "own greedy continuation, which `turbospec bench spec --shape NAME` computes first; run "
                         "it there")
    if method not in METHODS:
        hint = _METHOD_HINTS.get(method) or ("the target's own MTP layers are method 'mtp'"
                                             if str(method).endswith("_mtp") else None)
        raise ValueError(f"speculative_config method {method!r} is not one of {', '.join(METHODS)}"
                         + (f" ({hint})" if hint else ""))
    _check_keys(spec, method)
    k = spec.get("num_speculative_tokens")
    if method != "dflash" and (not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K):
        raise ValueError(f"speculative_config needs num_speculative_tokens from 1 to {MAX_K} (got {k!r})")
    if spec.get("draft_length", "fixed") not in ("fixed", "auto"):
        raise ValueError(f"speculative_config draft_length={spec['draft_length']!r}: use 'auto' (chosen per step "
                         "from measured verify cost and acceptance) or leave it out (always k)")
    bitwise_exact(spec)
    if method in ("draft_model", "eagle3", "dflash") and not spec.get("model"):
        raise ValueError(f"method {method!r} needs speculative_config['model']: the drafter's directory")
    if spec.get("model") is not None and not isinstance(spec["model"], str):     # a TypeError blamed on the target
        raise ValueError(f"speculative_config model={spec['model']!r} must be the drafter's directory, a string")
    if method == "ngram":
        for key in ("prompt_lookup_min", "prompt_lookup_max"):            # 'x' was int()'s message, 2.7 ran as 2
            val = spec.get(key, 1)
            if not isinstance(val, int) or isinstance(val, bool):
                raise ValueError(f"speculative_config {key}={val!r} must be an integer (n-gram length in tokens)")
    return spec, method, k


def build_proposer(spec: dict[str, Any], target, config: ModelConfig, model_dir: str,
                   device: torch.device, dtype: torch.dtype, download_dir: str | None = None,
                   max_model_len: int | None = None):
    """`spec["model"]`: a drafter directory or a Hugging Face id (with `spec["revision"]`), fetched
    through the Hub cache in `download_dir` (turbospec/hub.py). `max_model_len`: the engine's, which
    picks a longrope drafter's factors as the target's (learned drafters follow `config.rope`)."""
    spec, method, k = check_speculative_config(spec)
    if spec.get("model"):
        from turbospec.hub import resolve_model
        spec["model"] = resolve_model(spec["model"], "speculative_config model", revision=spec.get("revision"),
                                      download_dir=download_dir,
                                      files="draft" if method in ("eagle3", "dflash") else "weights")
    if method == "ngram":
        from turbospec.spec.ngram import NgramProposer
        lookup = {key: spec.get(key, default) for key, default in (("prompt_lookup_min", 1), ("prompt_lookup_max", 4))}
        return NgramProposer(k, lookup["prompt_lookup_min"], lookup["prompt_lookup_max"])
    if method == "draft_model":
        from turbospec.spec.draft_model import DraftModelProposer
        return DraftModelProposer.from_dir(spec["model"], k, config, device, dtype, max_model_len=max_model_len)
    if method == "eagle3":
        from turbospec.spec.eagle3 import build_eagle3_proposer
        return build_eagle3_proposer(target, config, spec, device, dtype)
    if method == "dflash":
        from turbospec.spec.dflash import build_dflash_proposer
        return build_dflash_proposer(target, config, spec, device, dtype)
    from turbospec.spec.mtp import build_mtp_proposer
    return build_mtp_proposer(target, config, model_dir, spec, device, dtype)
