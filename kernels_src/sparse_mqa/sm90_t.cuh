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
// Supported specialization: BLOCK_H 16 or 32, BLOCK_N 64, STAGES 2, bf16 cache; on the FP8 cache (KV_FP8 1) BLOCK_H 16, the
// same math on tiles the FP8 producer dequantizes (sparse_mqa/sm90_f8_staged.cuh); PERSIST 1 (BLOCK_H 16, bf16, with the key-set
// pre-pass's list): the persistent grid (sparse_mqa/sm90_t_persist.cuh, min(tokens, SMs) blocks). grid = (tokens, ceil(h / BLOCK_H)),
// mj_mqa90t_threads(KV_FP8) threads, mj_mqa90t_smem_bytes(BLOCK_H, 64, 2, KV_FP8) bytes of shared memory. Development switch
// MJ_MQA90T8_FOLD = 1: the FP8 cache's earlier body (sparse_mqa/sm90_t_fp8.cuh: codes as f16, scales folded into fp32
// sums; 2 to 5 stages, mj_mqa90t8_smem_bytes), which does not round e4m3 * scale to bf16 as the contract says. The runtime
// launches it at <= 16 heads on both caches; at 32 it ties with the 64-head kernel (docs/perf_mqa_notes.md, "Hopper tier for
// 16 and 32 heads").
//
// Design (one block = one query token x BLOCK_H heads):
//  * Warpgroup 2 gathers the 64-key tiles of the compacted key set into a 2-slot ring with cp.async, as the
//    64-head kernel's producer does (a warp copies 16 rows of 1152 bytes, 512 bytes an instruction).
//    On the FP8 cache 16 producer warps of 4 rows land the 656-byte rows by cp.async in rings of raw rows of their own
//    (1.5 tiles ahead) and store them dequantized into the same bf16 tile (sparse_mqa/sm90_f8_staged.cuh); the math
//    below does not change. H100, 8k, 16 heads: 4.71 ms against 5.55 for session 25's register producer (8 warps of 8
//    rows, sparse_mqa/sm90_f8_producer.cuh, MJ_MQA90T8_STAGE=0) and 4.15-4.23 for the bf16 cache (docs/PERF.md).
//  * Warpgroup g (0, 1) takes tiles g, g + 2, g + 4, ... (tile t in slot t % 2 = g): its own S^T, its own online
//    softmax (per head = per accumulator column: the maximum over the tile's 64 keys is reduced across the 8 row groups
//    of a warp by shuffles and across the 4 warps through shared memory), its own O^T and row sums. The two
//    warpgroups never wait for each other inside the loop; while one exponentiates or waits for its slot, the
//    other's wgmma runs. The epilogue merges the two partial softmaxes (max, rescale, add) through shared memory.
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
#include "sparse_mqa/sm90_tile.cuh"
#include "sparse_mqa/sm90_t_common.cuh"

#ifndef MJ_MQA90T_PIN  // 1: O^T's rescale is pinned before the wgmma fence (development switch, not measured yet). Without
                       // it the compiler sinks the multiplications past the fence and ptxas injects a warpgroup.arrive
                       // before each of the 8 column blocks' first wgmma (C7519 in the -v log), 8 fences a tile, not 1.
#define MJ_MQA90T_PIN 0
#endif
#ifndef MJ_MQA90T_DEV_SKIP  // 1: no wgmma (timing of the gather and barriers only; results are wrong); 3: no
                            // gather (timing of the math on whatever the ring holds); 4: the producer's gather alone;
                            // 5: no tiles (Q load, key-set build and epilogue: a block's fixed cost); 6: as 5 without
                            // the key-set build; 2 (FP8 cache): the codes stored unconverted (the producer without its
                            // dequantization)
