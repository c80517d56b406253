// Sparse MQA prefill, Hopper tier for 16 and 32 heads (sm_90a): keys as the wgmma M dimension.
// Semantics: DESIGN.md section 2 and the SparseMqaFwdParams comment in mlajit_abi.h, the same as the 64-head
// Hopper kernel (sparse_mqa/sm90.cuh) and the portable tier; the key set comes from sparse_mqa/index_set.cuh.
//
// Why a second Hopper kernel: wgmma's M is 64, so the 64-head kernel pads a 16-head block four times (a tile
// costs at 16 heads what it costs at 64) and the math, not the gather, sets its time. Here the product is
// transposed: S^T [64 keys x H] = K Q^T and O^T [512 x H] += V^T P^T, so H (16 or 32) is wgmma's N and no
// math is padded. The gathered tile is read twice from shared memory, once K-major (A of S^T) and once
// MN-major (A of O^T: V^T, the first eight 64-column blocks of the same tile); Q [H x 576] and P^T [H x 64]
// are the B operands.
//
// Supported specialization: BLOCK_H 16 or 32, BLOCK_N 64, STAGES 2, bf16 cache. grid = (tokens, ceil(h / BLOCK_H)),
// mj_mqa90_threads() threads, mj_mqa90t_smem_bytes(BLOCK_H) bytes of shared memory.
//
// Design (one block = one query token x BLOCK_H heads):
//  * Warpgroup 2 gathers the 64-key tiles of the compacted key set into a 2-slot ring with cp.async, as the
//    64-head kernel's producer does (a warp copies 16 rows of 1152 bytes, 512 bytes an instruction).
//  * Warpgroup g (0, 1) owns slot g and takes tiles g, g + 2, g + 4, ...: its own S^T, its own online softmax
//    (per head = per accumulator column: the maximum over the tile's 64 keys is reduced across the 8 row groups
//    of a warp by shuffles and across the 4 warps through shared memory), its own O^T and row sums. The two
//    warpgroups never wait for each other inside the loop; while one exponentiates or waits for its slot, the
//    other's wgmma runs. The epilogue merges the two partial softmaxes (max, rescale, add).
//  * P^T (bf16 [H][64 keys], the B operand of O^T, K-major with the 128-byte swizzle) is stored into the
//    tile's rope block, which S^T no longer needs; the slot is released after O^T.
#pragma once
#include "mlajit_device.cuh"
#include "sparse_mqa/index_set.cuh"
#include "sparse_mqa/online_softmax.cuh"

// The shared Hopper wrappers (kernels_src/sm90.cuh), by header name as NVRTC gets it. An nvcc build finds
// sparse_mqa/sm90.cuh (the 64-head kernel) under that name first, so such builds include kernels_src/sm90.cuh
// before this file (tools/dev/mqa/kernel_cfg90t.cu does) and the guard skips the include.
#ifndef MJ90_ACC64_OPS
#include "sm90.cuh"
#endif

#ifndef MJ_MQA90T_DEV_SKIP  // 1: no wgmma (timing of the gather and barriers only; results are wrong); 3: no
                            // gather (timing of the math on whatever the ring holds)
#define MJ_MQA90T_DEV_SKIP 0
#endif

