"""The engine's side of structured outputs (turbospec/structured_outputs.py): each request's
llguidance matcher, and the mask of the tokens its grammar allows next, applied to a step's logits."""
from __future__ import annotations

import torch

from turbospec.structured_outputs import StructuredOutputsParams


class GrammarCompiler:
    """Builds each request's matcher against the model's tokenizer (llguidance's view of it is made
    once, at the first request held to a grammar). The mask covers the model's whole vocabulary
    (`vocab_size`, padding ids included: never allowed)."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: list[int]):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)
        self._ll_tokenizer = None
        self.think_ids: tuple[int, int] | None = None      # (<think>, </think>): set_reasoning

    def set_reasoning(self, start: str = "<think>", end: str = "</think>") -> bool:
        """With a reasoning parser (vLLM's rule), a grammar holds from the end of the think block
        on. Needs each tag to be one token; returns False (and the grammar holds from the first
        token) when the tokenizer splits them."""
        ids = [self.tokenizer.encode(t, add_special_tokens=False) if self.tokenizer is not None else []
               for t in (start, end)]
        if not all(len(i) == 1 for i in ids):
            self.think_ids = None
            return False
        self.think_ids = (ids[0][0], ids[1][0])
        return True

    def waits_for(self, prompt_ids: list[int]) -> int | None:
        """The token a new request's grammar waits for: </think> when reasoning is on and the
        prompt's last think block is not closed (a prompt that ends with `<think>`, or none at all:
        the model opens it), else None (the grammar holds from the first token)."""
        if self.think_ids is None:
            return None
        start, end = self.think_ids
        last = {t: i for i, t in enumerate(prompt_ids) if t in (start, end)}
        return None if last.get(end, -1) > last.get(start, -1) else end

    def ll_tokenizer(self):
        if self._ll_tokenizer is None:
            if self.tokenizer is None:
                raise ValueError("structured outputs need the model's tokenizer; this model directory has none "
                                 "(add its tokenizer files or pass --tokenizer / LLM(tokenizer=...))")
            try:
                import llguidance.hf
            except ImportError:
                raise ValueError("structured outputs need the llguidance package: pip install 'llguidance>=1,<2'") from None
            try:
                self._ll_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size,
                                                                  eos_token=self.eos_token_ids or None)
            except Exception as e:  # noqa: BLE001 - a slow (Python) tokenizer, a vocabulary larger than the model's
                raise ValueError(f"structured outputs cannot use this tokenizer ({type(e).__name__}: {e}); they need "
                                 "a fast (tokenizer.json) tokenizer whose ids fit the model's vocab_size") from None
        return self._ll_tokenizer

    def matcher(self, params: StructuredOutputsParams):
        """A fresh LLMatcher for one request; ValueError naming the problem for a grammar, regex or
        schema that does not compile."""
        from llguidance import LLMatcher
        tok = self.ll_tokenizer()
        grammar = params.to_grammar()
        error = LLMatcher.validate_grammar(grammar, tok)
        if error:
            raise ValueError(f"structured outputs: the {params.kind.replace('_', ' ')} does not compile: "
                             f"{error.strip()}")
        m = LLMatcher(tok, grammar, log_level=0)
        if m.is_error():
            raise ValueError(f"structured outputs: the {params.kind.replace('_', ' ')} does not compile: {m.get_error()}")
        return m


_BITS = None


def allowed_mask(matchers: list, vocab_size: int, device: torch.device) -> torch.Tensor:
    """[len(matchers), vocab_size] bool: the tokens each matcher allows next (a None matcher: all)."""
    import llguidance.torch as lt
    global _BITS
    words = (vocab_size + 31) // 32
    packed = torch.full((len(matchers), words), -1, dtype=torch.int32)          # [N, V/32] host
    for i, m in enumerate(matchers):
        if m is not None:
            lt.fill_next_token_bitmask(m, packed, i)
    if _BITS is None or _BITS.device != device:
        _BITS = torch.arange(32, dtype=torch.int32, device=device)
    bits = (packed.to(device, non_blocking=True).unsqueeze(-1) >> _BITS) & 1    # [N, V/32, 32]
    return bits.view(len(matchers), words * 32)[:, :vocab_size].bool()


def apply_grammar(logits: torch.Tensor, matchers: list) -> torch.Tensor:
    """[N, V] logits with every token the row's grammar forbids at -inf (a new tensor; a None
    matcher leaves its row as is)."""
    allowed = allowed_mask(matchers, logits.shape[1], logits.device)
    return logits.masked_fill(~allowed, float("-inf"))
