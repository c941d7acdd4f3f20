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

template <int NT, bool PIPE>
__device__ __forceinline__ void stripe_dot_bf16(const bf16_t *__restrict__ rg, const bf16_t *__restrict__ rg8,
                                                const bf16_t *__restrict__ x, int M, int stride_xm, int kb0,
                                                int kb1, float (&acc)[NT][4]) {
  using Buf = KBlock<8, NT>;
  const bf16_t *xl[NT];
  lane_x<NT, 1>(xl, x, M, stride_xm);
  auto load = [&](int kb, Buf &buf) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      buf.w[2 * i] = __ldg(reinterpret_cast<const uint4 *>(rg + (size_t)kb * 128 + x_off<1>(i)));      // row g
      buf.w[2 * i + 1] = __ldg(reinterpret_cast<const uint4 *>(rg8 + (size_t)kb * 128 + x_off<1>(i))); // row g + 8
    }
    load_x<NT, 1>(buf.x, xl, kb);
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
  k_loop<PIPE, Buf>(kb0, kb1, load, compute);
}

template <int WARPS, int NT, bool PIPE>
__device__ __forceinline__ void bf16_gemv_body(const bf16_t *__restrict__ w, const bf16_t *__restrict__ x,
                                               bf16_t *__restrict__ out, int M, int N, int K, int stride_xm,
                                               int stride_om) {
  const int stripe = blockIdx.x, kblocks = K / 128;
  int kb0, kb1;
  warp_k_range<WARPS>(kblocks, kb0, kb1);
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const bf16_t *rg = w + ((size_t)stripe * 16 + g) * K + 8 * t;
  float acc[NT][4] = {};
  stripe_dot_bf16<NT, PIPE>(rg, rg + (size_t)8 * K, x, M, stride_xm, kb0, kb1, acc);
  __shared__ float red[WARPS * NT * 128];
  warp_sum<WARPS, NT>(acc, red);
  if (threadIdx.x / 32 == 0) store_rows<NT>(acc, out, M, stride_om, stripe);
}

#define BF16_GEMV(W, NT, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(W * 32) bf16_gemv_w##W##_nt##NT##_p##P(                 \
      const bf16_t *w, const bf16_t *x, bf16_t *out, int M, int N, int K, int stride_xm, \
      int stride_om) {                                                                                 \
    pdl_wait();                                                                                      \
    bf16_gemv_body<W, NT, P>(w, x, out, M, N, K, stride_xm, stride_om);                              \
  }
BF16_GEMV(2, 1, 1)
BF16_GEMV(4, 1, 0)
BF16_GEMV(4, 1, 1)
BF16_GEMV(8, 1, 0)
BF16_GEMV(8, 1, 1)
BF16_GEMV(4, 2, 1)
BF16_GEMV(8, 2, 1)
