"""MTP drafting from layers shipped inside the target checkpoint (CPU, float32).

Tiny random Qwen3 / Qwen3-MoE / Llama targets written by transformers get synthetic random MTP
tensors in the Qwen3-Next (`mtp.*`) or DeepSeek (`model.layers.{L}.*`) naming scheme. Speculative
greedy output must equal plain output; the proposer's drafts must equal a full-recompute reference
written here from the raw tensors (no cache, no padding, no batching, no turbospec layers)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import prefill, read_checkpoint
from turbospec import LLM, SamplingParams
from turbospec.config import ModelConfig
from turbospec.engine.sequence import Sequence
from turbospec.layers.sampler import SamplingTensors, compute_probs
from turbospec.model_loader import load_model
from turbospec.models.mtp import load_mtp
from turbospec.spec.mtp import MTPProposer
from turbospec.spec.proposer import TargetFeatures

CPU = torch.device("cpu")
V = 512
SMALL = dict(vocab_size=V, tokenizer=False)


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest.py: small tensors, one thread


# ----------------------------------------------------------------------------- synthetic MTP tensors

def mtp_tensors(cfg: dict, scheme: str, seed: int, moe: bool = False, head: torch.Tensor | None = None) -> dict:
    """Random MTP tensors for a target config (dict) in one naming scheme. Near-copy by design, so
    that drafts are sometimes accepted: fc passes hnorm(h) through (plus a small embedding part) and
    the layer's weights are small, so g ~ h_t and the MTP tends to re-predict x_{t+1}, which a tiny
    random target that has fallen into a repetition loop does emit again."""
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s, std=0.05: torch.randn(*s, generator=g) * std    # noqa: E731
    norm = lambda n: 1.0 + torch.randn(n, generator=g) * 0.1         # noqa: E731
    H, nh, nkv, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    layer = {"input_layernorm.weight": norm(H), "post_attention_layernorm.weight": norm(H),
             "self_attn.q_proj.weight": rnd(nh * D, H, std=0.3), "self_attn.k_proj.weight": rnd(nkv * D, H, std=0.3),
             "self_attn.v_proj.weight": rnd(nkv * D, H), "self_attn.o_proj.weight": rnd(H, nh * D)}
    if cfg["architectures"][0] != "LlamaForCausalLM":
        layer |= {"self_attn.q_norm.weight": norm(D), "self_attn.k_norm.weight": norm(D)}
    if moe:
        E, I = cfg.get("num_experts") or cfg["num_local_experts"], cfg["moe_intermediate_size"]
        layer["mlp.gate.weight"] = rnd(E, H, std=0.3)
        for e in range(E):
            layer |= {f"mlp.experts.{e}.gate_proj.weight": rnd(I, H), f"mlp.experts.{e}.up_proj.weight": rnd(I, H),
                      f"mlp.experts.{e}.down_proj.weight": rnd(H, I)}
    else:
        I = cfg["intermediate_size"]
        layer |= {"mlp.gate_proj.weight": rnd(I, H), "mlp.up_proj.weight": rnd(I, H), "mlp.down_proj.weight": rnd(H, I)}
    top = {"fc": torch.cat([rnd(H, H), torch.eye(H) + rnd(H, H)], dim=1), "e_norm": norm(H), "h_norm": norm(H),
           "norm": norm(H)}
    if scheme == "qwen3_next":
        out = {f"mtp.layers.0.{k}": v for k, v in layer.items()}
        return out | {"mtp.fc.weight": top["fc"], "mtp.pre_fc_norm_embedding.weight": top["e_norm"],
                      "mtp.pre_fc_norm_hidden.weight": top["h_norm"], "mtp.norm.weight": top["norm"]}
    p = f"model.layers.{cfg['num_hidden_layers']}."
    out = {p + k: v for k, v in layer.items()}
    out |= {p + "eh_proj.weight": top["fc"], p + "enorm.weight": top["e_norm"], p + "hnorm.weight": top["h_norm"],
            p + "shared_head.norm.weight": top["norm"]}
    if head is not None:                                  # its own head: the target's plus noise
        out[p + "shared_head.head.weight"] = head + rnd(*head.shape, std=0.01)
    return out


def with_mtp(tiny_dir_factory, base, scheme, seed=5, moe=False, edit=None, config=None):
    import json
    with open(base / "config.json") as f:
        cfg = json.load(f)

    def add(t):
        emb = t["model.embed_tokens.weight"]
        t = t | mtp_tensors(cfg, scheme, seed, moe, head=t.get("lm_head.weight", emb))
        if scheme == "deepseek":                          # DeepSeek ships a copy of the embedding
            t[f"model.layers.{cfg['num_hidden_layers']}.embed_tokens.weight"] = emb.clone()
        return edit(t) if edit else t
    return tiny_dir_factory(base, {"num_nextn_predict_layers": 1} | (config or {}), edit_tensors=add)


@pytest.fixture(scope="module")
def qwen3_base(tiny_checkpoint_factory):
    return tiny_checkpoint_factory("qwen3", "mtp_qwen3", **SMALL)


@pytest.fixture(scope="module")
def dirs(tiny_checkpoint_factory, tiny_dir_factory, qwen3_base):
    moe = tiny_checkpoint_factory("qwen3_moe", "mtp_qwen3_moe", seed=1, **SMALL)
    llama = tiny_checkpoint_factory("llama", "mtp_llama", seed=2, tokenizer=False)
    return {("qwen3", "qwen3_next"): with_mtp(tiny_dir_factory, qwen3_base, "qwen3_next"),
            ("qwen3", "deepseek"): with_mtp(tiny_dir_factory, qwen3_base, "deepseek"),
            ("qwen3_moe", "qwen3_next"): with_mtp(tiny_dir_factory, moe, "qwen3_next", moe=True),
            ("llama", "deepseek"): with_mtp(tiny_dir_factory, llama, "deepseek")}


# ----------------------------------------------------------------------------- engine: lossless

PARAMS = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)


def make_llm(d, **kw) -> LLM:
    return LLM(d, device="cpu", dtype="float32", **kw)


def prompts(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"prompt_token_ids": torch.randint(3, V, (int(5 + 7 * i % 13),), generator=g).tolist()}
            for i in range(n)]


@pytest.mark.parametrize("key,batch,tree", [
    (("qwen3", "qwen3_next"), 1, None), (("qwen3", "qwen3_next"), 4, None),
    (("qwen3", "deepseek"), 1, None), (("qwen3", "deepseek"), 4, None),
    (("qwen3_moe", "qwen3_next"), 4, None), (("llama", "deepseek"), 2, None),
    (("qwen3", "qwen3_next"), 2, {"topk": 2, "depth": 3, "budget": 5})])
def test_greedy_equals_plain(dirs, key, batch, tree):
    d = str(dirs[key])
    spec = {"method": "mtp", "num_speculative_tokens": 3} | ({"tree": tree} if tree else {})
    plain = make_llm(d)                                     # the target loader skips the MTP tensors
    mtp = make_llm(d, speculative_config=spec)
    ps = prompts(batch, seed=batch)
    want = [o.outputs[0].token_ids for o in plain.generate(ps, PARAMS)]
    got = [o.outputs[0].token_ids for o in mtp.generate(ps, PARAMS)]
    assert got == want
    eng = mtp.llm_engine
    assert eng.block_manager.num_free_blocks == eng.block_manager.num_usable_blocks
    m = mtp.get_metrics()
    assert m["spec_decode_num_drafts"] > 0 and m["spec_decode_num_accepted_tokens"] > 0   # both paths ran
    assert not eng.proposer.states                          # every finished sequence was freed


def test_target_loader_skips_mtp_tensors(dirs, qwen3_base):
    want = load_model(str(qwen3_base)).state_dict()
    for key in (("qwen3", "qwen3_next"), ("qwen3", "deepseek")):
        got = load_model(str(dirs[key])).state_dict()
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want)


# ----------------------------------------------------------------------------- reference forward

def rms(x, w, eps=1e-6):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):                                  # x [S, heads, D], neox halves
    D = x.shape[-1]
    f = pos[:, None].double() / theta ** (torch.arange(0, D, 2).double() / D)     # [S, D/2]
    cos, sin = torch.cat([f.cos(), f.cos()], -1)[:, None].float(), torch.cat([f.sin(), f.sin()], -1)[:, None].float()
    return x * cos + torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1) * sin


def ref_layer(T, p, cfg, x, pos):
    S, H = x.shape
    nh, nkv, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    h = rms(x, T[p + "input_layernorm.weight"])
    q = rms((h @ T[p + "self_attn.q_proj.weight"].T).view(S, nh, D), T[p + "self_attn.q_norm.weight"])
    k = rms((h @ T[p + "self_attn.k_proj.weight"].T).view(S, nkv, D), T[p + "self_attn.k_norm.weight"])
    v = (h @ T[p + "self_attn.v_proj.weight"].T).view(S, nkv, D)
    q, k = rope(q, pos, cfg.rope.theta), rope(k, pos, cfg.rope.theta)
    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    att = torch.einsum("shd,thd->hst", q, k) / math.sqrt(D)
    att = att.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    x = x + torch.einsum("hst,thd->shd", att, v).reshape(S, nh * D) @ T[p + "self_attn.o_proj.weight"].T
    h = rms(x, T[p + "post_attention_layernorm.weight"])
    mlp = lambda a, g, u, d: (F.silu(a @ g.T) * (a @ u.T)) @ d.T          # noqa: E731
    if p + "mlp.gate.weight" not in T:
        return x + mlp(h, *(T[p + f"mlp.{n}_proj.weight"] for n in ("gate", "up", "down")))
    w, ids = (h @ T[p + "mlp.gate.weight"].T).softmax(-1).topk(cfg.num_experts_per_tok, -1)
    w = w / w.sum(-1, keepdim=True) if cfg.norm_topk_prob else w
    out = torch.zeros_like(x)
    for s in range(S):
        for j in range(ids.shape[1]):
            e = int(ids[s, j])
            out[s] += w[s, j] * mlp(h[s], *(T[p + f"mlp.experts.{e}.{n}_proj.weight"] for n in ("gate", "up", "down")))
    return x + out


class Ref:
    """The MTP forward written from the checkpoint tensors: embedding-first concat, norms, layer, head."""

    def __init__(self, model_dir, cfg: ModelConfig):
        self.T, self.cfg = read_checkpoint(model_dir), cfg
        L = cfg.num_hidden_layers
        if "mtp.fc.weight" in self.T:
            self.names = ("mtp.fc", "mtp.pre_fc_norm_embedding", "mtp.pre_fc_norm_hidden", "mtp.norm")
            self.layer, self.zero0 = "mtp.layers.0.", False
        else:
            p = f"model.layers.{L}."
            self.names = (p + "eh_proj", p + "enorm", p + "hnorm", p + "shared_head.norm")
            self.layer, self.zero0 = p, True
        emb = self.T["model.embed_tokens.weight"]
        self.head = self.T.get(f"model.layers.{L}.shared_head.head.weight", self.T.get("lm_head.weight", emb))
        self.emb = emb

    def forward(self, hs, toks):                          # hs [S, H] inputs, toks [S] next tokens -> g [S, H]
        fc, en, hn, norm = (self.T[n + ".weight"] for n in self.names)
        pos = torch.arange(len(toks))
        e = self.emb[torch.tensor(toks)]
        if self.zero0:
            e = e.masked_fill((pos == 0)[:, None], 0.0)
        x = torch.cat([rms(e, en), rms(hs, hn)], -1) @ fc.T
        return rms(ref_layer(self.T, self.layer, self.cfg, x, pos), norm)

    def next_logits(self, target_h, ids, path):
        """Logits for the token after ids + path; target_h [len(ids) - 1, H] final-normed target hidden."""
        hs, toks = list(target_h), list(ids[1:])
        for j in range(len(path) + 1):
            g = self.forward(torch.stack(hs), toks)[-1]
            if j == len(path):
                return g @ self.head.T
            hs.append(g)
            toks.append(path[j])

    def chain(self, target_h, ids, k):
        path = []
        for _ in range(k):
            path.append(int(self.next_logits(target_h, ids, path).argmax()))
        return path


def target_hidden(model, ids) -> torch.Tensor:
    """Final-normed hidden [T, H] of one full prefill with turbospec's target model."""
    return prefill(model, ids)


