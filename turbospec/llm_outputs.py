"""`LLM.generate`'s outputs as vLLM returns them: the n sequences of one prompt merged into one
RequestOutput, with vLLM's conventions applied (the stop string kept when asked, logprob entries'
`decoded_token` filled)."""
from __future__ import annotations

from dataclasses import replace

from turbospec.outputs import CompletionOutput, RequestOutput
from turbospec.sampling_params import SamplingParams


def finalize(outs: list[RequestOutput], params: SamplingParams, tokenizer,
              indices: list[int] | None = None) -> RequestOutput:
    """The n sequences of one prompt as one RequestOutput (completions index 0..n-1, or `indices`,
    the first's request id and prompt, speculation counts summed), with vLLM's output conventions
    applied: the stop string kept when `include_stop_str_in_output`, logprob entries' `decoded_token`."""
    completions = [_completion(o.outputs[0], j, params) for j, o in zip(indices or range(len(outs)), outs)]
    first = outs[0]
    merged = replace(first, outputs=completions,
                     metrics=first.metrics.plus_drafts_of([o.metrics for o in outs[1:]]) if len(outs) > 1
                     else first.metrics)
    if tokenizer is not None:
        _decode_logprob_tokens(tokenizer, [c.logprobs for c in completions] + [merged.prompt_logprobs])
    return merged


def _completion(c: CompletionOutput, index: int, params: SamplingParams) -> CompletionOutput:
    text = c.text
    if params.include_stop_str_in_output and c.stop_string is not None:
        text += c.stop_string                  # the text was cut right before the matched stop string
    return replace(c, index=index, text=text)


def _decode_logprob_tokens(tokenizer, tables: list[list[dict | None] | None]) -> None:
    """Fill `Logprob.decoded_token` (each token's text, special tokens included), as vLLM does."""
    cache: dict[int, str] = {}
    for table in tables:
        for entry in table or ():
            for tid, lp in (entry or {}).items():
                if lp.decoded_token is None:
                    if tid not in cache:
                        cache[tid] = tokenizer.decode([tid], skip_special_tokens=False)
                    lp.decoded_token = cache[tid]
