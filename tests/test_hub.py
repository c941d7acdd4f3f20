"""Hugging Face ids resolve through the Hub cache (turbospec/hub.py), as vLLM's do: the model,
the tokenizer and the drafter, in `LLM`, `turbospec serve`, training, `bench --shape` and the
audit's `--model-config`. The cache here is a real huggingface_hub cache layout (refs/ and
snapshots/) that huggingface_hub itself resolves, offline (conftest sets HF_HUB_OFFLINE=1)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from turbospec import LLM, SamplingParams
from turbospec.hub import resolve_model

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"
MAIN, V1 = "1" * 40, "2" * 40                    # commit hashes of the two cached revisions
PROMPT = "def fibonacci(n):"


def _cache_repo(cache: Path, repo_id: str, src: Path, refs: dict[str, str], only: tuple[str, ...] = ()) -> None:
    """`src`'s files as the cached snapshot of `repo_id` at each ref (symlinks, as the Hub cache has)."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    for ref, commit in refs.items():
        (root / "refs" / ref).write_text(commit)
        snap = root / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if not only or f.name in only:
                (snap / f.name).symlink_to(f)


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("hub")
    _cache_repo(cache, "acme/codelm", MODELS / "codelm-12m", {"main": MAIN, "v1": V1})
    v1_gen = Path(_snapshot(cache, "acme/codelm", V1)) / "generation_config.json"
    v1_gen.unlink()                                   # revision v1 differs: sampling defaults of its own
    v1_gen.write_text(json.dumps({"eos_token_id": 0, "temperature": 0.3, "top_k": 7}))
    _cache_repo(cache, "acme/codelm-eagle3", MODELS / "codelm-12m-eagle3", {"main": MAIN})
    _cache_repo(cache, "acme/codelm-config", MODELS / "codelm-12m", {"main": MAIN}, only=("config.json",))
    return cache


def _snapshot(cache: Path, repo_id: str, commit: str) -> str:
    return str(cache / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit)


def test_an_id_resolves_to_its_cached_snapshot_at_the_revision(hub_cache):
    assert resolve_model("acme/codelm", download_dir=str(hub_cache)) == _snapshot(hub_cache, "acme/codelm", MAIN)
    assert resolve_model("acme/codelm", revision="v1", download_dir=str(hub_cache)) == \
        _snapshot(hub_cache, "acme/codelm", V1)
    assert resolve_model(str(MODELS / "codelm-12m")) == str(MODELS / "codelm-12m")      # a directory: itself


def test_llm_from_an_id_and_a_drafter_id_gives_the_local_models_tokens(hub_cache):
    params = SamplingParams(temperature=0.0, max_tokens=24)
    want = LLM(str(MODELS / "codelm-12m"), device="cpu").generate([PROMPT], params)[0].outputs[0].token_ids
    llm = LLM("acme/codelm", device="cpu", download_dir=str(hub_cache), tokenizer="acme/codelm",
              speculative_config={"method": "eagle3", "model": "acme/codelm-eagle3", "revision": "main",
                                  "num_speculative_tokens": 4})
    out = llm.generate([PROMPT], params)[0]
    assert out.outputs[0].token_ids == want and len(want) == 24
    assert llm.get_metrics()["spec_decode_num_accepted_tokens"] > 0       # the cached drafter drafted
    assert llm.get_default_sampling_params().top_k == -1
    v1 = LLM("acme/codelm", revision="v1", device="cpu", download_dir=str(hub_cache))
    assert (v1.get_default_sampling_params().temperature, v1.get_default_sampling_params().top_k) == (0.3, 7)


def test_missing_ids_and_revisions_say_what_to_do(hub_cache):
    with pytest.raises(ValueError) as e:
        LLM("acme/not-cached", device="cpu", download_dir=str(hub_cache))
    msg = str(e.value)
    assert "not in the cache" in msg and str(hub_cache) in msg and "Hub could not be reached" in msg
    assert "hf download acme/not-cached --local-dir models/not-cached" in msg
    with pytest.raises(ValueError) as e:
        resolve_model("acme/codelm", revision="v9", download_dir=str(hub_cache))
    assert "at revision 'v9'" in str(e.value)
    with pytest.raises(ValueError) as e:
        LLM(str(MODELS / "codelm-12m"), device="cpu", speculative_config={
            "method": "eagle3", "model": "acme/no-drafter", "num_speculative_tokens": 4})
    assert "speculative_config model 'acme/no-drafter'" in str(e.value)
    with pytest.raises(ValueError, match="nor a valid Hugging Face id"):
        resolve_model("acme/b..c", download_dir=str(hub_cache))
    with pytest.raises(ValueError) as e:
        resolve_model("acme/codelm", revision=3)
    assert "revision=3 must be a string" in str(e.value)
    with pytest.raises(ValueError) as e:                   # revision is a drafter key, not n-gram's
        LLM(str(MODELS / "codelm-12m"), device="cpu",
            speculative_config={"method": "ngram", "num_speculative_tokens": 2, "revision": "v1"})
    assert "revision='v1' is not supported" in str(e.value)


