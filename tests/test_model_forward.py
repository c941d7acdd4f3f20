"""Model forward parity with transformers (CPU, float32): packed prefill, paged decode, capture."""
from __future__ import annotations

import random

import pytest
import torch

from turbospec.engine.forward_context import AttentionMetadata, forward_context
from turbospec.layers.attention import Attention
from turbospec.model_loader import load_model

from tests.conftest import MOE_VARIANTS

ATOL = 1e-4


class PagedKV:
    """A KV pool for every attention layer of `model` (block 0 = null block, blocks handed out in
    shuffled order so block tables are not contiguous) and per-step metadata for packed tokens."""

    def __init__(self, model, num_blocks: int = 48, block_size: int = 4, seed: int = 0):
        self.block_size = block_size
        for m in model.modules():
            if isinstance(m, Attention):
                shape = (num_blocks, block_size, m.num_kv_heads, m.head_dim)
                m.k_cache, m.v_cache = torch.zeros(shape), torch.zeros(shape)
        self.free = list(range(1, num_blocks))
        random.Random(seed).shuffle(self.free)
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def step(self, chunks: dict[int, list[int]]):
        """chunks: seq id -> new token ids. Returns input_ids [T], positions [T], metadata."""
        ids, pos, slots, qsl, seq_lens, tables = [], [], [], [0], [], []
        for s, toks in chunks.items():
            ctx = self.lens.get(s, 0)
            table = self.tables.setdefault(s, [])
            total = ctx + len(toks)
            while len(table) * self.block_size < total:
                table.append(self.free.pop())
            for p in range(ctx, total):
                slots.append(table[p // self.block_size] * self.block_size + p % self.block_size)
            ids += toks
            pos += range(ctx, total)
            qsl.append(qsl[-1] + len(toks))
            seq_lens.append(total)
            tables.append(list(table))
            self.lens[s] = total
        width = max(len(t) for t in tables)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            query_start_loc=torch.tensor(qsl, dtype=torch.int32),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.int32),
            max_query_len=max(len(t) for t in chunks.values()), max_seq_len=max(seq_lens),
            is_decode_only=all(len(t) == 1 for t in chunks.values()))
        return torch.tensor(ids, dtype=torch.int64), torch.tensor(pos, dtype=torch.int64), meta


def run(model, kv: PagedKV, chunks: dict[int, list[int]]):
    input_ids, positions, meta = kv.step(chunks)
    with torch.no_grad(), forward_context(meta):
        out = model(input_ids, positions)
        hidden = out[0] if isinstance(out, tuple) else out
        return model.compute_logits(hidden), out


def split_by_seq(x: torch.Tensor, chunks: dict[int, list[int]]) -> dict[int, torch.Tensor]:
    out, start = {}, 0
    for s, toks in chunks.items():
        out[s] = x[start:start + len(toks)]
        start += len(toks)
    return out


def prompts(vocab: int, lengths=(11, 7), seed: int = 0) -> dict[int, list[int]]:
    g = torch.Generator().manual_seed(seed)
    return {s: torch.randint(2, vocab, (n,), generator=g).tolist() for s, n in enumerate(lengths)}


ARCHS = ["qwen3", "qwen3_bias_untied", "llama31", "llama_linear", "qwen2", "mistral"] + [
    f"moe_{v}" for v in MOE_VARIANTS]


@pytest.fixture(params=ARCHS)
def arch_dir(request, tiny_checkpoint_factory, tiny_qwen3_moe_factory):
    name = request.param
    if name.startswith("moe_"):
        return tiny_qwen3_moe_factory(name[4:])
    if name == "qwen3_bias_untied":
        return tiny_checkpoint_factory("qwen3", "qwen3_bias_untied", tokenizer=False, seed=3,
                                       vocab_size=300, attention_bias=True, tie_word_embeddings=False)
    if name == "llama_linear":
        return tiny_checkpoint_factory("llama", "llama_linear", tokenizer=False, seed=4,
                                       rope_parameters={"rope_type": "linear", "factor": 4.0,
                                                        "rope_theta": 10000.0})
    if name in ("qwen2", "mistral"):
        return tiny_checkpoint_factory(name, name, tokenizer=False, seed=5)
    return request.getfixturevalue({"qwen3": "tiny_qwen3", "llama31": "tiny_llama31"}[name])


def hf_logits(hf, ids: list[int], **kwargs):
    with torch.no_grad():
        return hf(torch.tensor([ids]), **kwargs)


