// The Hopper sparse MQA kernels' shared tile layout (sparse_mqa/sm90.cuh: heads as wgmma's M; sparse_mqa/sm90_t.cuh:
// keys as wgmma's M): a matrix of rows x 576 bf16 columns is stored as nine 64-column blocks of [rows][128 bytes]
// with the 128-byte swizzle (16-byte chunk XOR row % 8), the layout wgmma's descriptors read; Q and every gathered
// latent tile use it. Included after the Hopper wrappers (kernels_src/sm90.cuh, namespace mj90), which both kernels
// include first.
#pragma once
#include "mlajit_device.cuh"

namespace mj_tile90 {

// Byte offset of 16-byte chunk c (0..71) of row r in such a matrix whose 64-column blocks are BLOCK_BYTES apart.
template <int BLOCK_BYTES>
MJ_DEVICE unsigned chunk_off(int r, int c) {
    return (unsigned)((c >> 3) * BLOCK_BYTES + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// Q [ROWS heads x 576] of token `tok` from head head0 on, into `dst` (blocks ROWS * 128 bytes apart), issued by threads
// 0..THREADS-1 (the caller's `tid`) as cp.async in one commit group; heads past num_heads load zeros. The caller waits
// (cp.async.wait_group) and fences the async proxy before wgmma reads it. C0 > 0: only chunks C0..71 (C0 64: q_pe alone).
// DST: `dst` as a pointer or as a 32-bit shared address (mj90::cp_async_16_at); the persistent 16-head grid passes the
// address, the other kernels keep the pointer form they were measured with.
template <int ROWS, int THREADS, int C0 = 0, class DST>
MJ_DEVICE void load_q(const SparseMqaFwdParams& p, int tok, int head0, DST dst, int tid) {
    constexpr int kChunks = 72 - C0;
    const unsigned char* qtok = (const unsigned char*)p.q + (mj_i64)tok * p.q_stride_tok * 2;
    for (int i = tid; i < ROWS * kChunks; i += THREADS) {
        const int row = i / kChunks, c = C0 + i - row * kChunks;
        const bool ok = head0 + row < p.num_heads;
        const unsigned char* src = ok ? qtok + ((mj_i64)(head0 + row) * p.q_stride_head + c * 8) * 2 : (const unsigned char*)p.q;
        mj90::cp_async_16_at(dst, chunk_off<ROWS * 128>(row, c), src, ok);
    }
    mj90::cp_async_commit();
}

}  // namespace mj_tile90