#define MJ_MQA90T_DEV_SKIP 0
#endif
#ifndef MJ_MQA90T_BULK  // 1 (timing only, with DEV_SKIP 4): each 1152-byte row by one cp.async.bulk into a linear slot
#define MJ_MQA90T_BULK 0
#endif
#ifndef MJ_MQA90T8_FOLD  // 1: the FP8 cache's scale-folding body (see above), for comparison only
#define MJ_MQA90T8_FOLD 0
#endif
#ifndef MJ_MQA90T8_STAGE  // FP8 cache: the raw-ring producer (sparse_mqa/sm90_f8_staged.cuh) with 16 warps (the runtime's) or 8;
                          // 0 = the register producer (sparse_mqa/sm90_f8_producer.cuh, 8 warps: session 25's form)
#define MJ_MQA90T8_STAGE 16
#endif
#include "sparse_mqa/sm90_t_fp8.cuh"      // the FP8 cache's scale-folding body (MJ_MQA90T8_FOLD)
#include "sparse_mqa/sm90_f8_producer.cuh"  // the FP8 cache's register producer (MJ_MQA90T8_STAGE=0)
#include "sparse_mqa/sm90_f8_staged.cuh"    // the FP8 cache's raw-ring producer (the default)

namespace mj_mqa90t {

constexpr int kH = MJ_BLOCK_H;
constexpr int kN = MJ_BLOCK_N;
constexpr int kS = MJ_STAGES;
static_assert(MJ_D_LATENT == 512 && MJ_D_ROPE == 64, "sparse MQA is specialized for 512 latent + 64 rope");
// 64-key tiles in 2 slots. Tried and dropped (H100, 8k, paged): 56 keys in 3 slots at 16 heads (5.13 against 4.53 ms)
// and 48 in 3 at 32 (5.91 against 5.06); a short tile is read as wgmma's 64 rows, and the rows past it (P^T at the
// end of the tile) carried a NaN of one head's P into every head's O (the GPU suite's containment test). Both warpgroups on
// every tile (S^T's k-steps, softmax by head and O^T's column blocks split; commit 87c0ad8): 4.59-4.66 against 4.48-4.56 ms.
static_assert((kH == 16 || kH == 32) && kN == 64 && (kS == 2 || MJ_MQA90T8_FOLD), "sparse MQA sm90 (keys as M): BLOCK_H 16 or 32, BLOCK_N 64, 2 stages");
// The FP8 cache (not folded): 8 producer warps hold 8 rows of codes a thread (sm90_f8_producer.cuh), so BLOCK_H 16 only, whose
// math fits the registers left.
constexpr bool kF8 = MJ_KV_FP8 != 0 && MJ_MQA90T8_FOLD == 0;
static_assert(!kF8 || kH == 16, "sparse MQA sm90 (keys as M) on the FP8 cache: BLOCK_H 16");
static_assert(!kF8 || (MJ_MQA90T_DEV_SKIP != 3 && !MJ_MQA90T_BULK), "FP8 producer: no timing form without the gather, no bulk form");
static_assert(kF8 || MJ_MQA90T_DEV_SKIP != 2, "DEV_SKIP 2 is a form of the FP8 producer");
static_assert(MJ_ARCH == 90, "sparse MQA sm90 needs sm_90a (wgmma)");
// Producer warps: 4 copying bf16 rows; on the FP8 cache 16 of the raw-ring producer (8 of it: 6.06 ms, H100, 8k, 16 heads)
// or 8 of the register producer (5.95 against 7.09 ms for 4 of 16 rows; the conversions of 4 warps a SM run at a third of
// the rate 16 reach, tools/dev/cvtbench).
constexpr bool kF8Stage = kF8 && MJ_MQA90T8_STAGE != 0;
static_assert(MJ_MQA90T8_STAGE == 0 || MJ_MQA90T8_STAGE == 8 || MJ_MQA90T8_STAGE == 16, "MJ_MQA90T8_STAGE: 0, 8 or 16 warps");
constexpr int kProducerWarps = kF8Stage ? MJ_MQA90T8_STAGE : kF8 ? 8 : 4;
constexpr int kThreads = 256 + 32 * kProducerWarps;
static_assert((kF8 && MJ_MQA90T8_STAGE != 16) || kThreads == mj_mqa90t_threads(kF8 ? 1 : 0),
              "the host launches mj_mqa90t_threads() threads");
constexpr int kBlk = kN * 128;    // one 64-column block of a 64-key tile, bytes
constexpr int kTileBytes = 9 * kBlk;
constexpr int kQBlk = kH * 128;   // one 64-column block of Q
constexpr int kAcc = kH / 2;      // accumulator floats a thread of an m64nH tile
constexpr int kCols = kH / 4;     // accumulator columns (heads) a thread holds: 8 i + 2 q4 + e
// MJ_PERSIST (the spec's PERSIST): the persistent grid (sparse_mqa/sm90_t_persist.cuh; bf16 cache, 16 heads, with the key-set
// pre-pass's list; the host launches min(tokens, SMs) blocks).
constexpr bool kPersist = MJ_PERSIST != 0;
static_assert(!kPersist || (kH == 16 && MJ_KV_FP8 == 0 && (MJ_MQA90T_DEV_SKIP == 0 || MJ_MQA90T_DEV_SKIP == 4) && !MJ_MQA90T_BULK),
              "sparse MQA sm90t, persistent grid: bf16 cache, BLOCK_H 16, DEV_SKIP 0 or 4");
constexpr int kWRow = 512 + 4;     // the epilogue's fp32 O rows, padded
// Shared memory layout (bytes). The persistent grid: Q in two buffers (the next token's loads while this one runs), and the
// epilogue's O staged outside the ring ([kH][kWRow] fp32), which by then holds the next token's first tiles.
constexpr int kOffQ = 0;
constexpr int kOffK = (kPersist ? 2 : 1) * 9 * kQBlk;
constexpr int kOffW = kOffK + kS * kTileBytes;
constexpr int kOffX = kOffW + (kPersist ? kH * kWRow * 4 : 0);  // fp32 [2 warpgroups][2 parities][4 warps][kH]: tile maxima
constexpr int kOffE = kOffX + 16 * kH * 4;           // fp32 [2][4][kH] row sums, then [2][kH] maxima (epilogue)
constexpr int kOffBar = kOffE + 10 * kH * 4;         // mbarriers full[kS], empty[kS]
constexpr int kOffSet = kOffBar + 2 * kS * 8;        // the row's key set
constexpr int kOffRaw = kOffSet + mj_idx::kSetBytes;  // MJ_MQA90T8_STAGE: the producer warps' raw rings
constexpr int kRawBytes = kF8Stage ? mj_f8stage::raw_bytes(kProducerWarps) : 0;
constexpr int kSmem = kOffRaw + kRawBytes;
static_assert(kSmem - kRawBytes == mj_mqa90t_smem_bytes(kH, kN, kS, 0, MJ_PERSIST) &&
                  (!kF8Stage || kRawBytes == mj_mqa90t8_raw_bytes()),
              "sparse MQA sm90t: layout and mj_mqa90t_smem_bytes disagree");
static_assert(kOffRaw % 16 == 0, "raw rows are cp.async targets");
static_assert(kSmem <= 232448 || MJ_MQA90T8_FOLD, "sparse MQA sm90t: over the per-block shared memory of sm_90");
static_assert(kOffK % 1024 == 0 && kOffBar % 8 == 0, "swizzled tiles need 1 KiB alignment, mbarriers 8 bytes");
static_assert(kS * kTileBytes >= mj_idx::kHashBytes, "the ring doubles as the index set's hash scratch");
static_assert(kS * kTileBytes >= 2 * kH * kWRow * 4, "the ring holds both warpgroups' O at the end");
constexpr int kBarEnd = 3;  // named barriers: 1 + g (warpgroup g's 128 threads), kBarEnd (the 256 math threads)
// Registers after setmaxnreg: a lean cp.async producer (bf16). The math warps' increase must be covered by what the producer
// releases. FP8, 16 raw-ring warps (768 threads start with 80): 48 / 144 (40 / 152 spills 52 bytes in the producer, ptxas
// 13.0). FP8, 8 warps (either producer; the register one holds 32 registers of codes a thread): 104 / 152, the split without
// spills (88 / 168 and 96 / 160 spill 4 bytes, 80 / 176 24).
constexpr int kProducerRegs = kF8Stage && kProducerWarps == 16 ? 48 : kF8 ? 104 : 40,
              kMathRegs = kF8Stage && kProducerWarps == 16 ? 144 : kF8 ? 152 : 232;
constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;  // what every thread starts with (one block a SM)
static_assert(32 * kProducerWarps * kProducerRegs + 256 * kMathRegs <= 65536, "register budget");
static_assert(32 * kProducerWarps * (kLaunchRegs - kProducerRegs) >= 256 * (kMathRegs - kLaunchRegs),
              "the producer must release what the math warps take");

// Byte offset of 16-byte chunk c (0..71) of row r in a 64-key tile (sparse_mqa/sm90_tile.cuh).
MJ_DEVICE unsigned tile_off(int r, int c) { return mj_tile90::chunk_off<kBlk>(r, c); }
// A thread's accumulator columns (heads) and rows: sparse_mqa/sm90_t_common.cuh.
using mj_mqa90t_common::acc0;
using mj_mqa90t_common::acc1;
using mj_mqa90t_common::col_of;

template <int TA>
MJ_DEVICE void mma(float (&d)[kAcc], unsigned long long a, unsigned long long b) {
    if constexpr (MJ_MQA90T_DEV_SKIP == 1) return;
    if constexpr (kH == 16) mj90::wgmma_m64n16k16_ss_t<TA, 0>(d, a, b);
    else mj90::wgmma_m64n32k16_ss_t<TA, 0>(d, a, b);
}

// After a token's loop: warpgroup 1, which has one tile fewer when the count is odd, passes its loop barrier as often as
// warpgroup 0 did (two a tile). Without it compute-sanitizer racecheck reports the epilogue's exchange through the 256-thread
// barrier (merge_softmax, the O staging) as hazards between the warpgroups: it seems to order threads by the number of barriers
// each has passed. Tested side by side in session 28 (docs/RELIABILITY.md section 4): the reports went from 46 (and 41 on the
// GPU suite's small shapes) to 0; reconverging the warps or giving the epilogue barriers ids of their own left them.
MJ_DEVICE void even_barrier_counts(int wg, int ntiles) {
    if (wg == 1 && (ntiles & 1)) {
        mj90::named_bar_sync_unaligned(1 + wg, 128);
        mj90::named_bar_sync_unaligned(1 + wg, 128);
    }
}

// A token's accumulators before its first tile: O^T 0, running maxima -inf, row sums 0.
MJ_DEVICE void clear_softmax(float (&ot)[8][kAcc], float (&m)[kCols], float (&l)[kCols]) {
#pragma unroll
    for (int jb = 0; jb < 8; ++jb)
#pragma unroll
        for (int i = 0; i < kAcc; ++i) ot[jb][i] = 0.f;
#pragma unroll
    for (int j = 0; j < kCols; ++j) m[j] = MJ_NEG_INF, l[j] = 0.f;
}

// How stage_o writes a warpgroup's O^T into the fp32 staging buffer.
enum StageMode {
    kStageScaled,      // O^T sc stored
    kStageRaw,         // O^T stored unscaled (the persistent grid's hand-over, math_merged)
    kStageAddScaled,   // O^T sc added to what the buffer holds times sc_w (the other warpgroup's unscaled O^T and factors)
};
// A warpgroup's O^T into fp32 [kH][kWRow] at w (padded rows: the fragments' column-wise stores hit distinct banks) as MODE says.
// No fused multiply-add: every product is rounded first, as a store of it alone rounds it, so one buffer summed in place gives
// the bits of two buffers summed later, whichever warpgroup scales the staged part.
template <StageMode MODE>
MJ_DEVICE void stage_o(float* w, const float (&ot)[8][kAcc], const float (&sc)[kCols], const float (&sc_w)[kCols], int q4, int row0) {
#pragma unroll
    for (int jb = 0; jb < 8; ++jb)
#pragma unroll
        for (int j = 0; j < kCols; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float* x = w + col_of(j, q4) * kWRow + 64 * jb + row0 + 8 * e;
                const float o = ot[jb][e ? acc1(j) : acc0(j)];
                if constexpr (MODE == kStageRaw) {
                    *x = o;
                    continue;
                }
                const float v = __fmul_rn(o, sc[j]);
                if constexpr (MODE == kStageScaled) *x = v;
                if constexpr (MODE == kStageAddScaled) *x = __fadd_rn(v, __fmul_rn(*x, sc_w[j]));
            }
}

// Producer warp pw's rows of a bf16 tile, kN / 4 of them from row kN / 4 pw on: lane i's `mine` is row i's latent row (nullptr
// past the key set: zeros), each row copied by the whole warp, 512 contiguous bytes an instruction. TILE: the tile as a
// pointer or as a 32-bit shared address (mj90::cp_async_16_at). The persistent grid (the 16-head default) ran 8 % faster with
// the address form (3.01 / 2.97 ms against 3.27 / 3.26 through the library, H100, session 34), nvcc's speed. The one-block
// form keeps the pointer form: the one run of it with the address form was slower (4.03 against 3.44 ms, a different run;
// tools/dev/mqa/run_t35.sh settles it).
template <class TILE>
MJ_DEVICE void gather_rows(const SparseMqaFwdParams& p, TILE tile, const unsigned char* mine, int pw, int lane) {
    constexpr int kR = kN / 4;
#pragma unroll 4
    for (int i = 0; i < kR; ++i) {
        const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
        const int r = pw * kR + i;
        const bool ok = rowp != nullptr;
        const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
        if constexpr (MJ_MQA90T_DEV_SKIP == 3) continue;
        mj90::cp_async_16_at(tile, tile_off(r, lane), src + lane * 16, ok);
        mj90::cp_async_16_at(tile, tile_off(r, lane + 32), src + (lane + 32) * 16, ok);
        if (lane < 8) mj90::cp_async_16_at(tile, tile_off(r, lane + 64), src + (lane + 64) * 16, ok);
    }
}

// One 64-key tile of math warpgroup wg: tile t of a set of nvalid keys (rows past the set: -inf) in `slot` (full barrier phase
// `phase`), the warpgroup's it-th tile (the parity of its maxima exchange); Q at shared address sq. S^T, the tile's maxima, the
// online softmax with P^T stored into the slot's rope block, O^T += V^T P^T; then the slot is released.
MJ_DEVICE void tile_step(unsigned char* smem, int slot, unsigned phase, int t, int nvalid, int it, unsigned long long* full,
                         unsigned long long* empty, unsigned sq, float* xmax, float (&ot)[8][kAcc], float (&m)[kCols], float (&l)[kCols],
                         int wg, int wl, int row0, int q4, int lane, float sl2) {
    const unsigned slot_a = mj90::smem_u32(smem + kOffK) + slot * kTileBytes;
    unsigned char* pt = smem + kOffK + slot * kTileBytes + 8 * kBlk;  // P^T [kH][64 keys] in the slot's rope block
    mj90::mbar_wait(&full[slot], phase);
    if constexpr (MJ_MQA90T_DEV_SKIP == 4) {  // the producer's gather alone: tiles released as they land
        mj90::mbar_arrive(&empty[slot]);
        return;
    }
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
    const int lim = min(nvalid - t * kN, kN);
    const bool v0 = row0 < lim, v1 = row0 + 8 < lim;
    float* xb = xmax + (it & 1) * 4 * kH;
    float tm[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        s[acc0(j)] = v0 ? s[acc0(j)] : MJ_NEG_INF;
        s[acc1(j)] = v1 ? s[acc1(j)] : MJ_NEG_INF;
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
    if constexpr (MJ_MQA90T_PIN) {  // the rescaled O^T registers written before the fence below
#pragma unroll
        for (int jb = 0; jb < 8; ++jb)
#pragma unroll
            for (int i = 0; i < kAcc; ++i) mj90::reg_fence(ot[jb][i]);
    }
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
    mj90::mbar_arrive(&empty[slot]);
}

#include "sparse_mqa/sm90_t_persist.cuh"  // run_persistent (PERSIST 1)

}  // namespace mj_mqa90t

extern "C" __global__ void __launch_bounds__(mj_mqa90t::kThreads, 1) mlajit_sparse_mqa_fwd_sm90t(const SparseMqaFwdParams p) {
    if constexpr (MJ_KV_FP8 != 0 && MJ_MQA90T8_FOLD != 0) {  // the scale-folding FP8 body and layout (sparse_mqa/sm90_t_fp8.cuh)
        mj_mqa90t8::run<MJ_KV_FP8>(p);
        return;
    }
    using namespace mj_mqa90t;
    extern __shared__ __align__(1024) unsigned char smem[];
    if constexpr (kPersist) {
        run_persistent(p, smem);
        return;
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tok = mj_idx::token_of_block(p, (int)blockIdx.x, (int)gridDim.x);
    const int head0 = blockIdx.y * kH;
    unsigned long long* full = (unsigned long long*)(smem + kOffBar);
    unsigned long long* empty = full + kS;
    const mj_idx::SetView ks = mj_idx::set_view(smem + kOffSet);
    if (tid == 0 && (mj90::smem_u32(smem) & 1023u) != 0u) __trap();  // the 128-byte swizzle needs 1 KiB alignment

    // Q first (math threads): its latency hides behind the index set build. Heads past num_heads load zeros.
    if (tid < 256) mj_tile90::load_q<kH, 256>(p, tok, head0, smem + kOffQ, tid);
    if (tid == 0) {
        for (int s = 0; s < kS; ++s) {
            // bf16: one cp.async-completion arrival per producer thread; FP8: mj_f8stage's / mj_f8prod's count
            mj90::mbar_init(&full[s], kF8Stage ? mj_f8stage::full_arrivals(kProducerWarps)
                                      : kF8    ? mj_f8prod::full_arrivals(kProducerWarps)
                                               : MJ_MQA90T_BULK ? 4 : 128);
            mj90::mbar_init(&empty[s], 128);  // the warpgroup that took the slot's tile, after its O^T
        }
    }
    const mj_idx::Request rq = mj_idx::request_of_token(p, tok);
    const int* irow = p.indices + (mj_i64)tok * p.idx_stride_tok;
    const int width = p.topk;
    if constexpr (MJ_MQA90T_DEV_SKIP != 6)
        mj_idx::build_set<kThreads>(p, rq, irow, width, ks.keep, ks.pref, ks.nvalid, (unsigned long long*)(smem + kOffK));
    const int nvalid = MJ_MQA90T_DEV_SKIP >= 5 ? 0 : *ks.nvalid;
    const int nwords = (width + 31) >> 5;
    const int ntiles = (nvalid + kN - 1) / kN;

    if (warp >= 8) {
        // ---- producer: warp pw copies rows kR pw .. kR pw + kR - 1 of every tile (rows past the key set: zeros) ----
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        if constexpr (kF8Stage) {
            mj_f8stage::produce<kN, kS, kTileBytes, kProducerWarps, MJ_MQA90T_DEV_SKIP == 2>(p, rq, irow, ks, nwords, nvalid, ntiles,
                                                                                            smem + kOffK, smem + kOffRaw, full, empty, pw, lane);
        } else if constexpr (kF8) {
            mj_f8prod::produce<kN, kS, kTileBytes, kProducerWarps, MJ_MQA90T_DEV_SKIP == 2>(p, rq, irow, ks, nwords, nvalid, ntiles,
                                                                                           smem + kOffK, full, empty, pw, lane);
        } else {
            constexpr int kR = kN / 4;
            for (int t = 0; t < ntiles; ++t) {
                const int slot = t % kS;
                const int c = t * kN + pw * kR + lane % kR;  // the lanes past kR repeat the first ones' rows
                const unsigned char* mine = mj_idx::set_row(p, rq, irow, ks, nwords, nvalid, c);
                if (t >= kS) mj90::mbar_wait(&empty[slot], (unsigned)((t / kS - 1) & 1));
                unsigned char* tile = smem + kOffK + slot * kTileBytes;
                if constexpr (MJ_MQA90T_BULK) {  // timing form: linear rows, one cp.async.bulk each (see the switch)
                    static_assert(!MJ_MQA90T_BULK || MJ_MQA90T_DEV_SKIP == 4, "the bulk-copy producer is a gather-timing form");
                    mj_mqa90t_common::bulk_rows<kR, 1152u>(tile + pw * kR * 1152, mine, lane, &full[slot]);
                    continue;
                }
                gather_rows(p, tile, mine, pw, lane);
                mj90::cp_async_mbar_arrive_noinc(&full[slot]);
            }
            mj90::cp_async_wait<0>();
        }
        return;
    }

    // ---- math warpgroups ----
    // Read through a shuffle so that ptxas knows it is the same in every lane: a loop bound it cannot prove warp-uniform
    // (t starts at wg) makes it serialize every wgmma of the kernel (C7520: "WG.AR in divergent path").
    const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);
    mj90::setmaxnreg_inc<kMathRegs>();
    const int wl = warp & 3;                     // warp within the warpgroup
    const int row0 = wl * 16 + (lane >> 2);      // accumulator rows row0, row0 + 8 (keys of S^T, columns of O^T)
    const int q4 = lane & 3;
    const float sl2 = p.sm_scale_log2;
    const unsigned sq = mj90::smem_u32(smem + kOffQ);
    float* xmax = (float*)(smem + kOffX) + wg * 8 * kH;              // [2 parities][4 warps][kH]

    mj90::cp_async_wait<0>();
    mj90::fence_proxy_async();  // Q, written by cp.async, is read by wgmma
    mj90::named_bar_sync_unaligned(kBarEnd, 256);

    float ot[8][kAcc];  // O^T: 64-column block jb, rows 64 jb + row0 (+ 8), heads col_of(j)
    float m[kCols], l[kCols];  // running max (raw score) and this thread's partial row sum, per head column
    clear_softmax(ot, m, l);

    for (int t = wg, it = 0; t < ntiles; t += 2, ++it)
        tile_step(smem, t % kS, (unsigned)((t / kS) & 1), t, nvalid, it, full, empty, sq, xmax, ot, m, l, wg, wl, row0, q4,
                  lane, sl2);

    even_barrier_counts(wg, ntiles);

    // ---- epilogue: merge the two warpgroups' softmaxes; lse / max_logits; O normalized and stored ----
    float sc[kCols], Lt[kCols], mt[kCols];
    mj_mqa90t_common::merge_softmax<kH>(l, m, (float*)(smem + kOffE), wg, wl, lane, sl2, kBarEnd, sc, Lt, mt);
    // Each warpgroup's scaled O^T into the ring, then both added by all 256 threads with 16-byte output stores.
    stage_o<kStageScaled>((float*)(smem + kOffK) + wg * kH * kWRow, ot, sc, sc, q4, row0);
    mj_mqa90t_common::store_out<kH, kWRow>(p, (const float*)(smem + kOffK), Lt, mt, tok, head0, tid, wg, wl, lane, sl2,
                                           kBarEnd);
}
