"""The engine's side of structured outputs (turbospec/structured_outputs.py): each request's
llguidance matcher, and the mask of the tokens its grammar allows next, applied to a step's logits."""
from __future__ import annotations

import threading

import torch

from turbospec.structured_outputs import StructuredOutputsParams, require_llguidance


CACHED_GRAMMARS = 64


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
        self._compiled: dict[str, object] = {}              # grammar text -> an unused matcher
        self._lock = threading.Lock()

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

    def state(self, params: StructuredOutputsParams, prompt_ids: list[int]) -> "GrammarState":
        """A new request's grammar state. With reasoning on (set_reasoning) the grammar waits for
        </think> when the prompt ends inside a think block (`<think>` its last tag, as DeepSeek-R1's
        template leaves it); holds from the first token when the prompt ends with `</think>` (the
        template closed an empty block: Qwen3's enable_thinking false); and otherwise holds from the
        first token but lets that token be `<think>`, which then opens a free block (a Qwen3 that
        thinks writes it; an instruct model does not). The reasoning parser reads the same tags."""
        wait = opener = None
        if self.think_ids is not None:
            start, end = self.think_ids
            tags = [i for i, t in enumerate(prompt_ids) if t in (start, end)]
            closing = tags and self.tokenizer.decode(prompt_ids[tags[-1] + 1:]).strip() == ""
            if closing and prompt_ids[tags[-1]] == start:
                wait = end
            elif not closing:
                opener = (start, end)
        return GrammarState(self.matcher(params), wait, opener)

    def ll_tokenizer(self):
        if self._ll_tokenizer is None:
            if self.tokenizer is None:
                raise ValueError("structured outputs need the model's tokenizer; this model directory has none "
                                 "(add its tokenizer files or pass --tokenizer / LLM(tokenizer=...))")
            require_llguidance()
            import llguidance.hf
            try:
                self._ll_tokenizer = llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size,
                                                                  eos_token=self.eos_token_ids or None)
            except Exception as e:  # noqa: BLE001 - a slow (Python) tokenizer, a vocabulary larger than the model's
                raise ValueError(f"structured outputs cannot use this tokenizer ({type(e).__name__}: {e}); they need "
                                 "a fast (tokenizer.json) tokenizer whose ids fit the model's vocab_size") from None
        return self._ll_tokenizer

    def matcher(self, params: StructuredOutputsParams):
        """A fresh LLMatcher for one request; ValueError naming the problem for a grammar, regex or
        schema that does not compile. The last CACHED_GRAMMARS compiled grammars are kept, so a
        schema sent again (most clients send one schema many times) is copied, not compiled.
        Thread-safe (llguidance compiles without the GIL)."""
        grammar = params.to_grammar()                          # ValueError first where llguidance is missing
        from llguidance import LLMatcher
        with self._lock:                                       # the server compiles on worker threads too
            pristine = self._compiled.get(grammar)
        if pristine is None:
            tok = self.ll_tokenizer()
            error = LLMatcher.validate_grammar(grammar, tok)
            if error:
                raise ValueError(f"the {params.what} does not compile: {error.strip()}")
            pristine = LLMatcher(tok, grammar, log_level=0)
            if pristine.is_error():
                raise ValueError(f"the {params.what} does not compile: {pristine.get_error()}")
        with self._lock:
            self._compiled.pop(grammar, None)
            self._compiled[grammar] = pristine                # most recent last
            while len(self._compiled) > CACHED_GRAMMARS:
                self._compiled.pop(next(iter(self._compiled)))
            return pristine.deep_copy()


class GrammarState:
    """One request's matcher and its reasoning gate: `wait`, the token (</think>) before which the
    grammar does not hold yet; `opener`, (<think>, </think>) while the next token may open a think
    block (the first output token only)."""

    def __init__(self, matcher, wait: int | None = None, opener: tuple[int, int] | None = None):
        self.matcher, self.wait, self.opener = matcher, wait, opener
        # verify_masks: the draft paths whose row mask hit a limit -> llguidance's error, and the tokens
        # appended since (the path of the row the next token is sampled from)
        self.failed_rows: dict[tuple[int, ...], str] = {}
        self.since_verify: list[int] = []

    def step(self, token: int) -> str | None:
        """Advance past an appended token; None, or why the request fails here: the mask of the row
        it was sampled from hit a limit (in verify_masks, on a copy of the matcher: plain decoding
        fails on whatever token follows such a mask), llguidance failed on the token or in the mask
        before it (which then allows EOS alone, and accepts it), or it refused a token it allowed."""
        failed = self.failed_rows.get(tuple(self.since_verify)) if self.failed_rows else None
        if self.failed_rows:
            self.since_verify.append(token)
        if failed is not None:
            return failed
        if not self.advance(token) or self.matcher.is_error():
            return self.matcher.get_error() or "the grammar refused the token"
        return None

    def is_stopped(self) -> bool:
        """The grammar holds and is complete: nothing but EOS may follow."""
        return self.wait is None and self.matcher.is_stopped()

    def fill(self, packed: torch.Tensor, row: int) -> None:
        """packed[row] = the tokens allowed next (left all-allowed while waiting)."""
        if self.wait is not None:
            return
        import llguidance.torch as lt
        lt.fill_next_token_bitmask(self.matcher, packed, row)
        if self.opener is not None:
            t = self.opener[0]
            packed[row, t >> 5] |= torch.bitwise_left_shift(torch.tensor(1, dtype=torch.int32), t & 31)

    def advance(self, token: int, check: bool = False) -> bool:
        """The gate and the matcher past `token`; False if the grammar refuses it (with `check`,
        the matcher is then left as it was; without, it enters its error state)."""
        opener, self.opener = self.opener, None
        if self.wait is not None:
            self.wait = None if token == self.wait else self.wait
            return True
        if opener is not None and token == opener[0]:
            self.wait = opener[1]
            return True
        if check and (self.matcher.is_stopped() or self.matcher.validate_tokens([token]) != 1):
            return False
        return self.matcher.consume_token(token)


