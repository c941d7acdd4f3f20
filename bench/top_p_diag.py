"""Where the top-k / top-p kernel (kernels/top_p_kernel.py) leaves the PyTorch search
(layers/cutoff_search.top_k_top_p_cutoff_torch): one GPU run, under 60 s, at most ~80 lines.

    PYTHONPATH=. python3 bench/top_p_diag.py            # H200: vocab 151,936, batch 1 / 16 / 64

Rows as tests/gpu/test_top_p_gpu._rows builds them (ties in rows 1 mod 4, 40% -inf in rows 2 mod
4; top_k 0 / 500 / 20 / 5000 and top_p 0.9 .. 0.01 by row mod 8), with three scales: `test` (the
test's own rows and seed: rand x 10 + 0.2 per row, peaked to flat), `peaked` (x 3), `flat`
(x 0.3: every token a candidate). Each batch with bounded 0 (top_k 20 searched by the kernel) and
128 (left to the caller).

One line per (scale, batch, bounded):
  bad          rows whose cutoff differs from the PyTorch search's (their indices)
  steps        rows where a step below differs, though the cutoff may not, e.g. `cand:2`
  rerun        the same call again: `same` or `DIFFERS` (kernel nondeterministic run to run: a race)
  1 prog/row   the mass pass in one segment a row (programs=1): rows whose cutoff then differs
  4 warps      num_warps 4 instead of 8: rows whose cutoff then differs (a race inside a program,
               or a layout bug, moves with the warps)
Then, for up to 3 bad rows a line: top_k, top_p, kind, both cutoffs, the cutoff of the row run
alone (batch 1: `alone=kern` batch-independent, `alone=ref` the batch changed it), and the
first step that differs, kernel vs reference. Steps, in the order the launches run them:
  kth        _top_k_kernel: the k-th largest key (0: top-k off)
  z          _mass_kernel: the kept fixed-point mass, summed over the segments (z by segment too)
  cand_n     _mass_kernel: candidates (kept, x >= the kernel's own bound lo_mass), summed
  cand_bits  _mass_kernel: each segment's candidate list equals the row's candidates in order
  target     _top_p_kernel: max(ceil(top_p z), 1)
  n_value    _top_p_kernel: the candidates >= lo_v its value pass kept
  bin        _top_p_kernel: the value bin [lo, hi) (keys) holds the reference's cutoff key
  above      _top_p_kernel: the mass at or above hi
  t          _top_p_kernel: top-p's cutoff key after the key passes (n_left: the list left)
A wrong `kth` or `z` points at the first two launches, `cand_*` at the mass pass's compaction,
`bin` / `above` at the value pass, only `t` at the key passes' in-place compaction (_narrow).
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from turbospec.kernels.top_p_kernel import STATS_FIELDS, top_k_top_p_cutoff_cuda
from turbospec.layers.cutoff_search import (
    fixed_point_weights,
    key_values,
    ordered_keys,
    radix_select,
    top_k_top_p_cutoff_torch,
    top_p_target,
)

SCALES = {"test": None, "peaked": 3.0, "flat": 0.3}
F = {name: i for i, name in enumerate(STATS_FIELDS)}


def rows(N: int, V: int, seed: int, scale: float | None, device: str):
    """tests/gpu/test_top_p_gpu._rows with a fixed scale (None: its own rand x 10 + 0.2)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, V, generator=g) * (torch.rand(N, 1, generator=g) * 10 + 0.2)
    if scale is not None:
        x = x / x.std(-1, keepdim=True) * scale
    x[1::4] = (x[1::4] * 2).round() / 2
    x[2::4] = x[2::4].masked_fill(torch.rand(len(x[2::4]), V, generator=g) < 0.4, float("-inf"))
    top_k = torch.tensor([0, 0, 500, 0, 20, 0, 5000, 0])[torch.arange(N) % 8]
    top_p = torch.tensor([0.9, 0.95, 0.9, 0.5, 0.9, 0.999, 1.0, 0.01])[torch.arange(N) % 8]
    return x.to(device), top_k.to(device), top_p.to(device)


