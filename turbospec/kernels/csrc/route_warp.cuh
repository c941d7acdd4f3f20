// An MoE router's top-k routing of one token by one warp (bf16_gemv.cu's router_topk kernels, which
// compute the router logits first). The semantics of layers/moe_routing.py without groups: softmax
// (p = exp(x - max) / sum) or sigmoid scores s, experts chosen on s (+ expert_bias), the k largest in
// descending order (ties: the lower expert id, as tl.argmax and kernels/moe_align.fused_topk), weights
// the chosen s, renormalised by (their sum + eps) when asked, times routed_scaling_factor; fp32.
// The reductions (max, softmax sum, arg-max, weight sum) are xor-butterflies over the warp: fixed
// orders, so a token's routing depends on its logits only, never on the launch's other tokens.
#pragma once
#include "gemv_common.cuh"

#define ROUTE_MAX_PER_LANE 8        // experts per lane: at most 256 experts
#define ROUTE_SIGMOID 1             // flags
#define ROUTE_BIAS 2
#define ROUTE_RENORM 4

__device__ __forceinline__ float ld_cg_bf16(const bf16_t *p) {   // L2, not L1: written by other blocks
  unsigned short v;
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return __uint_as_float((uint32_t)v << 16);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_add(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// logits [E] (bf16, written by this launch's blocks) -> ids [top_k] int32, tw [top_k] fp32.
// E <= 32 * ROUTE_MAX_PER_LANE, top_k <= 32. Called by all 32 lanes of a warp.
__device__ __forceinline__ void route_row_warp(const bf16_t *logits, const float *__restrict__ bias, int E,
                                               int top_k, float scale, float eps, int flags,
                                               int *__restrict__ ids, float *__restrict__ tw) {
  const int lane = threadIdx.x % 32;
  const float NEG = -__int_as_float(0x7f800000);
  float s[ROUTE_MAX_PER_LANE], c[ROUTE_MAX_PER_LANE];          // expert lane + 32j: score, choice
  float mx = NEG;
#pragma unroll
  for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) {
    const int e = lane + 32 * j;
    s[j] = e < E ? ld_cg_bf16(logits + e) : NEG;
    mx = fmaxf(mx, s[j]);
  }
  if (flags & ROUTE_SIGMOID) {
#pragma unroll
    for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) s[j] = lane + 32 * j < E ? 1.0f / (1.0f + expf(-s[j])) : 0.0f;
  } else {
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) {
      s[j] = lane + 32 * j < E ? expf(s[j] - mx) : 0.0f;
      sum += s[j];
    }
    const float inv = 1.0f / warp_add(sum);
#pragma unroll
    for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) s[j] *= inv;
  }
#pragma unroll
  for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) {
    const int e = lane + 32 * j;
    c[j] = e < E ? s[j] + ((flags & ROUTE_BIAS) ? __ldg(bias + e) : 0.0f) : NEG;
  }
  float my_w = 0.0f;                                            // lane i < top_k: slot i's weight
  int my_id = 0;
  for (int i = 0; i < top_k; ++i) {
    float bv = NEG, bs = 0.0f;
    int bi = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j)                 // ascending e: a tie keeps the lower
      if (c[j] > bv) {
        bv = c[j];
        bs = s[j];
        bi = lane + 32 * j;
      }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o), os = __shfl_xor_sync(0xffffffffu, bs, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) {
        bv = ov;
        bs = os;
        bi = oi;
      }
    }
    if (bi >= E) {                                               // NaN logits: a valid id, weight 0
      bi = 0;
      bs = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j)
      if (bi == lane + 32 * j) c[j] = NEG;
    if (lane == i) {
      my_w = bs;
      my_id = bi;
    }
  }
  if (flags & ROUTE_RENORM) my_w = my_w / (warp_add(lane < top_k ? my_w : 0.0f) + eps);
  if (lane < top_k) {
    ids[lane] = my_id;
    tw[lane] = my_w * scale;
  }
}
