"""Training data: one JSONL file, validated whole before any compute, tokenized into a flat store.

Record schemas (one JSON object per line; a file may mix them):

| schema | fields | trained positions |
|---|---|---|
| text / code | `text` | all |
| prompt + completion | `prompt`, optional `completion` | completion (all with `--loss-on-prompt`; all if no completion) |
| token ids (what `regenerate` writes) | `prompt_token_ids`, optional `completion_token_ids` | as prompt + completion |
| chat, OpenAI | `messages`: [{role, content}] | assistant turns, rendered with the target's chat template |
| chat, ShareGPT | `conversations`: [{from, value}] | as chat (human -> user, gpt -> assistant) |

Prompt and completion are tokenized separately (no special tokens added, as the engine tokenizes
prompts) and concatenated, so the loss mask is exact. A trained position t means "the token at t
is a label": the drafter learns the target's distribution for it.
"""
from __future__ import annotations

import json

from turbospec.train.chat_render import TemplateSyntax, render_chat
from turbospec.train.dataset import DataReport, TokenDataset

SCHEMAS = "text | prompt (+completion) | prompt_token_ids (+completion_token_ids) | messages | conversations"
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "model": "assistant",
                   "system": "system", "tool": "tool", "function": "tool"}


# ----------------------------------------------------------------------------- parsing

def _fail(path: str, line: int, msg: str) -> ValueError:
    return ValueError(f"{path}:{line}: {msg}")


def _check_str(path, n, row, key, required=True):
    if key not in row:
        if required:
            raise _fail(path, n, f"missing field {key!r}")
        return None
    if not isinstance(row[key], str):
        raise _fail(path, n, f"field {key!r} must be a string, got {type(row[key]).__name__}")
    return row[key]


def _check_ids(path, n, row, key, vocab_size, required=True):
    if key not in row:
        if required:
            raise _fail(path, n, f"missing field {key!r}")
        return None
    ids = row[key]
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise _fail(path, n, f"field {key!r} must be a list of integer token ids")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise _fail(path, n, f"{key} holds ids {bad[:5]} outside the target vocabulary [0, {vocab_size}): "
                    "these ids were made with another tokenizer")
    return ids


