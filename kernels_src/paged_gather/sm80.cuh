// mlajit paged latent-cache gather (any arch from sm_80): copies the latent rows of a run of requests out
// of the engine's pages into one contiguous bf16 [rows, 576] buffer, 16 bytes per thread and step. It runs
// once per MHA run of the one-call prefill on a paged cache, ahead of the K/V up-projection (a plain GEMM
// needs contiguous rows); sparse MQA reads the pages directly. See PagedGatherParams in mlajit_abi.h.
// MJ_KV_FP8 = 1: the pages are the FP8 cache (656-byte rows): each 16 e4m3 values become 32 bytes of
// bf16(e4m3 * scale) (the value every kernel computes with), k_pe is copied; only the run's keys are read.
//
// SUPPORTED CONFIGS: MJ_ROWS_PER_BLOCK in 1..64 (rows of one request per block), MJ_KV_FP8 in {0, 1};
// rows whose starts are 16-byte aligned (the host checks the strides).
#include "quantize_cache/e4m3.cuh"

static_assert(MJ_ROWS_PER_BLOCK >= 1 && MJ_ROWS_PER_BLOCK <= 64, "paged_gather: MJ_ROWS_PER_BLOCK must be 1..64");
static_assert(MJ_KV_FP8 == 0 || MJ_KV_FP8 == 1, "paged_gather: MJ_KV_FP8 must be 0 (bf16 pages) or 1 (fp8_ds_mla)");
static_assert(MJ_ARCH >= 80, "paged_gather: mlajit targets sm_80 and newer");

namespace mj_gather {
constexpr int ROWS = MJ_ROWS_PER_BLOCK;
constexpr int NT = mj_gather_threads();
// Work items per row: bf16 pages, one 16-byte chunk of the 1152-byte row each; FP8 pages, 32 chunks of 16
// e4m3 values (each written as 32 bytes of bf16) then 8 chunks of k_pe.
constexpr int ITEMS = MJ_KV_FP8 ? 512 / 16 + 64 * 2 / 16 : 576 * 2 / 16;
constexpr int ELEM_BYTES = MJ_KV_FP8 ? 1 : 2;  // page_stride / tok_stride count these
}  // namespace mj_gather

extern "C" __global__ void __launch_bounds__(mj_gather::NT) mlajit_paged_gather(const PagedGatherParams p) {
    using namespace mj_gather;
    const int r = blockIdx.y;
    const int k0 = p.cu_seqlens_k[0];
    const int kr = p.cu_seqlens_k[r];
    const int s_k = p.cu_seqlens_k[r + 1] - kr;
    const int row0 = blockIdx.x * ROWS;
    if (row0 >= s_k) return;
    const int rows = min(ROWS, s_k - row0);
    const unsigned nan2 = 0x7fc07fc0u;  // two bf16 quiet NaNs
    for (int i = threadIdx.x; i < rows * ITEMS; i += NT) {
        const int pos = row0 + i / ITEMS, c = i % ITEMS;
        const int blk = pos / p.block_size;
        const int page = blk < p.max_blocks ? p.block_table[(mj_i64)r * p.bt_stride + blk] : -1;
        uint4* drow = reinterpret_cast<uint4*>(static_cast<char*>(p.dst) + ((mj_i64)(kr - k0 + pos) * p.dst_stride) * 2);
        const char* srow = static_cast<const char*>(p.pages) +
                           ((mj_i64)page * p.page_stride + (mj_i64)(pos % p.block_size) * p.tok_stride) * ELEM_BYTES;
        const bool bad = page < 0 || page >= p.num_blocks;  // never read: the row is written as NaN
        // MJ_KV_FP8 is a constexpr of the spec, not a macro: `if constexpr`, never `#if` (under #if an unknown
        // name is 0, which compiled the FP8 variant as the bf16 copy: seen on the H200 as all-NaN outputs).
        if constexpr (MJ_KV_FP8 == 1) {
            if (c < 32) {
                uint4 lo = make_uint4(nan2, nan2, nan2, nan2), hi = lo;
                if (!bad) {
                    const uint4 q = __ldg(reinterpret_cast<const uint4*>(srow) + c);
                    const float scale = __ldg(reinterpret_cast<const float*>(srow + mj_fp8_scales_at) + c / 8);
                    const mj_u32 w[4] = {q.x, q.y, q.z, q.w};
                    mj_u32 o[8];
                    for (int k = 0; k < 4; ++k) {
                        o[2 * k] = mj_e4m3x2_dequant_bf16x2(w[k] & 0xffu, (w[k] >> 8) & 0xffu, scale);
                        o[2 * k + 1] = mj_e4m3x2_dequant_bf16x2((w[k] >> 16) & 0xffu, w[k] >> 24, scale);
                    }
                    lo = make_uint4(o[0], o[1], o[2], o[3]);
                    hi = make_uint4(o[4], o[5], o[6], o[7]);
                }
                drow[2 * c] = lo;
                drow[2 * c + 1] = hi;
            } else {
                drow[64 + (c - 32)] = bad ? make_uint4(nan2, nan2, nan2, nan2)
                                          : __ldg(reinterpret_cast<const uint4*>(srow + mj_fp8_rope_at) + (c - 32));
            }
        } else {
            drow[c] = bad ? make_uint4(nan2, nan2, nan2, nan2) : __ldg(reinterpret_cast<const uint4*>(srow) + c);
        }
    }
}
