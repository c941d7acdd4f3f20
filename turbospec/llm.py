"""`LLM`: the offline entry point, vLLM's shape — `LLM(model=...).generate(prompts, params)`."""
from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from turbospec.config import EngineConfig
from turbospec.engine.llm_engine import LLMEngine
from turbospec.outputs import RequestOutput
from turbospec.sampling_params import SamplingParams


class LLM:
    def __init__(self, model: str, device: str | None = None, dtype: str | None = None,
                 quantization: str | None = None, speculative_config: dict[str, Any] | None = None,
                 tokenizer: str | None = None, block_size: int = 16, num_kv_blocks: int | None = None,
                 gpu_memory_utilization: float = 0.85, max_num_seqs: int = 256,
                 max_num_batched_tokens: int = 8192, max_model_len: int | None = None,
                 enforce_eager: bool = False, num_scheduler_steps: int | None = None):
        ec = EngineConfig(block_size=block_size, num_kv_blocks=num_kv_blocks,
                          gpu_memory_utilization=gpu_memory_utilization, max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
                          enforce_eager=enforce_eager, num_scheduler_steps=num_scheduler_steps)
        self.llm_engine = LLMEngine.from_config(model, device=device, dtype=dtype,
                                                speculative_config=speculative_config,
                                                engine_config=ec, quantization=quantization,
                                                tokenizer=tokenizer)
        self._ids = itertools.count()

    def get_tokenizer(self):
        return self.llm_engine.tokenizer

    def generate(self, prompts, sampling_params: SamplingParams | list[SamplingParams] | None = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """One RequestOutput per prompt, in prompt order, with `n` completions (index 0..n-1: one
        engine sequence each, sample j seeded with seed + j). Every prompt is validated before any
        work starts, so a bad one fails the call without running the others."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        prompts = list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(prompts)} prompts but {len(params)} SamplingParams: pass one, "
                             "or one per prompt")
        eng = self.llm_engine
        groups = [[f"gen-{next(self._ids)}" for _ in range(p.n)] for p in params]     # per prompt: its n ids
        ids = [rid for g in groups for rid in g]
        added = []
        try:
            for g, prompt, p in zip(groups, prompts, params):
                for j, rid in enumerate(g):
                    eng.add_request(rid, prompt, p.for_sample(j))
                    added.append(rid)
        except ValueError:
            for rid in added:
                eng.abort_request(rid)
            raise
        finals: dict[str, RequestOutput] = {}
        bar = None
        if use_tqdm:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(ids), desc="generate", unit="req")
        while len(finals) < len(ids):
            outs = eng.step()
            if not outs and not eng.scheduler.running:     # nothing can be scheduled: never spin
                raise RuntimeError(f"{len(ids) - len(finals)} requests cannot be scheduled (KV pool of "
                                   f"{eng.block_manager.num_usable_blocks} blocks): raise num_kv_blocks")
            for out in outs:
                if out.finished:
                    finals[out.request_id] = out
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return [_merge_samples([finals[r] for r in g]) for g in groups]

    def get_metrics(self) -> dict[str, Any]:
        return self.llm_engine.get_metrics()


def _merge_samples(outs: list[RequestOutput]) -> RequestOutput:
    """The n sequences of one prompt as one RequestOutput: completions index 0..n-1, the first's
    request id and prompt, speculation counts summed."""
    if len(outs) == 1:
        return outs[0]
    first = outs[0]
    completions = [replace(o.outputs[0], index=j) for j, o in enumerate(outs)]
    return replace(first, outputs=completions, metrics=first.metrics.plus_drafts_of([o.metrics for o in outs[1:]]))
