"""Batch invariance of the decode / chain-verify attention kernel, in miniature, through Triton's
interpreter (TRITON_INTERPRET=1): a row's bits must not depend on the batch it runs in, on the
`max_seq_len` bound (the grid), or on whether it is a decode or token i of a chain verify.

These check the logic (partition layout, masking, row packing, the merge), not GPU rounding: the
GPU versions are in tests/gpu/test_attention_kernels.py. numpy's matmul rounds a row differently
depending on where it sits in the matrix (BLAS edge kernels), which a tensor core does not; the
subprocess therefore replaces the interpreter's `tl.dot` with a row-exact one (a sequential sum
over K per element). Small partitions (`min_partition=16, max_partitions=2`) make short sequences
cross several partition-size steps; one case uses the defaults around the 2048-token step.

    PYTHONPATH=/tmp/triton-site .venv/bin/python -m pytest -q tests/test_attention_invariance_interpret.py
"""
from __future__ import annotations

import sys

import pytest

from tests.triton_interpret import ROOT, interpreter_shim, needs_triton, row_exact_dot, run_case

CASES = ["decode_batch", "chain_vs_decode", "defaults_and_padding", "fused_reduce", "programs_per_row"]
SMALL = dict(min_partition=16, block_n=16, max_partitions=2)        # partition size steps at 32, 64, ...


@needs_triton
@pytest.mark.parametrize("case", CASES)
def test_invariance_interpreted(case):
    run_case(__file__, case, timeout=600)


