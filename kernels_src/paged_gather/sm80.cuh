// mlajit paged latent-cache gather (any arch from sm_80): copies the 576-wide bf16 rows of a run of
// requests out of the engine's pages into one contiguous buffer, 16 bytes per thread and step. It runs once
// per MHA run of the one-call prefill on a paged cache, ahead of the K/V up-projection (a plain GEMM needs
// contiguous rows); sparse MQA reads the pages directly. See PagedGatherParams in mlajit_abi.h.
//
// SUPPORTED CONFIGS: MJ_ROWS_PER_BLOCK in 1..64 (rows of one request per block); 576-wide rows whose
// starts are 16-byte aligned (the host checks the strides).
#include "mlajit_device.cuh"

static_assert(MJ_ROWS_PER_BLOCK >= 1 && MJ_ROWS_PER_BLOCK <= 64, "paged_gather: MJ_ROWS_PER_BLOCK must be 1..64");
static_assert(MJ_ARCH >= 80, "paged_gather: mlajit targets sm_80 and newer");

namespace mj_gather {
constexpr int ROWS = MJ_ROWS_PER_BLOCK;
constexpr int NT = mj_gather_threads();
constexpr int CHUNKS = 576 * 2 / 16;  // 16-byte chunks per row
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
    for (int i = threadIdx.x; i < rows * CHUNKS; i += NT) {
        const int pos = row0 + i / CHUNKS, c = i % CHUNKS;
        const int blk = pos / p.block_size;
        const int page = blk < p.max_blocks ? p.block_table[(mj_i64)r * p.bt_stride + blk] : -1;
        uint4* dst = reinterpret_cast<uint4*>(static_cast<char*>(p.dst) +
                                              ((mj_i64)(kr - k0 + pos) * p.dst_stride) * 2) + c;
        if (page < 0 || page >= p.num_blocks) {
            *dst = make_uint4(nan2, nan2, nan2, nan2);
            continue;
        }
        const uint4* src = reinterpret_cast<const uint4*>(static_cast<const char*>(p.pages) +
                                                          ((mj_i64)page * p.page_stride +
                                                           (mj_i64)(pos % p.block_size) * p.tok_stride) * 2) + c;
        *dst = __ldg(src);
    }
}