def bits(c: torch.Tensor) -> torch.Tensor:
    """float32 -> its int32 bits, on the host."""
    return c.view(torch.int32).cpu()


def f32(bits: torch.Tensor) -> torch.Tensor:
    """int64 holding float32 bits -> float32."""
    return bits.to(torch.int32).view(torch.float32)


def steps(x, top_k, top_p, bounded, tr) -> dict[str, torch.Tensor]:
    """Per row, [N] bool: whether each step of the kernel (trace `tr`) agrees with the reference,
    plus the values compared (name + '_kern' / '_ref')."""
    N, V = x.shape
    keys = ordered_keys(x)                                                       # [N, V]
    mine = (top_k <= 0) | (top_k > bounded)
    k_on = mine & (top_k > 0) & (top_k < V)
    p_on = mine & (top_p < 1.0)
    kth = torch.where(k_on, radix_select(keys, torch.ones_like(keys), top_k), 0)
    m = x.amax(-1, keepdim=True)
    m = torch.where(m == float("-inf"), 0.0, m)
    w = torch.where(keys >= kth.unsqueeze(-1), fixed_point_weights(x, m), 0)   # [N, V]
    z = w.sum(-1)
    target = top_p_target(top_p, z)
    t = radix_select(keys, w, target)
    st, seg_len, nseg = tr["stats"], tr["seg_len"], tr["nseg"]
    lo_mass, lo_v = f32(st[:, F["lo_mass"]]), f32(st[:, F["lo_v"]])
    cand = (keys >= kth.unsqueeze(-1)) & (x >= lo_mass.unsqueeze(-1))          # [N, V] the kernel's bound
    lo, hi = st[:, F["lo"]], st[:, F["hi"]]
    z_seg = torch.nn.functional.pad(w, (0, nseg * seg_len - V)).view(N, nseg, seg_len).sum(-1)
    bits_ok = torch.ones(N, dtype=torch.bool)
    cnt, buf = tr["cnt"].cpu(), tr["cand"].cpu()
    xc, cc = x.cpu(), cand.cpu()
    for r in range(N):
        for c in range(nseg):
            want = xc[r, c * seg_len:(c + 1) * seg_len][cc[r, c * seg_len:(c + 1) * seg_len]]
            n = int(cnt[r, c])
            if p_on[r] and (n != len(want) or not torch.equal(buf[r, c * seg_len:c * seg_len + n].view(torch.int32),
                                                                want.view(torch.int32))):
                bits_ok[r] = False
    d = {"kth": (tr["kth"], kth), "z": (tr["z"].sum(-1), z), "cand_n": (tr["cnt"].sum(-1).long(), cand.sum(-1)),
         "target": (st[:, F["target"]], target),
         "n_value": (st[:, F["n_value"]], (cand & (x >= lo_v.unsqueeze(-1))).sum(-1)),
         "bin": (torch.stack([lo, hi], -1), t),
         "above": (st[:, F["above"]], (w * (keys >= hi.unsqueeze(-1))).sum(-1)), "t": (st[:, F["t"]], t)}
    ok = {name: (a == b) | ~p_on for name, (a, b) in d.items() if name != "bin"}
    ok["kth"] = d["kth"][0] == d["kth"][1]
    ok["z"] = ((tr["z"] == z_seg).all(-1)) | ~p_on
    ok["bin"] = ((lo <= t) & (t < hi)) | ~p_on | (st[:, F["z"]] == 0)
    ok["cand_bits"] = bits_ok.to(x.device)
    order = ["kth", "z", "cand_n", "cand_bits", "target", "n_value", "bin", "above", "t"]
    return {"ok": {k: ok[k].cpu() for k in order}, "vals": {k: (a.cpu(), b.cpu()) for k, (a, b) in d.items()},
            "n_left": st[:, F["n_left"]].cpu(), "z_seg": (tr["z"].cpu(), z_seg.cpu())}


