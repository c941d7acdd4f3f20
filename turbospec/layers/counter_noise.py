"""Counter-based noise for seeded requests: the Exp(1) noise of the exponential race
(`sampler.race_scores`) for the token at index t of a sequence seeded s is a pure function of
(s, t, vocab id). A seeded request so draws the same tokens whatever else is in its batch, and
whether it decodes in single steps or inside a CUDA-graphed decode burst (a graph cannot hold a
`torch.Generator`, a counter needs no state).

    key(s)      = mix(s xor SALT)                         (host, once per request)
    E(s, t, v)  = -log(u),  u = (top 23 bits of mix(key(s) + (t * V + v) * GOLDEN) + 1/2) / 2^23

mix is SplitMix64's finaliser (Steele, Lea, Flood 2014), GOLDEN its increment: the row of token t
is the SplitMix64 stream of key(s) at offsets t * V .. t * V + V - 1. u lies in [2^-24, 1 - 2^-24],
every value exact in float32, so E >= 6e-8 (clamped to float32's tiny where a fast log rounds)
and E <= 16.6. With 24 bits the top cell (2^24 - 1/2) / 2^24 rounded to 1.0 in float32: E = 0,
and a token top-k / top-p had removed scored 0 / 0 = NaN, which torch's argmax picks: one draw in
2^24 / V drew a token outside the user's distribution (0.9% of seeded draws at V = 152k).

On CUDA one Triton launch (`kernels/counter_noise.py`) writes the seeded rows of a noise tensor in
place (graph-capturable; unseeded rows keep their noise from the default generator); elsewhere the
same arithmetic in int64 PyTorch ops. The two are not required to agree bit for bit: single steps
and bursts on one device both take that device's path.
"""
from __future__ import annotations

import torch

GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_SALT = 0x5EED5EED5EED5EED
_MASK = (1 << 64) - 1
TINY = torch.finfo(torch.float32).tiny    # E's floor: p / E stays finite, 0 / E is 0


def _mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _signed(z: int) -> int:
    return z - (1 << 64) if z >= 1 << 63 else z


def seed_key(seed: int) -> int:
    """The per-request key (a signed int64, as a tensor holds it) of a request seeded `seed`."""
    return _signed(_mix((int(seed) ^ _SALT) & _MASK))


def reference_noise(seed: int, index: int, vocab_size: int, v: int) -> float:
    """E(seed, index, v) in Python integers and float64 (tests): -log(u) before float32 rounding."""
    import math
    z = _mix((seed_key(seed) + (index * vocab_size + v) * GOLDEN) & _MASK)
    return -math.log(((z >> 41) + 0.5) / 2 ** 23)


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _torch_rows(keys: torch.Tensor, index: torch.Tensor, V: int) -> torch.Tensor:
    """keys, index [N] int64 -> [N, V] float32 E, in int64 PyTorch ops (multiplies wrap mod 2^64)."""
    v = torch.arange(V, dtype=torch.int64, device=keys.device)
    z = keys[:, None] + (index[:, None] * V + v[None, :]) * _signed(GOLDEN)               # [N, V]
    z = (z ^ _shr(z, 30)) * _signed(_M1)
    z = (z ^ _shr(z, 27)) * _signed(_M2)
    z = z ^ _shr(z, 31)
    u = (_shr(z, 41).to(torch.float32) + 0.5) * (2.0 ** -23)                           # [2^-24, 1 - 2^-24]
    return (-torch.log(u)).clamp_min_(TINY)


def counter_exponential_(noise: torch.Tensor, keys: torch.Tensor, index: torch.Tensor,
                         seeded: torch.Tensor) -> torch.Tensor:
    """Overwrite the rows of noise [N, V] float32 where seeded [N] with E(key, index, .) (keys,
    index [N] int64 device tensors); other rows are left as they are. Returns noise."""
    N, V = noise.shape
    if N == 0:
        return noise
    if noise.is_cuda:
        from turbospec.kernels.counter_noise import counter_exponential_rows   # CUDA only: imports Triton
        counter_exponential_rows(noise, keys, index, seeded)
        return noise
    rows = seeded.nonzero().squeeze(1)             # off CUDA: eager, so only the seeded rows are hashed
    noise[rows] = _torch_rows(keys[rows], index[rows], V)
    return noise


def warm_up(device: torch.device, vocab_size: int) -> None:
    """Compile the seeded rows' kernel at start-up (CUDA): a seeded request's first token is
    drawn in an eager step, which would otherwise compile it while the request waits."""
    if device.type != "cuda":
        return
    noise = torch.empty(1, vocab_size, device=device)
    one = torch.zeros(1, dtype=torch.long, device=device)
    counter_exponential_(noise, one, one, torch.ones(1, dtype=torch.bool, device=device))
