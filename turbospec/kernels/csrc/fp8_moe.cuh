// The FP8 MoE GEMVs (kernels/moe_gemv.py launches them): fp8_gemv.cu's stripe loop over an MoE's stacked
// experts, one token (each (token, slot) its own blocks) or 2-16 tokens grouped by expert. Part of
// fp8_gemv.cu's build (it includes this file last; nothing else does), split off to keep each file short.
#pragma once
#include "gemv_common.cuh"
#include "moe_common.cuh"
#include "norm_fold.cuh"

// ---------------------------------------------------------------- fused MoE, T tokens, each on its own
// Every (token, slot) and every token's combine is its own block, so a token's row does not depend
// on T (kernels/moe_gemv.py serves one token with them; 2-16 tokens take the grouped kernels below).
// GEMM1: grid (I / 8 stripes, T * top_k slots). Stripe s of w13 [E, 2I, H] = gate rows 8s..8s+7 (as
// rows g) and up rows I+8s..I+8s+7 (as rows g + 8), so silu(gate) * up is in one lane.
// inter[slot, I] = silu(x[slot / top_k] @ gate.T) * (x[slot / top_k] @ up.T), rounded to bf16 once.
// NORM (norm_fold.cuh): x is round(r * gamma) and gate, up are scaled by the token's rstd (`nin`).
template <int WARPS, bool PIPE, bool NORM = false>
__device__ __forceinline__ void moe1_body(const uint8_t *__restrict__ w13, const bf16_t *__restrict__ x,
                                          const float *__restrict__ s13, const int *__restrict__ ids,
                                          bf16_t *__restrict__ inter, int I, int H, int stride_se,
                                          int stride_sn, int top_k, int stride_x, NormIn nin = {}) {
  const int stripe = blockIdx.x, slot = blockIdx.y;
  x += (size_t)(slot / top_k) * stride_x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int e = __ldg(ids + slot);
  const float rs = NORM && warp == 0 ? row_rstd(nin, H, slot / top_k) : 1.f;
  const int kblocks = H / 128;
  int kb0, kb1;
  warp_k_range<WARPS>(kblocks, kb0, kb1);
  const uint8_t *rg = lane_row(w13, (size_t)e * 2 * I + stripe * 8 + g, H);
  const float *se = s13 + (size_t)e * stride_se;
  float acc[1][4] = {};
  stripe_dot<1, PIPE>(rg, rg + (size_t)I * H, x, 1, 0, kb0, kb1, se + (size_t)(stripe * 8 / 128) * stride_sn,
                      se + (size_t)((I + stripe * 8) / 128) * stride_sn, acc);
  __shared__ float red[WARPS * 128];
  warp_sum<WARPS, 1>(acc, red);
  if (warp == 0 && t == 0)                                         // token 0: acc 0 = gate, acc 2 = up
    inter[(size_t)slot * I + stripe * 8 + g] = NORM ? silu_mul(acc[0][0] * rs, acc[0][2] * rs)
                                                    : silu_mul(acc[0][0], acc[0][2]);
}

// GEMM2 + combine: grid (H / 16 stripes, T), one warp per slot (TOPK warps), each over all of I;
// out[token, H] = sum over its slots in slot order of bf16(w_slot * (inter[slot] @ down_e.T)), in fp32.
// NORM (norm_fold.cuh): the token's row goes through the residual add + norm (`nout`; out = xn).
template <int TOPK, bool PIPE, bool EARLY, bool NORM = false>
__device__ __forceinline__ void moe2_body(const uint8_t *__restrict__ w2, const bf16_t *__restrict__ inter,
                                          const float *__restrict__ s2, const int *__restrict__ ids,
                                          const float *__restrict__ tw, bf16_t *__restrict__ out, int H,
                                          int I, int stride_se, int stride_sn, int stride_o, NormOut nout = {}) {
  const int stripe = blockIdx.x, token = blockIdx.y;
  ids += token * TOPK;
  tw += token * TOPK;
  inter += (size_t)token * TOPK * I;
  out += (size_t)token * stride_o;
  const int slot = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int e = __ldg(ids + slot);
  const int kblocks = I / 128;
  const uint8_t *rg = lane_row(w2, (size_t)e * H + stripe * 16 + g, I);
  const float *srow = s2 + (size_t)e * stride_se + (size_t)(stripe * 16 / 128) * stride_sn;
  float acc[1][4] = {};
  stripe_dot<1, PIPE, EARLY>(rg, rg + (size_t)8 * I, inter + (size_t)slot * I, 1, 0, 0, kblocks, srow, srow, acc);
  const float w = __ldg(tw + slot);
  acc[0][0] = bf2f(f2bf(acc[0][0] * w));  // each slot's row rounded, as moe_sum
  acc[0][2] = bf2f(f2bf(acc[0][2] * w));
  __shared__ float red[TOPK * 128];
  warp_sum<TOPK, 1>(acc, red);
  if (NORM) {
    if (slot == 0) {                                                // the token's row as one row of [1, H]
      const NormOut n{nout.res + (size_t)token * H, nout.gamma, nout.rout + (size_t)token * H,
                      nout.sq + (size_t)token * nout.np, nout.np};
      store_add_norm<1>(acc, out, 1, 0, stripe, n, H);
    }
  } else if (slot == 0 && t == 0) {
    out[stripe * 16 + g] = f2bf(acc[0][0]);
    out[stripe * 16 + g + 8] = f2bf(acc[0][2]);
  }
}

