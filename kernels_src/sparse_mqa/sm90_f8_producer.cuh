// The Hopper sparse MQA kernels' producer on the FP8 cache (fp8_ds_mla rows, sparse_mqa/fp8.cuh): it fills each 64-key
// slot of the ring with the dequantized bf16 tile, bf16(float(e4m3) * scale) as the contract says, in the layout the bf16
// producers write (sparse_mqa/sm90_tile.cuh: nine 64-column blocks, 128-byte swizzle), so the math that reads the slot is
// the bf16 kernel's, unchanged. Used by the keys-as-M kernel (sparse_mqa/sm90_t.cuh) at 16 heads.
//
// WARPS producer warps of ROWS = 64 / WARPS rows (4 x 16, or 8 x 8); warp pw owns rows ROWS pw .. ROWS pw + ROWS - 1 of
// every tile. A row's 512 codes are one 16-byte load a lane (lane L: codes 16 L .. 16 L + 15, of scale L / 8), held in
// registers from their load to their conversion (4 ROWS registers a thread); the scales of 8 rows are one load a lane
// (lane L: scale L % 4 of row L / 4), handed out by shuffles. Per tile: wait for the slot, start k_pe (bf16 as stored,
// cp.async of lanes 0..7) so it lands while the codes are converted, then per group of 8 rows: convert them, load the
// same rows of the next tile into the freed registers. The global loads of tile t + 1 are in flight while tile t is
// converted, and never wait for a slot. A row's two dependent lookups (the set's key, then its block-table entry) are
// split a tile apart. Rows past the key set load nothing and store zeros. The slot's full barrier takes two arrivals a
// producer thread (full_arrivals): the cp.async completion of its k_pe, and one after its dequantized stores (fenced for
// wgmma's async proxy).
#pragma once
#include "mlajit_device.cuh"
#include "sparse_mqa/fp8.cuh"
#include "sparse_mqa/index_set.cuh"
#include "sparse_mqa/sm90_tile.cuh"

namespace mj_f8prod {

// The full barrier's count: 2 arrivals a producer thread.
MJ_DEVICE constexpr int full_arrivals(int warps) { return 2 * 32 * warps; }

// RAW (timing only): the codes are stored unconverted (XOR the scale, so the loads stay live): the producer's cost
// without the dequantization.
template <int KN, int KS, int TILE_BYTES, int WARPS, bool RAW>
MJ_DEVICE void produce(const SparseMqaFwdParams& p, const mj_idx::Request& rq, const int* irow, const mj_idx::SetView& ks,
                       int nwords, int nvalid, int ntiles, unsigned char* ring, unsigned long long* full,
                       unsigned long long* empty, int pw, int lane) {
    constexpr int kRowsPerWarp = KN / WARPS, kGroups = kRowsPerWarp / 8;
    static_assert(KN == 64 && (WARPS == 4 || WARPS == 8), "4 producer warps of 16 rows or 8 of 8 fill a 64-key tile");
    constexpr int kBlk = KN * 128;
    auto tile_off = [](int r, int c) { return mj_tile90::chunk_off<kBlk>(r, c); };
    // Key of row (pw * kRowsPerWarp + lane % kRowsPerWarp) of tile t, or -1 past the set; then its row pointer (a
    // block-table load).
    auto key_of = [&](int t) { return mj_idx::set_key(rq, irow, ks, nwords, nvalid, t * KN + pw * kRowsPerWarp + (lane % kRowsPerWarp)); };
    auto ptr_of = [&](int key) { return mj_idx::key_row(p, rq, key); };
    mj_u32 v[kRowsPerWarp][4];
    float sc[kGroups];
    auto load_group = [&](int h, const unsigned char* mine) {
#pragma unroll
        for (int i = 8 * h; i < 8 * h + 8; ++i) {
            const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
            if (rowp != nullptr) {
                mj90::ld_global_nc_v4(v[i], rowp + lane * 16);
            } else {
                v[i][0] = v[i][1] = v[i][2] = v[i][3] = 0u;
            }
        }
        const unsigned char* rows = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, 8 * h + (lane >> 2));
        sc[h] = rows != nullptr ? mj90::ld_global_nc_f32(rows + mj_fp8::kScaleOff + 4 * (lane & 3)) : 0.f;
    };
    auto convert_group = [&](int h, unsigned tile_a) {
#pragma unroll
        for (int i = 8 * h; i < 8 * h + 8; ++i) {
            const int r = pw * kRowsPerWarp + i;
            const float scale = __shfl_sync(0xffffffffu, sc[h], 4 * (i & 7) + (lane >> 3));
            mj_u32 o[8];
            if constexpr (RAW) {
#pragma unroll
                for (int j = 0; j < 8; ++j) o[j] = v[i][j >> 1] ^ __float_as_uint(scale);
            } else {
                mj_fp8::dequant16<MJ_ARCH>(v[i], scale, o);
            }
            mj_fp8::st_pair_swizzled(tile_a, tile_off(r, 2 * lane), tile_off(r, 2 * lane + 1), (lane >> 2) & 1, o);
        }
    };
    const unsigned char* cur = ntiles > 0 ? ptr_of(key_of(0)) : nullptr;
    int key_next = ntiles > 1 ? key_of(1) : -1;
    if (ntiles > 0) {
#pragma unroll
        for (int h = 0; h < kGroups; ++h) load_group(h, cur);
    }
    for (int t = 0; t < ntiles; ++t) {
        const int slot = t % KS;
        const bool more = t + 1 < ntiles;
        const unsigned char* nxt = more ? ptr_of(key_next) : nullptr;
        key_next = t + 2 < ntiles ? key_of(t + 2) : -1;
        if (t >= KS) mj90::mbar_wait(&empty[slot], (unsigned)((t / KS - 1) & 1));
        unsigned char* tile = ring + slot * TILE_BYTES;
        const unsigned tile_a = mj90::smem_u32(tile);
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
            const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)cur, i);
            if (lane < 8)
                mj90::cp_async_16(tile + tile_off(pw * kRowsPerWarp + i, 64 + lane),
                                  (rowp != nullptr ? rowp : (const unsigned char*)p.kv) + mj_fp8::kRopeOff + lane * 16, rowp != nullptr);
        }
#pragma unroll
        for (int h = 0; h < kGroups; ++h) {
            convert_group(h, tile_a);
            if (more) load_group(h, nxt);
        }
        mj90::fence_proxy_async();  // the dequantized stores are read by wgmma (async proxy)
        mj90::cp_async_mbar_arrive_noinc(&full[slot]);
        mj90::mbar_arrive(&full[slot]);
        cur = nxt;
    }
    mj90::cp_async_wait<0>();
}

}  // namespace mj_f8prod
