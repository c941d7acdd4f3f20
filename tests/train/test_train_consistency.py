"""Training computes what decoding will compute: the TTT unroll equals step-by-step chain drafting
with a KV cache (EAGLE-3), and the batched random-anchor forward equals drafting one block at a
time from the context before its anchor (DFlash). Checked on a tiny random target in float32."""
from __future__ import annotations

import torch

from turbospec.train.config import DFlashOptions, DraftShape, Eagle3Options, TrainConfig
from turbospec.train.dflash import DFlashTrainer, build_dflash_draft
from turbospec.train.eagle3 import Eagle3Trainer, build_eagle3_draft
from turbospec.train.features import TargetModel


def _cfg(tiny_target, code_jsonl, tmp_path, method, **kw):
    return TrainConfig(method=method, target=str(tiny_target), data=str(code_jsonl), out=str(tmp_path / "o"),
                       **kw)


def test_eagle3_ttt_equals_chain_drafting(tiny_target, code_jsonl, tmp_path):
    torch.manual_seed(0)
    cfg = _cfg(tiny_target, code_jsonl, tmp_path, "eagle3", eagle3=Eagle3Options(ttt_steps=4, draft_vocab_size=300))
    target = TargetModel(str(tiny_target), (1, 2, 3), torch.device("cpu"))
    counts = torch.randint(0, 50, (target.config.vocab_size,))
    draft, used = build_eagle3_draft(cfg, target, counts)
    with torch.no_grad():                       # make the head's residual path matter
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    tr = Eagle3Trainer(draft, target, used, 4, 0.8)
    B, S = 2, 24
    ids = torch.randint(2, 8192, (B, S))
    feats = target.features(ids, torch.full((B,), S))
    with torch.no_grad():
        ttt = tr.unroll(ids, feats.aux)                                   # K x [B, S, Vd]
        for i in (0, 5, 13):                                              # base positions
            # step 0 over positions 0..i (target features, the next token's embedding)
            h = draft.combine_features(feats.aux[:, :i + 1])
            out, kv = draft(h, draft.embed(ids[:, 1:i + 2]), torch.arange(i + 1).expand(B, -1))
            cache = kv
            last = out[:, -1:]
            for j in range(4):
                if j > 0:                                                 # chain step: own hidden, next token
                    out, kv = draft(last, draft.embed(ids[:, i + 1 + j:i + 2 + j]),
                                    torch.full((B, 1), i + j), None, cache)
                    cache = [(torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(cache, kv)]
                    last = out
                ref = draft.compute_logits(last[:, 0])                    # [B, Vd]
                torch.testing.assert_close(ttt[j][:, i], ref, rtol=1e-4, atol=1e-4)


def test_dflash_batched_blocks_equal_one_block_at_a_time(tiny_target, code_jsonl, tmp_path):
    torch.manual_seed(0)
    cfg = _cfg(tiny_target, code_jsonl, tmp_path, "dflash", shape=DraftShape(num_layers=2),
               dflash=DFlashOptions(block_size=4))
    target = TargetModel(str(tiny_target), (1, 2), torch.device("cpu"))
    draft = build_dflash_draft(cfg, target, _tok(tiny_target))
    tr = DFlashTrainer(draft, target, 2.0)
    B, S = 2, 20
    ids = torch.randint(2, 8192, (B, S))
    feats = target.features(ids, torch.full((B,), S))
    anchors = torch.tensor([[3, 10, 1], [16, 7, -1]])
    with torch.no_grad():
        batched = tr.block_logits(ids, feats.aux, anchors)                # [B, N, K, V]
        for b in range(B):
            for n, a in enumerate(anchors[b].tolist()):
                if a < 0:
                    continue
                ctx = draft.context_kv(feats.aux[b:b + 1, :a], torch.arange(a)[None])
                block = torch.full((1, 4), draft.config.mask_token_id)
                block[0, 0] = ids[b, a]
                out = draft(draft.embed(block), torch.arange(a, a + 4)[None], ctx)   # every key visible
                ref = draft.compute_logits(out[0, 1:])                    # [K, V]
                torch.testing.assert_close(batched[b, n], ref, rtol=1e-4, atol=1e-4)


def _tok(target_dir):
    from turbospec.train.data import load_tokenizer
    return load_tokenizer(str(target_dir))
