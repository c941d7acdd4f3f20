"""Workloads: the prompts an audit sends.

`--dataset` takes a comma-separated list of items:
  code | chat | summary | math | hindi   built-in sets (turbospec/audit/prompts/)
  all                                    every built-in set
  FILE.jsonl                             one JSON object a line: `prompt` (str) or `messages`
                                         (OpenAI chat list); optional `domain`, `max_tokens`, `id`
  random:IN:OUT                          prompts of about IN words (≈ tokens) asking for OUT tokens

Domains are interleaved round-robin, so the first N prompts of any mix cover every domain.
"""
from __future__ import annotations

import importlib
import json
import os
import random
from dataclasses import dataclass

BUILTIN_DOMAINS = ("code", "chat", "summary", "math", "hindi")

_RANDOM_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education river garden window market table paper music light road"
).split()


@dataclass(frozen=True)
class Prompt:
    id: str
    domain: str
    prompt: str | None = None                 # plain text (sent as a user message on the chat API)
    messages: tuple[dict, ...] | None = None  # a full chat conversation (chat API only)
    max_tokens: int | None = None             # per-prompt override of --max-tokens

    def as_messages(self) -> list[dict]:
        if self.messages is not None:
            return [dict(m) for m in self.messages]
        return [{"role": "user", "content": self.prompt}]

    def as_text(self) -> str:
        if self.prompt is None:
            raise ValueError(f"prompt {self.id} has only `messages`: run with --api chat, or give "
                             "`prompt` in the JSONL line")
        return self.prompt


def builtin_prompts(domain: str) -> list[Prompt]:
    if domain not in BUILTIN_DOMAINS:
        raise ValueError(f"unknown built-in dataset {domain!r}: use one of {', '.join(BUILTIN_DOMAINS)}, "
                         "'all', a FILE.jsonl or random:IN:OUT")
    texts = importlib.import_module(f"turbospec.audit.prompts.{domain}").PROMPTS
    return [Prompt(id=f"{domain}-{i:02d}", domain=domain, prompt=t) for i, t in enumerate(texts)]


def jsonl_prompts(path: str) -> list[Prompt]:
    if os.path.isdir(path):
        raise ValueError(f"--dataset {path!r} is a directory: pass a .jsonl file in it (one JSON object a line, "
                         "e.g. {\"prompt\": \"...\"}), or a built-in set such as code")
    if not os.path.isfile(path):
        raise ValueError(f"dataset file {path!r} does not exist: pass an existing .jsonl file")
    default_domain = os.path.splitext(os.path.basename(path))[0]
    prompts: list[Prompt] = []
    try:
        with open(path, encoding="utf-8-sig") as f:       # -sig: a byte order mark (Notepad) is skipped
            lines = f.readlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}): save it as UTF-8 "
                         "(Windows PowerShell's `>` writes UTF-16; use `Out-File -Encoding utf8`)") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno} is not valid JSON ({e}): one JSON object per line") from e
        prompts.append(_prompt_from_obj(obj, f"{path}:{lineno}", f"{default_domain}-{lineno}", default_domain))
    if not prompts:
        raise ValueError(f"{path} holds no prompts: add lines such as {{\"prompt\": \"...\"}}")
    return prompts


def _prompt_from_obj(obj: object, where: str, default_id: str, default_domain: str) -> Prompt:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object with `prompt` or `messages`")
    text, messages = obj.get("prompt"), obj.get("messages")
    if (text is None) == (messages is None):
        raise ValueError(f"{where}: give exactly one of `prompt` (a string) or `messages` (a chat list)")
    if text is not None and not isinstance(text, str):
        raise ValueError(f"{where}: `prompt` must be a string")
    if messages is not None:
        ok = isinstance(messages, list) and messages and all(
            isinstance(m, dict) and "role" in m and "content" in m for m in messages)
        if not ok:
            raise ValueError(f"{where}: `messages` must be a non-empty list of {{\"role\", \"content\"}} objects")
        messages = tuple(messages)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise ValueError(f"{where}: `max_tokens` must be a positive integer")
    return Prompt(id=str(obj.get("id", default_id)), domain=str(obj.get("domain", default_domain)),
                  prompt=text, messages=messages, max_tokens=max_tokens)


def random_prompts(spec: str, count: int, seed: int) -> list[Prompt]:
    """`random:IN:OUT`: IN random common words (about one token each in BPE vocabularies)."""
    parts = spec.split(":")
    try:
        n_in, n_out = int(parts[1]), int(parts[2])
        if len(parts) != 3 or n_in < 1 or n_out < 1:
            raise ValueError
    except (ValueError, IndexError):
        raise ValueError(f"bad random dataset {spec!r}: write random:IN:OUT with positive integers, "
                         "e.g. random:512:128") from None
    rng = random.Random(seed)
    out = []
    for i in range(count):
        words = " ".join(rng.choice(_RANDOM_WORDS) for _ in range(max(n_in - 8, 1)))
        text = f"Continue this list of words for a long time: {words}"
        out.append(Prompt(id=f"random-{i:04d}", domain="random", prompt=text, max_tokens=n_out))
    return out


def load_workload(spec: str, num_prompts: int, seed: int = 0) -> list[Prompt]:
    """The prompt list for `--dataset spec`, domains interleaved; at least one prompt per domain."""
    groups: list[list[Prompt]] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item == "all":
            groups.extend(builtin_prompts(d) for d in BUILTIN_DOMAINS)
        elif item.startswith("random:"):
            groups.append(random_prompts(item, num_prompts, seed))
        elif item.endswith(".jsonl") or os.path.sep in item:
            groups.append(jsonl_prompts(item))
        else:
            groups.append(builtin_prompts(item))
    if not groups:
        raise ValueError("--dataset is empty: pass e.g. code, all, prompts.jsonl or random:512:128")
    interleaved: list[Prompt] = []
    for i in range(max(len(g) for g in groups)):
        interleaved.extend(g[i] for g in groups if i < len(g))
    return interleaved


def take(prompts: list[Prompt], n: int) -> list[Prompt]:
    """The first n prompts, cycling when n exceeds the set (repeats hit prefix caches: say so)."""
    return [prompts[i % len(prompts)] for i in range(n)]