_BITS: dict = {}


def unpack_mask(packed: torch.Tensor, vocab_size: int, device: torch.device) -> torch.Tensor:
    """[N, ceil(V/32)] int32 bitmasks (host) -> [N, vocab_size] bool on `device`."""
    bits = _BITS.get(device)
    if bits is None:
        bits = _BITS[device] = torch.arange(32, dtype=torch.int32, device=device)
    n, words = packed.shape
    out = (packed.to(device, non_blocking=True).unsqueeze(-1) >> bits) & 1          # [N, V/32, 32]
    return out.view(n, words * 32)[:, :vocab_size].bool()


def allowed_mask(states: list, vocab_size: int, device: torch.device) -> torch.Tensor:
    """[len(states), vocab_size] bool: the tokens each GrammarState allows next (None: all)."""
    packed = torch.full((len(states), (vocab_size + 31) // 32), -1, dtype=torch.int32)    # [N, V/32] host
    for i, g in enumerate(states):
        if g is not None:
            g.failed_rows = {}           # a single step's mask fails on the matcher itself
            g.fill(packed, i)
    return unpack_mask(packed, vocab_size, device)


def apply_grammar(logits: torch.Tensor, states: list) -> torch.Tensor:
    """[N, V] logits with every token the row's grammar forbids at -inf (a new tensor; a None
    state leaves its row as is)."""
    allowed = allowed_mask(states, logits.shape[1], logits.device)
    return logits.masked_fill(~allowed, float("-inf"))


def verify_masks(g: GrammarState, tokens: list[int], parents: list[int] | None, rows: int,
                 vocab_size: int) -> torch.Tensor:
    """[rows, ceil(V/32)] int32 host bitmasks of a verify's rows for one sequence held to a grammar:
    row 0 what it allows after the committed tokens, row 1 + n after the drafts on the path to node
    n (a chain: drafts 0..n; a tree: `parents`, -1 the root). A row whose path holds a draft the
    grammar refuses (never accepted: the refusing row gives it probability 0), a row after the
    draft that completes the grammar (the request stops at that draft: the row's token is
    dropped), rows past the drafts and rows before the reasoning gate allow every token. The
    state is left as it was (the matcher rolled back).

    A path on which llguidance hits a limit (on a draft, or in its row's mask, which then allows EOS
    alone) leaves the matcher in its error state, which does not roll back: the matcher is then
    replaced by a copy taken before, and the rows go on. A row whose mask failed is kept with its
    error (`g.failed_rows`), so that the token sampled from it fails the request (`GrammarState.step`)
    as the token after that mask does in plain decoding, with the same message."""
    packed = torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)
    paths: list[list[int]] = [[]]
    for n, t in enumerate(tokens):
        paths.append((paths[parents[n] + 1] if parents is not None else paths[n]) + [t])
    wait, opener = g.wait, g.opener
    spare, g.failed_rows, g.since_verify = g.matcher.deep_copy(), {}, []
    for row, path in enumerate(paths):
        consumed, reachable = 0, True
        for t in path:
            held = g.wait is None and not (g.opener is not None and t == g.opener[0])
            if not g.advance(t, check=True):
                reachable = False
                break
            consumed += held
        if reachable and not g.is_stopped():
            g.fill(packed, row)
            if g.matcher.is_error():
                g.failed_rows[tuple(path)] = g.matcher.get_error()
        if g.matcher.is_error():
            g.matcher, spare = spare, (spare.deep_copy() if row + 1 < len(paths) else None)
        elif consumed:
            g.matcher.rollback(consumed)
        g.wait, g.opener = wait, opener
    return packed
