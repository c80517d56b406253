// mlajit top-k mask build: indices [T_q, topk] (request-local key positions) -> packed bitmask rows
// (bit j of word w = request-local key 32w + j), every word in [0, mask_stride_row) written, so the
// caller needs no memset. Indices outside [0, s_k) of the row's request (-1 included) are skipped;
// duplicates are harmless (OR).
//
// SUPPORTED CONFIGS: MJ_ROWS_PER_BLOCK in 1..16 (default 4). Block = mj_mask_threads() = 256 threads,
// grid = (ceil(max_seqlen_q / MJ_ROWS_PER_BLOCK), batch), no dynamic shared memory (32 KiB static).
//
// The job is one pass over the indices (64 MiB at S 8k, top-2048) plus the mask's store (8 MiB): a
// bandwidth job, so the loads are 16-byte vectors when the rows allow, all of a block's loads are in
// flight before the first is used, and nothing touches global memory twice. A block owns its rows outright
// and builds them in shared memory with shared atomicOr, then stores them with coalesced writes; words that
// cannot hold a bit (past ceil(s_k / 32)) are stored as zeros directly. Rows longer than a block's share of
// shared memory are built in word chunks: each chunk rescans the row's indices (few, and still in L2).
// Measured on the H200 (2026-12-03, tools/dev/mask, docs/PERF.md "Top-k mask build"): 0.031 / 0.052 /
// 0.103 ms at S 8k / 16k / 32k, 85 / 92 / ~100 % of a read-only kernel's rate over the same bytes. Tried
// and dropped there: one byte per key set with plain stores, then packed (no atomics): 8-170 % slower
// (more shared memory per row, so fewer rows per pass and more passes).
#include "mlajit_device.cuh"

static_assert(MJ_ROWS_PER_BLOCK >= 1 && MJ_ROWS_PER_BLOCK <= 16, "topk_mask: MJ_ROWS_PER_BLOCK must be 1..16");
static_assert(MJ_ARCH >= 80, "topk_mask: mlajit targets sm_80 and newer");

namespace mj_topk {
constexpr int RPB = MJ_ROWS_PER_BLOCK;
constexpr int NT = mj_mask_threads();
constexpr int CHUNK_WORDS = 8192 / RPB;  // mask words a row builds per pass: 32 KiB of shared memory in all
// 16-byte index vectors per row and thread loaded together: 8 vectors (128 B) per thread in flight.
constexpr int VPT = RPB >= 8 ? 1 : 8 / RPB;
static_assert(CHUNK_WORDS % 4 == 0, "topk_mask: a row's words are zeroed in 16-byte vectors");
}  // namespace mj_topk

extern "C" __global__ void __launch_bounds__(mj_topk::NT) mlajit_topk_mask(const TopkMaskParams p) {
    using namespace mj_topk;
    __shared__ __align__(16) unsigned words[RPB][CHUNK_WORDS];

    const int b = blockIdx.y;
    const int q_start = p.cu_seqlens_q[b];
    const int s_q = p.cu_seqlens_q[b + 1] - q_start;
    const int r0 = blockIdx.x * RPB;
    if (r0 >= s_q) return;
    const int s_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    const int nrows = min(RPB, s_q - r0);
    const mj_i64 W = p.mask_stride_row;
    const int tid = threadIdx.x;
    const int n_words = (int)min((mj_i64)((s_k + 31) >> 5), W);  // words that can hold a bit
    unsigned* const mask0 = p.mask + (mj_i64)(q_start + r0) * W;

    // Words past the last key: zeros, stored directly (the library's stride adds fewer than 4).
    for (int r = 0; r < nrows; ++r)
        for (mj_i64 w = n_words + tid; w < W; w += NT) mask0[r * W + w] = 0u;

    // 16-byte loads need 16-byte aligned rows of whole vectors (the library's own buffers are).
    const bool vec = ((reinterpret_cast<unsigned long long>(p.indices) | (unsigned long long)p.idx_stride_tok * 4 |
                       (unsigned long long)p.topk * 4) & 15) == 0;
    const int n_vec = p.topk >> 2;

    for (int wb = 0; wb < n_words; wb += CHUNK_WORDS) {
        const int cw = min(CHUNK_WORDS, n_words - wb);
        const int kb = wb * 32, ke = min(kb + cw * 32, s_k);  // the chunk's keys [kb, ke)
        // Zero the chunk's words (whole 16-byte vectors: CHUNK_WORDS is a multiple of 4).
        const int zero_vecs = (cw + 3) >> 2;
        for (int r = 0; r < nrows; ++r)
            for (int i = tid; i < zero_vecs; i += NT) reinterpret_cast<uint4*>(words[r])[i] = make_uint4(0, 0, 0, 0);
        __syncthreads();

        auto set = [&](int r, int x) {
            if (x < kb || x >= ke) return;  // also skips -1 and anything outside [0, s_k)
            const int k = x - kb;
            atomicOr(&words[r][k >> 5], 1u << (k & 31));
        };
        if (vec) {
            // All of a pass's vector loads (VPT per row and thread, every row) first, then the atomics.
            for (int v0 = 0; v0 < n_vec; v0 += NT * VPT) {
                int4 v[RPB][VPT];
#pragma unroll
                for (int r = 0; r < RPB; ++r) {
                    const int4* idx = reinterpret_cast<const int4*>(p.indices + (mj_i64)(q_start + r0 + r) * p.idx_stride_tok);
#pragma unroll
                    for (int u = 0; u < VPT; ++u) {
                        const int i = v0 + tid + u * NT;
                        v[r][u] = r < nrows && i < n_vec ? idx[i] : make_int4(-1, -1, -1, -1);
                    }
                }
#pragma unroll
                for (int r = 0; r < RPB; ++r)
#pragma unroll
                    for (int u = 0; u < VPT; ++u) {
                        set(r, v[r][u].x);
                        set(r, v[r][u].y);
                        set(r, v[r][u].z);
                        set(r, v[r][u].w);
                    }
            }
        } else {  // any alignment: 4-byte loads, the same number in flight
            for (int k0 = 0; k0 < p.topk; k0 += NT * VPT * 4) {
                int v[RPB][VPT * 4];
#pragma unroll
                for (int r = 0; r < RPB; ++r) {
                    const int* idx = p.indices + (mj_i64)(q_start + r0 + r) * p.idx_stride_tok;
#pragma unroll
                    for (int u = 0; u < VPT * 4; ++u) {
                        const int k = k0 + tid + u * NT;
                        v[r][u] = r < nrows && k < p.topk ? idx[k] : -1;
                    }
                }
#pragma unroll
                for (int r = 0; r < RPB; ++r)
#pragma unroll
                    for (int u = 0; u < VPT * 4; ++u) set(r, v[r][u]);
            }
        }
        __syncthreads();

        for (int r = 0; r < nrows; ++r) {
            unsigned* dst = mask0 + r * W + wb;
            for (int w = tid; w < cw; w += NT) dst[w] = words[r][w];
        }
        __syncthreads();  // the next chunk reuses the words
    }
}
