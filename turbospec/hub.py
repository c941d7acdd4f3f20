"""Model paths: a local directory, or a Hugging Face id fetched through the Hub cache (as vLLM does).

`resolve_model("Qwen/Qwen3-8B")` returns the cached snapshot directory, downloading what is missing
(huggingface_hub: `HF_TOKEN` for gated models, `HF_HOME` / `HF_HUB_CACHE` or `download_dir` for the
cache, `HF_HUB_OFFLINE=1` for the cache alone). An interrupted download resumes on the next call.
Only the files the engine reads are fetched: configs, tokenizer files and *.safetensors (a repo
without safetensors, such as a published EAGLE-3 head, gives its pytorch_model*.bin instead).
"""
from __future__ import annotations

import logging
import os
import re
from typing import Literal

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TOKENIZER = ["*.json", "*.jinja", "tokenizer.model", "*.tiktoken", "merges.txt", "vocab.txt"]
PATTERNS = {"weights": _TOKENIZER + ["*.safetensors"], "tokenizer": _TOKENIZER,
            "config": ["config.json", "generation_config.json"]}
_IGNORE = ["original/*", "consolidated*"]       # Meta's / Mistral's own copies of the same weights
Files = Literal["weights", "tokenizer", "config"]


def is_hub_id(text: str) -> bool:
    """"org/name" that is not a local path (a missing "dir/config.json" is a path, not a repo)."""
    return bool(_REPO_ID.match(text)) and not text.endswith((".json", ".safetensors")) and not os.path.exists(text)


def resolve_model(path: str | os.PathLike, what: str = "model", *, revision: str | None = None,
                  download_dir: str | None = None, files: Files = "weights") -> str:
    """A local directory for `path`: the directory itself, or a Hugging Face id's snapshot in the
    Hub cache. `files`: what the caller reads ("weights": everything a model needs; "tokenizer";
    "config": config.json alone, for shapes and rooflines). Anything else is a ValueError that says
    what to pass instead."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"{what} must be the path of a model directory or a Hugging Face id, "
                         f"not {type(path).__name__}")
    path = os.fspath(path)
    if os.path.isdir(path):
        return path
    if os.path.isfile(path):
        raise ValueError(f"{what} {path!r} is a file: pass the directory that holds config.json "
                         f"({os.path.dirname(path) or '.'!r})")
    if not is_hub_id(path):
        raise ValueError(f"{what} path {path!r} does not exist: pass a Hugging Face model directory "
                         "(config.json + *.safetensors) or a Hugging Face id such as Qwen/Qwen3-8B")
    for arg, value in (("revision", revision), ("download_dir", download_dir)):
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{arg}={value!r} must be a string (or None)")
    return _snapshot(path, what, revision, download_dir, files)


def _snapshot(repo_id: str, what: str, revision: str | None, download_dir: str | None, files: Files) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)
    at = f" at revision {revision!r}" if revision else ""
    local = os.path.join("models", repo_id.split("/")[1])
    not_here = (f"{what} {repo_id!r} is not a directory under {os.getcwd()!r} (if it is a relative path, run "
                "from the directory that holds it, or pass an absolute path)")
    log.info("%s %s: not a local directory, fetching it from the Hugging Face Hub cache%s", what, repo_id, at)
    try:
        snap = snapshot_download(repo_id, revision=revision, cache_dir=download_dir,
                                 allow_patterns=PATTERNS[files], ignore_patterns=_IGNORE)
        if files == "weights" and not _has(snap, ".safetensors"):
            snap = snapshot_download(repo_id, revision=revision, cache_dir=download_dir,
                                     allow_patterns=["pytorch_model*.bin"], ignore_patterns=_IGNORE)
    except GatedRepoError as e:
        raise ValueError(f"{what} {repo_id!r} is gated on the Hugging Face Hub: accept its license at "
                         f"https://huggingface.co/{repo_id}, then log in (`hf auth login`, or set HF_TOKEN)") from e
    except RepositoryNotFoundError as e:
        raise ValueError(f"{not_here}, nor a model on the Hugging Face Hub (check the spelling; a private "
                         "model needs `hf auth login` or HF_TOKEN)") from e
    except RevisionNotFoundError as e:
        raise ValueError(f"{what} {repo_id!r} has no revision {revision!r} on the Hugging Face Hub: pass a "
                         "branch, tag or commit it has") from e
    except LocalEntryNotFoundError as e:          # no network (or HF_HUB_OFFLINE=1) and not in the cache
        cache = download_dir or _cache_dir()
        raise ValueError(f"{not_here}; as a Hugging Face id it is not in the cache ({cache}){at} and the Hub "
                         f"could not be reached ({_first_line(e)}). Download it where the Hub can be reached "
                         f"(`hf download {repo_id} --local-dir {local}`) and pass {local!r}") from e
    except (HfHubHTTPError, OSError) as e:        # a server error, a full disk, a lost connection
        raise ValueError(f"{what} {repo_id!r}: downloading it from the Hugging Face Hub failed "
                         f"({_first_line(e)}); run again to resume, or download it with "
                         f"`hf download {repo_id} --local-dir {local}` and pass {local!r}") from e
    log.info("%s %s: %s", what, repo_id, snap)
    return snap


def cached_snapshot(repo_id: str) -> str | None:
    """`repo_id`'s snapshot if the Hub cache already holds one (nothing is downloaded), else None."""
    if not is_hub_id(repo_id):
        return None
    from huggingface_hub import snapshot_download
    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached (or an unreadable cache): the caller goes without
        return None


def _has(directory: str, suffix: str) -> bool:
    return any(name.endswith(suffix) for name in os.listdir(directory))


def _cache_dir() -> str:
    from huggingface_hub import constants
    return constants.HF_HUB_CACHE


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
