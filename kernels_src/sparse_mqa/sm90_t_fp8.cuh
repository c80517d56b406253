// Sparse MQA prefill, Hopper tier for 16 heads on the FP8 latent cache (fp8_ds_mla rows of 656 bytes): the body of
// mlajit_sparse_mqa_fwd_sm90t when MJ_KV_FP8 (sparse_mqa/sm90_t.cuh holds the entry point and the bf16 body).
// Semantics: DESIGN.md section 2, as every sparse MQA kernel; the key set comes from sparse_mqa/index_set.cuh.
//
// Why not dequantize into a bf16 tile: a producer that converts 36,864 values a tile bounds the kernel (the 64-head
// FP8 kernel, docs/PERF.md "Sparse MQA on the FP8 cache"), and a bf16 tile costs 72 KB of the ring. Here the ring
// holds the rows as they arrive (656 bytes a key, 4 slots) and the math warpgroups read the e4m3 codes from shared
// memory into wgmma's register A operand, converted exactly to f16 (every e4m3 value is an f16 value). The per-128
// scales never touch the codes:
//  * S^T [64 keys x 16 heads] = sum over the four 128-column blocks b of scale[key][b] * (codes_b . Q_b^T) + k_pe . q_pe^T:
//    one f16 accumulator per block, scaled per row (key) when the four are summed; the rope part is a bf16 wgmma
//    on k_pe as stored.
//  * O^T [512 x 16] += V^T P^T: the rows of O^T in block b take P_b = P * scale[key][b], so the tile carries four
//    scaled copies of P^T (f16, 2 KB each) in its k_pe block, which S^T no longer needs.
// Q is f16 too (wgmma multiplies f16 by f16): each head's q_nope is scaled by a power of two 2^k_h that puts its
// largest magnitude in [2^14, 2^15) (exact for bf16 values down to 2^-29 of that maximum), and S divides it out.
// The scaled P_b carry a running power of two per block, 2^-E_b, that keeps P * scale below 2^15 whatever the scales
// are; O^T's rows of block b are rescaled when E_b grows, as the online softmax rescales them when the max grows.
// The scales are applied to exact fp32 sums (the cache's value e4m3 * scale is not rounded to bf16 first), so results
// agree with the bf16 kernels on the dequantized rows within their tolerance, not bit for bit.
//
// Index layouts (a thread: warp wl of its warpgroup, g = lane / 4, q4 = lane % 4; its accumulator rows row0 = 16 wl + g
// and row0 + 8):
//  * The codes of a tile: [64 keys][512 bytes], 16-byte chunk c of key r stored at chunk c ^ swz(r) (within its 128-byte
//    group): the S^T loads (a row's 16 bytes a thread) and the O^T loads (4 bytes of 4 keys) are both free of bank
//    conflicts.
//  * S^T's k order is permuted: thread q4's four A values of k-step s in 64-column group G are the 4 bytes at
//    64 G + 16 q4 + 4 s of its key row (one 16-byte load feeds 4 k-steps); Q's columns are stored in the same order.
//  * O^T's rows are permuted: the four bytes at 128 b + 4 (8 wl + g) of a key are rows row0, row0 + 8 of 64-row
//    blocks 2 b and 2 b + 1 (one 4-byte load of each of the k-step's 4 keys feeds both blocks); the epilogue writes O
//    in the cache's column order.
#pragma once
#include "sparse_mqa/fp8.cuh"
#include "sparse_mqa/sm90_t_common.cuh"

#ifndef MJ_MQA90T8_INT  // 1: codes to f16 by integer operations (2^-8 times the value; NaN codes read as finite values, so a
                        // development switch only) instead of cvt.rn.f16x2.e4m3x2
#define MJ_MQA90T8_INT 0
#endif

#ifndef MJ_MQA90T8_BULK  // 1 (timing only, with DEV_SKIP 4): each row by one cp.async.bulk of 656 bytes into a linear [64][656]
                         // slot, one mbarrier arrival with the expected bytes per producer warp, instead of 41 cp.async of 16
#define MJ_MQA90T8_BULK 0
#endif

