// An RMSNorm folded into the CUDA GEMVs around it (layers/norm_epilogue.py, TURBOSPEC_NORM_EPILOGUE=1;
// the Triton kernels' form is kernels/norm_epilogue.py, and these keep its arithmetic):
//
// - a producer (o_proj, down_proj, an MoE's GEMM2 or its combine) rounds its row o as before, then
//   stores r = round(o + residual) (the new residual stream), xn = round(r * gamma) as its output, and
//   for each 16-column stripe the sum of r^2 by adjacent pairs (`NormOut`, `store_add_norm`);
// - a consumer (qkv_proj, gate_up_proj, the router, an MoE's GEMM1) reads xn as its input, sums its
//   rows' stripe sums by adjacent pairs (zero-padded to a power of two) into rstd = 1 / sqrt(sum / K +
//   eps) right after its PDL wait (`rows_rstd`), and scales its fp32 rows by rstd before rounding.
//
// A 32-column chunk sum of the Triton producer is the pair of two 16-column sums, so either producer's
// sums give a consumer the same tree, bit for bit: the sums of r^2 depend on neither the kernel family
// nor the launch (r^2 is exact in fp32). Every step is per row, so a row's bits do not depend on M.
#pragma once
#include "gemv_common.cuh"

// NORM_FOLD (a build define: TURBOSPEC_NORM_EPILOGUE=gemv, kernels/cubin.py): 1 builds the folded twins of
// the kernels (_e1 / _e2, moe_*n, moe_combine_n); 0 (the default) leaves them out, and the build as it was.
#ifndef NORM_FOLD
#define NORM_FOLD 0
#endif

struct NormIn {            // a consumer's rows: sq [M, np] fp32 sums of r^2, eps
  const float *sq;
  int np;
  float eps;
};

struct NormOut {           // a producer's epilogue: residual [M, N] in, gamma [N], r [M, N] and sq [M, np] out
  const bf16_t *res;
  const bf16_t *gamma;
  bf16_t *rout;
  float *sq;
  int np;
};

// The pair-tree sums of R rows [0 .. np) (row m at sq + m * np), each zero-padded to a power of two p2,
// by one warp (np <= 512): lane l holds the run [l * per, l * per + per) of each row (per = p2 / 32, at
// least 1: lanes past np hold zeros, and adding zeros at the tree's top changes no bit), summed in pairs
// in registers, then across lanes in pairs (xor 1, 2, .., 16). Every lane gets the sums; every row's
// loads are issued before the first add.
template <int R>
__device__ __forceinline__ void warp_pair_sums(const float *__restrict__ sq, int np, int rows, float (&s)[R]) {
  const int lane = threadIdx.x % 32;
  int p2 = 32;
  while (p2 < np) p2 *= 2;
  const int per = p2 / 32;
  float v[R][16];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int j = lane * per + i;
      v[r][i] = r < rows && i < per && j < np ? __ldcg(sq + (size_t)r * np + j) : 0.f;
    }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int d = 1; d < 16; d *= 2)
#pragma unroll
      for (int i = 0; i + d < 16; i += 2 * d) v[r][i] += v[r][i + d];
    s[r] = v[r][0];
#pragma unroll
    for (int o = 1; o < 32; o *= 2) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
  }
}

__device__ __forceinline__ float rstd_of(float s, int K, float eps) { return 1.0f / sqrtf(s / (float)K + eps); }

// rstd of row m (all lanes of the calling warp).
__device__ __forceinline__ float row_rstd(const NormIn &n, int K, int m) {
  float s[1];
  warp_pair_sums<1>(n.sq + (size_t)m * n.np, n.np, 1, s);
  return rstd_of(s[0], K, n.eps);
}

// rstd of rows [0, T) into rs (warp w: rows Rw .. Rw + R - 1, then R (w + WARPS) .., R rows' loads at a
// time: R = 1 costs a dense GEMV no registers, R = 4 serves the grouped MoE GEMM1's 16 tokens on 2 warps in
// two rounds); rs is read after a __syncthreads. np of up to 512: K of up to 8,192 from 16-column sums.
template <int WARPS, int R>
__device__ __forceinline__ void rows_rstd(const NormIn &n, int K, int T, float *rs) {
  for (int m0 = threadIdx.x / 32 * R; m0 < T; m0 += WARPS * R) {
    float s[R];
    warp_pair_sums<R>(n.sq + (size_t)m0 * n.np, n.np, T - m0, s);
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (threadIdx.x % 32 == 0 && m0 + r < T) rs[m0 + r] = rstd_of(s[r], K, n.eps);
  }
}

