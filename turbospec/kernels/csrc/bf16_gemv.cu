// bf16 weight x bf16 activation GEMV for decode (M <= 8 * NT rows): the FP8 GEMV's structure
// (fp8_gemv.cu) without the conversion, for #8's small qwen3-8b linears (qkv, o, down at 68-86% of
// copy bandwidth in the Triton skinny GEMM at M = 1 on an H200). TURBOSPEC_BF16_GEMV (default auto:
// engines of one sequence; kernels/bf16_gemv.py); bench/bf16_gemv_probe.py compares it with kernels/skinny_gemm.py and cuBLAS.
//
// out[m, n] = sum_k x[m, k] * w[n, k]
//
// The weights are read as stored (row-major [N, K]): lane (g, t) loads 16 bytes (8 k's) of row g
// and of row g + 8 at k 32i + 8t, i = 0..3, of each 128-wide K block (a warp's load: 64 contiguous
// bytes of 8 rows); load i holds the lane's A fragments of k16 steps 2i and 2i + 1, with the k order
// inside a block taken as the same for x (gemv_common.cuh, `x_off<1>`). K blocks split between a
// block's warps, partial sums added in warp order.
#include "gemv_common.cuh"
#include "moe_common.cuh"
#include "norm_fold.cuh"

// xl: the lane's x row of each tile (lane_x<NT, 1>; nullptr: zeros). EARLY: k_loop's.
template <int NT, bool PIPE, bool EARLY = false, typename Wait = PdlWait>
__device__ __forceinline__ void stripe_dot_bf16_x(const bf16_t *__restrict__ rg, const bf16_t *__restrict__ rg8,
                                                  const bf16_t *const (&xl)[NT], int kb0, int kb1, float (&acc)[NT][4],
                                                  Wait wait = Wait()) {
  using Buf = KBlock<8, NT>;
  auto load_w = [&](int kb, Buf &buf) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      buf.w[2 * i] = __ldg(reinterpret_cast<const uint4 *>(rg + (size_t)kb * 128 + x_off<1>(i)));      // row g
      buf.w[2 * i + 1] = __ldg(reinterpret_cast<const uint4 *>(rg8 + (size_t)kb * 128 + x_off<1>(i))); // row g + 8
    }
  };
  auto load_x_ = [&](int kb, Buf &buf) { load_x<NT, 1>(buf.x, xl, kb); };
  auto load = [&](int kb, Buf &buf) {
    load_w(kb, buf);
    load_x_(kb, buf);
  };
  auto compute = [&](const Buf &buf) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint4 &wg = buf.w[(j / 2) * 2], &wg8 = buf.w[(j / 2) * 2 + 1];
      const int h = 2 * (j % 2);                       // step j: words h, h + 1 of load j / 2
      const uint32_t a[4] = {word(wg, h), word(wg8, h), word(wg, h + 1), word(wg8, h + 1)};
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const uint32_t *xs = reinterpret_cast<const uint32_t *>(&buf.x[n][0]);
        mma_bf16(acc[n], a, xs[2 * j], xs[2 * j + 1]);
      }
    }
  };
  k_loop<PIPE, EARLY, Buf>(kb0, kb1, load, load_w, load_x_, compute, wait);
}

template <int NT, bool PIPE, bool EARLY = false, typename Wait = PdlWait>
__device__ __forceinline__ void stripe_dot_bf16(const bf16_t *__restrict__ rg, const bf16_t *__restrict__ rg8,
                                                const bf16_t *__restrict__ x, int M, int stride_xm, int kb0,
                                                int kb1, float (&acc)[NT][4], Wait wait = Wait()) {
  const bf16_t *xl[NT];
  lane_x<NT, 1>(xl, x, M, stride_xm);
  stripe_dot_bf16_x<NT, PIPE, EARLY>(rg, rg8, xl, kb0, kb1, acc, wait);
}

// EPI (norm_fold.cuh): 0 none, 1 rows scaled by their rstd (`nin`), 2 the residual add + norm (`nout`).
template <int WARPS, int NT, bool PIPE, bool EARLY, int EPI = 0>
__device__ __forceinline__ void bf16_gemv_body(const bf16_t *__restrict__ w, const bf16_t *__restrict__ x,
                                               bf16_t *__restrict__ out, int M, int N, int K, int stride_xm,
                                               int stride_om, NormIn nin = {}, NormOut nout = {}) {
  const int stripe = blockIdx.x, kblocks = K / 128;
  int kb0, kb1;
  warp_k_range<WARPS>(kblocks, kb0, kb1);
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const bf16_t *rg = w + ((size_t)stripe * 16 + g) * K + 8 * t;
  float acc[NT][4] = {};
  __shared__ float rs[16];
  if (EPI == 1 && !EARLY) rows_rstd<WARPS, rstd_rows<WARPS, NT>()>(nin, K, M, rs);        // the kernel has waited
  if (EPI == 1)
    stripe_dot_bf16<NT, PIPE, EARLY>(rg, rg + (size_t)8 * K, x, M, stride_xm, kb0, kb1, acc,
                                     RstdWait<WARPS, NT>{nin, K, M, rs});
  else
    stripe_dot_bf16<NT, PIPE, EARLY>(rg, rg + (size_t)8 * K, x, M, stride_xm, kb0, kb1, acc);
  __shared__ float red[WARPS * NT * 128];
  warp_sum<WARPS, NT>(acc, red);
  if (threadIdx.x / 32 == 0) store_epi<EPI, NT>(acc, out, M, stride_om, stripe, rs, nout, N);
}

