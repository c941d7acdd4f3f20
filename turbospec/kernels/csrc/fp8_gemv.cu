// Block-FP8 weight x bf16 activation GEMV for decode (M <= 8 * NT rows; TURBOSPEC_FP8_GEMV: default
// auto, engines of one sequence; kernels/cubin.py builds it with nvcc or NVRTC, kernels/fp8_gemv.py launches the
// dense kernels and kernels/moe_gemv.py the MoE ones): a hand-written
// kernel with fewer SASS instructions per weight byte in its loop (2.7 unpipelined, 2.9 pipelined)
// than the Triton FP8 GEMM (kernels/fp8_gemm.py: 4.0, issue-bound on an H200; bench/sass_loop.py
// counts both).
//
// out[m, n] = sum_k x[m, k] * w[n, k] * scale[n / 128, k / 128]   (w e4m3, 128 x 128 scale blocks)
//
// The weights are read as stored (row-major [N, K], or an MoE's [E, rows, K]): lane (g, t) of a
// warp loads 16 bytes of row g and of row g + 8 of its 16-row stripe at k 16t and at 64 + 16t of
// each 128-wide K block (a warp's load: 64 contiguous bytes of 8 rows), which are its mma.sync
// m16n8k16 A fragments for the block's 8 k16 steps once the k order inside the block is taken
// as the same for x (gemv_common.cuh, `x_off<2>`): the sum over k does not depend on which k sits
// in which MMA slot. A block of WARPS warps owns one stripe and splits its K blocks between warps
// (contiguous ranges); the partial sums are added in warp order (deterministic, independent of M).
// fp8 -> bf16 with integer ops as in kernels/fp8_gemm.py (w * 2^-120 exactly), x pre-scaled by
// 2^64 and the block's result by scale * 2^56.
#include "gemv_common.cuh"
#include "moe_common.cuh"
#include "norm_fold.cuh"

__device__ __forceinline__ void fp8x4_to_bf16x4(uint32_t w, uint32_t &lo, uint32_t &hi) {
  // bytes (w0, w1, w2, w3) -> lo = bf16x2(w0, w1), hi = bf16x2(w2, w3), each value * 2^-120
  uint32_t a, b;
  asm("prmt.b32 %0, %1, 0, 0x9180;" : "=r"(a) : "r"(w));
  asm("prmt.b32 %0, %1, 0, 0xB3A2;" : "=r"(b) : "r"(w));
  lo = (a << 4) & 0x87F087F0u;
  hi = (b << 4) & 0x87F087F0u;
}

__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t v) {
  // v * 2^64 in bf16x2 (exact): 0x5F80 is 2^64 in bf16
  return mul_bf16x2(v, 0x5F805F80u);
}