@needs_triton
def test_split_programs_and_its_switch():
    """G per row block: every partition its own program at batch 1, at least two programs per row
    block, never more than the partitions; a bad TURBOSPEC_ATTN_PROGRAMS_PER_SM stops the import
    with the variable and the fix named."""
    import os
    import subprocess

    from turbospec.kernels.paged_decode import split_programs
    assert split_programs(8, 10, 132) == 10            # qwen3-8b batch 1: one program per partition
    assert split_programs(8, 32, 132) == 32
    assert split_programs(128, 32, 132) == 2           # batch 16
    assert split_programs(512, 32, 132) == 2           # batch 64: still two
    assert split_programs(512, 1, 132) == 1            # one partition: one program
    env = dict(os.environ, TURBOSPEC_ATTN_PROGRAMS_PER_SM="lots",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", "import turbospec.kernels.paged_decode"], env=env,
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode != 0 and "TURBOSPEC_ATTN_PROGRAMS_PER_SM='lots'" in r.stderr and "(0, 64]" in r.stderr


@needs_triton
def test_large_decode_policy_and_its_switch():
    """Decode batches with at least 3 row blocks per SM take the register cap and about 4 programs
    per SM (one per row block at qwen3-8b batch 64 on 132 SMs); smaller batches and verify do not;
    a bad TURBOSPEC_ATTN_LARGE_DECODE stops the import with the fix named."""
    import os
    import subprocess

    from turbospec.kernels.paged_decode_policy import large_decode, large_decode_programs
    assert large_decode(1, 64 * 8, 132) and large_decode_programs(64 * 8, 132) == 1
    assert large_decode(1, 50 * 8, 132) and large_decode_programs(50 * 8, 132) == 1
    assert not large_decode(1, 48 * 8, 132)            # batch 48: the default policy
    assert not large_decode(4, 64 * 8, 132)            # verify: uncapped
    assert large_decode_programs(4096, 132) == 1
    env = dict(os.environ, TURBOSPEC_ATTN_LARGE_DECODE="yes",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", "import turbospec.kernels.paged_decode"], env=env,
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode != 0 and "TURBOSPEC_ATTN_LARGE_DECODE='yes'" in r.stderr and "use 1" in r.stderr


# ------------------------------------------------------------- run inside the subprocess


def _case(q_lens, ctx_lens, H, KVH, D, dtype="float32", seed=0):
    import torch
    from turbospec.kernels.microbench import make_attn_case
    return make_attn_case(q_lens, ctx_lens, num_heads=H, num_kv_heads=KVH, head_dim=D, block_size=16,
                          dtype=getattr(torch, dtype), device="cpu", poison=True, seed=seed)


def _bits(x):
    import torch
    return x.contiguous().view(torch.int32 if x.dtype == torch.float32 else torch.int16)


def _assert_same(a, b, what):
    import torch
    assert torch.equal(_bits(a), _bits(b)), f"{what}: max diff {(a.float() - b.float()).abs().max():.3e}"


def _accurate(case, out, tol=1e-5):
    from turbospec.kernels.microbench import check_attention
    err = check_attention(case, out)
    assert err < tol, f"rel err {err:.2e}"


def _as_decodes(c, q_len, ctx_lens, bound, **kw):
    """Every token of a chain step as its own decode: seq_len ctx + i + 1, the sequence's pages."""
    import torch
    from turbospec.kernels.paged_decode import paged_decode_attention
    m = c.metas[0]
    lens = torch.tensor([ctx + i + 1 for ctx in ctx_lens for i in range(q_len)], dtype=torch.int32)
    bt = m.block_tables.repeat_interleave(q_len, 0)                 # [B * q_len, max_blocks]
    return paged_decode_attention(c.q, c.k_cache, c.v_cache, lens, bt, c.scale, bound, **kw)


def run_decode_batch():
    """A sequence decoded alone, in a batch of other lengths, and under a larger bound."""
    from turbospec.kernels.paged_decode import paged_decode_attention
    ctx_lens = [70, 3, 0, 33, 129, 31]
    c = _case([1] * len(ctx_lens), ctx_lens, H=4, KVH=2, D=32)
    m = c.metas[0]

    def decode(a, b, bound):
        return paged_decode_attention(c.q[a:b], c.k_cache, c.v_cache, m.seq_lens[a:b],
                                      m.block_tables[a:b], c.scale, bound, **SMALL)
    batch = decode(0, len(ctx_lens), m.max_seq_len)
    _accurate(c, batch)
    _assert_same(batch, decode(0, len(ctx_lens), 4 * m.max_seq_len), "larger bound")
    for s, ctx in enumerate(ctx_lens):
        _assert_same(batch[s], decode(s, s + 1, ctx + 1)[0], f"seq {s} alone")


def run_chain_vs_decode():
    """Row i of a chain verify == a decode with seq_len ctx + i + 1 (GQA 1/4/8, two head dims,
    lengths on and across partition-size steps)."""
    from turbospec.kernels.paged_decode import paged_decode_attention
    ctx_lens = [0, 15, 17, 30, 62]
    for H, KVH, D, q_lens in ((2, 2, 32, (1, 8)), (4, 1, 48, (2, 5)), (8, 1, 32, (3, 8))):
        for q_len in q_lens:
            c = _case([q_len] * len(ctx_lens), ctx_lens, H=H, KVH=KVH, D=D, seed=q_len)
            m = c.metas[0]
            verify = paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables,
                                            c.scale, m.max_seq_len, q_len=q_len, **SMALL)
            _accurate(c, verify)
            decodes = _as_decodes(c, q_len, ctx_lens, 2 * m.max_seq_len, **SMALL)
            _assert_same(verify, decodes, f"H={H} KVH={KVH} D={D} q={q_len}")


def run_defaults_and_padding():
    """Default partitions through TritonBackend around the 2048-token step (fp16), then graph-style
    padding: seq_len 0 gives zeros, seq_len q over the null block stays finite."""
    import torch
    from turbospec.engine.forward_context import AttentionMetadata
    from turbospec.kernels.backend import TritonBackend
    from turbospec.kernels.paged_decode import paged_decode_attention
    ctx_lens, q_len = [2045], 4                                     # rows see 2046..2049
    c = _case([q_len], ctx_lens, H=4, KVH=1, D=32, dtype="float16", seed=3)
    verify = TritonBackend.attention(c.q, c.k_cache, c.v_cache, c.metas[0], c.scale)
    _accurate(c, verify, 3e-3)
    _assert_same(verify, _as_decodes(c, q_len, ctx_lens, 4096), "defaults, across 2048")

    kc, vc = torch.randn(3, 16, 2, 32), torch.randn(3, 16, 2, 32)
    q = torch.randn(3 * q_len, 4, 32)
    bt = torch.zeros(3, 2, dtype=torch.int32)
    bt[0] = torch.tensor([1, 2], dtype=torch.int32)
    lens = torch.tensor([20, 0, q_len], dtype=torch.int32)
    meta = AttentionMetadata(torch.full((3 * q_len,), -1), torch.arange(4, dtype=torch.int32) * q_len,
                             lens, bt, q_len, 64)
    out = TritonBackend.attention(q, kc, vc, meta, 0.2)
    assert torch.isfinite(out).all()
    assert torch.equal(out[q_len:2 * q_len], torch.zeros_like(out[:q_len])), "seq_len 0 gives zeros"
    bigger = paged_decode_attention(q, kc, vc, lens, bt, 0.2, 4096, q_len=q_len)
    _assert_same(out, bigger, "padding, larger bound")


def run_fused_reduce():
    """The merge in the decode launch (last split to arrive) gives the bits of the two-launch path
    and of the automatic choice between them, for decode and chain verify, and leaves every arrival
    counter re-armed."""
    import torch
    from turbospec.kernels.paged_decode import _LOCKS, paged_decode_attention
    ctx_lens = [0, 15, 40, 62]
    for q_len in (1, 3, 8):
        c = _case([q_len] * len(ctx_lens), ctx_lens, H=4, KVH=2, D=32, seed=7 + q_len)
        m = c.metas[0]
        outs = [paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables, c.scale,
                                       m.max_seq_len, q_len=q_len, fused_reduce=f, **SMALL)
                for f in (True, False, None)]                   # None: by rows per program (auto)
        _accurate(c, outs[0])
        _assert_same(outs[0], outs[1], f"fused vs two launches, q={q_len}")
        _assert_same(outs[0], outs[2], f"fused vs auto, q={q_len}")
        assert int(_LOCKS[c.q.device].abs().sum()) == 0, "arrival counters not re-armed"
    assert torch.equal(_LOCKS[c.q.device], torch.zeros_like(_LOCKS[c.q.device]))