// The folded-norm twins of a dense kernel (norm_fold.cuh): _e1 a consumer, _e2 a producer (out = xn).
#define BF16_GEMV_NORM(W, NT, P)                                                                      \
  extern "C" __global__ void __launch_bounds__(W * 32) bf16_gemv_w##W##_nt##NT##_p##P##_e1(            \
      const bf16_t *w, const bf16_t *x, bf16_t *out, int M, int N, int K, int stride_xm,               \
      int stride_om, const float *sq, int np, float eps) {                                             \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    bf16_gemv_body<W, NT, P, EARLY_WAIT, 1>(w, x, out, M, N, K, stride_xm, stride_om,                 \
                                            NormIn{sq, np, eps});                                     \
  }                                                                                                  \
  extern "C" __global__ void __launch_bounds__(W * 32) bf16_gemv_w##W##_nt##NT##_p##P##_e2(            \
      const bf16_t *w, const bf16_t *x, bf16_t *out, int M, int N, int K, int stride_xm,               \
      int stride_om, const bf16_t *res, const bf16_t *gamma, bf16_t *rout, float *sq, int np) {        \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    bf16_gemv_body<W, NT, P, EARLY_WAIT, 2>(w, x, out, M, N, K, stride_xm, stride_om, NormIn{},       \
                                            NormOut{res, gamma, rout, sq, np});                       \
  }
#if NORM_FOLD
BF16_GEMV_NORM(4, 1, 1)
BF16_GEMV_NORM(8, 1, 1)
BF16_GEMV_NORM(4, 2, 1)
BF16_GEMV_NORM(8, 2, 1)
#endif

#define BF16_GEMV(W, NT, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(W * 32) bf16_gemv_w##W##_nt##NT##_p##P(                 \
      const bf16_t *w, const bf16_t *x, bf16_t *out, int M, int N, int K, int stride_xm, \
      int stride_om) {                                                                                 \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    bf16_gemv_body<W, NT, P, EARLY_WAIT>(w, x, out, M, N, K, stride_xm, stride_om);                  \
  }
BF16_GEMV(2, 1, 1)
BF16_GEMV(4, 1, 0)
BF16_GEMV(4, 1, 1)
BF16_GEMV(8, 1, 0)
BF16_GEMV(8, 1, 1)
BF16_GEMV(4, 2, 1)
BF16_GEMV(8, 2, 1)

// ---------------------------------------------------------------- fused MoE with bf16 experts
// fp8_moe.cuh's MoE kernels without the conversion (and the same bit-for-bit contract): w13 [E, 2I, H],
// w2 [E, H, I]. One token: moe_bf16_gemv1 / moe_bf16_gemv2, each (token, slot) its own blocks; 2-16
// tokens: moe_group, then moe_bf16_gemv1g / moe_bf16_gemv2g over groups of pairs of one expert (a
// column each), then moe_combine. Lane (g, t)'s row pointers are advanced by 8t (x_off<1>).
__device__ __forceinline__ const bf16_t *lane_row_bf16(const bf16_t *w, size_t r, int K) {
  return w + r * K + 8 * (threadIdx.x % 4);
}

// GEMM1, one (token, slot) per blockIdx.y: inter[slot, I] = silu(x @ gate.T) * (x @ up.T).
template <int WARPS, bool PIPE, bool NORM = false>
__device__ __forceinline__ void bmoe1_body(const bf16_t *__restrict__ w13, const bf16_t *__restrict__ x,
                                           const int *__restrict__ ids, bf16_t *__restrict__ inter, int I, int H,
                                           int top_k, int stride_x, NormIn nin = {}) {
  const int stripe = blockIdx.x, slot = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int e = __ldg(ids + slot);
  const float rs = NORM && warp == 0 ? row_rstd(nin, H, slot / top_k) : 1.f;
  int kb0, kb1;
  warp_k_range<WARPS>(H / 128, kb0, kb1);
  const bf16_t *rg = lane_row_bf16(w13, (size_t)e * 2 * I + stripe * 8 + g, H);
  float acc[1][4] = {};
  stripe_dot_bf16<1, PIPE>(rg, rg + (size_t)I * H, x + (size_t)(slot / top_k) * stride_x, 1, 0, kb0, kb1, acc);
  __shared__ float red[WARPS * 128];
  warp_sum<WARPS, 1>(acc, red);
  if (warp == 0 && t == 0)
    inter[(size_t)slot * I + stripe * 8 + g] = NORM ? silu_mul(acc[0][0] * rs, acc[0][2] * rs)
                                                    : silu_mul(acc[0][0], acc[0][2]);
}