// acc[NT][4] += this lane's share of x[:, kb0 * 128 : kb1 * 128] @ W_stripe.T for one 16-row stripe
// (rg / rg8: rows g and g + 8 of the stripe, advanced by the lane's 16t bytes; sg / s8: their scales,
// stepped by K block: the same pointer for a dense stripe, two where the halves come from different
// 128-row blocks). PIPE: two register buffers, each block's loads issued one block ahead of its use.
// xl: the lane's x row of each tile (lane_x<NT, 2>; nullptr: zeros). EARLY: k_loop's (the caller has not
// waited for its predecessor).
template <int NT, bool PIPE, bool EARLY = false, typename Wait = PdlWait>
__device__ __forceinline__ void stripe_dot_x(const uint8_t *__restrict__ rg, const uint8_t *__restrict__ rg8,
                                             const bf16_t *const (&xl)[NT], int kb0, int kb1,
                                             const float *__restrict__ sg, const float *__restrict__ s8,
                                             float (&acc)[NT][4], Wait wait = Wait()) {
  using Buf = KBlock<4, NT>;
  auto load_w = [&](int kb, Buf &buf) {
    const uint8_t *a = rg + (size_t)kb * 128, *b = rg8 + (size_t)kb * 128;
#pragma unroll
    for (int L = 0; L < 2; ++L) {                                   // x pieces 2L, 2L + 1: k 16t + 64L ..
      buf.w[2 * L] = __ldg(reinterpret_cast<const uint4 *>(a + x_off<2>(2 * L)));       // row g
      buf.w[2 * L + 1] = __ldg(reinterpret_cast<const uint4 *>(b + x_off<2>(2 * L)));   // row g + 8
    }
  };
  auto load_s = [&](int kb, Buf &buf) {
    buf.sg = __ldg(sg + kb) * 72057594037927936.0f;               // scale * 2^56
    buf.s8 = __ldg(s8 + kb) * 72057594037927936.0f;
  };
  auto load = [&](int kb, Buf &buf) {
    load_w(kb, buf);
    load_x<NT, 2>(buf.x, xl, kb);
    load_s(kb, buf);
  };
  auto load_ws = [&](int kb, Buf &buf) {
    load_w(kb, buf);
    load_s(kb, buf);
  };
  auto load_x_ = [&](int kb, Buf &buf) { load_x<NT, 2>(buf.x, xl, kb); };
  auto compute = [&](const Buf &buf) {
    float d[NT][4];
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[n][i] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t wg = word(buf.w[(j / 4) * 2], j % 4), wg8 = word(buf.w[(j / 4) * 2 + 1], j % 4);
      uint32_t fa[4];
      fp8x4_to_bf16x4(wg, fa[0], fa[2]);               // row g: k slots (2t, 2t+1), (2t+8, 2t+9)
      fp8x4_to_bf16x4(wg8, fa[1], fa[3]);              // row g + 8
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const uint32_t *xs = reinterpret_cast<const uint32_t *>(&buf.x[n][0]);
        mma_bf16(d[n], fa, scale_bf16x2(xs[2 * j]), scale_bf16x2(xs[2 * j + 1]));
      }
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
      acc[n][0] = fmaf(d[n][0], buf.sg, acc[n][0]);
      acc[n][1] = fmaf(d[n][1], buf.sg, acc[n][1]);
      acc[n][2] = fmaf(d[n][2], buf.s8, acc[n][2]);
      acc[n][3] = fmaf(d[n][3], buf.s8, acc[n][3]);
    }
  };
  k_loop<PIPE, EARLY, Buf>(kb0, kb1, load, load_ws, load_x_, compute, wait);
}

// stripe_dot_x over rows 0 .. M - 1 of x (row stride stride_xm).
template <int NT, bool PIPE, bool EARLY = false, typename Wait = PdlWait>
__device__ __forceinline__ void stripe_dot(const uint8_t *__restrict__ rg, const uint8_t *__restrict__ rg8,
                                           const bf16_t *__restrict__ x, int M, int stride_xm, int kb0,
                                           int kb1, const float *__restrict__ sg, const float *__restrict__ s8,
                                           float (&acc)[NT][4], Wait wait = Wait()) {
  const bf16_t *xl[NT];
  lane_x<NT, 2>(xl, x, M, stride_xm);
  stripe_dot_x<NT, PIPE, EARLY>(rg, rg8, xl, kb0, kb1, sg, s8, acc, wait);
}

// Row r of a row-major [rows, K] FP8 matrix, advanced by lane t's 16t bytes.
__device__ __forceinline__ const uint8_t *lane_row(const uint8_t *w, size_t r, int K) {
  return w + r * K + 16 * (threadIdx.x % 4);
}

