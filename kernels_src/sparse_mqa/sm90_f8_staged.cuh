// The keys-as-M kernel's producer on the FP8 cache through a raw ring (development switch MJ_MQA90T8_STAGE, sparse_mqa/sm90_t.cuh):
// the 656-byte rows land by cp.async in a ring of raw rows of their own, then each producer warp dequantizes them shared ->
// shared into the bf16 tile the math reads (the layout sparse_mqa/sm90_tile.cuh gives; bf16(float(e4m3) * scale) as the
// contract says; k_pe copied as stored).
//
// Why: the register producer (sparse_mqa/sm90_f8_producer.cuh) holds one tile of codes a warp, so a row's load is issued
// only after the same row of the previous tile was converted and is needed right after the rest of that tile: the
// producer alone took 4.90 ms at 16 heads, 8k (H100), against 1.32 ms for the L2 gather of the same rows with enough
// loads in flight (docs/PERF.md, "A block's fixed cost, and the L2 gather ceiling"). Here a warp keeps ring_rows() rows
// in flight (1.5 tiles), a row's copy is issued as soon as its raw slot is read, and waiting for a bf16 slot (the math's
// empty barrier) never stops rows from landing. The 64-head kernel's staged form (sparse_mqa/sm90.cuh, MJ_MQA90_F8STAGE)
// landed the raw rows in the bf16 slot itself, so a slot lived land + convert + math; the ring here is separate
// shared memory (63,312 bytes are free in the 16-head layout).
//
// WARPS producer warps (8 or 16) of ROWS = 64 / WARPS rows; warp pw owns rows ROWS pw .. ROWS pw + ROWS - 1 of every tile and
// a private ring of ring_rows(WARPS) raw rows. Rows go through the ring in order (tile by tile, row by row), one
// cp.async group a row, so waiting for a row is cp.async.wait_group(ring - 1). The row pointers: lane L holds row
// L % ROWS of tile 32 / ROWS * w + L / ROWS for the window w being issued; the next window's pointers and the window after's
// keys are looked up a window ahead. Rows past the key set are zero-filled by their copies (codes, scale and k_pe 0).
// The slot's full barrier takes one arrival a producer thread, after its stores (fenced for wgmma's async proxy).
#pragma once
#include "mlajit_device.cuh"
#include "sparse_mqa/fp8.cuh"
#include "sparse_mqa/index_set.cuh"
#include "sparse_mqa/sm90_tile.cuh"

