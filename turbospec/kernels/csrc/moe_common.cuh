// Shared by the CUDA MoE GEMVs (fp8_moe.cuh in fp8_gemv.cu, bf16_gemv.cu): SiLU-and-mul, the grouping of a launch's
// (token, slot) pairs by expert, and the combine of a token's slot rows.
#pragma once
#include "gemv_common.cuh"
#include "norm_fold.cuh"

#define GEMV_MAX_TOKENS 16   // the tokens of one launch (kernels/gemv_common.py GEMV_MAX_M)

__device__ __forceinline__ bf16_t silu_mul(float gate, float up) { return f2bf(gate / (1.0f + __expf(-gate)) * up); }

// moe_group: ids [S] (pair p = token p / top_k, slot p % top_k; S <= 128) -> groups [S, 8] pair ids
// (-1: empty), grp_expert [S], num_groups [1]: the pairs of one expert in pair order, cut every 8;
// groups numbered in the order of their first pair. One block of 128 threads.
extern "C" __global__ void __launch_bounds__(128) moe_group(const int *__restrict__ ids, int S,
                                                            int *__restrict__ groups, int *__restrict__ grp_expert,
                                                            int *__restrict__ num_groups) {
  pdl_wait();
  __shared__ int sid[128], sgrp[128], wc[4];
  const int p = threadIdx.x, lane = p % 32, warp = p / 32;
  const int e = p < S ? __ldg(ids + p) : -1;
  sid[p] = e;
  __syncthreads();
  int rank = 0;                                           // same-expert pairs before p
  for (int q = 0; q < p; ++q) rank += sid[q] == e;
  const bool start = p < S && rank % 8 == 0;               // p opens a group
  const unsigned b = __ballot_sync(0xffffffffu, start);
  if (lane == 0) wc[warp] = __popc(b);
  __syncthreads();
  int grp = __popc(b & ((1u << lane) - 1));
  for (int w = 0; w < warp; ++w) grp += wc[w];
  sgrp[p] = grp;
  if (start) {
    grp_expert[grp] = e;
    for (int j = 0; j < 8; ++j) groups[grp * 8 + j] = -1;
  }
  if (p == 0) num_groups[0] = wc[0] + wc[1] + wc[2] + wc[3];
  __syncthreads();
  if (p < S) {                                            // the pair that opened p's group
    const int want = rank - rank % 8;
    int c = 0, opener = p;
    for (int q = 0; q <= p; ++q)
      if (sid[q] == e) {
        if (c == want) {
          opener = q;
          break;
        }
        ++c;
      }
    groups[sgrp[opener] * 8 + rank % 8] = p;
  }
}

// The lane's x row (lane_x<1, P>'s offset 8Pt): pair groups[grp * 8 + g]'s row of x (row = pair / div),
// nullptr for an empty column.
template <int P>
__device__ __forceinline__ const bf16_t *group_x(const int *__restrict__ groups, int grp, const bf16_t *x,
                                                 int div, int stride_x) {
  const int pair = __ldg(groups + grp * 8 + threadIdx.x % 32 / 4);
  return pair >= 0 ? x + (size_t)(pair / div) * stride_x + 8 * P * (threadIdx.x % 4) : nullptr;
}

// Grouped GEMM1's epilogue (warp 0, after warp_sum): lane (g, t) holds columns 2t and 2t + 1 of the
// group (acc 0 / 1: gate row g, acc 2 / 3: up row g, stripe `stripe` of 8 rows): inter[pair, I].
// NORM: gate and up scaled by rs[token] first (the folded norm's rstd, token = pair / top_k).
template <bool NORM = false>
__device__ __forceinline__ void store_group_inter(const float (&acc)[1][4], const int *__restrict__ groups, int grp,
                                                  bf16_t *__restrict__ inter, int I, int stripe,
                                                  const float *rs = nullptr, int top_k = 1) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int p0 = __ldg(groups + grp * 8 + 2 * t), p1 = __ldg(groups + grp * 8 + 2 * t + 1);
  if (NORM) {
    if (p0 >= 0) {
      const float r = rs[p0 / top_k];
      inter[(size_t)p0 * I + stripe * 8 + g] = silu_mul(acc[0][0] * r, acc[0][2] * r);
    }
    if (p1 >= 0) {
      const float r = rs[p1 / top_k];
      inter[(size_t)p1 * I + stripe * 8 + g] = silu_mul(acc[0][1] * r, acc[0][3] * r);
    }
    return;
  }
  if (p0 >= 0) inter[(size_t)p0 * I + stripe * 8 + g] = silu_mul(acc[0][0], acc[0][2]);
  if (p1 >= 0) inter[(size_t)p1 * I + stripe * 8 + g] = silu_mul(acc[0][1], acc[0][3]);
}

