"""Optional on-disk cache of target features (`--feature-cache DIR`): one file per training sample.

A cached feature belongs to the run setting that wrote it. Which sample the key `train-i` names
depends on the data file, its tokenization (chat template, --max-seq-len, --truncate,
--loss-on-prompt) and the held-out split (--seed, --heldout-fraction, the held-out cap); its values
depend on the target's weights, its dtype and the captured layers. `manifest.json` records all of
them (files by path, size and modification time; the target's config.json, its tokenizer files
and the --chat-template file by content hash: a new tokenizer.json or chat template tokenizes the
same data into other samples, with the same size and modification time of the data). A directory
written for another setting is refused before the data is read: it used to be reused silently
(stale features of other samples) or to fail with a shape traceback. Each entry read is also
checked against the sample's length and the feature widths.
"""
from __future__ import annotations

import hashlib
import json
import os

import torch

from turbospec.train.features import Features, TargetModel

MANIFEST = "manifest.json"
FORMAT = 2                      # 2: the tokenizer files and the chat template by content hash
# what `load_tokenizer` (transformers' AutoTokenizer) reads from a model directory, and *.tiktoken
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "merges.txt",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_id(path: str) -> dict:
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def target_identity(target_dir: str) -> dict:
    """Path, config.json hash and each weight file's name, size and modification time."""
    from turbospec.model_loader import checkpoint_files
    with open(os.path.join(target_dir, "config.json"), "rb") as f:
        config_hash = hashlib.sha256(f.read()).hexdigest()
    weights = [{"name": os.path.basename(p), "size": os.stat(p).st_size, "mtime_ns": os.stat(p).st_mtime_ns}
               for p in checkpoint_files(target_dir)]
    return {"path": os.path.realpath(target_dir), "config_sha256": config_hash, "weights": weights}


def tokenizer_identity(target_dir: str, chat_template: str | None) -> dict:
    """Content hash of each tokenizer file of the target that exists, and of the --chat-template file:
    they decide how the data is tokenized, so which sample `train-i` is and how long."""
    names = [n for n in TOKENIZER_FILES if os.path.isfile(os.path.join(target_dir, n))]
    names += sorted(n for n in os.listdir(target_dir) if n.endswith(".tiktoken"))
    files = {n: _sha256(os.path.join(target_dir, n)) for n in names}
    if chat_template is not None:
        files["--chat-template"] = _sha256(chat_template)
    return {"path": os.path.realpath(target_dir), "files": files}


def cache_key(cfg, layers: tuple[int, ...], target_dtype: torch.dtype) -> dict:
    """Everything the cached features of sample `train-i` depend on (cfg: a TrainConfig whose
    max_seq_len is resolved)."""
    key = {"format": FORMAT, "method": cfg.method, "target": target_identity(cfg.target),
           "target_dtype": str(target_dtype).removeprefix("torch."), "capture_layers": list(layers),
           "data": _file_id(cfg.data), "tokenizer": tokenizer_identity(cfg.target, cfg.chat_template),
           "chat_template": os.path.realpath(cfg.chat_template) if cfg.chat_template else None,
           "max_seq_len": cfg.max_seq_len, "truncate": cfg.truncate, "loss_on_prompt": cfg.loss_on_prompt,
           "seed": cfg.seed, "heldout_fraction": cfg.heldout_fraction, "heldout_max": cfg.heldout_max}
    return json.loads(json.dumps(key))          # as the manifest reads back (lists, not tuples)


def _differences(saved: dict, now: dict) -> list[str]:
    if saved.get("format") != now.get("format"):
        return [f"cache format {saved.get('format')!r} -> {now.get('format')!r}: written by another turbospec "
                "version"]
    out = []
    for k in sorted(set(saved) | set(now)):
        a, b = saved.get(k), now.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            if a.get("path") != b.get("path"):
                out.append(f"{k} {a.get('path')!r} -> {b.get('path')!r}")
            elif isinstance(a.get("files"), dict) and isinstance(b.get("files"), dict):
                fa, fb = a["files"], b["files"]
                changed = sorted(n for n in set(fa) | set(fb) if fa.get(n) != fb.get(n))
                out.append(f"{k} {b.get('path')!r}: {', '.join(changed)} changed since (content hash)")
            else:
                out.append(f"{k} {b.get('path')!r} changed since (size, modification time or config)")
        else:
            out.append(f"{k} {a!r} -> {b!r}")
    return out


