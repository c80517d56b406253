// The keys-as-M sparse MQA kernels' shared pieces (bf16 body: sparse_mqa/sm90_t.cuh, FP8 body: sparse_mqa/sm90_t_fp8.cuh):
// where a thread's accumulator columns (heads) sit, the epilogue that merges the two math warpgroups' softmaxes, writes
// lse / max_logits and stores O, and the bulk-copy producer of the gather-timing forms. Included after the Hopper
// wrappers (namespace mj90).
#pragma once
#include "mlajit_device.cuh"

namespace mj_mqa90t_common {

// Head (accumulator column) of a thread's column j: 8 (j / 2) + 2 q4 + j % 2; its two rows' accumulator indices.
MJ_DEVICE int col_of(int j, int q4) { return 8 * (j >> 1) + 2 * q4 + (j & 1); }
MJ_DEVICE constexpr int acc0(int j) { return 4 * (j >> 1) + (j & 1); }
MJ_DEVICE constexpr int acc1(int j) { return 4 * (j >> 1) + 2 + (j & 1); }

// A warpgroup's running max m and partial row sums l (per thread column) into e_l: its 4 warps' sums at [wg][wl][H], then its
// maxima at [2][H] from 8 H on.
template <int H>
MJ_DEVICE void publish_softmax(const float (&l)[H / 4], const float (&m)[H / 4], float* e_l, int wg, int wl, int lane) {
    const int q4 = lane & 3;
    float* e_m = e_l + 8 * H;
#pragma unroll
    for (int j = 0; j < H / 4; ++j) {
        float x = l[j];
        x += __shfl_xor_sync(0xffffffffu, x, 4);
        x += __shfl_xor_sync(0xffffffffu, x, 8);
        x += __shfl_xor_sync(0xffffffffu, x, 16);
        if (lane < 4) {
            e_l[(wg * 4 + wl) * H + col_of(j, q4)] = x;
            if (wl == 0) e_m[wg * H + col_of(j, q4)] = m[j];
        }
    }
}

// Column c's merge from what both warpgroups published in e_l: each one's factor (the exp2 offset of its max over the joint
// max mm; 0 for a warpgroup without keys), the total row sum L and 1 / L (0 for a row without keys).
template <int H>
MJ_DEVICE void merge_column(const float* e_l, int c, float sl2, float& fa, float& fb, float& L, float& inv, float& mm) {
    const float* e_m = e_l + 8 * H;
    const float ma = e_m[c], mb = e_m[H + c];
    mm = fmaxf(ma, mb);
    fa = ma == MJ_NEG_INF ? 0.f : mj_exp2(__fmul_rn(ma, sl2) - __fmul_rn(mm, sl2));
    fb = mb == MJ_NEG_INF ? 0.f : mj_exp2(__fmul_rn(mb, sl2) - __fmul_rn(mm, sl2));
    const float la = e_l[c] + e_l[H + c] + e_l[2 * H + c] + e_l[3 * H + c];
    const float lb = e_l[4 * H + c] + e_l[5 * H + c] + e_l[6 * H + c] + e_l[7 * H + c];
    L = la * fa + lb * fb;
    inv = L > 0.f ? 1.f / L : 0.f;
}

// Each warpgroup's running max m and partial row sums l (per thread column) through e_l ([2][4][H] sums, then [2][H] maxima;
// BAR: the 256 math threads' barrier, which also orders every wgmma read of the ring before it is reused): per column the
// factor sc for this warpgroup's O (its exp2 offset over the total sum), the total sum L and the max.
template <int H>
MJ_DEVICE void merge_softmax(const float (&l)[H / 4], const float (&m)[H / 4], float* e_l, int wg, int wl, int lane, float sl2,
                             int bar, float (&sc)[H / 4], float (&Lt)[H / 4], float (&mt)[H / 4]) {
    const int q4 = lane & 3;
    publish_softmax<H>(l, m, e_l, wg, wl, lane);
    mj90::named_bar_sync_unaligned(bar, 256);
#pragma unroll
    for (int j = 0; j < H / 4; ++j) {
        float fa, fb, inv;
        merge_column<H>(e_l, col_of(j, q4), sl2, fa, fb, Lt[j], inv, mt[j]);
        sc[j] = (wg ? fb : fa) * inv;
    }
}

// After each warpgroup staged its scaled O as fp32 [H][WROW] at w0 (warpgroup 1's at w0 + H * WROW): lse / max_logits
// (warpgroup 0, warp 0), the barrier, then O = the two parts added, bf16, 16-byte stores (a thread: 8 columns of one head).
// PARTS 1: w0 already holds the sum (the persistent grid's staging, sparse_mqa/sm90_t_persist.cuh). THREADS: the threads that
// store (256: both warpgroups; 128: warpgroup 0 alone, BAR its own barrier).
template <int H, int WROW, int PARTS = 2, int THREADS = 256>
MJ_DEVICE void store_out(const SparseMqaFwdParams& p, const float* w0, const float (&Lt)[H / 4], const float (&mt)[H / 4], int tok,
                         int head0, int tid, int wg, int wl, int lane, float sl2, int bar) {
    const int nh = p.num_heads;
    if (wg == 0 && wl == 0 && lane < 4) {
#pragma unroll
        for (int j = 0; j < H / 4; ++j) {
            const int head = head0 + col_of(j, lane & 3);
            if (head >= nh) continue;
            const float L = Lt[j], mm = mt[j];
            p.lse[(mj_i64)tok * p.lse_stride_tok + head] = L > 0.f ? (mj_log2(L) + mm * sl2) * MJ_LN2 : MJ_NEG_INF;
            if (p.max_logits) p.max_logits[(mj_i64)tok * p.ml_stride_tok + head] = L > 0.f ? mm * p.sm_scale : MJ_NEG_INF;
        }
    }
    // (racecheck reported the staging stores against the loads below until both warpgroups passed as many barriers before
    // the epilogue: sparse_mqa/sm90_t.cuh, even_barrier_counts)
    mj90::named_bar_sync_unaligned(bar, THREADS);
    const float* w1 = w0 + H * WROW;
    unsigned char* otok = (unsigned char*)p.out + (mj_i64)tok * p.o_stride_tok * 2;
    for (int i = tid; i < H * 64; i += THREADS) {
        const int hh = i >> 6, c8 = (i & 63) * 8;
        if (head0 + hh >= nh) continue;
        mj_u32 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            v[k] = PARTS == 1 ? mj_pack_bf16x2(w0[hh * WROW + c8 + 2 * k], w0[hh * WROW + c8 + 2 * k + 1])
                              : mj_pack_bf16x2(w0[hh * WROW + c8 + 2 * k] + w1[hh * WROW + c8 + 2 * k],
                                               w0[hh * WROW + c8 + 2 * k + 1] + w1[hh * WROW + c8 + 2 * k + 1]);
        mj_st_global_v4(otok + ((mj_i64)(head0 + hh) * p.o_stride_head + c8) * 2, v);
    }
}

// Gather-timing form of a producer warp's share of a tile (MJ_MQA90T_BULK, MJ_MQA90T8_BULK): lanes 0..ROWS-1 copy their row
// `mine` (nullptr: past the key set, skipped) of ROW_BYTES to rows[lane] by one cp.async.bulk each; lane 0 announces the
// copied bytes on `bar` with the warp's one arrival. The rows land linearly, not in the math's layout.
template <int ROWS, unsigned ROW_BYTES>
MJ_DEVICE void bulk_rows(unsigned char* rows, const unsigned char* mine, int lane, unsigned long long* bar) {
    const bool ok = lane < ROWS && mine != nullptr;
    const unsigned vb = __ballot_sync(0xffffffffu, ok);
    if (lane == 0) mj90::mbar_arrive_expect_tx(bar, (unsigned)__popc(vb) * ROW_BYTES);
    __syncwarp();
    if (ok) mj90::bulk_copy_g2s(rows + lane * ROW_BYTES, mine, ROW_BYTES, bar);
}

}  // namespace mj_mqa90t_common
