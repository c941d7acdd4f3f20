"""A real sliding attention window (Mistral-7B-v0.1, Phi-3-mini-4k, Qwen2 / Qwen3 with
`use_sliding_window`): a query at position p sees keys p - W < j <= p, in the layers the config names,
with the context no longer capped to the window. The PyTorch path (CPU, and the reference of the Triton
kernels) against a brute-force reference for every step shape the engine makes (decode, chain verify,
prefill chunks with context, tree verify, long prefills split off), then whole models against
transformers and speculation against plain decoding."""
from __future__ import annotations

import pytest
import torch

from tests.test_attention_long_query import shuffled_tables
from tests.test_generate_parity import check_parity
from turbospec import LLM, SamplingParams
from turbospec.engine.forward_context import AttentionMetadata
from turbospec.layers.attention import PAD_MAX_QUERY_LEN, paged_attention_torch

BLOCK, KVH, H, D = 4, 2, 4, 8


def _tree(parents: list[int]) -> torch.Tensor:
    """[n, n] bool: node j sees itself and its ancestors (parents[j] < j, -1: the root's parent)."""
    n = len(parents)
    m = torch.eye(n, dtype=torch.bool)
    for j, p in enumerate(parents):
        if p >= 0:
            m[j] |= m[p]
    return m


def _step(q_lens: list[int], seq_lens: list[int], trees: list[list[int]] | None = None, seed: int = 0):
    """Random q and paged KV (tables in shuffled order); trees: per sequence its parents (a tree step)."""
    g = torch.Generator().manual_seed(seed)
    tables, num_blocks = shuffled_tables(seq_lens, BLOCK, g)
    Lq = max(q_lens)
    tree_mask = None
    if trees is not None:
        tree_mask = torch.zeros(len(q_lens), Lq, Lq, dtype=torch.bool)
        for s, parents in enumerate(trees):
            tree_mask[s, :len(parents), :len(parents)] = _tree(parents)
    meta = AttentionMetadata(torch.zeros(sum(q_lens), dtype=torch.long),
                             torch.tensor([0] + q_lens).cumsum(0).to(torch.int32),
                             torch.tensor(seq_lens, dtype=torch.int32), tables, Lq, max(seq_lens), tree_mask)
    k_cache = torch.randn(num_blocks, BLOCK, KVH, D, generator=g, dtype=torch.float64)
    v_cache = torch.randn(num_blocks, BLOCK, KVH, D, generator=g, dtype=torch.float64)
    return torch.randn(sum(q_lens), H, D, generator=g, dtype=torch.float64), k_cache, v_cache, meta


