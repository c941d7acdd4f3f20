"""turbospec: lossless speculative decoding for open LLMs on H100/H200."""
from turbospec.sampling_params import SamplingParams

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name):
    # LLM pulls in torch model code; import it on first use so `import turbospec` stays light
    if name == "LLM":
        from turbospec.llm import LLM
        return LLM
    raise AttributeError(name)