namespace mj_mqa90t8 {

// A bf16 specialization of the family (any BLOCK_H) also compiles this body, never calling it: it then sees the FP8 form's own
// shape, so that its checks and wgmma shapes hold (C++ checks what does not depend on the template parameter).
constexpr int kH = MJ_KV_FP8 ? MJ_BLOCK_H : 16;
constexpr int kN = MJ_KV_FP8 ? MJ_BLOCK_N : 64;
constexpr int kS = MJ_KV_FP8 ? MJ_STAGES : 4;
constexpr int kAcc = kH / 2, kCols = kH / 4;
constexpr int kQBlk = kH * 128;
constexpr int kRope = 64 * 128;    // k_pe [64][128 bytes], 128-byte swizzle; after S^T: P_b^T, b = 0..3, [kH][64] f16 each
constexpr int kCodes = 64 * 512;   // e4m3 [64][512]
constexpr int kScl = 64 * 16;      // fp32 [64][4]
constexpr int kSlot = kRope + kCodes + kScl;
constexpr int kOffQ = 0;  // Q: blocks 0..7 q_nope f16 (permuted columns), block 8 q_pe bf16
constexpr int kOffK = 9 * kQBlk;
constexpr int kXRow = kH + 4;                       // per warp: the tile's max score per head, then its max scale per block
constexpr int kOffX = kOffK + kS * kSlot;           // fp32 [2 warpgroups][2 parities][4 warps][kXRow]
constexpr int kOffE = kOffX + 16 * kXRow * 4;       // fp32 [2][4][kH] row sums, [2][kH] maxima (epilogue)
constexpr int kOffQk = kOffE + 10 * kH * 4;         // fp32 [kH]: 2^-k_h, the factor that undoes q_nope's scaling
constexpr int kOffBar = kOffQk + kH * 4;            // mbarriers full[kS], empty[kS]
constexpr int kOffSet = kOffBar + 2 * kS * 8;
constexpr int kSmem = kOffSet + mj_idx::kSetBytes;
constexpr int kSmemAbi = mj_mqa90t8_smem_bytes(kH, kN, kS);  // evaluated here: a host constexpr function
constexpr int kThreads = mj_mqa90_threads();
constexpr int kWRow = 512 + 4;
constexpr int kBarEnd = 3;
constexpr int kProducerRegs = 40, kMathRegs = 232;
constexpr float kUnit = MJ_MQA90T8_INT ? 256.f : 1.f;  // value / f16 of a converted code

// Chunk position (0..31) of chunk c of key r's codes.
MJ_DEVICE int code_chunk(int r, int c) { return (c & ~7) | ((c & 7) ^ (((r & 1) << 2) ^ (((r >> 1) & 3) << 1))); }
// Byte (0..3) of a 4-byte code word that holds k-column 2 q4 + e (half 0) or 2 q4 + 8 + e (half 1): the converter's
// pair order.
MJ_DEVICE constexpr int pair_byte(int half, int e) { return MJ_MQA90T8_INT ? half + 2 * e : 2 * half + e; }

// Four codes -> two f16x2: lo holds pair_byte(0, .), hi pair_byte(1, .) (value exactly, or 2^-8 times it: kUnit).
MJ_DEVICE void codes_to_f16(mj_u32 x, mj_u32& lo, mj_u32& hi) {
    if constexpr (MJ_MQA90T8_INT) {
        lo = ((x << 7) & 0x3f803f80u) | ((x << 8) & 0x80008000u);
        hi = ((x >> 1) & 0x3f803f80u) | (x & 0x80008000u);
    } else {
        asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, b;\n}"
            : "=r"(lo), "=r"(hi) : "r"(x));
    }
}
// Byte selectors: words of keys k, k + 1 -> the pairs (k, k + 1) of bytes 0, 1 (kSel01) or 2, 3 (kSel23).
constexpr unsigned kSel01 = MJ_MQA90T8_INT ? 0x5410u : 0x5140u;
constexpr unsigned kSel23 = MJ_MQA90T8_INT ? 0x7632u : 0x7362u;
MJ_DEVICE mj_u32 prmt(mj_u32 a, mj_u32 b, unsigned sel) {
    mj_u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
MJ_DEVICE mj_u32 f32_to_f16_bits(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
MJ_DEVICE float pow2(int e) { return __int_as_float((127 + e) << 23); }  // e in [-126, 127]
MJ_DEVICE int exponent_of(float x) { return (int)((__float_as_uint(x) >> 23) & 0xffu) - 127; }  // floor(log2 x), x > 0 normal

MJ_DEVICE mj_u32 ld_shared_u32(unsigned a) {
    mj_u32 v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
MJ_DEVICE void ld_shared_v4(unsigned a, mj_u32 (&v)[4]) {
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(a));
}

// D[64 x 16] += A[64 x 16] (f16, registers) . B[16 x 16] (f16, shared, K-major)
MJ_DEVICE void wgmma_f16_rs(float (&d)[8], const mj_u32 (&a)[4], unsigned long long desc_b) {
    if constexpr (MJ_MQA90T_DEV_SKIP == 1) return;
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

using mj_mqa90t_common::acc0;
using mj_mqa90t_common::acc1;
using mj_mqa90t_common::col_of;

// q_nope of head `hq` (thread part 0..15 of 16: columns 32 part .. 32 part + 31) into Q's f16 blocks, scaled by the
// head's 2^k (the 16 lanes of a head reduce its maximum); part 0 stores 2^-k * kUnit at qk[hq]. Heads past num_heads: zeros.
MJ_DEVICE void load_q_nope_f16(const SparseMqaFwdParams& p, int tok, int head0, unsigned char* qs, float* qk, int tid) {
    const int hq = tid >> 4, part = tid & 15;
    const bool ok = head0 + hq < p.num_heads;
    float v[32];
    if (ok) {
        const unsigned char* src = (const unsigned char*)p.q + ((mj_i64)tok * p.q_stride_tok + (mj_i64)(head0 + hq) * p.q_stride_head + 32 * part) * 2;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            mj_u32 w[4];
            mj90::ld_global_nc_v4(w, src + 16 * i);
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                v[8 * i + 2 * k] = __uint_as_float(w[k] << 16);
                v[8 * i + 2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) v[i] = 0.f;
    }
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));  // NaN is skipped; an inf makes the head's k 0 below
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    // amax in [2^14, 2^15) after scaling; 0, subnormal or inf: k 0 (a head with an inf or NaN has a non-finite S anyway)
    const int k = (amax > 0.f && amax < 3.0e38f) ? max(-113, min(100, 14 - exponent_of(fmaxf(amax, 1.17549435e-38f)))) : 0;
    const float sc = k >= 0 ? pow2(min(k, 127)) : pow2(max(k, -126));
    if (part == 0) qk[hq] = (k >= 0 ? pow2(-min(k, 126)) : pow2(min(-k, 127))) * kUnit;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int ph = 32 * part + i;  // the column in the cache's order
        const int G = ph >> 6, pp = ph & 63, q4 = pp >> 4, s = (pp >> 2) & 3, b = pp & 3;
        const int half = MJ_MQA90T8_INT ? (b & 1) : (b >> 1), e = MJ_MQA90T8_INT ? (b >> 1) : (b & 1);
        const int L = 16 * s + 8 * half + 2 * q4 + e;  // its k position in group G
        *(unsigned short*)(qs + G * kQBlk + hq * 128 + ((((L >> 3) ^ (hq & 7))) << 4) + (L & 7) * 2) =
            (unsigned short)f32_to_f16_bits(v[i] * sc);
    }
}