// Dense: block = one 16-row stripe, its K blocks split between the WARPS warps (contiguous ranges).
// EPI (norm_fold.cuh): 0 none, 1 rows scaled by their rstd (`nin`), 2 the residual add + norm (`nout`).
template <int WARPS, int NT, bool PIPE, bool EARLY, int EPI = 0>
__device__ __forceinline__ void gemv_body(const uint8_t *__restrict__ w, const bf16_t *__restrict__ x,
                                          const float *__restrict__ scale, bf16_t *__restrict__ out,
                                          int M, int N, int K, int stride_xm, int stride_om, int stride_sn,
                                          NormIn nin = {}, NormOut nout = {}) {
  const int stripe = blockIdx.x, kblocks = K / 128;
  int kb0, kb1;
  warp_k_range<WARPS>(kblocks, kb0, kb1);
  const int g = threadIdx.x % 32 / 4;
  const uint8_t *rg = lane_row(w, (size_t)stripe * 16 + g, K);
  const float *srow = scale + (size_t)(stripe * 16 / 128) * stride_sn;
  float acc[NT][4] = {};
  __shared__ float rs[16];
  if (EPI == 1 && !EARLY) rows_rstd<WARPS, rstd_rows<WARPS, NT>()>(nin, K, M, rs);        // the kernel has waited
  if (EPI == 1)
    stripe_dot<NT, PIPE, EARLY>(rg, rg + (size_t)8 * K, x, M, stride_xm, kb0, kb1, srow, srow, acc,
                                RstdWait<WARPS, NT>{nin, K, M, rs});
  else
    stripe_dot<NT, PIPE, EARLY>(rg, rg + (size_t)8 * K, x, M, stride_xm, kb0, kb1, srow, srow, acc);
  __shared__ float red[WARPS * NT * 128];
  warp_sum<WARPS, NT>(acc, red);
  if (threadIdx.x / 32 == 0) store_epi<EPI, NT>(acc, out, M, stride_om, stripe, rs, nout, N);
}

// The folded-norm twins of a dense kernel (norm_fold.cuh): _e1 a consumer, _e2 a producer (out = xn).
#define GEMV_NORM(W, NT, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(W * 32) fp8_gemv_w##W##_nt##NT##_p##P##_e1(             \
      const uint8_t *w, const bf16_t *x, const float *scale, bf16_t *out, int M, int N, int K,         \
      int stride_xm, int stride_om, int stride_sn, const float *sq, int np, float eps) {               \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    gemv_body<W, NT, P, EARLY_WAIT, 1>(w, x, scale, out, M, N, K, stride_xm, stride_om, stride_sn,    \
                                       NormIn{sq, np, eps});                                          \
  }                                                                                                  \
  extern "C" __global__ void __launch_bounds__(W * 32) fp8_gemv_w##W##_nt##NT##_p##P##_e2(             \
      const uint8_t *w, const bf16_t *x, const float *scale, bf16_t *out, int M, int N, int K,         \
      int stride_xm, int stride_om, int stride_sn, const bf16_t *res, const bf16_t *gamma,             \
      bf16_t *rout, float *sq, int np) {                                                               \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    gemv_body<W, NT, P, EARLY_WAIT, 2>(w, x, scale, out, M, N, K, stride_xm, stride_om, stride_sn,    \
                                       NormIn{}, NormOut{res, gamma, rout, sq, np});                  \
  }

#define GEMV(W, NT, P)                                                                                \
  extern "C" __global__ void __launch_bounds__(W * 32) fp8_gemv_w##W##_nt##NT##_p##P(                  \
      const uint8_t *w, const bf16_t *x, const float *scale, bf16_t *out, int M, int N,   \
      int K, int stride_xm, int stride_om, int stride_sn) {                                            \
    if (!EARLY_WAIT) pdl_wait();                                                                      \
    gemv_body<W, NT, P, EARLY_WAIT>(w, x, scale, out, M, N, K, stride_xm, stride_om, stride_sn);      \
  }
#if NORM_FOLD
GEMV_NORM(4, 1, 1)
GEMV_NORM(8, 1, 1)
GEMV_NORM(4, 2, 1)
GEMV_NORM(8, 2, 1)
#endif
GEMV(2, 1, 0)
GEMV(4, 1, 0)
GEMV(8, 1, 0)
GEMV(2, 1, 1)
GEMV(4, 1, 1)
GEMV(8, 1, 1)
GEMV(4, 2, 0)
GEMV(4, 2, 1)
GEMV(8, 2, 1)
GEMV(8, 2, 0)

#include "fp8_moe.cuh"     // the MoE kernels
