// An MoE token's routing by one warp (included by fp8_gemv.cu and bf16_gemv.cu; kernels/moe_gemv.py):
// the semantics of layers/moe_routing.py without expert groups: softmax (p = exp(x - max) / sum) or
// sigmoid scores s, experts chosen on s (+ expert_bias), the k largest in descending order (ties: the
// lower expert id, as kernels/moe_align.fused_topk), weights the chosen s, renormalised by (their sum +
// eps) when asked, times routed_scaling_factor; fp32. The reductions (max, softmax sum, arg-max, weight
// sum) are xor-butterflies over the warp: fixed orders, so a token's routing depends on its logits only.
//
// Every kernel that routes here computes the same instructions, so the one-token expert kernels, which
// route their token in their own prologue (`moe_gemv1r` after its PDL wait, `moe_gemv2r` before it:
// the router's logits are two launches back), and `moe_route`, which routes 2-16 tokens for the
// grouped kernels, give a token the same experts and weight bits (tests/gpu/test_moe_route_gpu.py).
#pragma once
#include "gemv_common.cuh"

#define ROUTE_MAX_PER_LANE 8        // experts per lane: at most 256 experts
#define ROUTE_SIGMOID 1             // flags
#define ROUTE_BIAS 2
#define ROUTE_RENORM 4

struct Route {                      // lane i < top_k: slot i's expert and weight
  int id;
  float w;
};

__device__ __forceinline__ float ld_cg_bf16(const bf16_t *p) {   // from L2: another launch wrote it
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

// logits [E] bf16 (E <= 32 * ROUTE_MAX_PER_LANE), bias [E] fp32 (flags & ROUTE_BIAS), top_k <= 32.
// Called by all 32 lanes of a warp.
__device__ __forceinline__ Route route_lane(const bf16_t *logits, const float *__restrict__ bias, int E,
                                            int top_k, float scale, float eps, int flags) {
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
    sum = warp_add(sum);
#pragma unroll
    for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) s[j] = s[j] / sum;
  }
#pragma unroll
  for (int j = 0; j < ROUTE_MAX_PER_LANE; ++j) {
    const int e = lane + 32 * j;
    c[j] = e < E ? s[j] + ((flags & ROUTE_BIAS) ? __ldg(bias + e) : 0.0f) : NEG;
  }
  Route r = {0, 0.0f};
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
      r.id = bi;
      r.w = bs;
    }
  }
  if (flags & ROUTE_RENORM) r.w = r.w / (warp_add(lane < top_k ? r.w : 0.0f) + eps);
  r.w *= scale;
  return r;
}

// Slot `slot`'s expert / weight, in every lane.
__device__ __forceinline__ int route_id(const Route &r, int slot) { return __shfl_sync(0xffffffffu, r.id, slot); }
__device__ __forceinline__ float route_w(const Route &r, int slot) { return __shfl_sync(0xffffffffu, r.w, slot); }

// logits [T, E] (row stride stride_l) -> ids [T, top_k] int32, tw [T, top_k] fp32: grid ceil(T / 4),
// a warp per token.
extern "C" __global__ void __launch_bounds__(128) moe_route(const bf16_t *logits, const float *bias, int *ids,
                                                            float *tw, int T, int E, int top_k, int stride_l,
                                                            float scale, float eps, int flags) {
  pdl_wait();
  const int token = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (token >= T) return;                                        // the whole warp
  const Route r = route_lane(logits + (size_t)token * stride_l, bias, E, top_k, scale, eps, flags);
  if (lane < top_k) {
    ids[token * top_k + lane] = r.id;
    tw[token * top_k + lane] = r.w;
  }
}