template <int FP8>
MJ_DEVICE void run(const SparseMqaFwdParams& p) {
    if constexpr (FP8 != 0) {
        static_assert(kH == 16 && kN == 64 && kS >= 2 && kS <= 5, "sparse MQA sm90t on the FP8 cache: BLOCK_H 16, BLOCK_N 64, 2 to 5 stages");
        static_assert(kSmem == kSmemAbi, "sparse MQA sm90t FP8: layout and mj_mqa90t8_smem_bytes disagree");
        static_assert(kSmem <= 232448, "sparse MQA sm90t FP8: over the per-block shared memory of sm_90");
        static_assert(kOffK % 1024 == 0 && kSlot % 1024 == 0 && kOffBar % 8 == 0, "swizzled tiles need 1 KiB alignment, mbarriers 8 bytes");
        static_assert(kS * kSlot >= mj_idx::kHashBytes && kS * kSlot >= 2 * kH * kWRow * 4, "the ring's other uses");
        static_assert(4 * kH * 128 <= kRope, "the four P_b^T fit the k_pe block");
        extern __shared__ __align__(1024) unsigned char smem[];
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const int tok = mj_idx::token_of_block(p, (int)blockIdx.x, (int)gridDim.x);
        const int head0 = blockIdx.y * kH;
        unsigned long long* full = (unsigned long long*)(smem + kOffBar);
        unsigned long long* empty = full + kS;
        const mj_idx::SetView ks = mj_idx::set_view(smem + kOffSet);
        if (tid == 0 && (mj90::smem_u32(smem) & 1023u) != 0u) __trap();

        // q_pe (bf16, block 8) by cp.async; q_nope converted to f16 by the math threads after the key set is built.
        if (tid < 256) mj_tile90::load_q<kH, 256, 64>(p, tok, head0, smem + kOffQ, tid);
        if (tid == 0) {
            for (int s = 0; s < kS; ++s) {
                mj90::mbar_init(&full[s], MJ_MQA90T8_BULK ? 4 : 128);
                mj90::mbar_init(&empty[s], 128);
            }
        }
        const mj_idx::Request rq = mj_idx::request_of_token(p, tok);
        const int* irow = p.indices + (mj_i64)tok * p.idx_stride_tok;
        const int width = p.topk;
        mj_idx::build_set<kThreads>(p, rq, irow, width, ks.keep, ks.pref, ks.nvalid, (unsigned long long*)(smem + kOffK));
        const int nvalid = *ks.nvalid;
        const int nwords = (width + 31) >> 5;
        const int ntiles = (nvalid + kN - 1) / kN;

        if (warp >= 8) {
            // ---- producer: warp pw copies keys 16 pw .. 16 pw + 15 of every tile as they are stored: codes (chunks 0..31,
            // to code_chunk), scales (chunk 32), k_pe (chunks 33..40, 128-byte swizzle); keys past the set: zeros ----
            mj90::setmaxnreg_dec<kProducerRegs>();
            constexpr int kR = kN / 4;
            const int pw = warp - 8;
            for (int t = 0; t < ntiles; ++t) {
                const int slot = t % kS;
                const int c = t * kN + pw * kR + lane % kR;
                const unsigned char* mine = mj_idx::set_row(p, rq, irow, ks, nwords, nvalid, c);
                if (t >= kS) mj90::mbar_wait(&empty[slot], (unsigned)((t / kS - 1) & 1));
                unsigned char* sl = smem + kOffK + slot * kSlot;
                if constexpr (MJ_MQA90T8_BULK) {
                    static_assert(!MJ_MQA90T8_BULK || MJ_MQA90T_DEV_SKIP == 4, "the bulk-copy producer is a gather-timing form");
                    mj_mqa90t_common::bulk_rows<kR, mj_fp8::kRowBytes>(sl + pw * kR * mj_fp8::kRowBytes, mine, lane, &full[slot]);
                    continue;
                }
#pragma unroll 4
                for (int i = 0; i < kR; ++i) {
                    const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                    const int r = pw * kR + i;
                    const bool ok = rowp != nullptr;
                    const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
                    if constexpr (MJ_MQA90T_DEV_SKIP == 3) continue;
                    mj90::cp_async_16(sl + kRope + r * 512 + code_chunk(r, lane) * 16, src + lane * 16, ok);
                    if (lane == 0) mj90::cp_async_16(sl + kRope + kCodes + r * 16, src + mj_fp8::kScaleOff, ok);
                    else if (lane <= 8)
                        mj90::cp_async_16(sl + r * 128 + (((lane - 1) ^ (r & 7)) << 4), src + mj_fp8::kRopeOff + (lane - 1) * 16, ok);
                }
                mj90::cp_async_mbar_arrive_noinc(&full[slot]);
            }
            mj90::cp_async_wait<0>();
            return;
        }

        // ---- math warpgroups ----
        load_q_nope_f16(p, tok, head0, smem + kOffQ, (float*)(smem + kOffQk), tid);
        const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for ptxas (see the bf16 body)
        mj90::setmaxnreg_inc<kMathRegs>();
        const int wl = warp & 3;
        const int g = lane >> 2, q4 = lane & 3;
        const int row0 = wl * 16 + g;
        const float sl2 = p.sm_scale_log2;
        const unsigned sq = mj90::smem_u32(smem + kOffQ);
        float* xmax = (float*)(smem + kOffX) + wg * 8 * kXRow;

        mj90::cp_async_wait<0>();
        mj90::fence_proxy_async();  // Q (cp.async and ordinary stores) is read by wgmma
        mj90::named_bar_sync_unaligned(kBarEnd, 256);
        float qk[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) qk[j] = ((const float*)(smem + kOffQk))[col_of(j, q4)];

        float ot[8][kAcc];  // O^T block jb: rows (permuted) 128 (jb / 2) + 4 (8 wl + g) + 2 (jb % 2) + {0: row0, 1: row0 + 8}
#pragma unroll
        for (int jb = 0; jb < 8; ++jb)
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ot[jb][i] = 0.f;
        float m[kCols], l[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) m[j] = MJ_NEG_INF, l[j] = 0.f;
        int eb[4] = {-126, -126, -126, -126};  // E_b: P_b = P * scale * kUnit * 2^-E_b (see the header)

        for (int t = wg, it = 0; t < ntiles; t += 2, ++it) {
            const int slot = t % kS;
            const unsigned sa = mj90::smem_u32(smem + kOffK) + slot * kSlot;  // k_pe, then P_b^T
            const unsigned codes = sa + kRope;
            unsigned char* slp = smem + kOffK + slot * kSlot;
            mj90::mbar_wait(&full[slot], (unsigned)((t / kS) & 1));
            if constexpr (MJ_MQA90T_DEV_SKIP == 4) {  // the producer's gather alone: tiles released as they land
                mj90::mbar_arrive(&empty[slot]);
                continue;
            }
            mj90::fence_proxy_async();

            // S^T: the rope part (bf16, shared A) into sr, the four code blocks (f16, register A) into sb[b].
            float sr[kAcc], sb[4][kAcc];
#pragma unroll
            for (int i = 0; i < kAcc; ++i) {
                sr[i] = 0.f;
#pragma unroll
                for (int b = 0; b < 4; ++b) sb[b][i] = 0.f;
            }
            mj90::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk)
                if constexpr (MJ_MQA90T_DEV_SKIP != 1)
                    mj90::wgmma_m64n16k16_ss_t<0, 0>(sr, mj90::smem_desc_addr(sa + kk * 32, 128, 1024, 16),
                                                     mj90::smem_desc_addr(sq + 8 * kQBlk + kk * 32, 128, 1024, 16));
            mj_u32 a[2][4][4];  // [buffer][k-step][register]
#pragma unroll
            for (int G = 0; G < 8; ++G) {
                mj_u32 x0[4], x1[4];
                ld_shared_v4(codes + row0 * 512 + code_chunk(row0, 4 * G + q4) * 16, x0);
                ld_shared_v4(codes + (row0 + 8) * 512 + code_chunk(row0 + 8, 4 * G + q4) * 16, x1);
#pragma unroll
                for (int s = 0; s < 4; ++s) {
                    codes_to_f16(x0[s], a[G & 1][s][0], a[G & 1][s][2]);
                    codes_to_f16(x1[s], a[G & 1][s][1], a[G & 1][s][3]);
                }
                mj90::wgmma_fence();
#pragma unroll
                for (int s = 0; s < 4; ++s)
                    wgmma_f16_rs(sb[G >> 1], a[G & 1][s], mj90::smem_desc_addr(sq + G * kQBlk + s * 32, 128, 1024, 16));
                mj90::wgmma_commit();
                if (G < 7) mj90::wgmma_wait<1>();  // the other buffer's wgmmas are done before it is refilled
            }
            mj90::wgmma_wait<0>();

            // S = rope + 2^-k_h * sum_b scale_b * sb[b], -inf past the set; the tile's max per head and max scale per block.
            const int lim = min(nvalid - t * kN, kN);
            const bool v0 = row0 < lim, v1 = row0 + 8 < lim;
            float c0[4], c1[4];
            {
                const float* scl = (const float*)(slp + kRope + kCodes);
#pragma unroll
                for (int b = 0; b < 4; ++b) c0[b] = scl[row0 * 4 + b], c1[b] = scl[(row0 + 8) * 4 + b];
            }
            float s[kAcc];
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                const int i0 = acc0(j), i1 = acc1(j);
                const float n0 = c0[0] * sb[0][i0] + c0[1] * sb[1][i0] + c0[2] * sb[2][i0] + c0[3] * sb[3][i0];
                const float n1 = c1[0] * sb[0][i1] + c1[1] * sb[1][i1] + c1[2] * sb[2][i1] + c1[3] * sb[3][i1];
                s[i0] = v0 ? sr[i0] + qk[j] * n0 : MJ_NEG_INF;
                s[i1] = v1 ? sr[i1] + qk[j] * n1 : MJ_NEG_INF;
            }
            float* xb = xmax + (it & 1) * 4 * kXRow;
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                float x = fmaxf(s[acc0(j)], s[acc1(j)]);
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
                if (lane < 4) xb[wl * kXRow + col_of(j, q4)] = x;
            }
