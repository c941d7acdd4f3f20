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


_BITS: dict = {}


def unpack_mask(packed: torch.Tensor, vocab_size: int, device: torch.device) -> torch.Tensor:
    """[N, ceil(V/32)] int32 bitmasks (host) -> [N, vocab_size] bool on `device`."""
    bits = _BITS.get(device)
    if bits is None:
        bits = _BITS[device] = torch.arange(32, dtype=torch.int32, device=device)
    n, words = packed.shape
    out = (packed.to(device, non_blocking=True).unsqueeze(-1) >> bits) & 1          # [N, V/32, 32]
    return out.view(n, words * 32)[:, :vocab_size].bool()


def allowed_mask(matchers: list, vocab_size: int, device: torch.device) -> torch.Tensor:
    """[len(matchers), vocab_size] bool: the tokens each matcher allows next (a None matcher: all)."""
    import llguidance.torch as lt
    packed = torch.full((len(matchers), (vocab_size + 31) // 32), -1, dtype=torch.int32)   # [N, V/32] host
    for i, m in enumerate(matchers):
        if m is not None:
            lt.fill_next_token_bitmask(m, packed, i)
    return unpack_mask(packed, vocab_size, device)


def apply_grammar(logits: torch.Tensor, matchers: list) -> torch.Tensor:
    """[N, V] logits with every token the row's grammar forbids at -inf (a new tensor; a None
    matcher leaves its row as is)."""
    allowed = allowed_mask(matchers, logits.shape[1], logits.device)
    return logits.masked_fill(~allowed, float("-inf"))


def verify_masks(seq, tokens: list[int], parents: list[int] | None, rows: int, vocab_size: int) -> torch.Tensor:
    """[rows, ceil(V/32)] int32 host bitmasks of a verify's rows for one sequence held to a grammar:
    row 0 what it allows after the committed tokens, row 1 + n after the drafts on the path to node
    n (a chain: drafts 0..n; a tree: `parents`, -1 the root). A row whose path holds a draft the
    grammar refuses (never accepted: the refusing row gives it probability 0), a row after the
    draft that completes the grammar (the request stops at that draft: the row's token is
    dropped), rows past the drafts and rows before the reasoning gate allow every token. The matcher is left as
    it was (rolled back)."""
    import llguidance.torch as lt
    packed = torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)
    m = seq.grammar
    paths: list[list[int]] = [[]]
    for n, t in enumerate(tokens):
        up = -1 if parents is None else parents[n]
        paths.append((paths[up + 1] if parents is not None else paths[n]) + [t])
    for row, path in enumerate(paths):
        wait, consumed, reachable = seq.grammar_wait, 0, True
        for t in path:
            if wait is not None:                   # reasoning: the grammar starts after the gate token
                wait = None if t == wait else wait
            elif m.is_stopped() or m.validate_tokens([t]) != 1:
                reachable = False
                break
            else:
                m.consume_token(t)
                consumed += 1
        if reachable and wait is None and not m.is_stopped():
            lt.fill_next_token_bitmask(m, packed, row)
        if consumed:
            m.rollback(consumed)
    return packed
