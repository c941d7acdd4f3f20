"""Triton kernels (CUDA only). Import the submodules you need, e.g.
`from turbospec.kernels.backend import TritonBackend`; this package itself imports nothing, so that
CPU-only machines never touch Triton.

- `store_kv`      — scatter new K/V into the paged cache (slot -1 skipped)
- `rope`          — q/k RMSNorm + RoPE; `qk_norm_rope_store_kv` also does `store_kv` in that launch
- `paged_decode`  — batch-invariant decode and chain-verify attention (fixed KV partitions + reduce)
- `paged_prefill` — multi-token attention (prefill, chunked prefill, tree verify, ragged batches)
- `rmsnorm`       — RMSNorm and fused residual-add + RMSNorm
- `backend`       — `TritonBackend`, the attention-backend interface over the above
- `skinny_gemm`   — batch-invariant small-M GEMM (decode/verify linears); `split_k` its epilogue,
                    shared with `fp8_gemm`; `microbench_gemm` (+ `gemm_sweep`) its benchmark
- `microbench`    — `python -m turbospec.kernels.microbench`: bandwidth vs the copy ceiling
"""