#define MOE1(W, P)                                                                                    \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_gemv1_w##W##_p##P(                          \
      const uint8_t *w13, const bf16_t *x, const float *s13, const int *ids, bf16_t *inter, \
      int I, int H, int stride_se, int stride_sn, int top_k, int stride_x) {                           \
    pdl_wait();                                                                                      \
    moe1_body<W, P>(w13, x, s13, ids, inter, I, H, stride_se, stride_sn, top_k, stride_x);           \
  }
MOE1(2, 1)
MOE1(4, 0)
MOE1(4, 1)
MOE1(8, 0)
#if NORM_FOLD
#define MOE1N(W, P)                                                                                  \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_gemv1n_w##W##_p##P(                         \
      const uint8_t *w13, const bf16_t *x, const float *s13, const int *ids, bf16_t *inter,           \
      int I, int H, int stride_se, int stride_sn, int top_k, int stride_x, const float *sq, int np,    \
      float eps) {                                                                                     \
    pdl_wait();                                                                                      \
    moe1_body<W, P, true>(w13, x, s13, ids, inter, I, H, stride_se, stride_sn, top_k, stride_x,      \
                          NormIn{sq, np, eps});                                                       \
  }
MOE1N(2, 1)
MOE1N(4, 0)
MOE1N(4, 1)
MOE1N(8, 0)
#endif

#define MOE2(K, P)                                                                                    \
  extern "C" __global__ void __launch_bounds__(K * 32) moe_gemv2_k##K##_p##P(                          \
      const uint8_t *w2, const bf16_t *inter, const float *s2, const int *ids, const float *tw, \
      bf16_t *out, int H, int I, int stride_se, int stride_sn, int stride_o) {                  \
    if (!EARLY_WAIT) pdl_wait();         /* ids, tw: top-k's, written two launches back */            \
    moe2_body<K, P, EARLY_WAIT>(w2, inter, s2, ids, tw, out, H, I, stride_se, stride_sn, stride_o);   \
  }
MOE2(1, 1)
MOE2(2, 1)
MOE2(4, 1)
MOE2(6, 1)
MOE2(8, 0)
MOE2(8, 1)
#if NORM_FOLD
#define MOE2N(K, P)                                                                                  \
  extern "C" __global__ void __launch_bounds__(K * 32) moe_gemv2n_k##K##_p##P(                         \
      const uint8_t *w2, const bf16_t *inter, const float *s2, const int *ids, const float *tw,       \
      bf16_t *out, int H, int I, int stride_se, int stride_sn, int stride_o, const bf16_t *res,        \
      const bf16_t *gamma, bf16_t *rout, float *sq, int np) {                                          \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    moe2_body<K, P, EARLY_WAIT, true>(w2, inter, s2, ids, tw, out, H, I, stride_se, stride_sn,        \
                                      stride_o, NormOut{res, gamma, rout, sq, np});                   \
  }
MOE2N(1, 1)
MOE2N(2, 1)
MOE2N(4, 1)
MOE2N(6, 1)
MOE2N(8, 0)
MOE2N(8, 1)
#endif

// ---------------------------------------------------------------- fused MoE, 2-16 tokens, grouped by expert
// A verify's tokens share experts (8 tokens: 11-13 distinct of their 64 slots after a prefill), and
// the kernels above read an expert once per slot. These read it once per group: the (token, slot)
// pairs of one expert, at most 8 (the MMA's 8-wide side), each pair a column of the MMA. A column's
// sum is the same instructions in the same order whichever column holds it and whatever the others
// hold, and the warps, K split, pipelining, SiLU and roundings are the one-token kernels', so each
// token's row is bit for bit what moe_gemv1 / moe_gemv2 give it (tests/gpu/test_fp8_gemv_gpu.py).
//
// GEMM1: grid (I / 8 stripes, S group bounds); blocks past num_groups exit. inter[pair, I] as moe1_body.
template <int WARPS, bool PIPE, bool NORM = false>
__device__ __forceinline__ void moe1g_body(const uint8_t *__restrict__ w13, const bf16_t *__restrict__ x,
                                           const float *__restrict__ s13, const int *__restrict__ groups,
                                           const int *__restrict__ grp_expert, bf16_t *__restrict__ inter,
                                           int I, int H, int stride_se, int stride_sn, int top_k, int stride_x,
                                           NormIn nin = {}) {
  const int stripe = blockIdx.x, grp = blockIdx.y;
  __shared__ float rs[GEMV_MAX_TOKENS];
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const int e = __ldg(grp_expert + grp);
  int kb0, kb1;
  warp_k_range<WARPS>(H / 128, kb0, kb1);
  const uint8_t *rg = lane_row(w13, (size_t)e * 2 * I + stripe * 8 + g, H);
  const float *se = s13 + (size_t)e * stride_se;
  const bf16_t *xl[1] = {group_x<2>(groups, grp, x, top_k, stride_x)};
  if (NORM) rows_rstd<WARPS, WARPS >= 8 ? 2 : 4>(nin, H, gridDim.y / top_k, rs);   // every token's (gridDim.y = T * top_k)
  float acc[1][4] = {};
  stripe_dot_x<1, PIPE>(rg, rg + (size_t)I * H, xl, kb0, kb1, se + (size_t)(stripe * 8 / 128) * stride_sn,
                        se + (size_t)((I + stripe * 8) / 128) * stride_sn, acc);
  __shared__ float red[WARPS * 128];
  warp_sum<WARPS, 1>(acc, red);
  if (warp == 0) store_group_inter<NORM>(acc, groups, grp, inter, I, stripe, rs, top_k);
}