namespace mj_mqa90t {

constexpr int kH = MJ_BLOCK_H;
constexpr int kN = MJ_BLOCK_N;
constexpr int kS = MJ_STAGES;
static_assert(MJ_D_LATENT == 512 && MJ_D_ROPE == 64, "sparse MQA is specialized for 512 latent + 64 rope");
static_assert((kH == 16 || kH == 32) && kN == 64 && kS == 2, "sparse MQA sm90 (keys as M): BLOCK_H 16 or 32, BLOCK_N 64, 2 stages");
static_assert(MJ_ARCH == 90, "sparse MQA sm90 needs sm_90a (wgmma)");
static_assert(MJ_KV_FP8 == 0, "sparse MQA sm90 (keys as M): bf16 cache only");
constexpr int kThreads = mj_mqa90_threads();
constexpr int kBlk = 64 * 128;    // one 64-column block of a 64-key tile, bytes
constexpr int kTileBytes = 9 * kBlk;
constexpr int kQBlk = kH * 128;   // one 64-column block of Q
constexpr int kAcc = kH / 2;      // accumulator floats a thread of an m64nH tile
constexpr int kCols = kH / 4;     // accumulator columns (heads) a thread holds: 8 i + 2 q4 + e
// Shared memory layout (bytes).
constexpr int kOffQ = 0;
constexpr int kOffK = 9 * kQBlk;
constexpr int kOffX = kOffK + kS * kTileBytes;      // fp32 [2 warpgroups][2 parities][4 warps][kH]: tile maxima
constexpr int kOffE = kOffX + 16 * kH * 4;           // fp32 [2][4][kH] row sums, then [2][kH] maxima (epilogue)
constexpr int kOffBar = kOffE + 10 * kH * 4;         // mbarriers full[kS], empty[kS]
constexpr int kOffSet = kOffBar + 2 * kS * 8;        // the row's key set
constexpr int kSmem = kOffSet + mj_idx::kSetBytes;
static_assert(kSmem == mj_mqa90t_smem_bytes(kH), "sparse MQA sm90t: layout and mj_mqa90t_smem_bytes disagree");
static_assert(kSmem <= 232448, "sparse MQA sm90t: over the per-block shared memory of sm_90");
static_assert(kOffK % 1024 == 0 && kOffBar % 8 == 0, "swizzled tiles need 1 KiB alignment, mbarriers 8 bytes");
static_assert(kS * kTileBytes >= mj_idx::kHashBytes, "the ring doubles as the index set's hash scratch");
static_assert(kS * kTileBytes >= 512 * kH * 4, "the ring holds warpgroup 1's O at the end");
constexpr int kBarEnd = 3;  // named barriers: 1 + g (warpgroup g's 128 threads), kBarEnd (the 256 math threads)
constexpr int kProducerRegs = 40, kMathRegs = 232;
static_assert(128 * kProducerRegs + 256 * kMathRegs <= 65536, "register budget");

// Byte offset of 16-byte chunk c (0..71) of row r in a 64-row tile / in Q: block c / 8, swizzled chunk in the row.
MJ_DEVICE unsigned tile_off(int r, int c) { return (unsigned)((c >> 3) * kBlk + r * 128 + (((c & 7) ^ (r & 7)) << 4)); }
MJ_DEVICE unsigned q_off(int r, int c) { return (unsigned)((c >> 3) * kQBlk + r * 128 + (((c & 7) ^ (r & 7)) << 4)); }
// Head (accumulator column) of a thread's column j: 8 (j / 2) + 2 q4 + j % 2; its two rows' accumulator indices.
MJ_DEVICE int col_of(int j, int q4) { return 8 * (j >> 1) + 2 * q4 + (j & 1); }
MJ_DEVICE constexpr int acc0(int j) { return 4 * (j >> 1) + (j & 1); }
MJ_DEVICE constexpr int acc1(int j) { return 4 * (j >> 1) + 2 + (j & 1); }

template <int TA>
MJ_DEVICE void mma(float (&d)[kAcc], unsigned long long a, unsigned long long b) {
    if constexpr (MJ_MQA90T_DEV_SKIP == 1) return;
    if constexpr (kH == 16) mj90::wgmma_m64n16k16_ss_t<TA, 0>(d, a, b);
    else mj90::wgmma_m64n32k16_ss_t<TA, 0>(d, a, b);
}

}  // namespace mj_mqa90t

