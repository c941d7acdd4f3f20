"""EAGLE-3 and DFlash proposers on a tiny random Qwen3 target (CPU, float32).

Target features come from a real `turbospec.models` forward; drafts are checked against plain
full-sequence forwards of the draft module (no cache, no padding, no batching), so incremental
caching, catch-up, padding and the tree search are all compared with a recompute."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("turbospec.models.qwen3")

from tests.conftest import prefill, randomize_  # noqa: E402
from turbospec.config import ModelConfig  # noqa: E402
from turbospec.engine.sequence import Sequence  # noqa: E402
from turbospec.layers.sampler import SamplingTensors, compute_probs  # noqa: E402
from turbospec.models.dflash_draft import DFlashConfig, DFlashDraftModel, save_dflash  # noqa: E402
from turbospec.models.eagle3_config import Eagle3Config  # noqa: E402
from turbospec.models.eagle3_draft import Eagle3DraftModel, save_eagle3  # noqa: E402
from turbospec.models.qwen3 import Qwen3ForCausalLM  # noqa: E402
from turbospec.sampling_params import SamplingParams  # noqa: E402
from turbospec.spec.dflash import DFlashProposer, build_dflash_proposer  # noqa: E402
from turbospec.spec.eagle3 import Eagle3Proposer, build_eagle3_proposer  # noqa: E402
from turbospec.spec.proposer import TargetFeatures  # noqa: E402

VT, HT, LT, VD = 64, 32, 6, 16
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def target():
    cfg = ModelConfig.from_dict(dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", vocab_size=VT, hidden_size=HT,
        intermediate_size=64, num_hidden_layers=LT, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, tie_word_embeddings=True, max_position_embeddings=256, torch_dtype="float32"))
    model = Qwen3ForCausalLM(cfg)
    randomize_(model, seed=0, std=0.2)
    return model, cfg


_AUX_CACHE: dict = {}


def target_aux(model, ids: list[int], layers) -> torch.Tensor:
    """One prefill of the whole sequence -> captured streams [T, len(layers) * H] (memoised)."""
    key = (id(model), tuple(ids), tuple(layers))
    if key not in _AUX_CACHE:
        _AUX_CACHE[key] = _target_aux(model, ids, layers)
    return _AUX_CACHE[key]


def _target_aux(model, ids: list[int], layers) -> torch.Tensor:
    _, aux = prefill(model, ids, tuple(layers))
    return torch.cat(aux, dim=-1)


def make_seq(ids, temperature=0.0, top_k=-1, seed=None) -> Sequence:
    p = SamplingParams(temperature=temperature, top_k=top_k, seed=seed, max_tokens=200)
    return Sequence("r", None, list(ids), p, CPU, max_model_len=256)


def feed(prop, seq, model, chunk=None):
    """Observe every feature the engine would have handed over (positions up to len-2)."""
    st = prop.states.get(seq.seq_id)
    start = st.num_features if st is not None else 0
    aux = target_aux(model, seq.token_ids, prop.aux_hidden_state_layers)
    end = len(seq) - 1
    step = chunk or (end - start)
    for s in range(start, end, step):
        e = min(end, s + step)
        prop.observe(seq, TargetFeatures(s, seq.token_ids[s:e], aux[s:e], torch.zeros(e - s, HT)))


def rand_ids(n, seed):
    return torch.randint(2, VT, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# ----------------------------------------------------------------------------- EAGLE-3

@pytest.fixture(scope="module")
def eagle3_dir(tmp_path_factory):
    cfg = Eagle3Config.from_dict(dict(
        hidden_size=HT, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
        vocab_size=VT, draft_vocab_size=VD, target_hidden_size=HT,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}))
    m = Eagle3DraftModel(cfg)
    randomize_(m, seed=1, std=0.3)
    used = torch.randperm(VT, generator=torch.Generator().manual_seed(2))[:VD].sort().values
    m.d2t.copy_(used - torch.arange(VD))
    m.t2d.zero_()
    m.t2d[used] = True
    d = tmp_path_factory.mktemp("eagle3")
    save_eagle3(m, str(d), {"num_hidden_layers": LT})
    return str(d)


def eagle3(target, eagle3_dir, k=4, tree=None) -> Eagle3Proposer:
    model, cfg = target
    return Eagle3Proposer(model, cfg, eagle3_dir, k, CPU, torch.float32, tree)


def ref_next_logits(prop, model, ids, path):
    """Draft logits [Vd] for the token after ids + path, by a full forward (no cache)."""
    draft = prop.draft
    aux = target_aux(model, ids, prop.aux_hidden_state_layers)[:len(ids) - 1]
    hid, toks = draft.combine_features(aux), list(ids[1:])
    with torch.no_grad():
        for j in range(len(path) + 1):
            out, _ = draft(hid[None], draft.embed(torch.tensor(toks))[None], torch.arange(len(toks))[None])
            if j == len(path):
                return draft.compute_logits(out[0, -1])
            hid, toks = torch.cat([hid, out[0, -1:]]), toks + [path[j]]


def ref_chain(prop, model, ids, K):
    path = []
    for _ in range(K):
        path.append(int(prop.draft.draft_to_target(ref_next_logits(prop, model, ids, path).argmax())))
    return path


def test_eagle3_greedy_chain_equals_recompute(target, eagle3_dir):
    model, _ = target
    prop = eagle3(target, eagle3_dir, k=4)
    assert prop.aux_hidden_state_layers == (2, 4, 5) and prop.needs_target_features
    a, b = make_seq(rand_ids(12, 3)), make_seq(rand_ids(7, 4))
    feed(prop, a, model, chunk=5)                     # chunked prefill features
    feed(prop, b, model)
    for round_ in range(3):
        p = prop.propose([a, b], [4, 2])
        assert p.token_ids.shape == (2, 4) and p.num_tokens == [4, 2]
        assert p.draft_probs is None and p.parents is None
        assert p.token_ids[0].tolist() == ref_chain(prop, model, a.token_ids, 4)
        assert p.token_ids[1, :2].tolist() == ref_chain(prop, model, b.token_ids, 2)
        assert p.token_ids[1, 2:].tolist() == [0, 0]
        # a verify step: a accepts 2 drafts + bonus, b accepts none + bonus
        for r, (seq, acc) in enumerate(((a, 2), (b, 0))):
            n = len(seq)
            seq.token_ids += p.token_ids[r, :acc].tolist()
            aux = target_aux(model, seq.token_ids, prop.aux_hidden_state_layers)
            prop.observe(seq, TargetFeatures(n - 1, seq.token_ids[n - 1:], aux[n - 1:], torch.zeros(acc + 1, HT)))
            seq.token_ids.append(rand_ids(1, 10 + round_)[0])


def test_eagle3_mixed_batch_returns_q_of_each_draft(target, eagle3_dir):
    model, _ = target
    prop = eagle3(target, eagle3_dir, k=3)
    g, s = make_seq(rand_ids(9, 5)), make_seq(rand_ids(6, 6), temperature=0.8, top_k=5, seed=7)
    feed(prop, g, model)
    feed(prop, s, model)
    p = prop.propose([g, s], [3, 3])
    q = p.draft_probs
    assert q is not None and q.shape == (2, 3, VT)
    torch.testing.assert_close(q.sum(-1), torch.ones(2, 3))
    assert (q[:, :, ~prop.draft.t2d] == 0).all()                         # only draft-vocab tokens
    assert p.token_ids[0].tolist() == ref_chain(prop, model, g.token_ids, 3)
    assert (q[0].max(-1).values == 1).all()                               # greedy row: one-hot q
    st = SamplingTensors.from_params([s.params], None, CPU)
    for j in range(3):                                                    # q_j given the sampled prefix
        logits = ref_next_logits(prop, model, s.token_ids, p.token_ids[1, :j].tolist())
        want = torch.zeros(VT)
        want[prop._vocab_ids] = compute_probs(logits[None], st)[0]
        torch.testing.assert_close(q[1, j], want, atol=1e-5, rtol=1e-4)
        assert q[1, j, p.token_ids[1, j]] > 0 and (q[1, j] > 0).sum() <= 5


def test_eagle3_sampled_drafts_follow_their_q(target, eagle3_dir):
    model, _ = target
    prop = eagle3(target, eagle3_dir, k=1)
    ids = rand_ids(8, 8)
    aux = target_aux(model, ids, prop.aux_hidden_state_layers)
    seqs = [make_seq(ids, temperature=0.7) for _ in range(400)]
    for s in seqs:
        prop.observe(s, TargetFeatures(0, ids[:7], aux[:7], torch.zeros(7, HT)))
    counts, q = torch.zeros(VT), None
    for _ in range(3):                                     # state is unchanged: fresh samples each call
        p = prop.propose(seqs, [1] * len(seqs))
        counts += torch.bincount(p.token_ids[:, 0], minlength=VT).float()
        q = p.draft_probs[0, 0] if q is None else q
        torch.testing.assert_close(p.draft_probs[:, 0], q.expand(len(seqs), VT))

    def fits(probs):
        n = counts.sum()
        return bool(((counts - n * probs).abs() <= 5 * (n * probs * (1 - probs)).sqrt() + 3).all())
    assert fits(q)
    logits = ref_next_logits(prop, model, ids, [])
    untempered = torch.zeros(VT)
    untempered[prop._vocab_ids] = logits.softmax(-1)
    assert not fits(untempered)                            # the check has power: T=1 would be caught


def ref_tree(prop, model, ids, k, depth, budget):
    """EAGLE-2 dynamic tree by brute force: (selected paths, frontier paths per depth, logits of
    each frontier node), paths as tuples of target ids."""
    logits_of = lambda path: ref_next_logits(prop, model, ids, list(path))                  # noqa: E731
    tgt = lambda t: int(prop.draft.draft_to_target(t))                                       # noqa: E731
    sc, tk = torch.log_softmax(logits_of(()), -1).topk(k)
    frontier = [(float(s), (tgt(t),)) for s, t in zip(sc, tk)]
    cands, frontiers, logits = list(frontier), [], []
    for _ in range(1, depth):
        children, level = [], []
        for s, path in frontier:
            lg = logits_of(path)
            level.append(lg)
            csc, ctk = torch.log_softmax(lg, -1).topk(k)
            children += [(s + float(c), path + (tgt(t),)) for c, t in zip(csc, ctk)]
        frontiers.append([p for _, p in frontier])
        logits.append(torch.stack(level))
        cands += children
        frontier = sorted(children, key=lambda x: -x[0])[:k]
    return {path for _, path in sorted(cands, key=lambda x: -x[0])[:budget]}, frontiers, logits


def tree_paths(token_ids, parents, n):
    paths = []
    for i in range(n):
        par = int(parents[i])
        assert -1 <= par < i                                                  # topological
        paths.append((paths[par] if par >= 0 else ()) + (int(token_ids[i]),))
    return paths


def test_eagle3_dynamic_tree(target, eagle3_dir):
    model, _ = target
    k, depth, budget = 3, 4, 12
    prop = eagle3(target, eagle3_dir, k=3, tree={"topk": k, "depth": depth, "budget": budget})
    assert prop.k == budget                                                   # slots = budget
    seqs = [make_seq(rand_ids(10, 11)), make_seq(rand_ids(6, 12), temperature=1.0), make_seq(rand_ids(8, 13))]
    for s in seqs:
        feed(prop, s, model)
    seen, compute = [], prop.draft.compute_logits                            # record each level's logits
    prop.draft.compute_logits = lambda h: seen.append(compute(h)) or seen[-1]
    p = prop.propose(seqs, [budget, 4, budget])
    assert p.num_tokens == [budget, 4, budget] and p.draft_probs is None and p.parents.shape == (3, budget)
    for r, seq in enumerate(seqs):
        paths = tree_paths(p.token_ids[r], p.parents[r], p.num_tokens[r])
        assert len(set(paths)) == len(paths) and max(len(x) for x in paths) <= depth
        for node in [()] + paths:                                             # at most topk children each
            assert sum(1 for x in paths if x[:-1] == node) <= k
        selected, _, level_logits = ref_tree(prop, model, seq.token_ids, k, depth, p.num_tokens[r])
        assert set(paths) == selected
        for d, ref in enumerate(level_logits):    # frontier nodes saw exactly their ancestors
            torch.testing.assert_close(seen[1 + d][r], ref, atol=1e-4, rtol=1e-4)
    assert p.parents[1, 4:].eq(-1).all() and p.token_ids[1, 4:].eq(0).all()


def test_eagle3_small_budget_drafts_fewer_levels(target, eagle3_dir):
    """A budget of n < depth nodes drafts only n levels (a node deeper than n never makes the cut):
    the same nodes as the full-depth tree, in fewer drafter steps."""
    model, _ = target
    k, depth = 3, 4
    prop = eagle3(target, eagle3_dir, k=3, tree={"topk": k, "depth": depth, "budget": 12})
    seqs = [make_seq(rand_ids(10, 21)), make_seq(rand_ids(7, 22))]
    for s in seqs:
        feed(prop, s, model)
    calls, compute = [], prop.draft.compute_logits
    prop.draft.compute_logits = lambda h: calls.append(1) or compute(h)
    p = prop.propose(seqs, [2, 3])
    assert len(calls) == 3                                  # the root, then levels 2 and 3: not 4
    for r, seq in enumerate(seqs):
        paths = tree_paths(p.token_ids[r], p.parents[r], p.num_tokens[r])
        selected, _, _ = ref_tree(prop, model, seq.token_ids, k, depth, p.num_tokens[r])
        assert set(paths) == selected and p.num_tokens[r] == [2, 3][r]


def test_eagle3_free_reobserve_and_errors(target, eagle3_dir):
    model, cfg = target
    prop = eagle3(target, eagle3_dir, k=3)
    a = make_seq(rand_ids(9, 13))
    feed(prop, a, model)
    first = prop.propose([a], [3]).token_ids
    prop.free(a)                                                              # preempted ...
    assert prop.propose([a], [3]).num_tokens == [0]                           # ... no state, no drafts
    feed(prop, a, model, chunk=4)                                             # ... re-prefilled
    assert torch.equal(prop.propose([a], [3]).token_ids, first)
    feed_aux = target_aux(model, a.token_ids, prop.aux_hidden_state_layers)
    prop.observe(a, TargetFeatures(3, a.token_ids[3:8], feed_aux[3:8], torch.zeros(5, HT)))   # overlap: rewind
    assert torch.equal(prop.propose([a], [3]).token_ids, first)
    with pytest.raises(ValueError, match="contiguous"):
        prop.observe(a, TargetFeatures(20, [1], feed_aux[:1], torch.zeros(1, HT)))
    with pytest.raises(ValueError, match="tree"):
        build_eagle3_proposer(model, cfg, {"model": eagle3_dir, "num_speculative_tokens": 3,
                                           "tree": {"topk": 2, "width": 3, "budget": 4}}, CPU, torch.float32)
    built = build_eagle3_proposer(model, cfg, {"method": "eagle3", "model": eagle3_dir,
                                               "num_speculative_tokens": 2}, CPU, torch.float32)
    assert built.k == 2
    other = ModelConfig.from_dict({**cfg.raw, "vocab_size": VT + 1})
    with pytest.raises(ValueError, match="vocab_size"):
        Eagle3Proposer(model, other, eagle3_dir, 2, CPU, torch.float32)


# ----------------------------------------------------------------------------- DFlash

@pytest.fixture(scope="module")
def dflash_dir(tmp_path_factory):
    cfg = DFlashConfig.from_dict(dict(
        hidden_size=HT, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=64,
        num_hidden_layers=2, vocab_size=VT, rope_theta=1e6, block_size=4,
        dflash_config={"mask_token_id": 1, "target_layer_ids": [0, 2, 4]}))   # 1 = pad: never emitted
    m = DFlashDraftModel(cfg)
    randomize_(m, seed=3, std=0.3)
    d = tmp_path_factory.mktemp("dflash")
    save_dflash(m, str(d))
    return str(d)


def ref_block_logits(prop, model, ids):
    """[B-1, V] logits of one block, recomputed from all context features at once."""
    draft, blk = prop.draft, prop.draft.config.block_size
    n = len(ids)
    aux = target_aux(model, ids, prop.aux_hidden_state_layers)[:n - 1]
    with torch.no_grad():
        ctx = draft.context_kv(aux[None], torch.arange(n - 1)[None])
        block = torch.tensor([ids[-1]] + [draft.config.mask_token_id] * (blk - 1))
        out = draft(draft.embed(block)[None], torch.arange(n - 1, n - 1 + blk)[None], ctx)
    return draft.compute_logits(out[0, 1:])


def test_dflash_greedy_block_equals_recompute(target, dflash_dir):
    model, cfg = target
    prop = DFlashProposer(model, cfg, dflash_dir, None, CPU, torch.float32)
    assert prop.k == 3 and prop.aux_hidden_state_layers == (1, 3, 5)
    a, b = make_seq(rand_ids(11, 14)), make_seq(rand_ids(5, 15))
    feed(prop, a, model, chunk=4)
    feed(prop, b, model)
    for round_ in range(3):
        p = prop.propose([a, b], [3, 1])
        assert p.token_ids.shape == (2, 3) and p.num_tokens == [3, 1] and p.draft_probs is None
        assert p.token_ids[0].tolist() == ref_block_logits(prop, model, a.token_ids).argmax(-1).tolist()
        assert p.token_ids[1].tolist() == ref_block_logits(prop, model, b.token_ids).argmax(-1)[:1].tolist() + [0, 0]
        for r, (seq, acc) in enumerate(((a, 1), (b, 0))):
            n = len(seq)
            seq.token_ids += p.token_ids[r, :acc].tolist()
            aux = target_aux(model, seq.token_ids, prop.aux_hidden_state_layers)
            prop.observe(seq, TargetFeatures(n - 1, seq.token_ids[n - 1:], aux[n - 1:], torch.zeros(acc + 1, HT)))
            seq.token_ids.append(rand_ids(1, 20 + round_)[0])


def test_dflash_sampled_q_free_and_builder(target, dflash_dir):
    model, cfg = target
    prop = build_dflash_proposer(model, cfg, {"model": dflash_dir, "num_speculative_tokens": 2}, CPU, torch.float32)
    assert prop.k == 2
    g, s = make_seq(rand_ids(8, 16)), make_seq(rand_ids(9, 17), temperature=0.9, top_k=4, seed=1)
    feed(prop, g, model)
    feed(prop, s, model)
    p = prop.propose([g, s], [2, 2])
    assert p.draft_probs.shape == (2, 2, VT)
    assert p.token_ids[0].tolist() == ref_block_logits(prop, model, g.token_ids)[:2].argmax(-1).tolist()
    st = SamplingTensors.from_params([s.params] * 2, None, CPU)
    want = compute_probs(ref_block_logits(prop, model, s.token_ids)[:2], st)
    torch.testing.assert_close(p.draft_probs[1], want, atol=1e-5, rtol=1e-4)
    assert (p.draft_probs[1].gather(1, p.token_ids[1][:, None]) > 0).all()
    prop.free(s)
    feed(prop, s, model, chunk=3)
    torch.testing.assert_close(prop.propose([s], [2]).draft_probs[0], want, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="block_size"):
        build_dflash_proposer(model, cfg, {"model": dflash_dir, "num_speculative_tokens": 4}, CPU, torch.float32)


def test_draft_model_method_with_a_learned_drafter_names_its_method():
    """method draft_model pointed at an EAGLE-3 or DFlash drafter: the error gives the config to use."""
    import json as _json
    from pathlib import Path

    from turbospec import LLM
    root = Path(__file__).resolve().parents[1] / "models"
    for name, method in (("codelm-12m-dflash", "dflash"), ("codelm-12m-eagle3", "eagle3")):
        d = str(root / name)
        with pytest.raises(ValueError) as e:
            LLM(str(root / "codelm-12m"), device="cpu", dtype="float32",
                speculative_config={"method": "draft_model", "model": d, "num_speculative_tokens": 3})
        assert _json.dumps({"method": method, "model": d}) in str(e.value)