// GEMM2 + combine, one token per blockIdx.y, one warp per slot over all of I, summed in slot order.
template <int TOPK, bool PIPE, bool EARLY, bool NORM = false>
__device__ __forceinline__ void bmoe2_body(const bf16_t *__restrict__ w2, const bf16_t *__restrict__ inter,
                                           const int *__restrict__ ids, const float *__restrict__ tw,
                                           bf16_t *__restrict__ out, int H, int I, int stride_o, NormOut nout = {}) {
  const int stripe = blockIdx.x, token = blockIdx.y;
  const int slot = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int e = __ldg(ids + token * TOPK + slot);
  const bf16_t *rg = lane_row_bf16(w2, (size_t)e * H + stripe * 16 + g, I);
  float acc[1][4] = {};
  stripe_dot_bf16<1, PIPE, EARLY>(rg, rg + (size_t)8 * I, inter + (size_t)(token * TOPK + slot) * I, 1, 0, 0, I / 128, acc);
  const float w = __ldg(tw + token * TOPK + slot);
  acc[0][0] = bf2f(f2bf(acc[0][0] * w));  // each slot's row rounded, as moe_combine reads it
  acc[0][2] = bf2f(f2bf(acc[0][2] * w));
  __shared__ float red[TOPK * 128];
  warp_sum<TOPK, 1>(acc, red);
  if (NORM) {
    if (slot == 0) {                                                // the token's row as one row of [1, H]
      const NormOut n{nout.res + (size_t)token * H, nout.gamma, nout.rout + (size_t)token * H,
                      nout.sq + (size_t)token * nout.np, nout.np};
      store_add_norm<1>(acc, out + (size_t)token * stride_o, 1, 0, stripe, n, H);
    }
  } else if (slot == 0 && t == 0) {
    out[(size_t)token * stride_o + stripe * 16 + g] = f2bf(acc[0][0]);
    out[(size_t)token * stride_o + stripe * 16 + g + 8] = f2bf(acc[0][2]);
  }
}

// Grouped GEMM1: grid (I / 8, S group bounds).
template <int WARPS, bool PIPE, bool NORM = false>
__device__ __forceinline__ void bmoe1g_body(const bf16_t *__restrict__ w13, const bf16_t *__restrict__ x,
                                            const int *__restrict__ groups, const int *__restrict__ grp_expert,
                                            bf16_t *__restrict__ inter, int I, int H, int top_k, int stride_x,
                                            NormIn nin = {}) {
  const int stripe = blockIdx.x, grp = blockIdx.y;
  __shared__ float rs[GEMV_MAX_TOKENS];
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  const int e = __ldg(grp_expert + grp);
  int kb0, kb1;
  warp_k_range<WARPS>(H / 128, kb0, kb1);
  const bf16_t *rg = lane_row_bf16(w13, (size_t)e * 2 * I + stripe * 8 + g, H);
  const bf16_t *xl[1] = {group_x<1>(groups, grp, x, top_k, stride_x)};
  if (NORM) rows_rstd<WARPS, WARPS >= 8 ? 2 : 4>(nin, H, gridDim.y / top_k, rs);   // every token's (gridDim.y = T * top_k)
  float acc[1][4] = {};
  stripe_dot_bf16_x<1, PIPE>(rg, rg + (size_t)I * H, xl, kb0, kb1, acc);
  __shared__ float red[WARPS * 128];
  warp_sum<WARPS, 1>(acc, red);
  if (warp == 0) store_group_inter<NORM>(acc, groups, grp, inter, I, stripe, rs, top_k);
}

// Grouped GEMM2: grid (H / 64, S group bounds), 4 warps each one 16-row stripe over all of I.
template <bool PIPE, bool EARLY>
__device__ __forceinline__ void bmoe2g_body(const bf16_t *__restrict__ w2, const bf16_t *__restrict__ inter,
                                            const int *__restrict__ groups, const int *__restrict__ grp_expert,
                                            const float *__restrict__ tw, bf16_t *__restrict__ y, int H, int I) {
  const int grp = blockIdx.y, stripe = blockIdx.x * 4 + threadIdx.x / 32;
  const int g = threadIdx.x % 32 / 4;
  const int e = __ldg(grp_expert + grp);
  const bf16_t *rg = lane_row_bf16(w2, (size_t)e * H + stripe * 16 + g, I);
  const bf16_t *xl[1] = {group_x<1>(groups, grp, inter, 1, I)};
  float acc[1][4] = {};
  stripe_dot_bf16_x<1, PIPE, EARLY>(rg, rg + (size_t)8 * I, xl, 0, I / 128, acc);
  store_group_y(acc, groups, grp, tw, y, H, stripe);
}