def check_cache_dir(path: str, key: dict) -> None:
    """Refuse a cache directory written for another setting; a missing or empty one is fine."""
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise ValueError(f"--feature-cache {path!r} is a file: pass a directory (created if missing)")
    manifest = os.path.join(path, MANIFEST)
    if not os.path.isfile(manifest):
        if os.listdir(path):
            raise ValueError(f"--feature-cache {path!r} holds files but no {MANIFEST}, so nothing says which run "
                             "they belong to: delete it or pass another (new or empty) directory")
        return
    try:
        with open(manifest) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"--feature-cache {path!r}: its {MANIFEST} cannot be read ({e}): delete the directory "
                         "or pass another one") from None
    if saved != key:
        diff = _differences(saved if isinstance(saved, dict) else {}, key)
        raise ValueError(f"--feature-cache {path!r} was written for another run ({'; '.join(diff[:4])}): its "
                         "features are not this run's; delete it or pass another directory")


class FeatureCache:
    """One file per sample (aux and hidden in the target dtype) under a checked manifest. Prints the
    size it will take before the first write; never required."""

    def __init__(self, path: str, key: dict, num_tokens: int, aux_width: int, hidden_size: int, itemsize: int,
                 log=print):
        check_cache_dir(path, key)
        self.path, self.aux_width, self.hidden_size = path, aux_width, hidden_size
        os.makedirs(path, exist_ok=True)
        manifest = os.path.join(path, MANIFEST)
        if not os.path.isfile(manifest):
            tmp = f"{manifest}.{os.getpid()}.tmp"              # ranks write the same content
            with open(tmp, "w") as f:
                json.dump(key, f, indent=1)
            os.replace(tmp, manifest)
        self.estimate_bytes = num_tokens * (aux_width + hidden_size) * itemsize
        log(f"feature cache {path}: about {self.estimate_bytes / 2**30:.2f} GiB for {num_tokens} tokens x "
            f"{aux_width + hidden_size} values x {itemsize} bytes (delete the directory to reclaim it)")

    def _file(self, key: str) -> str:
        return os.path.join(self.path, f"{key}.pt")

    def get(self, key: str, length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        f = self._file(key)
        if not os.path.isfile(f):
            return None
        try:
            aux, hidden = torch.load(f, weights_only=True)
        except Exception as e:                  # a truncated file (disk full) or not ours
            raise ValueError(f"--feature-cache {self.path!r}: {f} cannot be read ({type(e).__name__}): delete "
                             "the directory or pass another one") from None
        want = ((length, self.aux_width), (length, self.hidden_size))
        if (tuple(aux.shape), tuple(hidden.shape)) != want:
            raise ValueError(f"--feature-cache {self.path!r}: {f} holds features of shapes {tuple(aux.shape)} / "
                             f"{tuple(hidden.shape)}, this sample needs {want[0]} / {want[1]}: the cache is stale "
                             "or damaged; delete it or pass another directory")
        return aux, hidden

    def put(self, key: str, aux: torch.Tensor, hidden: torch.Tensor) -> None:
        tmp = self._file(key) + ".tmp"
        torch.save((aux.cpu(), hidden.cpu()), tmp)
        os.replace(tmp, self._file(key))


def cached_features(target: TargetModel, cache: FeatureCache | None, batch, sample_keys: list[str],
                    host_lengths: torch.Tensor | None = None) -> Features:
    """Features of a batch through the cache (per sample), computing only the missing ones."""
    lengths = host_lengths if host_lengths is not None else batch.lengths.cpu()
    if cache is None:
        return target.features(batch.input_ids, lengths)
    got = [cache.get(k, int(n)) for k, n in zip(sample_keys, lengths.tolist())]
    if any(g is None for g in got):
        feats = target.features(batch.input_ids, lengths)
        for r, (k, g) in enumerate(zip(sample_keys, got)):
            if g is None:
                n = int(lengths[r])
                cache.put(k, feats.aux[r, :n], feats.hidden[r, :n])
        return feats
    B, S = batch.input_ids.shape
    aux = got[0][0].new_zeros(B, S, cache.aux_width)
    hid = got[0][1].new_zeros(B, S, cache.hidden_size)
    for r, (a, h) in enumerate(got):
        aux[r, :a.shape[0]], hid[r, :h.shape[0]] = a, h
    return Features(aux.to(target.device), hid.to(target.device))