def run_programs_per_row():
    """How many programs share a row's partitions (G: one per partition at batch 1, one for all of
    them at batch 64) changes no bit: partitions of one and of two tiles (the last one cut short by
    the row's end), lengths across a partition-size step, decode and chain verify, merged in the
    launch and in a second one; every G against G = 1 and against the reference."""
    from turbospec.kernels.paged_decode import paged_decode_attention
    ctx_lens = [0, 15, 40, 77, 130, 200]
    for cfg in (dict(min_partition=16, block_n=16, max_partitions=6),     # 1 tile per partition
                dict(min_partition=32, block_n=16, max_partitions=3)):    # 2 tiles; P steps at 96, 192
        for q_len in (1, 4):
            c = _case([q_len] * len(ctx_lens), ctx_lens, H=4, KVH=2, D=32, seed=11 + q_len)
            m = c.metas[0]
            splits = min(cfg["max_partitions"], -(-m.max_seq_len // cfg["min_partition"]))
            outs = {(g, f): paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables,
                                                   c.scale, m.max_seq_len, q_len=q_len, fused_reduce=f,
                                                   programs_per_row=g, **cfg)
                    for g in sorted({1, 2, 3, splits}) for f in (True, False)}
            base = outs[1, True]
            _accurate(c, base)
            for (g, f), out in outs.items():
                _assert_same(base, out, f"{cfg} q={q_len} G={g} fused={f}")
            _assert_same(base, paged_decode_attention(c.q, c.k_cache, c.v_cache, m.seq_lens, m.block_tables,
                                                      c.scale, m.max_seq_len, q_len=q_len, **cfg), "automatic G")


if __name__ == "__main__":
    interpreter_shim()
    row_exact_dot()
    globals()["run_" + sys.argv[1]]()
    print("ok", sys.argv[1])
