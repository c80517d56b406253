// mlajit top-k mask build: indices [T_q, topk] (request-local key positions) -> packed bitmask rows
// (bit j of word w = request-local key 32w + j), every word in [0, mask_stride_row) written, so the
// caller needs no memset. Indices outside [0, s_k) of the row's request (-1 included) are skipped;
// duplicates are harmless (OR).
//
// SUPPORTED CONFIGS: MJ_ROWS_PER_BLOCK in 1..16 (default 4). Block = mj_mask_threads() = 256 threads,
// grid = (ceil(max_seqlen_q / MJ_ROWS_PER_BLOCK), batch), no dynamic shared memory (32 KiB static).
//
// A block owns its rows outright, so it can build each row in shared memory with shared atomics and
// then store it with coalesced writes. Rows longer than the shared buffer (more than 8192 / ROWS words,
// i.e. 65536 keys at 4 rows) are built in word chunks: each chunk rescans the row's indices, which are
// few (topk) and stay in L1/L2.
#include "mlajit_device.cuh"

static_assert(MJ_ROWS_PER_BLOCK >= 1 && MJ_ROWS_PER_BLOCK <= 16, "topk_mask: MJ_ROWS_PER_BLOCK must be 1..16");
static_assert(MJ_ARCH >= 80, "topk_mask: mlajit targets sm_80 and newer");

namespace mj_topk {
constexpr int RPB = MJ_ROWS_PER_BLOCK;
constexpr int NT = mj_mask_threads();
constexpr int CHUNK = 8192 / RPB;  // words per row per pass: 32 KiB of shared memory in all
constexpr int LPT = RPB >= 8 ? 2 : 32 / RPB;  // index loads per row and thread in flight together (32 at most)
}  // namespace mj_topk

extern "C" __global__ void __launch_bounds__(mj_topk::NT) mlajit_topk_mask(const TopkMaskParams p) {
    using namespace mj_topk;
    __shared__ unsigned words[RPB][CHUNK];

    const int b = blockIdx.y;
    const int q_start = p.cu_seqlens_q[b];
    const int s_q = p.cu_seqlens_q[b + 1] - q_start;
    const int r0 = blockIdx.x * RPB;
    if (r0 >= s_q) return;
    const int s_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    const int nrows = min(RPB, s_q - r0);
    const mj_i64 W = p.mask_stride_row;
    const int tid = threadIdx.x;

    for (mj_i64 wb = 0; wb < W; wb += CHUNK) {
        const int cw = (int)min((mj_i64)CHUNK, W - wb);
        for (int r = 0; r < nrows; ++r)
            for (int w = tid; w < cw; w += NT) words[r][w] = 0u;
        __syncthreads();
        // Only words below ceil(s_k / 32) can receive a bit; past that the chunk is just zeros.
        if (wb * 32 < (mj_i64)s_k) {
            // All of a pass's index loads first (LPT per row and thread, every row of the block), then the
            // shared atomics: the loads of a pass are in flight together. (Until 2026-12-03 each load was
            // followed by its atomic, and the compiler kept that order: one memory round trip per 256
            // indices, so a block of 4 rows x 2048 indices waited 32 round trips, 0.035 ms at S 8k.)
            for (int k0 = 0; k0 < p.topk; k0 += NT * LPT) {
                int v[RPB][LPT];
#pragma unroll
                for (int r = 0; r < RPB; ++r) {
                    const int* idx = p.indices + (mj_i64)(q_start + r0 + r) * p.idx_stride_tok;
#pragma unroll
                    for (int u = 0; u < LPT; ++u) {
                        const int k = k0 + tid + u * NT;
                        v[r][u] = r < nrows && k < p.topk ? idx[k] : -1;
                    }
                }
#pragma unroll
                for (int r = 0; r < RPB; ++r)
#pragma unroll
                    for (int u = 0; u < LPT; ++u) {
                        const int x = v[r][u];
                        if (x < 0 || x >= s_k) continue;
                        const mj_i64 w = (x >> 5) - wb;
                        if (w >= 0 && w < cw) atomicOr(&words[r][w], 1u << (x & 31));
                    }
            }
        }
        __syncthreads();
        for (int r = 0; r < nrows; ++r) {
            unsigned* dst = p.mask + (mj_i64)(q_start + r0 + r) * W + wb;
            for (int w = tid; w < cw; w += NT) dst[w] = words[r][w];
        }
        __syncthreads();  // the next chunk reuses the buffer
    }
}
