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
            for (int r = 0; r < nrows; ++r) {
                const int* idx = p.indices + (mj_i64)(q_start + r0 + r) * p.idx_stride_tok;
                for (int k = tid; k < p.topk; k += NT) {
                    const int v = idx[k];
                    if (v < 0 || v >= s_k) continue;
                    const mj_i64 w = (v >> 5) - wb;
                    if (w >= 0 && w < cw) atomicOr(&words[r][w], 1u << (v & 31));
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