// Grouped GEMM2's epilogue (each warp its 16-row stripe): columns 2t, 2t + 1, rows g (acc 0 / 1) and
// g + 8 (acc 2 / 3): y[pair, H] = bf16(w_pair * acc), the per-slot kernels' rounding of a slot row.
__device__ __forceinline__ void store_group_y(const float (&acc)[1][4], const int *__restrict__ groups, int grp,
                                              const float *__restrict__ tw, bf16_t *__restrict__ y, int H, int stripe) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int p0 = __ldg(groups + grp * 8 + 2 * t), p1 = __ldg(groups + grp * 8 + 2 * t + 1);
  bf16_t *row = y + stripe * 16 + g;
  if (p0 >= 0) {
    const float w = __ldg(tw + p0);
    row[(size_t)p0 * H] = f2bf(acc[0][0] * w);
    row[(size_t)p0 * H + 8] = f2bf(acc[0][2] * w);
  }
  if (p1 >= 0) {
    const float w = __ldg(tw + p1);
    row[(size_t)p1 * H] = f2bf(acc[0][1] * w);
    row[(size_t)p1 * H + 8] = f2bf(acc[0][3] * w);
  }
}

// out[token, h] = bf16(y[token * top_k, h] + y[.. + 1, h] + ...), fp32 in slot order: moe2_body's
// warp_sum over its slot warps. grid (H / 128, T), 128 threads.
extern "C" __global__ void __launch_bounds__(128) moe_combine(const bf16_t *__restrict__ y, bf16_t *__restrict__ out,
                                                              int H, int top_k, int stride_o) {
  pdl_wait();
  const int token = blockIdx.y, h = blockIdx.x * 128 + threadIdx.x;
  const bf16_t *yr = y + (size_t)token * top_k * H + h;
  float s = bf2f(yr[0]);
  for (int j = 1; j < top_k; ++j) s += bf2f(yr[(size_t)j * H]);
  out[(size_t)token * stride_o + h] = f2bf(s);
}

#if NORM_FOLD
// moe_combine with the folded norm's producer epilogue (norm_fold.cuh): o = the combined row, rounded;
// r = round(o + res) to rout, xn = round(r * gamma) to out, and each 16 columns' pair sum of r^2 (the
// lanes of a 16-column run are adjacent: pairs xor 1, 2, 4, 8) to sq[token, h / 16]. res, rout: [T, H].
extern "C" __global__ void __launch_bounds__(128) moe_combine_n(const bf16_t *__restrict__ y, bf16_t *__restrict__ out,
                                                                int H, int top_k, int stride_o,
                                                                const bf16_t *__restrict__ res,
                                                                const bf16_t *__restrict__ gamma,
                                                                bf16_t *__restrict__ rout, float *__restrict__ sq,
                                                                int np) {
  pdl_wait();
  const int token = blockIdx.y, h = blockIdx.x * 128 + threadIdx.x;
  const bf16_t *yr = y + (size_t)token * top_k * H + h;
  float s = bf2f(yr[0]);
  for (int j = 1; j < top_k; ++j) s += bf2f(yr[(size_t)j * H]);
  const size_t at = (size_t)token * H + h;
  const bf16_t r = f2bf(bf2f(f2bf(s)) + bf2f(res[at]));
  rout[at] = r;
  const float rf = bf2f(r);
  out[(size_t)token * stride_o + h] = f2bf(rf * bf2f(gamma[h]));
  float q = rf * rf;
#pragma unroll
  for (int o = 1; o < 16; o *= 2) q += __shfl_xor_sync(0xffffffffu, q, o);
  if (h % 16 == 0) sq[(size_t)token * np + h / 16] = q;
}
#endif
