"""Shared fixtures: tiny random-weight Hugging Face checkpoints written with transformers'
`save_pretrained`, the repo's demo model, and helpers to build HF reference models.

Checkpoint fixtures (session scope, written once into a tmp dir; float32 weights; treat as
read-only — derive variants with `tiny_dir_factory`):

| fixture          | architecture        | vocab | tokenizer | notes                                         |
|------------------|---------------------|-------|-----------|-----------------------------------------------|
| `tiny_qwen3`     | Qwen3ForCausalLM    | 8192  | codelm's  | 3 layers, GQA 4/2, tied, sharded + index.json |
| `tiny_qwen3_moe` | Qwen3MoeForCausalLM | 8192  | codelm's  | parametrized over `MOE_VARIANTS` (3 variants; |
|                  |                     |       |           | one dir each: `tiny_qwen3_moe_factory(name)`) |
| `tiny_llama31`   | LlamaForCausalLM    | 512   | none      | rope llama3 x8, untied, GQA 4/1               |
| `codelm_dir`     | Qwen3ForCausalLM    | 8192  | yes       | models/codelm-12m (real weights, bf16)        |

Weights are randomised with std 0.1 (norm weights 1 +- 0.1, biases non-zero) so that logits are
far from flat and a wrongly loaded norm or bias shows. eos_token_id is 0 for the codelm tokenizer
fixtures, 2 for `tiny_llama31` (token-id prompts only).

Factories:
- `tiny_checkpoint_factory(arch, name=None, tokenizer=True, max_shard_size=None, **config)` writes a
  fresh checkpoint (arch in "qwen3" | "qwen3_moe" | "llama" | "qwen2" | "mistral" | "mixtral" |
  "qwen2_moe" | "phi3"; `config` overrides the defaults below; the last two: 2 layers, vocab 512, 8 experts top-2).
- `tiny_dir_factory(src_dir, config_updates=None, config_drop=(), edit_tensors=None)` copies a
  checkpoint into a new dir, edits config.json (update / drop keys) and optionally rewrites the
  weights as one `model.safetensors` via `edit_tensors(dict[name, tensor]) -> dict`.
- `hf_model_factory(model_dir)` -> transformers model, float32, eager attention and experts.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import pytest

# Hugging Face ids resolve through the Hub cache (turbospec/hub.py): the tests never download and
# never see the user's own cache. Set before anything imports huggingface_hub, which reads them once;
# subprocesses inherit them.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"turbospec-test-hub-{os.getpid()}")

import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):     # make test: one worker per core, so no intra-op threads
    torch.set_num_threads(1)                  # fighting the other worker for it

REPO = Path(__file__).resolve().parents[1]
CODELM_DIR = REPO / "models" / "codelm-12m"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

_COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, max_position_embeddings=2048, rms_norm_eps=1e-6)
DEFAULTS = {
    "qwen3": dict(_COMMON, vocab_size=8192, tie_word_embeddings=True, bos_token_id=0,
                  eos_token_id=0, pad_token_id=1, rope_parameters={"rope_type": "default",
                                                                   "rope_theta": 10000.0}),
    "qwen3_moe": dict(_COMMON, vocab_size=8192, tie_word_embeddings=True, bos_token_id=0,
                      eos_token_id=0, pad_token_id=1, num_experts=8, num_experts_per_tok=3,
                      moe_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
                      mlp_only_layers=[], rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    "llama": dict(_COMMON, vocab_size=512, num_key_value_heads=1, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2,
                  rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                   "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 256}),
}
# Qwen2 / Qwen2.5: q/k/v biases, no q/k norm, tied (the small sizes); its sliding window is off
DEFAULTS["qwen2"] = dict(_COMMON, vocab_size=8192, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0,
                         pad_token_id=1, use_sliding_window=False, sliding_window=64,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
# Mistral: Llama's layers with a sliding window (v0.1's 4096, here 8: every test prompt runs past it)
DEFAULTS["mistral"] = dict(_COMMON, vocab_size=512, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                           sliding_window=8, max_position_embeddings=2048,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
# Mixtral: Llama's attention, MoE in every layer (experts intermediate_size wide), top-k renormalised
DEFAULTS["mixtral"] = dict(_COMMON, num_hidden_layers=2, vocab_size=512, tie_word_embeddings=False, bos_token_id=1,
                           eos_token_id=2, num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
# Qwen2-MoE: Qwen2's attention (q/k/v biases), routed experts + a sigmoid-gated shared expert
DEFAULTS["qwen2_moe"] = dict(_COMMON, num_hidden_layers=2, vocab_size=512, tie_word_embeddings=False, bos_token_id=1,
                             eos_token_id=2, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48,
                             shared_expert_intermediate_size=96, norm_topk_prob=False, decoder_sparse_step=1,
                             mlp_only_layers=[], use_sliding_window=False,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
# Phi-3 / Phi-4: Llama's layers stored fused (qkv_proj, gate_up_proj), untied; no window, default rope
DEFAULTS["phi3"] = dict(_COMMON, vocab_size=512, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                        pad_token_id=0, sliding_window=None, original_max_position_embeddings=2048,
                        rope_parameters={"rope_type": "default", "rope_theta": 250000.0})
MOE_VARIANTS = {
    "topk_norm": dict(norm_topk_prob=True),
    "mlp_only_no_norm": dict(norm_topk_prob=False, mlp_only_layers=[1]),
    "sparse_step2": dict(norm_topk_prob=True, decoder_sparse_step=2),
}
_counter = itertools.count()


def randomize_(model: torch.nn.Module, seed: int, std: float = 0.1) -> None:
    """Non-trivial random weights: N(0, std) everywhere, 1 + N(0, std) for norm weights."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32) * std
            p.copy_(1.0 + noise if name.endswith("norm.weight") else noise)


