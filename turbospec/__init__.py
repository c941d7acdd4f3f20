"""turbospec: lossless speculative decoding for open LLMs on H100/H200."""
from turbospec.inputs import TextPrompt, TokensPrompt
from turbospec.sampling_params import SamplingParams

__version__ = "0.1.0"
# vLLM's top-level names, so `from vllm import ...` ports by changing the package name
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "TextPrompt", "TokensPrompt",
           "__version__"]


def __getattr__(name):
    # LLM and the outputs pull in torch model code; import them on first use so `import turbospec` stays light
    if name == "LLM":
        from turbospec.llm import LLM
        return LLM
    if name in ("RequestOutput", "CompletionOutput"):
        from turbospec import outputs
        return getattr(outputs, name)
    raise AttributeError(name)
