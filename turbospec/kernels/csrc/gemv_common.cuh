// Shared by the CUDA GEMVs (fp8_gemv.cu, bf16_gemv.cu): PDL, the bf16 MMA, the warp-order sum.
#pragma once
// No CUDA header: NVRTC, which builds these sources where nvcc is absent (kernels/cubin.py), ships
// none. The kernels need a bf16 storage type and three conversions, written as the PTX that
// cuda_bf16.h emits for sm_90.
#ifdef __CUDACC_RTC__
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;
#else
#include <stdint.h>
#endif

struct __align__(2) bf16_t {
  unsigned short x;
};

__device__ __forceinline__ bf16_t f2bf(float f) {   // round to nearest even
  bf16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(f));
  return r;
}

__device__ __forceinline__ float bf2f(bf16_t h) { return __uint_as_float((uint32_t)h.x << 16); }

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// PDL (kernels/pdl.py's contract): wait for the predecessor, then release the successor. Both are
// no-ops in a launch without the programmatic-serialization attribute.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Partial sums of the block's warps, added in warp order into warp 0's registers (the other warps'
// v is left unset). red: WARPS * NT * 128 floats of shared memory.
template <int WARPS, int NT>
__device__ __forceinline__ void warp_sum(float (&acc)[NT][4], float *red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[((warp * NT + n) * 4 + i) * 32 + lane] = acc[n][i];
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int w = 1; w < WARPS; ++w) acc[n][i] += red[((w * NT + n) * 4 + i) * 32 + lane];
  }
}


// One K block's registers: the lane's weight loads (SEGS 128-bit loads of rows g and g + 8), its x
// values for NT 8-token tiles (32 bf16, four 128-bit loads) and, for FP8 weights, the scales of rows
// g and g + 8.
template <int SEGS, int NT>
struct KBlock {
  uint4 w[SEGS];
  uint4 x[NT][4];
  float sg, s8;
};

// The K order inside a 128-wide K block (the same for the weights and x, so the sum is x @ W.T):
// lane t's x values are four 8-wide pieces, piece i at k = 8Pt + x_off<P>(i), and its weight loads
// are the same k's of rows g and g + 8, straight from the row-major weight: 16-byte load L holds
// pieces PL .. PL + P - 1, at k = 8Pt + x_off<P>(PL). P = 2 (FP8: a load holds 16 k's, pieces 0-1 at
// 16t, 2-3 at 64 + 16t), P = 1 (bf16: 8 k's, piece i at 32i + 8t). A warp's load then reads 64
// contiguous bytes of each of 8 rows. At MMA step j the lane's k slots {2t, 2t+1, 2t+8, 2t+9} take
// x values 4j .. 4j + 3 of its 32 (x words 2j, 2j + 1).
template <int P>
__device__ __forceinline__ constexpr int x_off(int i) {
  return (i / P) * (32 * P) + (i % P) * 8;
}

// The lane's x rows: token 8n + g of each tile, advanced by 8Pt (nullptr past M).
template <int NT, int P>
__device__ __forceinline__ void lane_x(const bf16_t *(&xl)[NT], const bf16_t *__restrict__ x, int M,
                                       int stride_xm) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < NT; ++n) xl[n] = n * 8 + g < M ? x + (size_t)(n * 8 + g) * stride_xm + 8 * P * t : nullptr;
}

// x[m, kb * 128 + 8Pt + x_off<P>(i) : + 8] for i = 0..3 and each tile's lane row (zeros past M).
template <int NT, int P>
__device__ __forceinline__ void load_x(uint4 (&xd)[NT][4], const bf16_t *const (&xl)[NT], int kb) {
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const uint4 *xr = reinterpret_cast<const uint4 *>(xl[n] + kb * 128);   // one address, constant offsets
#pragma unroll
    for (int i = 0; i < 4; ++i) xd[n][i] = xl[n] ? __ldg(xr + x_off<P>(i) / 8) : make_uint4(0, 0, 0, 0);
  }
}