extern "C" __global__ void __launch_bounds__(mj_mqa90t::kThreads, 1) mlajit_sparse_mqa_fwd_sm90t(const SparseMqaFwdParams p) {
    using namespace mj_mqa90t;
    extern __shared__ __align__(1024) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tok = mj_idx::token_of_block(p, (int)blockIdx.x, (int)gridDim.x);
    const int head0 = blockIdx.y * kH;
    const int nh = p.num_heads;
    unsigned long long* full = (unsigned long long*)(smem + kOffBar);
    unsigned long long* empty = full + kS;
    unsigned* s_keep = (unsigned*)(smem + kOffSet);
    unsigned short* s_pref = (unsigned short*)(smem + kOffSet + mj_idx::kWords * 4);
    int* s_nvalid = (int*)(smem + kOffSet + mj_idx::kWords * 6);
    if (tid == 0 && (mj90::smem_u32(smem) & 1023u) != 0u) __trap();  // the 128-byte swizzle needs 1 KiB alignment

    // Q first (math threads): its latency hides behind the index set build. Heads past num_heads load zeros.
    if (tid < 256) {
        const unsigned char* qtok = (const unsigned char*)p.q + (mj_i64)tok * p.q_stride_tok * 2;
        for (int i = tid; i < kH * 72; i += 256) {
            const int row = i / 72, c = i - row * 72;
            const bool ok = head0 + row < nh;
            const unsigned char* src = ok ? qtok + ((mj_i64)(head0 + row) * p.q_stride_head + c * 8) * 2 : (const unsigned char*)p.q;
            mj90::cp_async_16(smem + kOffQ + q_off(row, c), src, ok);
        }
        mj90::cp_async_commit();
    }
    if (tid == 0) {
        for (int s = 0; s < kS; ++s) {
            mj90::mbar_init(&full[s], 128);   // one cp.async-completion arrival per producer thread
            mj90::mbar_init(&empty[s], 128);  // the slot's warpgroup, after its O^T
        }
    }
    const mj_idx::Request rq = mj_idx::request_of_token(p, tok);
    const int* irow = p.indices + (mj_i64)tok * p.idx_stride_tok;
    const int width = p.topk;
    mj_idx::build_set<kThreads>(p, rq, irow, width, s_keep, s_pref, s_nvalid, (unsigned long long*)(smem + kOffK));
    const int nvalid = *s_nvalid;
    const int nwords = (width + 31) >> 5;
    const int ntiles = (nvalid + kN - 1) / kN;

    if (warp >= 8) {
        // ---- producer: warp pw copies rows 16 pw .. 16 pw + 15 of every tile (rows past the key set: zeros) ----
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        for (int t = 0; t < ntiles; ++t) {
            const int slot = t % kS;
            const int c = t * kN + pw * 16 + (lane & 15);  // lanes 16..31 repeat lanes 0..15's rows
            const unsigned char* mine =
                c < nvalid ? mj_idx::kv_row(p, rq, irow[mj_idx::kept_position(s_keep, s_pref, nwords, c)]) : nullptr;
            if (t >= kS) mj90::mbar_wait(&empty[slot], (unsigned)((t / kS - 1) & 1));
            unsigned char* tile = smem + kOffK + slot * kTileBytes;
#pragma unroll 4
            for (int i = 0; i < 16; ++i) {
                const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                const int r = pw * 16 + i;
                const bool ok = rowp != nullptr;
                const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
                if constexpr (MJ_MQA90T_DEV_SKIP == 3) continue;
                mj90::cp_async_16(tile + tile_off(r, lane), src + lane * 16, ok);
                mj90::cp_async_16(tile + tile_off(r, lane + 32), src + (lane + 32) * 16, ok);
                if (lane < 8) mj90::cp_async_16(tile + tile_off(r, lane + 64), src + (lane + 64) * 16, ok);
            }
            mj90::cp_async_mbar_arrive_noinc(&full[slot]);
        }
        mj90::cp_async_wait<0>();
        return;
    }

    // ---- math warpgroups ----
    const int wg = warp >> 2;
    mj90::setmaxnreg_inc<kMathRegs>();
    const int wl = warp & 3;                     // warp within the warpgroup
    const int row0 = wl * 16 + (lane >> 2);      // accumulator rows row0, row0 + 8 (keys of S^T, columns of O^T)
    const int q4 = lane & 3;
    const float sl2 = p.sm_scale_log2;
    const unsigned sq = mj90::smem_u32(smem + kOffQ);
    const unsigned slot_a = mj90::smem_u32(smem + kOffK) + wg * kTileBytes;
    unsigned char* pt = smem + kOffK + wg * kTileBytes + 8 * kBlk;  // P^T [kH][64 keys] in the slot's rope block
    float* xmax = (float*)(smem + kOffX) + wg * 8 * kH;              // [2 parities][4 warps][kH]

    mj90::cp_async_wait<0>();
    mj90::fence_proxy_async();  // Q, written by cp.async, is read by wgmma
    mj90::named_bar_sync_unaligned(kBarEnd, 256);

    float ot[8][kAcc];  // O^T: 64-column block jb, rows 64 jb + row0 (+ 8), heads col_of(j)
#pragma unroll
    for (int jb = 0; jb < 8; ++jb)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) ot[jb][i] = 0.f;
    float m[kCols], l[kCols];  // running max (raw score) and this thread's partial row sum, per head column