def write_tiny_checkpoint(path: Path, arch: str, tokenizer: bool = True, max_shard_size=None,
                          seed: int = 0, **overrides) -> Path:
    import transformers
    cfg_cls, model_cls = {
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM),
        "qwen2_moe": (transformers.Qwen2MoeConfig, transformers.Qwen2MoeForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
    }[arch]
    config = cfg_cls(**{**DEFAULTS[arch], **overrides})
    torch.manual_seed(seed)
    model = model_cls(config).to(torch.float32)
    randomize_(model, seed)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **kwargs)
    if tokenizer:
        for fn in TOKENIZER_FILES:
            shutil.copy(CODELM_DIR / fn, path / fn)
    return path


@pytest.fixture(scope="session")
def tiny_checkpoint_factory(tmp_path_factory):
    def make(arch: str, name: str | None = None, tokenizer: bool = True, max_shard_size=None,
             seed: int = 0, **config) -> Path:
        path = tmp_path_factory.mktemp(name or f"tiny_{arch}_{next(_counter)}")
        return write_tiny_checkpoint(path, arch, tokenizer, max_shard_size, seed, **config)
    return make


@pytest.fixture(scope="session")
def tiny_qwen3(tiny_checkpoint_factory) -> Path:
    """Qwen3, 3 layers, vocab 8192 + codelm tokenizer, tied; sharded into several files."""
    return tiny_checkpoint_factory("qwen3", "tiny_qwen3", max_shard_size="1MB")


@pytest.fixture(scope="session")
def tiny_qwen3_moe_factory(tiny_checkpoint_factory):
    """variant name (a key of MOE_VARIANTS) -> checkpoint dir, written once per session."""
    cache: dict[str, Path] = {}

    def make(variant: str) -> Path:
        if variant not in cache:
            cache[variant] = tiny_checkpoint_factory("qwen3_moe", f"tiny_qwen3_moe_{variant}",
                                                     seed=1, **MOE_VARIANTS[variant])
        return cache[variant]
    return make


