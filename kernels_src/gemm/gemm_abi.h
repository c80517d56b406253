// The Hopper-tier GEMM's parameters and launch shape (kernels_src/gemm/sm90.cuh), shared by the host
// (src/ops/gemm_jit.cpp) and the kernel. Same rules as mlajit_abi.h: plain C types, no std::.
//
// C_b[M, N] = A_b[M, K] . B_b[K, N] (bf16 in, fp32 accumulate, bf16 out) for b in [0, batch). Three 3-D TMA
// tensor maps (bf16, 128-byte swizzle), encoded by the host:
//   tm_a: {K, M, batch}, boxes 64 x BLOCK_M x 1 (A row-major, any leading dimension and batch stride);
//   tm_b: B_NMAJOR = 0 (B stored [N, K]): {K, N, batch}, boxes 64 x BLOCK_N x 1;
//         B_NMAJOR = 1 (B stored [K, N]): {N, K, batch}, boxes 64 x 64 x 1 (BLOCK_N / 64 per k-step);
//   tm_c: {N, M, batch}, boxes 64 x 64 x 1 (stores: rows and columns past the tensor are clipped).
// (Each map's two outer dimensions may be swapped: *_batch_inner below.)
// Loads past the tensor are zero-filled by TMA, so M, N and K tails need no code in the kernel.
#pragma once
#include "mlajit_abi.h"

struct GemmSm90Params {
    MjTensorMap tm_a, tm_b, tm_c;  // first: a CUtensorMap sits 64-byte aligned in parameter space
    int tiles_m, tiles_n;          // BLOCK_M-row and BLOCK_N-column tiles of one batch entry
    int num_tiles;                 // tiles_m * tiles_n * batch
    int group_m;                   // tile raster: group_m row tiles walk the N tiles together (L2 reuse)
    // 1: the map's dimensions are {inner, batch, rows} instead of {inner, rows, batch} (the host orders
    // them by stride, e.g. per-head slices of a [T, heads, d] tensor: batch stride d < row stride heads * d).
    int a_batch_inner, b_batch_inner, c_batch_inner;
    // MJ_A_PAGED = 1 (batch 1, K = 512): A's rows come straight out of the paged latent cache (tm_a unused).
    // Row i of A is key cu[0] + i of the requests r = 0..a_nreq-1 of a_cu_seqlens (absolute entries): request
    // r's position pos = cu[0] + i - cu[r] lives in page a_block_table[r * a_bt_stride + pos / a_block_size],
    // row pos % a_block_size; A row i = that row's elements 0..511. Rows past m are zero. A page entry outside
    // 0..a_num_blocks-1 (or a position past a_max_blocks pages) reads as zeros, and its k_pe row as NaN.
    // kpe_out (optional, bf16 [m, 64] contiguous): the column-tile-0 blocks copy elements 512..575 of their
    // rows there (the MHA kernel's k_pe), so nothing else reads the pages.
    const void* a_pages;
    mj_i64 a_page_stride, a_tok_stride;  // elements
    const int* a_block_table;
    mj_i64 a_bt_stride;
    const int* a_cu_seqlens;
    int a_nreq, a_block_size, a_num_blocks, a_max_blocks;
    int m;
    void* kpe_out;
};

static constexpr int mj_gemm90_threads() { return 384; }  // 1 producer + 2 consumer warpgroups
static constexpr int mj_gemm90_stage_bytes(int block_m, int block_n) { return block_m * 64 * 2 + block_n * 64 * 2; }
// 1 KiB alignment slack (128-byte swizzled tiles start on 1024-byte boundaries), the k-step stages, the
// C staging tile (BLOCK_M x BLOCK_N bf16) and 256 bytes of mbarriers.
static constexpr int mj_gemm90_smem_bytes(int block_m, int block_n, int stages) {
    return 1024 + stages * mj_gemm90_stage_bytes(block_m, block_n) + block_m * block_n * 2 + 256;
}