def reference(q, k_cache, v_cache, meta: AttentionMetadata, scale: float, window: int) -> torch.Tensor:
    """Each query on its own: the keys it may see (its context, then causal or tree ancestors among the
    new tokens) and, with a window, only those at positions > its own - window."""
    out = torch.empty_like(q)
    qsl = meta.query_start_loc.tolist()
    for s in range(meta.num_seqs):
        n, L = qsl[s + 1] - qsl[s], int(meta.seq_lens[s])
        ctx = L - n
        rows = torch.cat([meta.block_tables[s, j // BLOCK:j // BLOCK + 1].long() * BLOCK + j % BLOCK
                          for j in range(L)])
        k = k_cache.view(-1, KVH, D)[rows]                                          # [L, KVH, D]
        v = v_cache.view(-1, KVH, D)[rows]
        for i in range(n):
            if meta.tree_mask is None:
                seen, depth = [ctx + j for j in range(i + 1)], i
            else:
                anc = meta.tree_mask[s, i, :n].nonzero().flatten().tolist()
                seen, depth = [ctx + j for j in anc], len(anc) - 1
            keys = [j for j in list(range(ctx)) + seen if window <= 0 or j > ctx + depth - window]
            for h in range(H):
                kk, vv = k[keys, h // (H // KVH)], v[keys, h // (H // KVH)]         # [n_keys, D]
                p = torch.softmax(q[qsl[s] + i, h] @ kk.T * scale, -1)
                out[qsl[s] + i, h] = p @ vv
    return out


# (q_lens, seq_lens, trees): decodes; a chain verify; a mixed step (decode, a prefill chunk with
# context, a fresh prefill); rows whose window reaches back exactly to the first key
STEPS = {
    "decode": ([1, 1, 1], [3, 17, 40], None),
    "chain_verify": ([5, 5], [22, 9], None),
    "mixed": ([1, 12, 7], [30, 25, 7], None),
    "window_edge": ([6], [6], None),
    "tree": ([6, 4], [26, 12], [[-1, 0, 0, 1, 1, 3], [-1, 0, 1, 0]]),
}


@pytest.mark.parametrize("window", [1, 3, 8, 64])
@pytest.mark.parametrize("step", list(STEPS))
def test_window_against_brute_force(step, window):
    q_lens, seq_lens, trees = STEPS[step]
    q, kc, vc, meta = _step(q_lens, seq_lens, trees)
    got = paged_attention_torch(q, kc, vc, meta, 0.3, window=window)
    assert torch.allclose(got, reference(q, kc, vc, meta, 0.3, window), atol=1e-10)
    full = paged_attention_torch(q, kc, vc, meta, 0.3)
    if window >= max(seq_lens):                     # a window over every key is no window, exactly
        assert torch.equal(got, full)
    else:                                           # and a smaller one changes what it hides
        assert (got - full).abs().max() > 1e-3


def test_window_on_a_long_prefill_split_from_its_batch():
    """A prefill longer than PAD_MAX_QUERY_LEN beside decodes attends on its own (a second metadata):
    the window applies there too."""
    n = PAD_MAX_QUERY_LEN + 9
    q, kc, vc, meta = _step([1, n, 1], [20, n + 5, 7])
    got = paged_attention_torch(q, kc, vc, meta, 0.3, window=16)
    assert meta._torch_parts is not None                  # it took the split path
    assert torch.allclose(got, reference(q, kc, vc, meta, 0.3, 16), atol=1e-10)


def test_a_layer_without_a_window_shares_the_cached_mask():
    """Windowed and full layers in one model share the step's layout: each window's mask is built
    once and the full mask is left as it was."""
    q, kc, vc, meta = _step([3, 1], [20, 9])
    full = paged_attention_torch(q, kc, vc, meta, 0.3)
    a = paged_attention_torch(q, kc, vc, meta, 0.3, window=4)
    assert torch.equal(paged_attention_torch(q, kc, vc, meta, 0.3), full)
    assert torch.equal(paged_attention_torch(q, kc, vc, meta, 0.3, window=4), a)
    assert set(meta._torch_layout._windowed) == {4}


def test_qwen2_window_in_its_top_layers_matches_transformers(tiny_checkpoint_factory, hf_model_factory):
    """Qwen2 with use_sliding_window and max_window_layers 1: layer 0 full, layers 1-2 within 6 tokens
    (transformers' layer_types), prompts and generations past the window."""
    d = tiny_checkpoint_factory("qwen2", "window_qwen2", tokenizer=False, seed=31, use_sliding_window=True,
                                sliding_window=6, max_window_layers=1)
    cfg = LLM(str(d), device="cpu", dtype="float32").llm_engine.model_config
    assert [cfg.layer_window(i) for i in range(3)] == [None, 6, 6]
    check_parity(d, hf_model_factory, [[5, 17, 300, 42, 7, 1, 2, 3, 4], list(range(100, 125))], steps=20)


def test_qwen3_layer_types_match_transformers(tiny_checkpoint_factory, hf_model_factory):
    """Qwen3 with the windowed layers listed in layer_types (the middle one), window 5."""
    d = tiny_checkpoint_factory("qwen3", "window_qwen3", tokenizer=False, seed=32, use_sliding_window=True,
                                sliding_window=5, layer_types=["full_attention", "sliding_attention", "full_attention"])
    cfg = LLM(str(d), device="cpu", dtype="float32").llm_engine.model_config
    assert cfg.window_layers == (1,)
    check_parity(d, hf_model_factory, [list(range(200, 230)), [7, 7, 7]], steps=20)


@pytest.mark.parametrize("method", ["ngram", "draft_model"])
def test_speculation_past_the_window_equals_plain(method, tiny_checkpoint_factory):
    """Greedy n-gram and draft-model speculation on a windowed Mistral give plain decoding's tokens
    (verify chains and prefills with context, all past the window of 8)."""
    d = str(tiny_checkpoint_factory("mistral", "window_spec", tokenizer=False, seed=33))
    prompts = [{"prompt_token_ids": [5, 17, 300, 42, 7] * 4}, {"prompt_token_ids": list(range(100, 131))}]
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    plain = [o.outputs[0].token_ids for o in LLM(d, device="cpu", dtype="float32").generate(prompts, params)]
    spec_cfg = ({"method": "ngram", "num_speculative_tokens": 4} if method == "ngram"
                else {"method": "draft_model", "model": d, "num_speculative_tokens": 3})
    spec = LLM(d, device="cpu", dtype="float32", speculative_config=spec_cfg)
    assert [o.outputs[0].token_ids for o in spec.generate(prompts, params)] == plain
    assert spec.llm_engine.spec_stats.num_draft_tokens > 0