#pragma unroll
            for (int b = 0; b < 4; ++b) {  // fmaxf drops a NaN scale (its key's S is NaN: the row is NaN anyway)
                float x = fmaxf(v0 ? fabsf(c0[b]) : 0.f, v1 ? fabsf(c1[b]) : 0.f);
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
                x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
                if (lane == 0) xb[wl * kXRow + kH + b] = x;
            }
            mj90::named_bar_sync_unaligned(1 + wg, 128);
            float tm[kCols], fb[4], rb[4];
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                const int c = col_of(j, q4);
                tm[j] = fmaxf(fmaxf(xb[c], xb[kXRow + c]), fmaxf(xb[2 * kXRow + c], xb[3 * kXRow + c]));
            }
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const float ms = fmaxf(fmaxf(xb[kH + b], xb[kXRow + kH + b]), fmaxf(xb[2 * kXRow + kH + b], xb[3 * kXRow + kH + b])) * kUnit;
                // E_b >= floor(log2 max) - 14: P * scale * kUnit * 2^-E_b < 2^15 (P <= 1)
                const int need = ms > 0.f ? (ms < 3.0e38f ? exponent_of(fmaxf(ms, 1.17549435e-38f)) - 14 : 126) : -126;
                const int en = min(126, max(eb[b], need));
                rb[b] = eb[b] - en < -126 ? 0.f : pow2(eb[b] - en);  // O^T rows of block b: old factor / new (1 unless E_b grew)
                eb[b] = en;
                fb[b] = pow2(-en) * kUnit;
            }
            // The scale_b * 2^-E_b * kUnit of this thread's two keys, per block.
            float f0[4], f1[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) f0[b] = c0[b] * fb[b], f1[b] = c1[b] * fb[b];
            float al[kCols];