#define BMOE1(W, P)                                                                                   \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_bf16_gemv1_w##W##_p##P(                     \
      const bf16_t *w13, const bf16_t *x, const int *ids, bf16_t *inter, int I, int H, int top_k,      \
      int stride_x) {                                                                                  \
    pdl_wait();                                                                                      \
    bmoe1_body<W, P>(w13, x, ids, inter, I, H, top_k, stride_x);                                     \
  }                                                                                                  \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_bf16_gemv1g_w##W##_p##P(                    \
      const bf16_t *w13, const bf16_t *x, const int *groups, const int *grp_expert,                   \
      const int *num_groups, bf16_t *inter, int I, int H, int top_k, int stride_x) {                   \
    pdl_wait();                                                                                      \
    if (blockIdx.y >= __ldg(num_groups)) return;                                                     \
    bmoe1g_body<W, P>(w13, x, groups, grp_expert, inter, I, H, top_k, stride_x);                     \
  }
BMOE1(2, 1)
BMOE1(4, 1)
BMOE1(8, 1)
#if NORM_FOLD
#define BMOE1N(W, P)                                                                                 \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_bf16_gemv1n_w##W##_p##P(                    \
      const bf16_t *w13, const bf16_t *x, const int *ids, bf16_t *inter, int I, int H, int top_k,      \
      int stride_x, const float *sq, int np, float eps) {                                              \
    pdl_wait();                                                                                      \
    bmoe1_body<W, P, true>(w13, x, ids, inter, I, H, top_k, stride_x, NormIn{sq, np, eps});          \
  }                                                                                                  \
  extern "C" __global__ void __launch_bounds__(W * 32) moe_bf16_gemv1gn_w##W##_p##P(                   \
      const bf16_t *w13, const bf16_t *x, const int *groups, const int *grp_expert,                   \
      const int *num_groups, bf16_t *inter, int I, int H, int top_k, int stride_x, const float *sq,    \
      int np, float eps) {                                                                             \
    pdl_wait();                                                                                      \
    if (blockIdx.y >= __ldg(num_groups)) return;                                                     \
    bmoe1g_body<W, P, true>(w13, x, groups, grp_expert, inter, I, H, top_k, stride_x,                \
                            NormIn{sq, np, eps});                                                     \
  }
BMOE1N(2, 1)
BMOE1N(4, 1)
BMOE1N(8, 1)
#endif

#define BMOE2(K)                                                                                      \
  extern "C" __global__ void __launch_bounds__(K * 32) moe_bf16_gemv2_k##K##_p1(                       \
      const bf16_t *w2, const bf16_t *inter, const int *ids, const float *tw, bf16_t *out, int H,     \
      int I, int stride_o) {                                                                           \
    if (!EARLY_WAIT) pdl_wait();         /* ids, tw: top-k's, written two launches back */            \
    bmoe2_body<K, true, EARLY_WAIT>(w2, inter, ids, tw, out, H, I, stride_o);                        \
  }
BMOE2(1)
BMOE2(2)
BMOE2(4)
BMOE2(6)
BMOE2(8)
#if NORM_FOLD
#define BMOE2N(K)                                                                                    \
  extern "C" __global__ void __launch_bounds__(K * 32) moe_bf16_gemv2n_k##K##_p1(                      \
      const bf16_t *w2, const bf16_t *inter, const int *ids, const float *tw, bf16_t *out, int H,     \
      int I, int stride_o, const bf16_t *res, const bf16_t *gamma, bf16_t *rout, float *sq, int np) {  \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    bmoe2_body<K, true, EARLY_WAIT, true>(w2, inter, ids, tw, out, H, I, stride_o,                    \
                                          NormOut{res, gamma, rout, sq, np});                         \
  }
BMOE2N(1)
BMOE2N(2)
BMOE2N(4)
BMOE2N(6)
BMOE2N(8)
#endif

extern "C" __global__ void __launch_bounds__(128) moe_bf16_gemv2g_p1(
    const bf16_t *w2, const bf16_t *inter, const int *groups, const int *grp_expert, const int *num_groups,
    const float *tw, bf16_t *y, int H, int I) {
  if (!EARLY_WAIT) pdl_wait();           // the groups: moe_group's, written two launches back
  if (blockIdx.y >= __ldg(num_groups)) return;
  bmoe2g_body<true, EARLY_WAIT>(w2, inter, groups, grp_expert, tw, y, H, I);
}