// The rows a dense consumer's warp takes at once: one for 1-8 rows (a decode: more would cost registers,
// e.g. 106 -> 127 in the FP8 4-warp kernel, 128 -> 161 in the bf16 one), two for 9-16 (a verify: at most
// two rounds of loads on 4 warps).
template <int WARPS, int NT>
__host__ __device__ constexpr int rstd_rows() { return NT == 1 ? 1 : 2; }

// k_loop's `wait` for a dense consumer (EARLY): pdl_wait, then its rows' rstd into rs once the first x
// loads are issued.
template <int WARPS, int NT>
struct RstdWait {
  NormIn n;
  int K, M;
  float *rs;
  __device__ __forceinline__ void operator()() const { pdl_wait(); }
  __device__ __forceinline__ void after_x() const { rows_rstd<WARPS, rstd_rows<WARPS, NT>()>(n, K, M, rs); }
};

// store_rows (gemv_common.cuh) with each row scaled by rs[m] before the rounding.
template <int NT>
__device__ __forceinline__ void store_rows_rstd(const float (&acc)[NT][4], bf16_t *__restrict__ out, int M,
                                                int stride_om, int stripe, const float *rs) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int m0 = n * 8 + 2 * t, row = stripe * 16 + g;
    if (m0 < M) {
      out[(size_t)m0 * stride_om + row] = f2bf(acc[n][0] * rs[m0]);
      out[(size_t)m0 * stride_om + row + 8] = f2bf(acc[n][2] * rs[m0]);
    }
    if (m0 + 1 < M) {
      out[(size_t)(m0 + 1) * stride_om + row] = f2bf(acc[n][1] * rs[m0 + 1]);
      out[(size_t)(m0 + 1) * stride_om + row + 8] = f2bf(acc[n][3] * rs[m0 + 1]);
    }
  }
}

// The sum of v over the 8 rows g of a 16-row stripe by adjacent pairs (lane 4g + t: rows g, g ^ 1 are
// lanes 4 apart), every lane of the warp taking part; each lane gets its t's sum.
__device__ __forceinline__ float stripe_pairs8(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  return v + __shfl_xor_sync(0xffffffffu, v, 16);
}

// The producer's epilogue in place of store_rows, by a whole warp (the shuffles): for token m (< M) of
// the lane's columns, o = round(acc), r = round(o + res[m, row]), rout[m, row] = r, out[m, row] =
// round(r * gamma[row]), and sq[m, stripe] = (pairs over rows 0-7 of r^2) + (over rows 8-15).
// res / rout rows: stride_r; out: stride_om; sq: n.np.
template <int NT>
__device__ __forceinline__ void store_add_norm(const float (&acc)[NT][4], bf16_t *__restrict__ out, int M,
                                               int stride_om, int stripe, const NormOut &n, int stride_r) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, row = stripe * 16 + g;
  const float ga = bf2f(n.gamma[row]), gb = bf2f(n.gamma[row + 8]);
#pragma unroll
  for (int i = 0; i < NT * 2; ++i) {
    const int m = (i / 2) * 8 + 2 * t + i % 2;
    const bool ok = m < M;
    float ra = 0.f, rb = 0.f;
    if (ok) {
      const size_t at = (size_t)m * stride_r + row;
      const bf16_t a = f2bf(bf2f(f2bf(acc[i / 2][i % 2])) + bf2f(n.res[at]));
      const bf16_t b = f2bf(bf2f(f2bf(acc[i / 2][2 + i % 2])) + bf2f(n.res[at + 8]));
      n.rout[at] = a;
      n.rout[at + 8] = b;
      ra = bf2f(a);
      rb = bf2f(b);
      out[(size_t)m * stride_om + row] = f2bf(ra * ga);
      out[(size_t)m * stride_om + row + 8] = f2bf(rb * gb);
    }
    const float s = stripe_pairs8(ra * ra) + stripe_pairs8(rb * rb);
    if (ok && g == 0) n.sq[(size_t)m * n.np + stripe] = s;
  }
}

// A dense GEMV's store (warp 0, after warp_sum) by its EPI: 0 store_rows, 1 its rows scaled by rs,
// 2 the residual add + norm (out = xn; res / rout rows of N).
template <int EPI, int NT>
__device__ __forceinline__ void store_epi(const float (&acc)[NT][4], bf16_t *__restrict__ out, int M, int stride_om,
                                          int stripe, const float *rs, const NormOut &nout, int N) {
  if (EPI == 0) store_rows<NT>(acc, out, M, stride_om, stripe);
  if (EPI == 1) store_rows_rstd<NT>(acc, out, M, stride_om, stripe, rs);
  if (EPI == 2) store_add_norm<NT>(acc, out, M, stride_om, stripe, nout, N);
}
