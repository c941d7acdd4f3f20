// Shared by the CUDA GEMVs (fp8_gemv.cu, bf16_gemv.cu): PDL, the bf16 MMA, the warp-order sum.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

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