@pytest.fixture(scope="session", params=list(MOE_VARIANTS), ids=list(MOE_VARIANTS))
def tiny_qwen3_moe(request, tiny_qwen3_moe_factory) -> Path:
    """Qwen3-MoE, 8 experts top-3, vocab 8192 + tokenizer; per-expert layout (as HF saves it)."""
    return tiny_qwen3_moe_factory(request.param)


@pytest.fixture(scope="session")
def tiny_llama31(tiny_checkpoint_factory) -> Path:
    """Llama 3.1-style: rope llama3 factor 8 (original context 256), untied, vocab 512, no tokenizer."""
    return tiny_checkpoint_factory("llama", "tiny_llama31", tokenizer=False, seed=2)


@pytest.fixture(scope="session")
def codelm_dir() -> Path:
    if not (CODELM_DIR / "config.json").is_file():
        pytest.skip(f"demo model not found at {CODELM_DIR}")
    return CODELM_DIR


def read_checkpoint(model_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    out = {}
    for fn in sorted(os.listdir(model_dir)):
        if fn.endswith(".safetensors"):
            out.update(load_file(str(Path(model_dir) / fn)))
    return out


@pytest.fixture(scope="session")
def tiny_dir_factory(tmp_path_factory):
    def make(src_dir: Path, config_updates: dict | None = None, config_drop=(),
             edit_tensors=None) -> Path:
        from safetensors.torch import save_file
        dst = tmp_path_factory.mktemp(f"variant_{Path(src_dir).name}")
        for fn in os.listdir(src_dir):
            if edit_tensors is None or not (fn.endswith(".safetensors") or fn.endswith(".index.json")):
                shutil.copy(Path(src_dir) / fn, dst / fn)
        if edit_tensors is not None:
            tensors = edit_tensors(read_checkpoint(Path(src_dir)))
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(dst / "model.safetensors"))
        with open(dst / "config.json") as f:
            cfg = json.load(f)
        cfg.update(config_updates or {})
        for key in config_drop:
            cfg.pop(key, None)
        with open(dst / "config.json", "w") as f:
            json.dump(cfg, f, indent=2)
        return dst
    return make


def load_hf_model(model_dir: Path):
    """transformers reference in float32 with eager attention (and eager experts for MoE)."""
    import transformers
    with open(Path(model_dir) / "config.json") as f:
        arch = json.load(f)["architectures"][0]
    is_moe = "Moe" in arch or "Mixtral" in arch
    kwargs = {"experts_implementation": "eager"} if is_moe else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", **kwargs)
    return model.eval()


@pytest.fixture(scope="session")
def hf_model_factory():
    return load_hf_model


def prefill(model, ids: list[int], aux_layers: tuple[int, ...] = ()):
    """One full prefill of `ids` through a turbospec model (a fresh KV pool, block 0 the null
    block): the model's output — hidden [T, H], or (hidden, aux list) with `aux_layers`."""
    from turbospec.engine.forward_context import AttentionMetadata, forward_context
    from turbospec.layers.attention import Attention
    T, bs = len(ids), 16
    nb = T // bs + 2
    for m in model.modules():
        if isinstance(m, Attention):
            m.k_cache = torch.zeros(nb, bs, m.num_kv_heads, m.head_dim)
            m.v_cache = torch.zeros(nb, bs, m.num_kv_heads, m.head_dim)
    meta = AttentionMetadata(
        slot_mapping=torch.arange(T) + bs, query_start_loc=torch.tensor([0, T], dtype=torch.int32),
        seq_lens=torch.tensor([T], dtype=torch.int32),
        block_tables=torch.arange(1, nb, dtype=torch.int32)[None], max_query_len=T, max_seq_len=T)
    model.aux_hidden_state_layers = aux_layers
    try:
        with torch.no_grad(), forward_context(meta):
            return model(torch.tensor(ids), torch.arange(T))
    finally:
        model.aux_hidden_state_layers = ()


@pytest.fixture(scope="module")
def one_thread():
    """Small tensors on a shared machine: one intra-op thread is several times faster (a module
    takes it with `pytestmark = pytest.mark.usefixtures("one_thread")`)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