#pragma unroll
            for (int j = 0; j < kCols; j += 2) {
                float ms0, ms1;
                mj_online_max2(m[j], m[j + 1], tm[j], tm[j + 1], sl2, ms0, ms1, al[j], al[j + 1]);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int jj = j + e, c = col_of(jj, q4);
                    const float ms = e ? ms1 : ms0;
                    const float p0 = mj_exp2(fmaf(s[acc0(jj)], sl2, -ms)), p1 = mj_exp2(fmaf(s[acc1(jj)], sl2, -ms));
                    l[jj] = l[jj] * al[jj] + (p0 + p1);
                    const int r1 = row0 + 8;
#pragma unroll
                    for (int b = 0; b < 4; ++b) {
                        unsigned char* pt = slp + b * kQBlk + c * 128;
                        *(unsigned short*)(pt + (((row0 >> 3) ^ (c & 7)) << 4) + (row0 & 7) * 2) = (unsigned short)f32_to_f16_bits(p0 * f0[b]);
                        *(unsigned short*)(pt + (((r1 >> 3) ^ (c & 7)) << 4) + (r1 & 7) * 2) = (unsigned short)f32_to_f16_bits(p1 * f1[b]);
                    }
                }
            }
#pragma unroll
            for (int jb = 0; jb < 8; ++jb)