namespace mj_f8stage {

// Raw rows a warp's ring holds: 1.5 tiles of its rows, what the 16-head layout leaves (63,312 bytes) over 656-byte rows.
MJ_DEVICE constexpr int ring_rows(int warps) { return warps == 16 ? 6 : 12; }
MJ_DEVICE constexpr int raw_bytes(int warps) { return warps * ring_rows(warps) * mj_fp8::kRowBytes; }
// The full barrier's count: 1 arrival a producer thread.
MJ_DEVICE constexpr int full_arrivals(int warps) { return 32 * warps; }

// RAW (timing only): the codes are stored unconverted (XOR the scale, so the loads stay live).
template <int KN, int KS, int TILE_BYTES, int WARPS, bool RAW>
MJ_DEVICE void produce(const SparseMqaFwdParams& p, const mj_idx::Request& rq, const int* irow, const mj_idx::SetView& ks,
                       int nwords, int nvalid, int ntiles, unsigned char* ring, unsigned char* raw_ring, unsigned long long* full,
                       unsigned long long* empty, int pw, int lane) {
    constexpr int kRows = KN / WARPS, kR = ring_rows(WARPS), kWin = 32 / kRows;
    static_assert(KN == 64 && (WARPS == 8 || WARPS == 16), "8 producer warps of 8 rows or 16 of 4 fill a 64-key tile");
    static_assert(kR > kRows, "the ring must hold more than a tile's rows of a warp");
    constexpr int kBlk = KN * 128;
    constexpr unsigned kRowB = mj_fp8::kRowBytes;
    auto tile_off = [](int r, int c) { return mj_tile90::chunk_off<kBlk>(r, c); };
    const unsigned raw = mj90::smem_u32(raw_ring) + (unsigned)(pw * kR) * kRowB;
    const int nrows = ntiles * kRows;
    auto key_of = [&](int w) {
        return mj_idx::set_key(rq, irow, ks, nwords, nvalid, (w * kWin + lane / kRows) * KN + pw * kRows + (lane % kRows));
    };
    auto ptr_of = [&](int key) { return mj_idx::key_row(p, rq, key); };
    const unsigned char* win = ptr_of(key_of(0));
    const int key1 = key_of(1);
    const unsigned char* win_next = nullptr;
    int key_nn = -1;
    int q_iss = 0, slot_iss = 0;  // next row to issue, its raw slot
    auto issue = [&]() {
        if (q_iss < nrows) {
            const int t = q_iss / kRows, i = q_iss - t * kRows;
            if (i == 0 && t > 0 && t % kWin == 0) {  // entering window t / kWin
                win = win_next;
                win_next = ptr_of(key_nn);
                key_nn = key_of(t / kWin + 2);
            }
            const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)win, (t % kWin) * kRows + i);
            const bool ok = rowp != nullptr;
            const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
            const unsigned dst = raw + (unsigned)slot_iss * kRowB;
            mj90::cp_async_16_addr(dst + lane * 16, src + lane * 16, ok);                  // codes
            if (lane < 9) mj90::cp_async_16_addr(dst + mj_fp8::kScaleOff + lane * 16, src + mj_fp8::kScaleOff + lane * 16, ok);  // scales, k_pe
        }
        mj90::cp_async_commit();  // one group a row (empty past the last row, so the wait count below holds)
        ++q_iss;
        slot_iss = slot_iss + 1 == kR ? 0 : slot_iss + 1;
    };
#pragma unroll 1
    for (int j = 0; j < kR; ++j) issue();  // rows 0 .. kR - 1 (window 0: kR < kWin kRows)
    win_next = ptr_of(key1);
    key_nn = key_of(2);
    int slot_cv = 0;  // raw slot of the next row to convert
    for (int t = 0; t < ntiles; ++t) {
        const int slot = t % KS;
        if (t >= KS) mj90::mbar_wait(&empty[slot], (unsigned)((t / KS - 1) & 1));
        const unsigned tile_a = mj90::smem_u32(ring + slot * TILE_BYTES);
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            mj90::cp_async_wait<kR - 1>();  // this lane's copies of the row landed
            __syncwarp();                   // and every lane's
            const unsigned src = raw + (unsigned)slot_cv * kRowB;
            const int r = pw * kRows + i;
            mj_u32 v[4], kp[4], o[8];
            mj_ld_shared_v4(v, src + lane * 16);
            const float scale = mj_fp8::ld_shared_f32(src + mj_fp8::kScaleOff + 4 * (lane >> 3));
            if (lane < 8) mj_ld_shared_v4(kp, src + mj_fp8::kRopeOff + lane * 16);
            if constexpr (RAW) {
#pragma unroll
                for (int j = 0; j < 8; ++j) o[j] = v[j >> 1] ^ __float_as_uint(scale);
            } else {
                mj_fp8::dequant16<MJ_ARCH>(v, scale, o);
            }
            mj_fp8::st_pair_swizzled(tile_a, tile_off(r, 2 * lane), tile_off(r, 2 * lane + 1), (lane >> 2) & 1, o);
            if (lane < 8) mj_fp8::st_shared_v4(tile_a + tile_off(r, 64 + lane), kp[0], kp[1], kp[2], kp[3]);
            __syncwarp();  // every lane read the raw row before its slot is refilled
            issue();
            slot_cv = slot_cv + 1 == kR ? 0 : slot_cv + 1;
        }
        mj90::fence_proxy_async();  // the dequantized stores are read by wgmma (async proxy)
        mj90::mbar_arrive(&full[slot]);
    }
    mj90::cp_async_wait<0>();
}

}  // namespace mj_f8stage
