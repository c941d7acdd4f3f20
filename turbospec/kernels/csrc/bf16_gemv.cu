// bf16 weight x bf16 activation GEMV for decode (M <= 8 * NT rows): the FP8 GEMV's structure
// (fp8_gemv.cu) without the conversion, a probe for #8's small qwen3-8b linears (qkv, o, down at
// 68-86% of copy bandwidth in the Triton skinny GEMM at M = 1 on an H200). Not used by the engine:
// bench/bf16_gemv_probe.py compares it with kernels/skinny_gemm.py and cuBLAS.
//
// out[m, n] = sum_k x[m, k] * w[n, k]
//
// Weights permuted once (bench/bf16_gemv_probe.py, `permute_bf16`): one 4 KB chunk per (16-row
// stripe, 128-wide K block), 8 segments of 512 B, lane l's 16 B of segment j = its A fragment of
// k16-step j: row g's 4 bf16 then row g + 8's (g = l / 4, t = l % 4), at the logical k's
// 32t + 4j + {0, 1, 2, 3} as in fp8_gemv.cu, so x is read the same way (32 contiguous bf16 per lane
// and block). K blocks split between a block's warps, partial sums added in warp order.
#include "gemv_common.cuh"

template <int NT, bool PIPE>
__device__ __forceinline__ void stripe_dot_bf16(const uint4 *__restrict__ wchunk, const __nv_bfloat16 *__restrict__ x,
                                                int M, int stride_xm, int kb0, int kb1, float (&acc)[NT][4]) {
  using Buf = KBlock<8, NT>;
  auto load = [&](int kb, Buf &buf) {
    const uint4 *wc = wchunk + (size_t)kb * 256;
#pragma unroll
    for (int j = 0; j < 8; ++j) buf.w[j] = __ldg(wc + 32 * j);
    load_x<NT>(buf.x, x, M, stride_xm, kb);
  };
  auto compute = [&](const Buf &buf) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t a[4] = {buf.w[j].x, buf.w[j].z, buf.w[j].y, buf.w[j].w};   // row g (k 2t.., 2t+8..), row g + 8
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
__device__ __forceinline__ void bf16_gemv_body(const uint8_t *__restrict__ wp, const __nv_bfloat16 *__restrict__ x,
                                               __nv_bfloat16 *__restrict__ out, int M, int N, int K, int stride_xm,
                                               int stride_om) {
  const int stripe = blockIdx.x, kblocks = K / 128;
  int kb0, kb1;
  warp_k_range<WARPS>(kblocks, kb0, kb1);
  const uint4 *wchunk = reinterpret_cast<const uint4 *>(wp) + ((size_t)stripe * kblocks) * 256 + threadIdx.x % 32;
  float acc[NT][4] = {};
  stripe_dot_bf16<NT, PIPE>(wchunk, x, M, stride_xm, kb0, kb1, acc);
  __shared__ float red[WARPS * NT * 128];
  warp_sum<WARPS, NT>(acc, red);
  if (threadIdx.x / 32 == 0) store_rows<NT>(acc, out, M, stride_om, stripe);
}

#define BF16_GEMV(W, NT, P)                                                                           \
  extern "C" __global__ void __launch_bounds__(W * 32) bf16_gemv_w##W##_nt##NT##_p##P(                 \
      const uint8_t *wp, const __nv_bfloat16 *x, __nv_bfloat16 *out, int M, int N, int K, int stride_xm, \
      int stride_om) {                                                                                 \
    pdl_wait();                                                                                      \
    bf16_gemv_body<W, NT, P>(wp, x, out, M, N, K, stride_xm, stride_om);                              \
  }
BF16_GEMV(2, 1, 1)
BF16_GEMV(4, 1, 0)
BF16_GEMV(4, 1, 1)
BF16_GEMV(8, 1, 0)
BF16_GEMV(8, 1, 1)
BF16_GEMV(4, 2, 1)
BF16_GEMV(8, 2, 1)
