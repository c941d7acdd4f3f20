"""Model paths: a local directory, or a Hugging Face id fetched through the Hub cache (as vLLM does).

`resolve_model("Qwen/Qwen3-8B")` returns the cached snapshot directory, downloading what is missing
(huggingface_hub: `HF_TOKEN` for gated models, `HF_HOME` / `HF_HUB_CACHE` or `download_dir` for the
cache, `HF_HUB_OFFLINE=1` for the cache alone). An interrupted download resumes on the next call.
Only the files the engine reads are fetched: configs, tokenizer files and *.safetensors. A drafter
repo without safetensors (published EAGLE-3 heads ship pytorch_model.bin) gives its *.bin files; a
target without safetensors is refused before any weight is fetched (the loader reads safetensors).
"""
from __future__ import annotations

import logging
import os
import re
from typing import Literal

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TOKENIZER = ["*.json", "*.jinja", "tokenizer.model", "*.tiktoken", "merges.txt", "vocab.txt"]
PATTERNS = {"weights": _TOKENIZER + ["*.safetensors"], "draft": _TOKENIZER + ["*.safetensors"],
            "tokenizer": _TOKENIZER, "config": ["config.json", "generation_config.json"]}
_IGNORE = ["original/*", "consolidated*"]       # Meta's / Mistral's own copies of the same weights
Files = Literal["weights", "draft", "tokenizer", "config"]


def is_hub_id(text: str) -> bool:
    """"org/name" that is not a local path (a missing "dir/config.json" is a path, not a repo)."""
    return bool(_REPO_ID.match(text)) and not text.endswith((".json", ".safetensors")) and not os.path.exists(text)


def resolve_model(path: str | os.PathLike, what: str = "model", *, revision: str | None = None,
                  download_dir: str | None = None, files: Files = "weights") -> str:
    """A local directory for `path`: the directory itself, or a Hugging Face id's snapshot in the
    Hub cache. `files`: what the caller reads ("weights": everything a model needs; "draft": the
    same, or *.bin weights when the repo has no safetensors; "tokenizer"; "config": config.json
    alone, for shapes and rooflines). Anything else is a ValueError that says what to pass instead."""
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
    from huggingface_hub import errors, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, HFValidationError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)
    incomplete = getattr(errors, "IncompleteSnapshotError", None) or ()      # huggingface_hub >= 1.x
    at = f" at revision {revision!r}" if revision else ""
    local = os.path.join("models", repo_id.split("/")[1])
    not_here = (f"{what} {repo_id!r} is not a directory under {os.getcwd()!r} (if it is a relative path, run "
                "from the directory that holds it, or pass an absolute path)")
    log.info("%s %s: not a local directory, fetching it from the Hugging Face Hub cache%s", what, repo_id, at)
    try:
        snap = snapshot_download(repo_id, revision=revision, cache_dir=download_dir,
                                 allow_patterns=PATTERNS[files], ignore_patterns=_IGNORE)
        if files == "draft" and not _has(snap, ".safetensors"):
            snap = snapshot_download(repo_id, revision=revision, cache_dir=download_dir,
                                     allow_patterns=["pytorch_model*.bin"], ignore_patterns=_IGNORE)
    except HFValidationError as e:
        raise ValueError(f"{not_here}, nor a valid Hugging Face id ({_first_line(e)})") from e
    except GatedRepoError as e:
        raise ValueError(f"{what} {repo_id!r} is gated on the Hugging Face Hub: accept its license at "
                         f"https://huggingface.co/{repo_id}, then log in (`hf auth login`, or set HF_TOKEN)") from e
    except RepositoryNotFoundError as e:
        raise ValueError(f"{not_here}, nor a model on the Hugging Face Hub (check the spelling; a private "
                         "model needs `hf auth login` or HF_TOKEN)") from e
    except RevisionNotFoundError as e:
        raise ValueError(f"{what} {repo_id!r} has no revision {revision!r} on the Hugging Face Hub: pass a "
                         "branch, tag or commit it has") from e
    except incomplete as e:                       # no network, and the cache holds part of the files
        raise ValueError(f"{what} {repo_id!r}{at}: the Hugging Face cache ({download_dir or _cache_dir()}) holds only "
                         f"part of the files needed and the Hub could not be reached ({_first_line(e)}): run "
                         f"where the Hub can be reached to complete it, or `hf download {repo_id} --local-dir "
                         f"{local}` and pass {local!r}") from e
    except LocalEntryNotFoundError as e:          # no network (or HF_HUB_OFFLINE=1) and not in the cache
        cache = download_dir or _cache_dir()
        raise ValueError(f"{not_here}; as a Hugging Face id it is not in the cache ({cache}){at} and the Hub "
                         f"could not be reached ({_first_line(e)}). Download it where the Hub can be reached "
                         f"(`hf download {repo_id} --local-dir {local}`) and pass {local!r}") from e
    except (HfHubHTTPError, OSError) as e:        # a server error, a full disk, a lost connection
        raise ValueError(f"{what} {repo_id!r}: downloading it from the Hugging Face Hub failed "
                         f"({_first_line(e)}); run again to resume, or download it with "
                         f"`hf download {repo_id} --local-dir {local}` and pass {local!r}") from e
    if files in ("weights", "draft") and not _has(snap, ".safetensors") and not _has(snap, ".bin"):
        raise ValueError(f"{what} {repo_id!r}{at} has no *.safetensors weights on the Hugging Face Hub: turbospec "
                         "loads safetensors checkpoints (convert it with transformers' save_pretrained, or pick "
                         "a repo that ships safetensors)")
    log.info("%s %s: %s", what, repo_id, snap)
    return snap


def cached_file(repo_id: str, filename: str) -> str | None:
    """`filename` of `repo_id` if the Hub cache already holds it (nothing is downloaded), else None.
    A file lookup, not a snapshot's: turbospec's own downloads leave snapshots huggingface_hub
    calls incomplete (README, .gitattributes, ... are never fetched)."""
    if not is_hub_id(repo_id):
        return None
    from huggingface_hub import try_to_load_from_cache
    try:
        path = try_to_load_from_cache(repo_id, filename)
    except Exception:  # noqa: BLE001 - an unreadable cache: the caller goes without
        return None
    return path if isinstance(path, str) and os.path.isfile(path) else None


def _has(directory: str, suffix: str) -> bool:
    return any(name.endswith(suffix) for name in os.listdir(directory))


def _cache_dir() -> str:
    from huggingface_hub import constants
    return constants.HF_HUB_CACHE


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