// GEMM2: grid (H / 64, S group bounds), 4 warps, each one 16-row stripe over all of I (as moe2_body's
// warps): y[pair, H] = bf16(w_pair * (inter[pair] @ down_e.T)), combined by moe_combine.
template <bool PIPE, bool EARLY>
__device__ __forceinline__ void moe2g_body(const uint8_t *__restrict__ w2, const bf16_t *__restrict__ inter,
                                           const float *__restrict__ s2, const int *__restrict__ groups,
                                           const int *__restrict__ grp_expert, const float *__restrict__ tw,
                                           bf16_t *__restrict__ y, int H, int I, int stride_se, int stride_sn) {
  const int grp = blockIdx.y, stripe = blockIdx.x * 4 + threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4;
  const int e = __ldg(grp_expert + grp);
  const uint8_t *rg = lane_row(w2, (size_t)e * H + stripe * 16 + g, I);
  const float *srow = s2 + (size_t)e * stride_se + (size_t)(stripe * 16 / 128) * stride_sn;
  const bf16_t *xl[1] = {group_x<2>(groups, grp, inter, 1, I)};
  float acc[1][4] = {};
  stripe_dot_x<1, PIPE, EARLY>(rg, rg + (size_t)8 * I, xl, 0, I / 128, srow, srow, acc);
  store_group_y(acc, groups, grp, tw, y, H, stripe);
}

#define MOE1G(W, P)                                                                                   \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_gemv1g_w##W##_p##P(                         \
      const uint8_t *w13, const bf16_t *x, const float *s13, const int *groups, const int *grp_expert, \
      const int *num_groups, bf16_t *inter, int I, int H, int stride_se, int stride_sn, int top_k,     \
      int stride_x) {                                                                                  \
    pdl_wait();                                                                                      \
    if (blockIdx.y >= __ldg(num_groups)) return;                                                     \
    moe1g_body<W, P>(w13, x, s13, groups, grp_expert, inter, I, H, stride_se, stride_sn, top_k, stride_x); \
  }
MOE1G(2, 1)
MOE1G(4, 0)
MOE1G(4, 1)
MOE1G(8, 0)
#if NORM_FOLD
#define MOE1GN(W, P)                                                                                 \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_gemv1gn_w##W##_p##P(                        \
      const uint8_t *w13, const bf16_t *x, const float *s13, const int *groups, const int *grp_expert, \
      const int *num_groups, bf16_t *inter, int I, int H, int stride_se, int stride_sn, int top_k,     \
      int stride_x, const float *sq, int np, float eps) {                                              \
    pdl_wait();                                                                                      \
    if (blockIdx.y >= __ldg(num_groups)) return;                                                     \
    moe1g_body<W, P, true>(w13, x, s13, groups, grp_expert, inter, I, H, stride_se, stride_sn, top_k,  \
                           stride_x, NormIn{sq, np, eps});                                            \
  }
MOE1GN(2, 1)
MOE1GN(4, 0)
MOE1GN(4, 1)
MOE1GN(8, 0)
#endif

extern "C" __global__ void __launch_bounds__(128) moe_gemv2g_p1(
    const uint8_t *w2, const bf16_t *inter, const float *s2, const int *groups, const int *grp_expert,
    const int *num_groups, const float *tw, bf16_t *y, int H, int I, int stride_se, int stride_sn) {
  if (!EARLY_WAIT) pdl_wait();           // the groups: moe_group's, written two launches back
  if (blockIdx.y >= __ldg(num_groups)) return;
  moe2g_body<true, EARLY_WAIT>(w2, inter, s2, groups, grp_expert, tw, y, H, I, stride_se, stride_sn);
}