#pragma unroll
    for (int j = 0; j < kCols; ++j) m[j] = MJ_NEG_INF, l[j] = 0.f;

    for (int t = wg, it = 0; t < ntiles; t += 2, ++it) {
        mj90::mbar_wait(&full[wg], (unsigned)(it & 1));
        mj90::fence_proxy_async();
        // S^T [64 keys x kH] = K Q^T: 36 k-steps of 16 columns.
        float s[kAcc];
#pragma unroll
        for (int i = 0; i < kAcc; ++i) s[i] = 0.f;
        mj90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 36; ++kk) {
            const unsigned koff = (kk >> 2) * kBlk + (kk & 3) * 32, qoff = (kk >> 2) * kQBlk + (kk & 3) * 32;
            mma<0>(s, mj90::smem_desc_addr(slot_a + koff, 128, 1024, 16), mj90::smem_desc_addr(sq + qoff, 128, 1024, 16));
        }
        mj90::wgmma_commit();
        mj90::wgmma_wait<0>();
        // Keys past the set: -inf. The tile's maximum per head: the thread's two rows, the warp's 8 row groups, the 4 warps.
        const int lim = nvalid - t * kN;
        const bool v0 = row0 < lim, v1 = row0 + 8 < lim;
        float* xb = xmax + (it & 1) * 4 * kH;
        float tm[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            if (!v0) s[acc0(j)] = MJ_NEG_INF;
            if (!v1) s[acc1(j)] = MJ_NEG_INF;
            float x = fmaxf(s[acc0(j)], s[acc1(j)]);
            x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
            x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
            x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
            if (lane < 4) xb[wl * kH + col_of(j, q4)] = x;
        }
        mj90::named_bar_sync_unaligned(1 + wg, 128);
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            const int c = col_of(j, q4);
            tm[j] = fmaxf(fmaxf(xb[c], xb[kH + c]), fmaxf(xb[2 * kH + c], xb[3 * kH + c]));
        }
        float al[kCols];
#pragma unroll
        for (int j = 0; j < kCols; j += 2) {
            float ms0, ms1;
            mj_online_max2(m[j], m[j + 1], tm[j], tm[j + 1], sl2, ms0, ms1, al[j], al[j + 1]);
            // P = exp2(s sl2 - ms): row sums, and P^T stored bf16 at [head][key] (128-byte rows, swizzled chunks)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int jj = j + e, c = col_of(jj, q4);
                const float ms = e ? ms1 : ms0;
                const float p0 = mj_exp2(fmaf(s[acc0(jj)], sl2, -ms)), p1 = mj_exp2(fmaf(s[acc1(jj)], sl2, -ms));
                l[jj] = l[jj] * al[jj] + (p0 + p1);
                const mj_u32 pk = mj_pack_bf16x2(p0, p1);
                const int r1 = row0 + 8;
                *(unsigned short*)(pt + c * 128 + (((row0 >> 3) ^ (c & 7)) << 4) + (row0 & 7) * 2) = (unsigned short)(pk & 0xffffu);
                *(unsigned short*)(pt + c * 128 + (((r1 >> 3) ^ (c & 7)) << 4) + (r1 & 7) * 2) = (unsigned short)(pk >> 16);
            }
        }
#pragma unroll
        for (int jb = 0; jb < 8; ++jb)
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                ot[jb][acc0(j)] *= al[j];
                ot[jb][acc1(j)] *= al[j];
            }
        mj90::fence_proxy_async();  // P^T (ordinary stores) is read by wgmma
        mj90::named_bar_sync_unaligned(1 + wg, 128);
        // O^T [512 x kH] += V^T P^T: 8 blocks of 64 latent columns x 4 k-steps of 16 keys.
        mj90::wgmma_fence();