def test_a_drafter_repo_without_safetensors_gives_its_bin_weights(tmp_path):
    """A published EAGLE-3 head ships pytorch_model.bin, which the drafter loaders read; a target
    without safetensors is refused (online, before any weight is fetched: the first fetch asks for
    safetensors alone)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "pytorch_model.bin").write_bytes(b"weights")
    _cache_repo(tmp_path / "hub", "acme/old-head", src, {"main": MAIN})
    snap = resolve_model("acme/old-head", download_dir=str(tmp_path / "hub"), files="draft")
    assert sorted(os.listdir(snap)) == ["config.json", "pytorch_model.bin"]
    (tmp_path / "src" / "pytorch_model.bin").unlink()
    _cache_repo(tmp_path / "hub", "acme/no-weights", tmp_path / "src", {"main": MAIN})
    with pytest.raises(ValueError, match="has no \\*.safetensors weights on the Hugging Face Hub"):
        resolve_model("acme/no-weights", download_dir=str(tmp_path / "hub"))


def test_shapes_and_the_audit_take_an_id_config_alone(hub_cache, monkeypatch):
    """`bench --shape ID` and `audit --model-config ID` need config.json only (a cache that holds
    nothing else is enough); the shape is named after the repo, not the commit."""
    import huggingface_hub.constants as hf
    from turbospec.audit.roofline import load_model_bytes
    from turbospec.benchmarks.shapes import resolve_shape
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(hub_cache))
    name, cfg = resolve_shape("acme/codelm-config")
    assert name == "codelm-config" and cfg.vocab_size == 8192
    got, local = load_model_bytes("acme/codelm-config", "x"), load_model_bytes(str(MODELS / "codelm-12m"), "x")
    assert (got.dense_bytes, got.total_params) == (local.dense_bytes, local.total_params) and got.total_params > 1e7


def test_recipe_check_reads_an_ids_config(hub_cache, monkeypatch):
    """`recipe check --model ID` compares the cached config with the recipe's model."""
    import huggingface_hub.constants as hf
    from typer.testing import CliRunner

    from turbospec.cli import app
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(hub_cache))
    r = CliRunner().invoke(app, ["recipe", "check", "codelm-12m-cpu", "--model", "acme/codelm-config"])
    assert "OK    model         acme/codelm-config: Qwen3ForCausalLM, hidden_size 384" in r.output, r.output
    r = CliRunner().invoke(app, ["recipe", "check", "qwen3-8b-h200", "--model", "acme/codelm-config"])
    assert "FAIL  model         acme/codelm-config is not the recipe's model" in r.output, r.output


def test_the_audit_counts_tokens_with_an_ids_tokenizer(hub_cache, monkeypatch):
    """--tokenizer ID fetches its tokenizer files; without --tokenizer, a served model name that is an
    id already in the cache is used (never downloaded for that)."""
    import huggingface_hub.constants as hf
    from turbospec.audit.tokens import find_token_counter
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(hub_cache))
    text = "def fibonacci(n):\n    return n"
    local = find_token_counter(str(MODELS / "codelm-12m"), "x").count(text)
    assert find_token_counter("acme/codelm", "x").count(text) == local > 3
    assert find_token_counter(None, "acme/codelm").count(text) == local              # the cached served name
    assert find_token_counter(None, "acme/not-cached") is None                       # nothing fetched


def test_the_audit_reads_a_served_ids_own_config(hub_cache, monkeypatch):
    """A served name that is a Hugging Face id and no preset gives the ceiling from its own
    config.json, and a --model-config of another size is a caveat against it."""
    import huggingface_hub.constants as hf
    from turbospec.audit.roofline import load_model_bytes
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(hub_cache))
    local = load_model_bytes(str(MODELS / "codelm-12m"), "x")
    got = load_model_bytes(None, "acme/codelm-config")
    assert got.total_params == local.total_params and "Hugging Face Hub" in got.source
    wrong = load_model_bytes("qwen3-8b", "acme/codelm-config").mismatch
    assert wrong.startswith("the endpoint serves 'acme/codelm-config', whose config.json on the Hugging Face Hub "
                            "describes acme/codelm-config (12.6M parameters in bfloat16), but --model-config describes 8.19B"), wrong
    assert load_model_bytes(str(MODELS / "codelm-12m"), "acme/codelm-config").mismatch is None
    assert load_model_bytes(None, "acme/not-cached") is None                      # offline, not cached: none


def _cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "turbospec.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_generate_and_serve_take_an_id(hub_cache, tmp_path):
    from tests.serve.server_process import ServerProcess
    want = LLM(str(MODELS / "codelm-12m"), device="cpu").generate(
        [PROMPT], SamplingParams(temperature=0.0, max_tokens=12))[0].outputs[0].text
    r = _cli("generate", "acme/codelm", "--revision", "v1", "--tokenizer", "acme/codelm", "--tokenizer-revision",
             "v1", "--download-dir", str(hub_cache), "--device", "cpu", "--prompt", PROMPT, "--max-tokens", "12",
             cache=hub_cache.parent / "elsewhere")                  # the cache given by --download-dir
    assert r.returncode == 0 and r.stdout.startswith(f"{PROMPT}\n--- completion ---\n{want}\n[finish_reason: "), r.stderr
    server = ServerProcess("acme/codelm", tmp_path / "serve.log", "--download-dir", str(hub_cache),
                           name="acme/codelm")
    try:
        import httpx
        body = httpx.post(f"{server.url}/v1/completions", timeout=60, json={
            "model": "acme/codelm", "prompt": PROMPT, "max_tokens": 12, "temperature": 0}).json()
        assert body["choices"][0]["text"] == want and body["usage"]["completion_tokens"] == 12
        card = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"][0]
        assert (card["id"], card["root"]) == ("acme/codelm", "acme/codelm")     # the id, not its cache path
    finally:
        server.terminate()


def test_a_speculative_config_typo_is_refused_before_the_model_is_fetched(monkeypatch):
    """A 16 GB download (or load) before a misspelt key was refused: now the key comes first."""
    import turbospec.hub as hub
    fetched = []
    monkeypatch.setattr(hub, "_snapshot", lambda *a, **k: fetched.append(a) or "/nonexistent")
    with pytest.raises(ValueError, match="did you mean 'num_speculative_tokens'"):
        LLM("acme/big-model", device="cpu", speculative_config={"method": "ngram", "num_speculative_token": 4})
    assert fetched == []