def _chat_messages(path, n, row) -> list[dict]:
    if "messages" in row:
        msgs = row["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise _fail(path, n, "'messages' must be a non-empty list of {role, content} objects")
        out = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise _fail(path, n, "every message needs string fields 'role' and 'content'")
            out.append({"role": m["role"], "content": m["content"]})
    else:
        conv = row["conversations"]
        if not isinstance(conv, list) or not conv:
            raise _fail(path, n, "'conversations' must be a non-empty list of {from, value} objects")
        out = []
        for m in conv:
            if not isinstance(m, dict) or not isinstance(m.get("from"), str) or not isinstance(m.get("value"), str):
                raise _fail(path, n, "every ShareGPT turn needs string fields 'from' and 'value'")
            role = _SHAREGPT_ROLES.get(m["from"].lower())
            if role is None:
                raise _fail(path, n, f"unknown ShareGPT speaker {m['from']!r}: use human, gpt or system")
            out.append({"role": role, "content": m["value"]})
    if not any(m["role"] == "assistant" for m in out):
        raise _fail(path, n, "the conversation has no assistant turn: there is nothing to train on")
    return out


def parse_records(path: str, vocab_size: int, sources: dict[int, str] | None = None, chat_ok: bool = True
                  ) -> list[tuple[int, str, object]]:
    """Every line checked (JSON, schema, types) before anything is tokenized; every bad line is
    counted and the first few are named, so one pass over the file finds them all.
    Returns (line number, schema, payload); `sources`, when given, receives {line: the record's
    string `source` field} for token-id records (regenerate writes the record its prompt came from).
    chat_ok False (a tokenizer without a chat template): chat records are bad lines too."""
    out, errors, bad_lines = [], [], []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                try:
                    line = raw.decode("utf-8-sig" if n == 1 else "utf-8")      # a BOM (Windows editors)
                except UnicodeDecodeError as e:
                    raise _fail(path, n, f"not UTF-8 text (byte {e.start} of the line): convert the file to "
                                "UTF-8") from None
                record = _parse_line(path, n, line, vocab_size, sources)
                if record[1] == "chat" and not chat_ok:
                    raise _fail(path, n, f"a chat record, but {_NO_TEMPLATE}")
                out.append(record)
            except ValueError as e:
                bad_lines.append(n)
                if len(errors) < _MAX_ERRORS:
                    errors.append(str(e))
    if errors:
        more = len(bad_lines) - len(errors)
        tail = f"\n  ... and {more} more bad line(s), e.g. line(s) {bad_lines[len(errors):][:10]}" if more else ""
        head = "" if len(bad_lines) == 1 else f"{len(bad_lines)} bad lines in {path} (fix or remove them):\n  "
        raise ValueError(head + "\n  ".join(errors) + tail)
    if not out:
        raise ValueError(f"{path} holds no records: write one JSON object per line with one of: {SCHEMAS}")
    return out


_MAX_ERRORS = 5
_NO_TEMPLATE = ("the target's tokenizer has no chat template: pass --chat-template FILE.jinja, or convert "
                "the data to text / prompt+completion")


def _parse_line(path: str, n: int, line: str, vocab_size: int, sources: dict[int, str] | None = None
                ) -> tuple[int, str, object]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise _fail(path, n, f"not valid JSON ({e.msg} at column {e.colno}): one JSON object per line") from None
    if not isinstance(row, dict):
        raise _fail(path, n, f"expected a JSON object with one of: {SCHEMAS}")
    if sources is not None and "prompt_token_ids" in row and isinstance(row.get("source"), str):
        sources[n] = row["source"]          # regenerate's records only: a text / chat set's "source"
                                            # often names a whole sub-dataset, not one record
    if "messages" in row or "conversations" in row:
        return n, "chat", _chat_messages(path, n, row)
    if "prompt_token_ids" in row:
        p = _check_ids(path, n, row, "prompt_token_ids", vocab_size)
        c = _check_ids(path, n, row, "completion_token_ids", vocab_size, required=False)
        return n, "token_ids", (p, c)
    if "text" in row:
        t = _check_str(path, n, row, "text")
        if not t.strip():
            raise _fail(path, n, "'text' is empty: remove the line")
        return n, "text", t
    if "prompt" in row:
        p = _check_str(path, n, row, "prompt")
        c = _check_str(path, n, row, "completion", required=False)
        if not p and not c:
            raise _fail(path, n, "'prompt' and 'completion' are empty: remove the line")
        return n, "prompt_completion", (p, c)
    raise _fail(path, n, f"has fields {sorted(row)[:6]}, expected one of: {SCHEMAS}")


# ----------------------------------------------------------------------------- tokenizing

def _encode_batch(tokenizer, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(x) for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def bad_records_error(path: str, errors: list[str], bad_lines: list[int], what: str) -> ValueError:
    """One error for every bad record: counted, the first few named (as parse_records does)."""
    if len(bad_lines) == 1:
        return ValueError(errors[0])
    more = len(bad_lines) - len(errors)
    tail = f"\n  ... and {more} more, e.g. line(s) {bad_lines[len(errors):][:10]}" if more else ""
    return ValueError(f"{len(bad_lines)} {what} in {path} (fix or remove them):\n  " + "\n  ".join(errors) + tail)


def tokenize_records(records, tokenizer, path: str, loss_on_prompt: bool, template: str | None = None,
                     vocab_size: int | None = None) -> tuple[list[tuple[int, list[int], list[bool]]], dict[str, int]]:
    """-> [(line, ids, loss_mask)], counts per schema. Plain text is encoded in one batch call.
    Every record is tokenized before an error is raised: records the chat template fails on, and
    (with `vocab_size`) records whose text tokenizes to ids past the target's embedding rows, are
    counted and the first few named. `template`: the --chat-template path, for the messages."""
    needs_tok = [r for r in records if r[1] != "token_ids"]
    if needs_tok and tokenizer is None:
        raise ValueError(f"{path} has text records (line {needs_tok[0][0]}) but the target ships no "
                         "tokenizer: add tokenizer files to the target directory or use prompt_token_ids")
    if any(r[1] == "chat" for r in records) and not getattr(tokenizer, "chat_template", None):
        line = next(r[0] for r in records if r[1] == "chat")
        raise ValueError(f"{path}:{line} is a chat record but {_NO_TEMPLATE}")
    errors: list[str] = []              # records the chat template fails on
    bad_lines: list[int] = []
    vocab_errors: list[str] = []        # records that tokenize past the target's vocabulary
    vocab_lines: list[int] = []
    texts = [r[2] for r in records if r[1] == "text"]
    prompts = [r[2][0] for r in records if r[1] == "prompt_completion"]
    comps = [r[2][1] or "" for r in records if r[1] == "prompt_completion"]
    enc_text, enc_p, enc_c = iter(_encode_batch(tokenizer, texts)), iter(_encode_batch(tokenizer, prompts)), \
        iter(_encode_batch(tokenizer, comps))
    out, counts = [], {}
    for line, kind, payload in records:
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "text":
            ids = next(enc_text)
            mask = [True] * len(ids)
        elif kind in ("prompt_completion", "token_ids"):
            if kind == "token_ids":
                p, c = payload[0], payload[1] or []
            else:
                p, c = next(enc_p), next(enc_c)
            whole = not c or loss_on_prompt
            ids, mask = p + c, [whole] * len(p) + [True] * len(c)
        else:
            try:
                ids, mask = render_chat(tokenizer, payload, path, line, template)
            except TemplateSyntax:
                raise
            except ValueError as e:
                bad_lines.append(line)
                if len(errors) < _MAX_ERRORS:
                    errors.append(str(e))
                continue
        if vocab_size is not None and kind != "token_ids" and ids and max(ids) >= vocab_size:
            vocab_lines.append(line)        # (token-id records were checked by parse_records)
            if len(vocab_errors) < _MAX_ERRORS:
                vocab_errors.append(out_of_vocab_line(path, line, ids, vocab_size, tokenizer))
        out.append((line, ids, mask))
    if bad_lines:
        raise bad_records_error(path, errors, bad_lines, "records the chat template cannot render")
    if vocab_lines:
        raise bad_records_error(path, vocab_errors, vocab_lines, "records with token ids past the target's vocabulary")
    return out, counts


def out_of_vocab_line(path: str, line: int, ids: list[int], vocab_size: int, tokenizer) -> str:
    bad = sorted({t for t in ids if t >= vocab_size})
    return str(_fail(path, line, f"its text tokenizes to ids {bad[:5]} ({tokenizer.convert_ids_to_tokens(bad[:5])}) "
                     f"outside the target vocabulary [0, {vocab_size}): the target's tokenizer has {len(tokenizer)} "
                     f"tokens, more than its {vocab_size} embedding rows; remove the tokenizer's added tokens past "
                     f"id {vocab_size - 1}, or these strings from the data"))


def load_dataset(path: str, tokenizer, vocab_size: int, max_seq_len: int, truncate: bool = False,
                 loss_on_prompt: bool = False, chat_template: str | None = None) -> tuple[TokenDataset, DataReport]:
    """Validate and tokenize the whole file (every id checked against `vocab_size`, the target's
    embedding rows). Too-long samples are an error unless `truncate`. `chat_template`: the
    --chat-template path the tokenizer carries, named in errors."""
    sources: dict[int, str] = {}
    chat_ok = tokenizer is None or bool(getattr(tokenizer, "chat_template", None))    # no tokenizer: said next
    records = parse_records(path, vocab_size, sources, chat_ok)
    tokenized, counts = tokenize_records(records, tokenizer, path, loss_on_prompt, chat_template, vocab_size)
    too_long = [(line, len(ids)) for line, ids, _ in tokenized if len(ids) > max_seq_len]
    if too_long and not truncate:
        worst = max(too_long, key=lambda x: x[1])
        raise ValueError(f"{len(too_long)} of {len(tokenized)} records in {path} are longer than "
                         f"--max-seq-len {max_seq_len} tokens (longest: line {worst[0]}, {worst[1]} tokens): "
                         "pass --truncate to cut them, raise --max-seq-len (up to the target's context), "
                         "or split the documents (`turbospec train stdlib-corpus` shows how)")
    samples, groups, skipped = [], [], 0
    for line, ids, mask in tokenized:
        ids, mask = ids[:max_seq_len], mask[:max_seq_len]
        if len(ids) < 3 or not any(mask[1:]):
            skipped += 1
            continue
        mask[0] = False                         # nothing precedes the first token: never a label
        samples.append((ids, mask))
        # the held-out split keeps samples of one source record together (split_heldout)
        groups.append(("source", sources[line]) if line in sources else ("line", line))
    if not samples:
        raise ValueError(f"{path}: every record is shorter than 3 tokens or has no trained position "
                         "(chat without assistant text?): nothing to train on")
    ds = TokenDataset.from_lists(samples, groups)
    report = DataReport(len(records), len(ds), ds.num_tokens, int(ds.loss_mask.sum()), len(too_long),
                        skipped, counts)
    return ds, report


def load_tokenizer(target_dir: str, chat_template: str | None = None):
    from turbospec.engine.request_input import load_tokenizer as _load
    tok = _load(target_dir)
    if tok is not None and chat_template is not None:
        with open(chat_template, encoding="utf-8") as f:
            tok.chat_template = f.read()
    return tok