def make_seq(ids, temperature=0.0, top_k=-1, seed=None) -> Sequence:
    p = SamplingParams(temperature=temperature, top_k=top_k, seed=seed, max_tokens=100)
    return Sequence("r", None, list(ids), p, CPU, max_model_len=256)


def rand_ids(n, seed):
    return torch.randint(3, V, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def setup(dirs, key, k=3):
    d = dirs[key]
    cfg = ModelConfig.from_pretrained(str(d))
    model = load_model(str(d))
    return MTPProposer(model, cfg, str(d), k, CPU, torch.float32), model, Ref(d, cfg)


def feed(prop, seq, model, chunk=None):
    """Observe what the engine would hand over: features of positions 0..len-2."""
    h = target_hidden(model, seq.token_ids)
    end = len(seq) - 1
    step = chunk or end
    for s in range(0, end, step):
        e = min(end, s + step)
        prop.observe(seq, TargetFeatures(s, seq.token_ids[s:e], None, h[s:e]))


# ----------------------------------------------------------------------------- proposer vs reference

@pytest.mark.parametrize("key", [("qwen3", "qwen3_next"), ("qwen3", "deepseek"), ("qwen3_moe", "qwen3_next")])
def test_greedy_drafts_equal_reference(dirs, key):
    prop, model, ref = setup(dirs, key, k=3)
    assert prop.needs_target_features and prop.aux_hidden_state_layers == ()
    if key[1] == "deepseek":      # its embed_tokens copy equals the target's: shared; its own head is used
        assert prop.draft.embed_tokens is None and prop.draft.head is not None
    a, b = make_seq(rand_ids(11, 1)), make_seq(rand_ids(6, 2))
    feed(prop, a, model, chunk=4)                         # chunked prefill features
    feed(prop, b, model)
    for round_ in range(3):
        p = prop.propose([a, b], [3, 2])
        assert p.token_ids.shape == (2, 3) and p.num_tokens == [3, 2] and p.draft_probs is None
        assert p.token_ids[0].tolist() == ref.chain(target_hidden(model, a.token_ids)[:-1], a.token_ids, 3)
        assert p.token_ids[1, :2].tolist() == ref.chain(target_hidden(model, b.token_ids)[:-1], b.token_ids, 2)
        assert p.token_ids[1, 2] == 0
        for r, (seq, acc) in enumerate(((a, 2), (b, 0))):    # a verify: a keeps 2 drafts, b none; + bonus
            n = len(seq)
            seq.token_ids += p.token_ids[r, :acc].tolist()
            h = target_hidden(model, seq.token_ids)
            prop.observe(seq, TargetFeatures(n - 1, seq.token_ids[n - 1:], None, h[n - 1:]))
            seq.token_ids.append(rand_ids(1, 10 + round_)[0])
    prop.free(a)
    assert a.seq_id not in prop.states and prop.propose([a], [3]).num_tokens == [0]


@pytest.mark.parametrize("key", [("qwen3", "qwen3_next"), ("qwen3", "deepseek"), ("qwen3_moe", "qwen3_next")])
def test_mixed_batch_sampled_drafts_carry_their_q(dirs, key):
    prop, model, ref = setup(dirs, key, k=3)
    g, s = make_seq(rand_ids(9, 3)), make_seq(rand_ids(7, 4), temperature=0.8, top_k=20, seed=7)
    feed(prop, g, model)
    feed(prop, s, model)
    p = prop.propose([g, s], [3, 3])
    q = p.draft_probs
    assert q is not None and q.shape == (2, 3, V)
    torch.testing.assert_close(q.sum(-1), torch.ones(2, 3))
    assert p.token_ids[0].tolist() == ref.chain(target_hidden(model, g.token_ids)[:-1], g.token_ids, 3)
    assert (q[0].max(-1).values == 1).all() and (q[0].argmax(-1) == p.token_ids[0]).all()   # greedy: one-hot
    st = SamplingTensors.from_params([s.params], None, CPU)
    hs = target_hidden(model, s.token_ids)[:-1]
    for j in range(3):                                     # q_j given the sampled prefix
        logits = ref.next_logits(hs, s.token_ids, p.token_ids[1, :j].tolist())
        torch.testing.assert_close(q[1, j], compute_probs(logits[None], st)[0], atol=1e-5, rtol=1e-4)
        assert q[1, j, p.token_ids[1, j]] > 0 and (q[1, j] > 0).sum() <= 20


def test_mtp_module_is_trainable(dirs):
    d = dirs[("qwen3_moe", "qwen3_next")]
    cfg = ModelConfig.from_pretrained(str(d))
    m = load_mtp(str(d), cfg)
    m.share_target_modules(torch.nn.Embedding(V, cfg.hidden_size), torch.nn.Linear(cfg.hidden_size, V))
    assert all(p.requires_grad for p in m.parameters())
    h, ids = torch.randn(2, 5, cfg.hidden_size), torch.randint(0, V, (2, 5))
    g, _ = m(h, m.embed(ids), torch.arange(5).expand(2, 5))
    F.cross_entropy(m.compute_logits(g).flatten(0, 1), ids.flatten()).backward()
    assert m.fc.weight.grad.abs().sum() > 0 and m.layer.mlp.experts.gate_up_proj.grad.abs().sum() > 0


def test_block_fp8_mtp_weights_are_dequantized(qwen3_base, tiny_dir_factory):
    from turbospec.layers.quant.fp8 import dequantize_fp8, quantize_fp8
    fp8 = {}

    def quantize(t):
        for name in [n for n in t if n.startswith("mtp.") and n.endswith("proj.weight")]:
            q, s = quantize_fp8(t[name], (16, 16))
            t[name], t[name + "_scale_inv"] = q, s
            fp8[name] = dequantize_fp8(q, s, (16, 16), torch.float32)
        return t
    d = with_mtp(tiny_dir_factory, qwen3_base, "qwen3_next", edit=quantize,
                 config={"quantization_config": {"quant_method": "fp8", "weight_block_size": [16, 16]}})
    m = load_mtp(str(d), ModelConfig.from_pretrained(str(d)))
    got = dict(m.named_parameters())
    assert len(fp8) == 7 and m.fc.weight.dtype == torch.float32
    for name, want in fp8.items():
        torch.testing.assert_close(got["layer." + name.removeprefix("mtp.layers.0.")], want, rtol=0, atol=0)


# ----------------------------------------------------------------------------- errors

def drop(name):
    return lambda t: {k: v for k, v in t.items() if k != name}


def test_checkpoint_without_mtp_layers(qwen3_base, tiny_dir_factory):
    with pytest.raises(ValueError, match="no MTP layers .*use eagle3, dflash, draft_model or ngram"):
        LLM(str(qwen3_base), device="cpu", dtype="float32",
            speculative_config={"method": "mtp", "num_speculative_tokens": 3})
    declared = tiny_dir_factory(qwen3_base, {"num_nextn_predict_layers": 1})
    with pytest.raises(ValueError, match=r"num_nextn_predict_layers=1 .*no MTP tensors \(mtp\.\* or model\.layers\.3"):
        load_mtp(str(declared), ModelConfig.from_pretrained(str(declared)))


@pytest.mark.parametrize("scheme,edit,config,match", [
    ("qwen3_next", drop("mtp.pre_fc_norm_hidden.weight"), None,
     r"missing MTP tensor\(s\) mtp\.pre_fc_norm_hidden\.weight \[64\]"),
    ("deepseek", drop("model.layers.3.self_attn.k_norm.weight"), None,
     r"missing MTP tensor\(s\) model\.layers\.3\.self_attn\.k_norm\.weight \[16\]"),
    ("qwen3_next", lambda t: t | {"mtp.fc.weight": torch.zeros(64, 64)}, None,
     r"mtp\.fc\.weight has shape \(64, 64\), expected \(64, 128\)"),
    ("qwen3_next", lambda t: t | {"mtp.layers.0.mlp.shared_expert.gate_proj.weight": torch.zeros(8, 64)}, None,
     r"mtp\.layers\.0\.mlp\.shared_expert\.gate_proj\.weight.*not part of a Qwen3ForCausalLM MTP layer"),
    ("deepseek", None, {"num_nextn_predict_layers": None},
     r"model\.layers\.3\.\* beyond num_hidden_layers=3 but config\.json has no num_nextn_predict_layers"),
    ("qwen3_next", lambda t: t | {"mtp.layers.1.input_layernorm.weight": torch.ones(64)}, None,
     r"mtp\.layers\.1\.\* but config\.json declares 1 MTP layer"),
])
def test_bad_mtp_tensors_are_named(qwen3_base, tiny_dir_factory, scheme, edit, config, match):
    d = with_mtp(tiny_dir_factory, qwen3_base, scheme, edit=edit, config=config)
    with pytest.raises(ValueError, match=match):
        load_mtp(str(d), ModelConfig.from_pretrained(str(d)))
