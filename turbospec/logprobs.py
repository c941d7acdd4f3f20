"""vLLM's `vllm.logprobs` (>= 0.11; `vllm.sequence` before): the `Logprob` entries of
`CompletionOutput.logprobs` and `RequestOutput.prompt_logprobs`."""
from turbospec.layers.sampler import Logprob

__all__ = ["Logprob"]