#pragma unroll
        for (int jb = 0; jb < 8; ++jb)
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
                mma<1>(ot[jb], mj90::smem_desc_addr(slot_a + jb * kBlk + kk * 2048, 128, 1024, kBlk),
                       mj90::smem_desc_addr(slot_a + 8 * kBlk + kk * 32, 128, 1024, 16));
        mj90::wgmma_commit();
        mj90::wgmma_wait<0>();
        mj90::mbar_arrive(&empty[wg]);
    }

    // ---- epilogue: merge the two warpgroups' softmaxes; lse / max_logits; O normalized and stored ----
    float* e_l = (float*)(smem + kOffE);  // [2][4][kH]
    float* e_m = e_l + 8 * kH;            // [2][kH]
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        float x = l[j];
        x += __shfl_xor_sync(0xffffffffu, x, 4);
        x += __shfl_xor_sync(0xffffffffu, x, 8);
        x += __shfl_xor_sync(0xffffffffu, x, 16);
        if (lane < 4) {
            e_l[(wg * 4 + wl) * kH + col_of(j, q4)] = x;
            if (wl == 0) e_m[wg * kH + col_of(j, q4)] = m[j];
        }
    }
    mj90::named_bar_sync_unaligned(kBarEnd, 256);  // also: every wgmma read of the ring is done
    float sc[kCols], Lt[kCols], mt[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        const int c = col_of(j, q4);
        const float ma = e_m[c], mb = e_m[kH + c], mm = fmaxf(ma, mb);
        const float fa = ma == MJ_NEG_INF ? 0.f : mj_exp2(__fmul_rn(ma, sl2) - __fmul_rn(mm, sl2));
        const float fb = mb == MJ_NEG_INF ? 0.f : mj_exp2(__fmul_rn(mb, sl2) - __fmul_rn(mm, sl2));
        const float la = e_l[c] + e_l[kH + c] + e_l[2 * kH + c] + e_l[3 * kH + c];
        const float lb = e_l[4 * kH + c] + e_l[5 * kH + c] + e_l[6 * kH + c] + e_l[7 * kH + c];
        const float L = la * fa + lb * fb;
        const float inv = L > 0.f ? 1.f / L : 0.f;
        sc[j] = (wg ? fb : fa) * inv;
        Lt[j] = L;
        mt[j] = mm;
    }
    float* w = (float*)(smem + kOffK);  // warpgroup 1's scaled O^T, fp32 [512][kH]
    if (wg == 1) {
#pragma unroll
        for (int jb = 0; jb < 8; ++jb)
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                const int c = col_of(j, q4), r = 64 * jb + row0;
                w[r * kH + c] = ot[jb][acc0(j)] * sc[j];
                w[(r + 8) * kH + c] = ot[jb][acc1(j)] * sc[j];
            }
    }
    mj90::named_bar_sync_unaligned(kBarEnd, 256);
    if (wg == 1) return;
    unsigned char* otok = (unsigned char*)p.out + (mj_i64)tok * p.o_stride_tok * 2;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        const int c = col_of(j, q4), head = head0 + c;
        if (head >= nh) continue;
        unsigned short* orow = (unsigned short*)(otok + (mj_i64)head * p.o_stride_head * 2);
#pragma unroll
        for (int jb = 0; jb < 8; ++jb) {
            const int r = 64 * jb + row0;
            const float v0 = fmaf(ot[jb][acc0(j)], sc[j], w[r * kH + c]);
            const float v1 = fmaf(ot[jb][acc1(j)], sc[j], w[(r + 8) * kH + c]);
            const mj_u32 pk = mj_pack_bf16x2(v0, v1);
            orow[r] = (unsigned short)(pk & 0xffffu);
            orow[r + 8] = (unsigned short)(pk >> 16);
        }
        if (wl == 0 && lane < 4) {
            const float L = Lt[j], mm = mt[j];
            p.lse[(mj_i64)tok * p.lse_stride_tok + head] = L > 0.f ? (mj_log2(L) + mm * sl2) * MJ_LN2 : MJ_NEG_INF;
            if (p.max_logits) p.max_logits[(mj_i64)tok * p.ml_stride_tok + head] = L > 0.f ? mm * p.sm_scale : MJ_NEG_INF;
        }
    }
}
