"""Token counting when the server does not report `usage`.

Order of trust, recorded per request as `token_source`:
  usage      the server's own count (we ask for it with `stream_options.include_usage`)
  tokenizer  a local tokenizer.json (`--tokenizer`: a file, a directory or a Hugging Face id; else
             `--model` when it is a local directory or a Hugging Face id already in the Hub cache)
  chunks     one token per streamed chunk: a lower bound when a server sends several tokens a chunk
"""
from __future__ import annotations

import os


class TokenCounter:
    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer            # light, and only needed on this fallback

        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        if not os.path.isfile(file):
            raise ValueError(f"--tokenizer {path!r}: no tokenizer.json there; pass a tokenizer.json file "
                             "or a Hugging Face model directory that holds one")
        try:
            self._tok = Tokenizer.from_file(file)
        except Exception as e:                        # the library raises a bare Exception on bad files
            raise ValueError(f"--tokenizer {file!r} could not be loaded ({e}): pass a Hugging Face "
                             "tokenizer.json") from e
        self.name = file

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)


def find_token_counter(tokenizer: str | None, model: str) -> TokenCounter | None:
    """The explicit --tokenizer (errors if unusable), else the model's directory if local, else None."""
    from turbospec.hub import cached_file, is_hub_id, resolve_model
    if tokenizer:
        if is_hub_id(tokenizer):
            tokenizer = resolve_model(tokenizer, "--tokenizer", files="tokenizer")
        return TokenCounter(tokenizer)
    if os.path.isfile(os.path.join(model, "tokenizer.json")):
        return TokenCounter(model)
    cached = cached_file(model, "tokenizer.json")
    return TokenCounter(cached) if cached else None
