"""A code corpus that every machine already has: the Python standard library's own sources.

`build_stdlib_corpus` walks `sysconfig.get_paths()["stdlib"]` (never site-packages / dist-packages,
so third-party code such as the held-out Django/SQLAlchemy prompts cannot leak in), skips the test
suites unless asked, and cuts each file into chunks of at most `chunk_tokens` target tokens at line
boundaries. Each chunk is re-tokenized on its own to check the bound (a few tokens of slack are
kept because tokenization at a cut can differ from tokenization in context). Output: JSONL records
`{"text": chunk, "source": "stdlib/<relative path>"}`, in sorted file order (deterministic).
A chunk is dropped when it has fewer than `min_tokens` tokens (a small file such as an
`__init__.py`, or the short tail of a file after its last full chunk: too little to train on) or,
rarely, when re-tokenized on its own it has more than `chunk_tokens`; files that are not UTF-8 are
skipped. The summary line counts each reason.
"""
from __future__ import annotations

import json
import os
import sysconfig
from dataclasses import dataclass

_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}
_TEST_DIRS = {"test", "tests", "idle_test"}


@dataclass
class CorpusStats:
    files: int
    chunks: int
    tokens: int
    dropped: int                        # short + long
    root: str
    short: int = 0                      # chunks under min_tokens tokens (small files, files' short tails)
    long: int = 0                       # chunks over chunk_tokens once re-tokenized on their own
    unreadable: int = 0                 # files skipped: not UTF-8 (or unreadable)
    min_tokens: int = 32
    chunk_tokens: int = 0

    def describe(self) -> str:
        why = []
        if self.short:
            why.append(f"{self.short} shorter than {self.min_tokens} tokens (small files and the short tails of "
                       "files: too little to train on)")
        if self.long:
            why.append(f"{self.long} longer than --chunk-tokens {self.chunk_tokens} once re-tokenized on their own")
        dropped = f"{self.dropped} chunks dropped: {'; '.join(why)}" if self.dropped else "no chunk dropped"
        skipped = f"; {self.unreadable} files skipped: not UTF-8" if self.unreadable else ""
        return (f"{self.chunks} chunks, {self.tokens} tokens from {self.files} files under {self.root} "
                f"({dropped}{skipped})")


def stdlib_files(root: str | None = None, include_tests: bool = False) -> list[str]:
    root = root or sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in _SKIP_DIRS and (include_tests or x not in _TEST_DIRS))
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (UnicodeDecodeError, OSError):
        return None


def _cuts(text: str, offsets: list[tuple[int, int]], budget: int) -> list[tuple[int, int]]:
    """Character spans covering `text` in order, each of about <= budget tokens, cut after the last
    newline before the budget (a hard cut only when a line alone exceeds it)."""
    spans, c0, tok, n = [], 0, 0, len(offsets)
    while tok < n:
        end_tok = min(tok + budget, n)
        if end_tok < n:
            limit = offsets[end_tok][0]
            c1 = text.rfind("\n", c0, limit) + 1
            if c1 <= offsets[tok][0]:
                c1 = limit
        else:
            c1 = len(text)
        spans.append((c0, c1))
        c0 = c1
        while tok < n and offsets[tok][0] < c1:
            tok += 1
    return spans


def build_stdlib_corpus(out_path: str, tokenizer, chunk_tokens: int, include_tests: bool = False,
                        min_tokens: int = 32, root: str | None = None, max_files: int | None = None
                        ) -> CorpusStats:
    if chunk_tokens < 64:
        raise ValueError(f"--chunk-tokens {chunk_tokens}: use >= 64 (e.g. the training --max-seq-len)")
    if tokenizer is None:
        raise ValueError("the target ships no tokenizer: stdlib-corpus needs one to cut chunks by tokens")
    root = root or sysconfig.get_paths()["stdlib"]
    files = stdlib_files(root, include_tests)[:max_files]
    if not files:
        raise ValueError(f"no .py files under {root!r}: pass --root pointing at a Python library directory")
    budget = max(16, chunk_tokens - 16)
    chunks: list[tuple[str, str]] = []
    unreadable = 0
    for i in range(0, len(files), 64):
        group = [(f, _read(f)) for f in files[i:i + 64]]
        unreadable += sum(t is None for _, t in group)
        group = [(f, t) for f, t in group if t and t.strip()]
        if not group:
            continue
        enc = tokenizer([t for _, t in group], add_special_tokens=False, return_offsets_mapping=True,
                        verbose=False)        # whole files: longer than model_max_length, cut below
        for (f, text), offs in zip(group, enc["offset_mapping"]):
            rel = os.path.relpath(f, root)
            chunks += [(text[a:b], rel) for a, b in _cuts(text, [tuple(o) for o in offs], budget)]
    kept, short, long, tokens = [], 0, 0, 0
    lens = [len(x) for x in tokenizer([c for c, _ in chunks], add_special_tokens=False)["input_ids"]] if chunks else []
    for (text, rel), n in zip(chunks, lens):
        if n < min_tokens or not text.strip():
            short += 1
            continue
        if n > chunk_tokens:
            long += 1
            continue
        kept.append({"text": text, "source": f"stdlib/{rel}"})
        tokens += n
    if not kept:
        raise ValueError(f"no chunk of >= {min_tokens} tokens from {root!r}")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        for r in kept:
            f.write(json.dumps(r) + "\n")
    return CorpusStats(len(files), len(kept), tokens, short + long, root, short=short, long=long,
                       unreadable=unreadable, min_tokens=min_tokens, chunk_tokens=chunk_tokens)