__device__ __forceinline__ uint32_t word(const uint4 &v, int i) {   // i: a compile-time constant
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// GEMV_EARLY (a build define: TURBOSPEC_GEMV_EARLY, kernels/cubin.py; default 1): the kernels whose
// weights (and what they read of them) no kernel of the step writes issue their first K blocks' weight
// loads before their PDL wait, so that those loads are in flight while the kernel before still runs
// (under PDL a kernel's blocks are resident from the start of its predecessor's, and wait); 0 waits
// first. The loads and the arithmetic are the same, only issued earlier: not a bit of the result
// changes (tests/gpu/test_gemv_early_gpu.py). H100, 2026-12-07: qwen3-30b-a3b b1 decode 0.9-1.7% faster,
// qwen3-8b unchanged; prefetching the rest of each warp's weight blocks into L2 there as well was slower
// (docs/benchmarks.md).
#ifndef GEMV_EARLY
#define GEMV_EARLY 1
#endif
#define EARLY_WAIT (GEMV_EARLY != 0)    // the kernels' EARLY template argument

// The loop over K blocks kb0 .. kb1: load(kb, buf) then compute(buf). PIPE: two buffers, each
// block's loads issued one block ahead of its use. EARLY: the kernel has not waited for its
// predecessor (`pdl_wait`); the loop does, after load_w(kb, buf) (load's part that no kernel of the
// step writes: weights, scales) of its first (PIPE: two) blocks, whose load_x (the rest) follows it.
// `wait`: its operator() waits (pdl_wait), its after_x() runs once the first K block's x loads are issued
// (`PdlWait`: nothing; the folded norm's consumers compute their rows' rstd there, norm_fold.cuh, so that
// the loads of its sums are in flight with the first x loads).
struct PdlWait {
  __device__ __forceinline__ void operator()() const { pdl_wait(); }
  __device__ __forceinline__ void after_x() const {}
};

template <bool PIPE, bool EARLY, typename Buf, typename Load, typename LoadW, typename LoadX, typename Compute,
          typename Wait = PdlWait>
__device__ __forceinline__ void k_loop(int kb0, int kb1, Load &&load, LoadW &&load_w, LoadX &&load_x,
                                       Compute &&compute, Wait wait = Wait()) {
  Buf a;
  if (!PIPE) {
    if (EARLY) {
      if (kb0 < kb1) load_w(kb0, a);
      wait();
    }
    for (int kb = kb0; kb < kb1; ++kb) {
      if (EARLY && kb == kb0) {
        load_x(kb, a);
        wait.after_x();
      } else {
        load(kb, a);
      }
      compute(a);
    }
    if (EARLY && kb0 >= kb1) wait.after_x();
  } else {
    Buf b;
    if (EARLY) {
      if (kb0 < kb1) load_w(kb0, a);
      if (kb0 + 1 < kb1) load_w(kb0 + 1, b);
      wait();
      if (kb0 < kb1) load_x(kb0, a);
      wait.after_x();
    } else if (kb0 < kb1) {
      load(kb0, a);
    }
    for (int kb = kb0; kb < kb1; kb += 2) {
      if (kb + 1 < kb1) {
        if (EARLY && kb == kb0)
          load_x(kb + 1, b);
        else
          load(kb + 1, b);
      }
      compute(a);
      if (kb + 2 < kb1) load(kb + 2, a);
      if (kb + 1 < kb1) compute(b);
    }
  }
}

// A warp's contiguous range of a stripe's K blocks (empty where there are more warps than blocks).
template <int WARPS>
__device__ __forceinline__ void warp_k_range(int kblocks, int &kb0, int &kb1) {
  const int per = (kblocks + WARPS - 1) / WARPS;
  kb0 = min(kblocks, (int)(threadIdx.x / 32) * per);
  kb1 = min(kblocks, kb0 + per);
}

// Warp 0's summed tile to out: acc 0 = (row g, token 2t), 1 = (row g, 2t + 1), 2 = (row g + 8, 2t),
// 3 = (row g + 8, 2t + 1), rows of 16-row stripe `stripe`, tokens 8n + .. of tile n (only < M).
template <int NT>
__device__ __forceinline__ void store_rows(const float (&acc)[NT][4], bf16_t *__restrict__ out, int M,
                                           int stride_om, int stripe) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int m0 = n * 8 + 2 * t, row = stripe * 16 + g;
    if (m0 < M) {
      out[(size_t)m0 * stride_om + row] = f2bf(acc[n][0]);
      out[(size_t)m0 * stride_om + row + 8] = f2bf(acc[n][2]);
    }
    if (m0 + 1 < M) {
      out[(size_t)(m0 + 1) * stride_om + row] = f2bf(acc[n][1]);
      out[(size_t)(m0 + 1) * stride_om + row + 8] = f2bf(acc[n][3]);
    }
  }
}