def show(v) -> str:
    if v.dim() == 1 and len(v) == 2:
        return f"[{v[0].item():#x},{v[1].item():#x})"
    return f"{v.item():#x}" if v.abs().max() >= 1 << 20 else str(v.item())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--scales", default=",".join(SCALES))
    ap.add_argument("--device", default="cuda", help="cpu with TRITON_INTERPRET=1: a smoke test of this script")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        from tests.triton_interpret import interpreter_shim
        interpreter_shim()
    dev, V, t0 = args.device, args.vocab, time.time()
    print(f"vocab {V}, {torch.cuda.get_device_name() if dev == 'cuda' else dev}, torch {torch.__version__}")
    details = 0
    for scale in args.scales.split(","):
        for N in map(int, args.batches.split(",")):
            x, top_k, top_p = rows(N, V, N, SCALES[scale], dev)
            for bounded in (0, 128):
                tr, tr2 = {}, {}
                got = top_k_top_p_cutoff_cuda(x, top_k, top_p, bounded, trace=tr)
                again = top_k_top_p_cutoff_cuda(x, top_k, top_p, bounded, trace=tr2)
                want = top_k_top_p_cutoff_torch(x, top_k, top_p, bounded)
                bad = (bits(got) != bits(want)).nonzero().flatten().tolist()
                same = torch.equal(bits(got), bits(again)) and all(
                    torch.equal(tr[k], tr2[k]) for k in ("kth", "z", "cnt", "stats"))
                one = (bits(top_k_top_p_cutoff_cuda(x, top_k, top_p, bounded, programs=1)) != bits(want)).sum().item()
                w4 = (bits(top_k_top_p_cutoff_cuda(x, top_k, top_p, bounded, num_warps=4)) != bits(want)).sum().item()
                s = steps(x, top_k, top_p, bounded, tr)
                off = {k: int((~v).sum()) for k, v in s["ok"].items() if (~v).any()}
                cands = tr["cnt"].sum(-1).tolist()
                print(f"{scale:6} N={N:<3} b={bounded:<3} bad {len(bad)}/{N} {bad[:12]}{'..' if len(bad) > 12 else ''}"
                      f" steps {' '.join(f'{k}:{v}' for k, v in off.items()) or 'ok'} rerun "
                      f"{'same' if same else 'DIFFERS'} 1prog/row {one} 4warps {w4} "
                      f"(segs {tr['nseg']}x{tr['seg_len']}, cand {min(cands)}-{max(cands)})")
                for r in bad[:3]:
                    if details >= 45:
                        break
                    details += 1
                    alone = top_k_top_p_cutoff_cuda(x[r:r + 1], top_k[r:r + 1], top_p[r:r + 1], bounded)
                    a = "kern" if bits(alone)[0] == bits(got)[r] else "ref" if bits(alone)[0] == bits(want)[r] else \
                        f"{alone.item():.9g}"
                    first = next((k for k, v in s["ok"].items() if not v[r]), None)
                    kind = ["plain", "ties", "-inf", "plain"][r % 4]
                    msg = f"  row {r} k={top_k[r].item()} p={top_p[r].item():.3g} {kind}: kern {got[r].item():.9g} " \
                          f"ref {want[r].item():.9g} alone={a} first off: {first}"
                    if first == "z":
                        zk, zr = s["z_seg"]
                        segs = (zk[r] != zr[r]).nonzero().flatten().tolist()
                        msg += f" segs {segs[:6]} kern {zk[r].sum().item():#x} ref {zr[r].sum().item():#x}"
                    elif first is not None and first != "cand_bits":
                        k_, r_ = s["vals"][first]
                        msg += f" kern {show(k_[r])} ref {show(r_[r])}"
                    if first in ("bin", "above", "t"):
                        msg += f" (n_value {s['vals']['n_value'][0][r].item()}, n_left {s['n_left'][r].item()}," \
                               f" t ref {key_values(s['vals']['t'][1][r:r + 1]).item():.9g})"
                    print(msg)
    print(f"done in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