#pragma unroll
                for (int j = 0; j < kCols; ++j) {
                    const float f = al[j] * rb[jb >> 1];
                    ot[jb][acc0(j)] *= f;
                    ot[jb][acc1(j)] *= f;
                }
            mj90::fence_proxy_async();  // P_b^T (ordinary stores) is read by wgmma
            mj90::named_bar_sync_unaligned(1 + wg, 128);
#pragma unroll
            for (int jb = 0; jb < 8; ++jb)
#pragma unroll
                for (int i = 0; i < kAcc; ++i) mj90::reg_fence(ot[jb][i]);

            // O^T += V^T P_b^T: per block b and k-step kk (16 keys), one 4-byte load of each of the thread's 4 keys.
#pragma unroll
            for (int b = 0; b < 4; ++b) {
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    const int it2 = 4 * b + kk;
                    const int cpos = 8 * b + 2 * wl + (g >> 2);
                    mj_u32 L[4];
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int key = 16 * kk + 2 * q4 + (i & 1) + 8 * (i >> 1);
                        L[i] = ld_shared_u32(codes + key * 512 + code_chunk(key, cpos) * 16 + 4 * (g & 3));
                    }
                    mj_u32(&ae)[4] = a[it2 & 1][0];
                    mj_u32(&ao)[4] = a[it2 & 1][1];
                    codes_to_f16(prmt(L[0], L[1], kSel01), ae[0], ae[1]);
                    codes_to_f16(prmt(L[0], L[1], kSel23), ao[0], ao[1]);
                    codes_to_f16(prmt(L[2], L[3], kSel01), ae[2], ae[3]);
                    codes_to_f16(prmt(L[2], L[3], kSel23), ao[2], ao[3]);
                    mj90::wgmma_fence();
                    const unsigned long long db = mj90::smem_desc_addr(sa + b * kQBlk + kk * 32, 128, 1024, 16);
                    wgmma_f16_rs(ot[2 * b], ae, db);
                    wgmma_f16_rs(ot[2 * b + 1], ao, db);
                    mj90::wgmma_commit();
                    if (it2 < 15) mj90::wgmma_wait<1>();
                }
            }
            mj90::wgmma_wait<0>();
            mj90::mbar_arrive(&empty[slot]);
        }

        // ---- epilogue: merge the two warpgroups' softmaxes (as the bf16 body), O in the cache's column order ----
        float sc[kCols], Lt[kCols], mt[kCols];
        mj_mqa90t_common::merge_softmax<kH>(l, m, (float*)(smem + kOffE), wg, wl, lane, sl2, kBarEnd, sc, Lt, mt);
        float* w = (float*)(smem + kOffK) + wg * kH * kWRow;
#pragma unroll
        for (int jb = 0; jb < 8; ++jb) {
            const float eu = pow2(eb[jb >> 1]);  // undoes 2^-E_b (E_b <= 126)
            const int d0 = 128 * (jb >> 1) + 4 * (8 * wl + g) + 2 * (jb & 1);
#pragma unroll
            for (int j = 0; j < kCols; ++j) {
                const int c = col_of(j, q4);
                w[c * kWRow + d0] = ot[jb][acc0(j)] * eu * sc[j];
                w[c * kWRow + d0 + 1] = ot[jb][acc1(j)] * eu * sc[j];
            }
        }
        mj_mqa90t_common::store_out<kH, kWRow>(p, (const float*)(smem + kOffK), Lt, mt, tok, head0, tid, wg, wl, lane, sl2, kBarEnd);
    }
}

}  // namespace mj_mqa90t8