def test_packed_prefill_matches_hf(arch_dir, hf_model_factory):
    model = load_model(str(arch_dir), "cpu", torch.float32)
    hf = hf_model_factory(arch_dir)
    chunks = prompts(model.config.vocab_size)
    logits, _ = run(model, PagedKV(model), chunks)
    assert logits.dtype == torch.float32 and logits.shape[1] == model.config.vocab_size
    for s, got in split_by_seq(logits, chunks).items():
        ref = hf_logits(hf, chunks[s]).logits[0]
        assert ref.std() > 0.3, "tiny model logits are flat: the fixture weights are too small"
        err = (got - ref).abs().max().item()
        assert err <= ATOL, f"seq {s}: max |logits - HF| = {err:.2e}"


def test_paged_decode_matches_full_forward(arch_dir):
    """Prefill, then a chunk with context, then token-by-token decode of two sequences of different
    lengths through the paged cache: logits equal those of one full forward."""
    model = load_model(str(arch_dir), "cpu", torch.float32)
    full = prompts(model.config.vocab_size, lengths=(14, 10), seed=1)
    ref, _ = run(model, PagedKV(model, seed=1), full)
    ref = split_by_seq(ref, full)

    kv = PagedKV(model, seed=2)
    got: dict[int, list[torch.Tensor]] = {0: [], 1: []}
    schedule = [{0: (0, 5), 1: (0, 3)}, {0: (5, 8), 1: (3, 4)}]       # prefill, then chunk + decode
    schedule += [{s: (p, p + 1) for s in full if p < len(full[s])} for p in range(8, 14)]
    schedule.insert(2, {1: (4, 8)})                                     # seq 1 catches up alone
    for step in schedule:
        chunks = {s: full[s][a:b] for s, (a, b) in step.items()}
        logits, _ = run(model, kv, chunks)
        for s, x in split_by_seq(logits, chunks).items():
            got[s].append(x)
    for s in full:
        out = torch.cat(got[s])
        assert out.shape == ref[s].shape
        err = (out - ref[s]).abs().max().item()
        assert err <= ATOL, f"seq {s}: paged decode differs from full forward by {err:.2e}"


def test_hidden_state_capture_matches_hf(arch_dir, hf_model_factory):
    model = load_model(str(arch_dir), "cpu", torch.float32)
    hf = hf_model_factory(arch_dir)
    L = model.config.num_hidden_layers
    model.aux_hidden_state_layers = (L, 0, 2, 1)                       # any order, returned as given
    chunks = prompts(model.config.vocab_size, lengths=(9,))
    _, (hidden, aux) = run(model, PagedKV(model), chunks)
    assert [a.shape for a in aux] == [hidden.shape] * 4
    ref = hf_logits(hf, chunks[0], output_hidden_states=True).hidden_states
    for i, a in zip(model.aux_hidden_state_layers, aux):
        if i < L:
            err = (a - ref[i][0]).abs().max().item()
            assert err <= ATOL, f"aux layer {i}: differs from HF hidden_states[{i}] by {err:.2e}"
    # id L is the last layer's output before the final norm: normed, it is the returned hidden
    torch.testing.assert_close(model.model.norm(aux[0]), hidden, atol=1e-6, rtol=0)
    torch.testing.assert_close(ref[L][0], hidden, atol=ATOL, rtol=0)   # HF reports it normed
    with pytest.raises(ValueError, match="out of range"):
        model.aux_hidden_state_layers = (L + 1,)
    model.aux_hidden_state_layers = ()
    _, out = run(model, PagedKV(model), chunks)
    assert isinstance(out, torch.Tensor)


def test_codelm_prefill_matches_hf(codelm_dir, hf_model_factory):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(codelm_dir))
    ids = tok("def fibonacci(n):\n    if n < 2:\n        return n\n    return")["input_ids"]
    model = load_model(str(codelm_dir), "cpu", torch.float32)
    assert model.lm_head.weight is model.get_input_embeddings().weight       # tied
    logits, _ = run(model, PagedKV(model, num_blocks=16, block_size=16), {0: ids})
    ref = hf_logits(hf_model_factory(codelm_dir), ids).logits[0]
    err = (logits - ref).abs().max().item()
    assert err <= ATOL, f"codelm-12m logits differ from HF by {err:.2e}"
    assert torch.equal(logits.argmax(-1), ref.argmax(-1))
