// Sparse MQA prefill, Hopper tier (sm_90a): wgmma with both operands in shared memory, cp.async gathers
// of whole 576-wide latent rows completing on mbarriers, a producer warp and two math warpgroups.
// Semantics: DESIGN.md section 2 and the SparseMqaFwdParams comment in mlajit_abi.h (the same as the
// portable tier, sparse_mqa/sm80.cuh; both build the row's compacted key set with sparse_mqa/index_set.cuh).
//
// Supported specialization: BLOCK_H 64, BLOCK_N 64, STAGES 2 (mj_mqa90_smem_bytes: 232,000 B of the
// 232,448 an sm_90 block may opt into). grid = (tokens, ceil(h / 64)) (PERSIST 1: min(tokens x ceil(h / 64), SMs), one row;
// sparse_mqa/sm90_persist.cuh), mj_mqa90_threads() threads. 32-key tiles in
// four slots (schedules 1 and 2, commit 6949765) measured 33-36 % slower on an H100 and were removed (docs/PERF.md,
// "32-key tiles in four slots").
//
// Design (one block = one query token x 64 heads; the loop runs over 64-key tiles of the compacted set):
//  * Q [64 x 576] stays in shared memory; every gathered K tile [64 x 576] lands in a 2-slot ring. Both
//    are stored as nine 64-column blocks of [rows][128 B] with the 128-byte swizzle (16-byte chunk XOR
//    row % 8), the layout wgmma reads: K-major for S = Q K^T, and the first eight blocks of the same tile
//    read MN-major (transposed) as V for O = P V. No copy of V.
//  * Warpgroup 2 (the producer, 40 registers a thread after setmaxnreg; the math warpgroups get 232)
//    gathers the tiles: a warp copies one key row at a time with coalesced 16-byte cp.async (512 bytes
//    an instruction), completion arriving on the slot's "full" mbarrier; it refills a slot once both math
//    warpgroups arrived on its "empty" mbarrier. (v1 gave each thread half a row: 16 rows per
//    instruction, 36 instructions a thread; gather-bound at 8.7 ms for h = 128 at 8k.)
//  * Math, schedule 1 (MJ_MQA90_SCHED, the default for the bf16 cache): warpgroup 0 computes S for the
//    whole tile (m64n64k16, 36 k-steps: Q and K each read once from shared memory per tile), the online
//    softmax, and O[:, 0..255] += P V with P kept in its registers (m64n256k16, A from registers);
//    it stores P (bf16) into the tile's rope block, which S no longer needs, and the rescale factors of O,
//    and warpgroup 1 rescales its O and adds O[:, 256..511] += P V from shared memory. P V of tile t and S
//    of tile t + 1 are issued back to back. Measured (H200, 8k, h = 128): 9.78 ms against 10.64 for schedule
//    0, and the math alone (no gather) 8.16 against 9.63 ms (docs/perf_mqa_notes.md, "Hopper tier v3").
//  * Math, schedule 0 (what the FP8 kernel keeps: schedule 1 spills at its 176 registers): warpgroup g
//    computes S for keys 32g..32g+31 (m64n32k16: both read all of Q), the two exchange row maxima, each
//    writes half of P, and each adds its 256 output columns from P in shared memory.
//  * Row sums: warpgroup 0's (schedule 1) or both warpgroups' (schedule 0); O is normalized, staged
//    through the Q region and written with 16-byte stores.
//  * MJ_MQA90_PAIR = 1 (development switch, not launched by the runtime): the two 64-head blocks of a
//    token form a 2-CTA cluster; each gathers half of every tile's rows (and the whole rope block) and
//    copies its half into the peer's ring with bulk shared::cluster copies, halving the L2 -> SM traffic
//    at h = 128. Correct but slower as built (13.4 against 9.7 ms at h = 128, 8k): each half is forwarded
//    only after all of it landed, a full latency added to every tile (docs/perf_mqa_notes.md).
//  * The FP8 latent cache (KV_FP8 = 1, fp8.cuh): the same ring; the producer loads each row's 512 e4m3 codes
//    into registers and writes the dequantized bf16 into the slot itself (no shared memory is left for a raw
//    ring), math on schedule 0. Measured on the H200 (8k, paged): 1.6x the bf16 time at 32-128 heads; with
//    the conversion left out (math kept) still 1.38x at 128 heads (docs/perf_mqa_notes.md).
//    MJ_MQA90_F8STAGE = 1 (development switch): the raw 656-byte rows are cp.async'ed into the slot itself
//    (codes into the producer warp's own rows of blocks 4-7, k_pe into block 8, scales into the P region),
//    each producer warp dequantizes its 16 rows shared -> shared, and the math runs schedule 1; the slot is
//    released in two parts (empty_hi: blocks 4-8, after warpgroup 1's P V; empty: blocks 0-3) so the next
//    tile's raw rows land while warpgroup 0 still reads V. First form measured 1.3 % faster than the
//    register producer (16.71 against 16.93 ms, 128 heads); the current form 7 % slower (18.24 against 17.01).
//    MJ_MQA90_F8HELP = 1 (with F8STAGE, development switch): warpgroup 1 runs half of the dequantization
//    passes while its P V is in flight: 15.17 ms at 128 heads, 7.57 at 64 (bf16 10.24 / 5.13), H200, 8k,
//    paged (docs/PERF.md, "Stop 14").
#pragma once
#include "mlajit_device.cuh"
#include "sparse_mqa/fp8.cuh"
#include "sparse_mqa/index_set.cuh"
#include "sparse_mqa/online_softmax.cuh"

// The shared Hopper wrappers (kernels_src/sm90.cuh), by header name as NVRTC gets it; nvcc finds this file first,
// which #pragma once makes a no-op: nvcc builds include kernels_src/sm90.cuh before this file
// (tools/dev/mqa/kernel_cfg90.cu does; without it the harness build recursed 200 levels deep).
#include "sm90.cuh"
// ================= end of the Hopper PTX wrappers =================
#include "sparse_mqa/sm90_tile.cuh"
#include "sparse_mqa/sm90_f8_producer.cuh"  // the FP8 register producer (kF8Regs)

#ifndef MJ_MQA90_OVERLAP  // 1: P V of tile t and S of tile t + 1 issued back to back (development switch)
#define MJ_MQA90_OVERLAP 1
#endif
#ifndef MJ_MQA90_SCHED  // 0: each math warpgroup computes S for half the keys of a tile (m64n32), maxima
                        // exchanged; 1: warpgroup 0 computes all of S (m64n64) and the softmax (below); 2: tile
                        // pairs (kSched2): 14 % slower than 1 on an H100 (docs/perf_mqa_notes.md, "Hopper tier v5")
#define MJ_MQA90_SCHED 1
#endif
#ifndef MJ_MQA90_PSYNC  // schedule 1's P hand-over: 1 = bar.sync by both warpgroups, 0 = bar.arrive by warpgroup 0.
                        // Measured the same (9.79 / 9.83 ms, h = 128, 8k); compute-sanitizer racecheck reports
                        // hazards for 0 (between the epilogue's O staging stores and loads, across a bar.sync that
                        // is in the SASS) and none for 1, so 1 it is.
#define MJ_MQA90_PSYNC 1
#endif
#ifndef MJ_MQA90_F8STAGE  // the FP8 cache's producer: 1 = raw 656-byte rows cp.async'ed into the slot, dequantized
                          // shared -> shared, math on schedule 1; 0 = codes staged through registers, schedule 0.
                          // Development switch, 0 by default: its first version measured 1.3 % faster than 0 (H200,
                          // 8k, 128 heads: 16.71 against 16.93 ms), the current one (loads a tile ahead, two copy
                          // groups a tile) 7 % slower (18.24 against 17.01; docs/PERF.md, "Stop 14").
#define MJ_MQA90_F8STAGE 0
#endif
#ifndef MJ_MQA90_F8HELP  // staged FP8 (MJ_MQA90_F8STAGE = 1) only: warpgroup 1 dequantizes half of every tile (passes 2, 3,
                         // 5, 7 of f8_convert_pass; the producer warps 0, 1, 4, 6) while its P V of the previous tile
                         // runs, so the conversion on the critical path halves and two warps a sub-partition share it.
                         // Development switch, off: 15.17 ms against 17.01 for the register producer and 10.24 for
                         // bf16 (H200, 8k, 128 heads, paged): faster FP8, still slower than bf16 (docs/PERF.md,
                         // "Stop 14").
#define MJ_MQA90_F8HELP 0
#endif
#ifndef MJ_MQA90_LATEHO  // schedule 1: warpgroup 0 hands tile t to warpgroup 1 after issuing S(t + 1), so that
                         // warpgroup 1's P V(t) queues behind S(t + 1) and runs during the softmax of t + 1.
                         // Measured slower (H200, 8k, 128 heads: 10.06 against 9.56 ms; FP8 staged 18.71 against
                         // 16.71): development switch, off.
#define MJ_MQA90_LATEHO 0
#endif
#ifndef MJ_MQA90_SPLITREL  // bf16, schedule 1: the producer refills column blocks 4-8 of a slot once warpgroup 1 is
                           // done with it (and warpgroup 0 handed the tile over), blocks 0-3 once warpgroup 0 is, so
                           // 40 of the 72 KB are in flight before warpgroup 0 releases the slot. Development switch,
                           // not measured yet (docs/perf_mqa_notes.md, "Hopper tier v4").
#define MJ_MQA90_SPLITREL 0
#endif
#ifndef MJ_MQA90_S2EARLY  // schedule 2: warpgroup 0 hands P of E over while its own P V of E runs (waits for
                          // that P V after the store, not before). Development switch: no gain (11.56 vs 11.62 ms, H100).
#define MJ_MQA90_S2EARLY 0
#endif
#ifndef MJ_MQA90_PAIR  // 1: the two 64-head blocks of a token form a cluster and share every gathered tile: each
                       // CTA gathers half the rows and copies them into the peer's ring (bf16, schedule 1;
                       // grid.y even). Development switch: the runtime does not launch it yet.
#define MJ_MQA90_PAIR 0
#endif
#if MJ_MQA90_PAIR
#define MJ_MQA90_CLUSTER __cluster_dims__(1, 2, 1)
#else
#define MJ_MQA90_CLUSTER
#endif
#ifndef MJ_MQA90_DEV_SKIP  // 1: no wgmma at all (timing of the gather and the barriers only: results are wrong);
                          // 2 (FP8 only): codes stored unconverted (timing of the dequantization's share);
                          // 3 (bf16 only): no gather, the math runs on whatever the ring holds (timing of the math);
                          // 5: no tiles (Q load, key-set build and epilogue: a block's fixed cost); 6: as 5 without
                          // the key-set build
#define MJ_MQA90_DEV_SKIP 0
#endif

namespace mj_mqa90 {

constexpr int kH = MJ_BLOCK_H;
constexpr int kN = MJ_BLOCK_N;
constexpr int kS = MJ_STAGES;
static_assert(MJ_D_LATENT == 512 && MJ_D_ROPE == 64, "sparse MQA is specialized for 512 latent + 64 rope");
static_assert(kH == 64 && kN == 64 && kS == 2, "sparse MQA sm90: the supported specialization is 64 x 64, 2 stages");
static_assert(MJ_ARCH == 90, "sparse MQA sm90 needs sm_90a (wgmma)");
constexpr int kThreads = mj_mqa90_threads();
constexpr int kConsumers = 256;   // two math warpgroups
constexpr int kBlk = 64 * 128;    // one 64-column block of a 64-row tile, bytes
constexpr int kTileBytes = 9 * kBlk;
// Shared memory layout (bytes).
constexpr int kOffQ = 0;
constexpr int kOffK = kTileBytes;
constexpr int kOffP = kOffK + kS * kTileBytes;  // P bf16 [64 heads][64 keys], swizzled like a tile block
constexpr int kOffMax = kOffP + kBlk;           // fp32 [2 warpgroups][64 rows]: tile row maxima, then row sums
constexpr int kOffBar = kOffMax + 2 * 64 * 4;   // mbarriers full[kS], empty[kS]
constexpr int kOffSet = kOffBar + 2 * kS * 8;   // the row's key set (index_set.cuh)
constexpr int kSmem = kOffSet + mj_idx::kSetBytes;
static_assert(kSmem == mj_mqa90_smem_bytes(), "sparse MQA sm90: layout and mj_mqa90_smem_bytes disagree");
static_assert(kSmem <= 232448, "sparse MQA sm90: over the per-block shared memory of sm_90");
static_assert(kS * kTileBytes >= mj_idx::kHashBytes, "the ring doubles as the index set's hash scratch");
constexpr int kBarMax = 1, kBarP = 2, kBarEnd = 3;  // named barriers of the 256 math threads (schedule 0)
constexpr int kBarP0 = 1;                           // schedule 1: kBarP0, kBarP0 + 1 hand tiles over; kBarEnd
constexpr bool kFp8 = MJ_KV_FP8 != 0;
// The spec's PERSIST: the persistent grid (sparse_mqa/sm90_persist.cuh; schedule 1, bf16 cache, with the key-set pre-pass's
// list; min(tokens x head blocks, SMs) blocks).
constexpr bool kPersist = MJ_PERSIST != 0;
// FP8, MJ_MQA90_F8STAGE = 1: the raw rows are staged in shared memory (the producer needs few registers).
constexpr bool kF8Stage = kFp8 && MJ_MQA90_F8STAGE != 0;
constexpr bool kF8Regs = kFp8 && !kF8Stage;  // the register-staged FP8 producer
// Staged FP8 with warpgroup 1 converting half of each tile (MJ_MQA90_F8HELP). Producer warp pw and warpgroup 1's warp
// pw share row group pw through two named barriers of 64 threads: kBarHelpP + pw (the producer's raw codes landed
// and its pass 6 read block 7's codes) and kBarHelpH + pw (warpgroup 1's passes 2, 3, 5 are stored).
constexpr bool kF8Help = kF8Stage && MJ_MQA90_F8HELP != 0;
constexpr int kBarHelpP = 4, kBarHelpH = 8;
// Registers after setmaxnreg. bf16: a lean cp.async producer. FP8: the producer holds a tile's 16 rows a warp
// in registers (64 a thread) between their loads and their dequantization, and the next tile's loads are
// issued as registers free up; the math code fits 176 without spills (it takes 184 of a 232 budget). The
// math warps' increase must be covered by what the producer releases (168 -> 144: 3,072 registers;
// 168 -> 176: 2,048), or setmaxnreg.inc would wait forever.
// Staged FP8: the dequantizing producer spills at 40-64 registers (ptxas 13.0) and fits 72.
constexpr int kProducerRegs = kF8Regs ? 144 : kF8Stage ? 72 : 40;
constexpr int kMathRegs = kF8Regs ? 176 : kF8Stage ? 216 : 232;
static_assert(128 * kProducerRegs + 256 * kMathRegs <= 65536, "register budget");
static_assert(128 * (168 - kProducerRegs) >= 256 * (kMathRegs - 168), "the producer must release what the math warps take");
// Math schedule (MJ_MQA90_SCHED above). The register-staged FP8 producer keeps schedule 0: schedule 1 spills at
// its 176 registers; the shared-memory-staged one needs schedule 1 (the empty_hi barriers below).
constexpr bool kSched1 = (MJ_MQA90_SCHED == 1 && !kFp8) || kF8Stage;
// Schedule 2 (bf16, development switch MJ_MQA90_SCHED = 2): tiles go in pairs, E = 2i in slot 0 and O = 2i + 1 in
// slot 1; warpgroup 0 computes S of E, warpgroup 1 S of O, so one warpgroup's softmax runs while the other's wgmma
// keeps the tensor pipe busy. Warpgroup g owns O[:, 256 g ..]: it adds its own tile's P V from registers and the
// other tile's from P in shared memory. Each slot is released in halves (blocks 0-3 / blocks 4-8) by the one
// warpgroup that reads that half last, so the producer refills a half as soon as it is free (the idea of FlashMLA's
// sm90 sparse prefill; written here from its description). The design, the barrier chain and the reasoning:
// docs/perf_mqa_notes.md, "Hopper tier v5".
constexpr bool kSched2 = MJ_MQA90_SCHED == 2 && !kFp8 && MJ_MQA90_PAIR == 0;
// Schedule 2's barriers besides full[s] (blocks 0-3 of slot s landed) and empty[s] (blocks 0-3 free): full_hi[s]
// and empty_hi[s] for blocks 4-8, in the second half of the maxima scratch (schedule 2 exchanges maxima through
// the first half only, and its row sums through the P region).
constexpr int kOffBarHi = kOffMax + 64 * 4;
// Schedule 2's named barriers (256 threads each): maxima of E (warpgroup 0 -> 1) and of the pair (1 -> 0),
// P of E stored (0 -> 1), P of O stored (1 -> 0).
constexpr int kBarM0 = 4, kBarM1 = 5, kBarPE = 6, kBarPO = 7;
constexpr bool kS2Early = MJ_MQA90_S2EARLY != 0;
constexpr bool kPair = MJ_MQA90_PAIR != 0;
static_assert(!kPair || (kSched1 && !kFp8), "the CTA pair needs schedule 1 (bf16)");
// Slots released in two parts (empty: warpgroup 0 is done with blocks 0-3; empty_hi: warpgroup 0 handed the
// tile over and warpgroup 1 is done, blocks 4-8): the staged FP8 producer, and bf16 with MJ_MQA90_SPLITREL.
constexpr bool kSplitRel = !kFp8 && !kPair && kSched1 && MJ_MQA90_SPLITREL != 0;
constexpr bool kSplitEmpty = kF8Stage || kSplitRel;
constexpr int kPairHalf = 8 * 32 * 128;  // bytes a CTA receives per tile: 32 rows x 128 B of the 8 latent column blocks
// Pair mode: own[s], the completion of this CTA's half of slot s, lives beside schedule 1's scratch in the P region.
constexpr int kOffOwn = kOffP + 1024;
// Staged FP8: empty_hi[s] (warpgroup 1 is done with slot s: its blocks 4-8 may take the next raw rows) at kOffOwn,
// and the 4 fp32 scales of every row of slot s at kOffScale + s * 1024.
constexpr int kOffScale = kOffP + 2048;
static_assert(kOffScale + kS * 1024 <= kOffP + kBlk, "the staged FP8 scales fit in the P region");
// Staged FP8, raw codes of producer warp pw (rows 16 pw .. 16 pw + 15) in its own rows of blocks 4-7: the 64 codes
// of output column block b (b = 0..7) of row i (0..15) at block 4 + b / 2, byte pw * 2048 + (b & 1) * 1024 + i * 64,
// 16-byte chunk q (0..3) at (q ^ ((i >> 1) & 1)): the dequantization of block b reads them conflict-free, and
// its stores into block 4 + j (j = 0..3) overwrite only raw codes of blocks 2j, 2j + 1, already converted
// (block 7's own codes: read before the stores).
MJ_DEVICE unsigned raw_off(int pw, int b, int i, int q) {
    return (unsigned)((4 + (b >> 1)) * kBlk + pw * 2048 + (b & 1) * 1024 + i * 64 + ((q ^ ((i >> 1) & 1)) << 4));
}

// Staged FP8: one dequantization pass of row group pw (rows 16 pw .. 16 pw + 15) of the tile in slot `slot`: output
// column block b (lane: row lane / 2, codes 32 h .. 32 h + 31 of the block, h = lane % 2), raw codes and scales
// read from shared memory, bf16 stored swizzled into block b. Run by the row group's producer warp and, with
// MJ_MQA90_F8HELP, by warpgroup 1's warp of the same index (raw_off: which passes may run in which order).
MJ_DEVICE void f8_convert_pass(unsigned ring, unsigned scl, int pw, int slot, int b, int lane) {
    const unsigned tile = ring + slot * kTileBytes;
    const int i = lane >> 1, h = lane & 1, r = pw * 16 + i;
    const float scale = mj_fp8::ld_shared_f32(scl + slot * 1024 + r * 16 + (b >> 1) * 4);
    mj_u32 in[2][4];
#pragma unroll
    for (int k = 0; k < 2; ++k) mj_ld_shared_v4(in[k], tile + raw_off(pw, b, i, 2 * h + k));
    if (b == 7) __syncwarp();  // block 7's stores overwrite its own codes: every lane has read them
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const int q = 2 * h + k;  // raw chunk: output chunks 2q, 2q + 1 of the block
        mj_u32 o[8];
        if constexpr (MJ_MQA90_DEV_SKIP == 2) {  // timing only: the codes stored unconverted
#pragma unroll
            for (int j = 0; j < 8; ++j) o[j] = in[k][j >> 1] ^ __float_as_uint(scale);
        } else {
            mj_fp8::dequant16<MJ_ARCH>(in[k], scale, o);
        }
        const unsigned rowa = tile + b * kBlk + r * 128;
        mj_fp8::st_shared_v4(rowa + (((2 * q) ^ (r & 7)) << 4), o[0], o[1], o[2], o[3]);
        mj_fp8::st_shared_v4(rowa + (((2 * q + 1) ^ (r & 7)) << 4), o[4], o[5], o[6], o[7]);
    }
    __syncwarp();  // the next pass may overwrite raw codes this pass read (block 4 + j after blocks 2j, 2j + 1)
}

// O (the m64n512 accumulator of one math warpgroup, rows row0 and row0 + 8 of each thread) times the
// rows' alphas; skipped when neither row's max moved.
MJ_DEVICE void rescale_o(float (&o)[128], float al0, float al1) {
    if (al0 != 1.f || al1 != 1.f) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            o[4 * i] *= al0;
            o[4 * i + 1] *= al0;
            o[4 * i + 2] *= al1;
            o[4 * i + 3] *= al1;
        }
    }
}

// The math warpgroups' wgmma groups (each: fence, the instructions, one commit; MJ_MQA90_DEV_SKIP 1 leaves the
// instructions out). S[64 heads x 64 keys] += Q K^T over the k-steps [K0, K1) of the tile at `tile` (16 a
// 64-column block; block 8 is the rope), Q at `sq`.
template <int K0, int K1>
MJ_DEVICE void issue_qk(float (&s)[32], unsigned sq, unsigned tile) {
    mj90::wgmma_fence();
    if constexpr (MJ_MQA90_DEV_SKIP != 1) {
#pragma unroll
        for (int kk = K0; kk < K1; ++kk) {
            const unsigned koff = (kk >> 2) * kBlk + (kk & 3) * 32;
            mj90::wgmma_m64n64k16_ss(s, mj90::smem_desc_addr(sq + koff, 128, 1024, 16), mj90::smem_desc_addr(tile + koff, 128, 1024, 16));
        }
    }
    mj90::wgmma_commit();
}
// O[64 x 256] += P V, V = four 64-column blocks at `vbase` read MN-major, P [64 x 64] bf16 from registers (A
// fragments: k-step j is pa[4j..4j+3]) ...
MJ_DEVICE void issue_pv_regs(float (&o)[128], const mj_u32 (&pa)[16], unsigned vbase) {
    mj90::wgmma_fence();
    if constexpr (MJ_MQA90_DEV_SKIP != 1) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const mj_u32 a4[4] = {pa[4 * j], pa[4 * j + 1], pa[4 * j + 2], pa[4 * j + 3]};
            mj90::wgmma_m64n256k16_rs<1>(o, a4, mj90::smem_desc_addr(vbase + j * 2048, 128, 1024, kBlk));
        }
    }
    mj90::wgmma_commit();
}
// ... or from shared memory at `pbase` (swizzled like a tile block).
MJ_DEVICE void issue_pv_smem(float (&o)[128], unsigned pbase, unsigned vbase) {
    mj90::wgmma_fence();
    if constexpr (MJ_MQA90_DEV_SKIP != 1) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
            mj90::wgmma_m64n256k16_ss<1>(o, mj90::smem_desc_addr(pbase + j * 32, 128, 1024, 16),
                                         mj90::smem_desc_addr(vbase + j * 2048, 128, 1024, kBlk));
    }
    mj90::wgmma_commit();
}

// S of a 64-key tile (m64n64 accumulator, rows row0 and row0 + 8 of the thread): the columns past the key set
// set to -inf (column c of this thread is valid iff c - 2 q4 < lim), and the two rows' maxima over the tile.
MJ_DEVICE void mask_tile_max(float (&s)[32], int lim, float& mx0, float& mx1) {
    mx0 = mx1 = MJ_NEG_INF;
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            if (i * 8 + j >= lim) s[4 * i + j] = s[4 * i + 2 + j] = MJ_NEG_INF;
            mx0 = fmaxf(mx0, s[4 * i + j]);
            mx1 = fmaxf(mx1, s[4 * i + 2 + j]);
        }
    mx0 = mj_warp_max4(mx0);
    mx1 = mj_warp_max4(mx1);
}

// Byte offset of 16-byte chunk c (0..71) of row r in a tile (sparse_mqa/sm90_tile.cuh).
MJ_DEVICE unsigned tile_off(int r, int c) { return mj_tile90::chunk_off<kBlk>(r, c); }

// Schedule 1's pieces both grids call (the one-block form below, the persistent one in sm90_persist.cuh). Moving them out of
// the one-block form left its code as measured: the 27 warmup variants' cubins have the same .text, byte for byte.
// Schedule 1, warpgroup 0: the online softmax of a tile whose S is in s (lim: the tile's valid columns past this thread's
// first, as mask_tile_max takes them): P into pa (bf16 A fragments) and into the tile's rope block (tile_g, dead once S is
// done) for warpgroup 1, the row sums and O rescaled, the factors into alpha[64] (this tile's buffer) for warpgroup 1.
MJ_DEVICE void s1_softmax(float (&s)[32], mj_u32 (&pa)[16], float (&o)[128], float& m0, float& m1, float& l0, float& l1, int lim,
                          float sl2, unsigned char* tile_g, float* alpha, int row0, int q4) {
    float mx0, mx1;
    mask_tile_max(s, lim, mx0, mx1);
    float ms0, ms1, al0, al1;
    mj_online_max2(m0, m1, mx0, mx1, sl2, ms0, ms1, al0, al1);
    float rs0 = 0.f, rs1 = 0.f;
    unsigned char* prow0 = tile_g + 8 * kBlk + row0 * 128;
    unsigned char* prow1 = prow0 + 8 * 128;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float p00 = mj_exp2(fmaf(s[4 * i], sl2, -ms0)), p01 = mj_exp2(fmaf(s[4 * i + 1], sl2, -ms0));
        const float p10 = mj_exp2(fmaf(s[4 * i + 2], sl2, -ms1)), p11 = mj_exp2(fmaf(s[4 * i + 3], sl2, -ms1));
        rs0 += p00 + p01;
        rs1 += p10 + p11;
        pa[2 * i] = mj_pack_bf16x2(p00, p01);
        pa[2 * i + 1] = mj_pack_bf16x2(p10, p11);
        *(mj_u32*)(prow0 + ((i ^ (row0 & 7)) << 4) + q4 * 4) = pa[2 * i];
        *(mj_u32*)(prow1 + ((i ^ ((row0 + 8) & 7)) << 4) + q4 * 4) = pa[2 * i + 1];
    }
    l0 = l0 * al0 + rs0;
    l1 = l1 * al1 + rs1;
    if (q4 == 0) {
        alpha[row0] = al0;
        alpha[row0 + 8] = al1;
    }
    rescale_o(o, al0, al1);
    mj90::fence_proxy_async();  // P (ordinary stores) is read by warpgroup 1's wgmma
}

// lse and max_logits of rows row0, row0 + 8 of a 64-head block (L: the row sums, m: the running maxima), by the threads
// with q4 == 0 of warpgroup 0; rows past the call's heads are not written.
MJ_DEVICE void store_lse(const SparseMqaFwdParams& p, int tok, int head0, int row0, float L0, float L1, float m0, float m1) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const int r = row0 + 8 * hr;
        const float L = hr ? L1 : L0, m = hr ? m1 : m0;
        if (head0 + r < p.num_heads) {
            p.lse[(mj_i64)tok * p.lse_stride_tok + head0 + r] = L > 0.f ? (mj_log2(L) + m * p.sm_scale_log2) * MJ_LN2 : MJ_NEG_INF;
            if (p.max_logits) p.max_logits[(mj_i64)tok * p.ml_stride_tok + head0 + r] = L > 0.f ? m * p.sm_scale : MJ_NEG_INF;
        }
    }
}

#include "sparse_mqa/sm90_persist.cuh"  // run_persistent (PERSIST 1)

}  // namespace mj_mqa90

extern "C" __global__ void __launch_bounds__(mj_mqa90::kThreads, 1) MJ_MQA90_CLUSTER mlajit_sparse_mqa_fwd_sm90(const SparseMqaFwdParams p) {
    using namespace mj_mqa90;
    extern __shared__ __align__(1024) unsigned char smem[];
    if constexpr (kPersist) {
        run_persistent(p, smem);
        return;
    }
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int tok = mj_idx::token_of_block(p, (int)blockIdx.x, (int)gridDim.x);
    const int head0 = blockIdx.y * kH;
    const int nh = p.num_heads;
    unsigned long long* full = (unsigned long long*)(smem + kOffBar);
    unsigned long long* empty = full + kS;
    const mj_idx::SetView ks = mj_idx::set_view(smem + kOffSet);
    float* s_max = (float*)(smem + kOffMax);
    if (tid == 0 && (mj90::smem_u32(smem) & 1023u) != 0u) __trap();  // the 128-byte swizzle needs 1 KiB alignment

    // Q first (math threads): its latency hides behind the index set build.
    if (tid < kConsumers) mj_tile90::load_q<kH, kConsumers>(p, tok, head0, smem + kOffQ, tid);
    unsigned long long* own = (unsigned long long*)(smem + kOffOwn);
    const unsigned crank = kPair ? mj90::cluster_ctarank() : 0u;
    if (tid == 0) {
        for (int s = 0; s < kS; ++s) {
            if constexpr (kSched2) {
                unsigned long long* hi = (unsigned long long*)(smem + kOffBarHi);
                mj90::mbar_init(&full[s], 128);    // every producer thread's cp.async of blocks 0-3
                mj90::mbar_init(&hi[s], 128);      // full_hi: blocks 4-8
                mj90::mbar_init(&empty[s], 128);   // the warpgroup that reads blocks 0-3 last
                // empty_hi: the warpgroup that reads blocks 4-8 last; slot 0's also warpgroup 0 after it stored P of E
                // there (block 8), which gives the producer's refill a direct edge from that store (the order already
                // holds through kBarPE and warpgroup 1's arrival, a chain racecheck does not follow).
                mj90::mbar_init(&hi[kS + s], s == 0 ? 256 : 128);
            } else if constexpr (kPair) {
                mj90::mbar_init(&own[s], 128);   // this CTA's cp.async half
                mj90::mbar_init(&full[s], 1);    // one arrive.expect_tx for the peer's half, after our own half
                mj90::mbar_init(&empty[s], kConsumers + 8);  // every local math thread, one per peer math warp
            } else if constexpr (kSplitEmpty) {
                mj90::mbar_init(&full[s], kF8Help ? 256 : 128);  // every producer (and helper) thread, after its stores
                mj90::mbar_init(&empty[s], 128);  // warpgroup 0, after its S and P V
                mj90::mbar_init(&own[s], 256);    // empty_hi: warpgroup 0 at its hand-over, warpgroup 1 after its P V
            } else {
                // One cp.async-completion arrive per producer thread (FP8: and one after its dequantized stores).
                mj90::mbar_init(&full[s], kF8Regs ? mj_f8prod::full_arrivals(4) : 128);
                mj90::mbar_init(&empty[s], kConsumers);  // every math thread after its P V
            }
        }
        if constexpr (kPair) mj90::fence_barrier_init();
    }
    const mj_idx::Request rq = mj_idx::request_of_token(p, tok);
    const int* irow = p.indices + (mj_i64)tok * p.idx_stride_tok;
    const int width = p.topk;
    if constexpr (MJ_MQA90_DEV_SKIP != 6)
        mj_idx::build_set<kThreads>(p, rq, irow, width, ks.keep, ks.pref, ks.nvalid, (unsigned long long*)(smem + kOffK));
    const int nvalid = MJ_MQA90_DEV_SKIP >= 5 ? 0 : *ks.nvalid;
    const int nwords = (width + 31) >> 5;
    const int ntiles = (nvalid + kN - 1) / kN;
    // Pair: the peer's barriers are initialized and its ring is no longer the index set's scratch before this
    // CTA's copies and arrivals reach them.
    if constexpr (kPair) mj90::cluster_sync();

    if (kF8Stage && warp >= 8) {
        // ---- FP8 producer, staged in shared memory: warp pw owns rows 16 pw .. 16 pw + 15 of every tile and works
        // alone (no barrier with the other producer warps). Tile t lands in slot t % 2 as raw rows: the 512 codes in
        // the warp's own rows of blocks 4-7 (raw_off), k_pe (bf16) straight into block 8, the 4 scales into the P
        // region; two cp.async groups a tile (blocks 0-3 with k_pe and the scales, then blocks 4-7). Then the warp
        // dequantizes shared -> shared, one output column block a pass (a lane: 32 codes of one row, two 16-byte
        // loads, four 16-byte stores; passes 0-3 start when the first group has landed), and arrives on full.
        // Tile t + 1 is issued into the other slot as soon as tile t - 1's empty_hi completes (warpgroup 0 handed
        // it over: S read blocks 4-8, P is stored in block 8; warpgroup 1's P V read blocks 4-8 last); warpgroup
        // 0's P V reads blocks 0-3, which only the dequantization writes, after "empty". Between passes the warp
        // tests empty_hi without blocking, so the copies of t + 1 are in flight while t is converted. Rows past
        // the key set load zeros (codes and scales).
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        const unsigned ring = mj90::smem_u32(smem + kOffK);
        const unsigned scl = mj90::smem_u32(smem + kOffScale);
        unsigned long long* empty_hi = own;
        const unsigned char* dummy = (const unsigned char*)p.kv;
        // Key of row 16 pw + lane % 16 of tile t (-1 past the set), then its row pointer (a block-table load): the
        // index row and block-table loads of tile t are issued two and one tiles ahead of its copies.
        auto key_of = [&](int t) { return mj_idx::set_key(rq, irow, ks, nwords, nvalid, t * kN + pw * 16 + (lane & 15)); };
        auto ptr_of = [&](int key) { return mj_idx::key_row(p, rq, key); };
        // Two cp.async groups a tile: the codes of column blocks 0-3, the scales and k_pe; then the codes of blocks 4-7
        // (the first four passes convert while the rest lands). `mine`: lane L (and L + 16) holds row 16 pw + L % 16.
        auto issue = [&](int t, const unsigned char* mine) {
            const int slot = t % kS;
            const unsigned tile = ring + slot * kTileBytes;
            const unsigned char* src[2];
            bool ok[2];
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {  // codes: rows 8 hf + lane / 4, chunk lane % 4 of each column block
                const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, 8 * hf + (lane >> 2));
                ok[hf] = rowp != nullptr;
                src[hf] = (ok[hf] ? rowp : dummy) + (lane & 3) * 16;
            }
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int b = 0; b < 4; ++b) mj90::cp_async_16_addr(tile + raw_off(pw, b, 8 * hf + (lane >> 2), lane & 3), src[hf] + b * 64, ok[hf]);
#pragma unroll
            for (int k = 0; k < 4; ++k) {  // k_pe: rows 4k + lane / 8, chunk lane % 8
                const int i = 4 * k + (lane >> 3);
                const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                const bool ok = rowp != nullptr;
                mj90::cp_async_16_addr(tile + tile_off(pw * 16 + i, 64 + (lane & 7)), (ok ? rowp : dummy) + mj_fp8::kRopeOff + (lane & 7) * 16, ok);
            }
            if (lane < 16)
                mj90::cp_async_16_addr(scl + slot * 1024 + (pw * 16 + lane) * 16, (mine != nullptr ? mine : dummy) + mj_fp8::kScaleOff,
                                       mine != nullptr);
            mj90::cp_async_commit();
#pragma unroll
            for (int hf = 0; hf < 2; ++hf)
#pragma unroll
                for (int b = 4; b < 8; ++b) mj90::cp_async_16_addr(tile + raw_off(pw, b, 8 * hf + (lane >> 2), lane & 3), src[hf] + b * 64, ok[hf]);
            mj90::cp_async_commit();
        };
        // Dequantize output column block b of tile t's rows (f8_convert_pass).
        auto convert = [&](int slot, int b) { f8_convert_pass(ring, scl, pw, slot, b, lane); };
        // Row pointers of tile t + 1 (nxt) and keys of tile t + 2 (knn), loaded a tile before their use.
        const unsigned char* nxt = nullptr;
        int knn = -1;
        if (ntiles > 0) issue(0, ptr_of(key_of(0)));
        if (ntiles > 1) nxt = ptr_of(key_of(1));
        if (ntiles > 2) knn = key_of(2);
        for (int t = 0; t < ntiles; ++t) {
            const int slot = t % kS;
            bool issued = t + 1 >= ntiles;
            // Issue tile t + 1 once warpgroup 1 is done with tile t - 1 (its slot); without blocking unless `block`.
            auto try_issue = [&](bool block) {
                if (issued) return;
                if (t + 1 >= kS) {
                    const unsigned par = (unsigned)(((t + 1) / kS - 1) & 1);
                    if (!block && !__shfl_sync(0xffffffffu, (int)mj90::mbar_test(&empty_hi[(t + 1) % kS], par), 0)) return;
                    mj90::mbar_wait(&empty_hi[(t + 1) % kS], par);
                }
                issue(t + 1, nxt);
                issued = true;
                nxt = t + 2 < ntiles ? ptr_of(knn) : nullptr;
                knn = t + 3 < ntiles ? key_of(t + 3) : -1;
            };
            try_issue(false);
            if constexpr (kF8Help) {
                // Passes 0, 1, 4, 6 here; warpgroup 1's warp pw runs 2, 3, 5 between the two barriers and 7 after
                // the second (block 7 holds pass 6's codes). Both arrive on full.
                if (issued && t + 1 < ntiles) mj90::cp_async_wait<2>();
                else mj90::cp_async_wait<0>();
                if (t >= kS) mj90::mbar_wait(&empty[slot], (unsigned)((t / kS - 1) & 1));  // warpgroup 0 is done with t - 2
                __syncwarp();
                mj90::named_bar_arrive(kBarHelpP + pw, 64);  // every lane's raw rows of tile t landed; blocks 0-3 are free
                convert(slot, 0);
                try_issue(false);
                convert(slot, 1);
                try_issue(false);
                convert(slot, 4);
                try_issue(false);
                mj90::named_bar_sync_unaligned(kBarHelpH + pw, 64);  // pass 5 read block 6's codes
                convert(slot, 6);
                mj90::named_bar_sync_unaligned(kBarHelpP + pw, 64);  // pass 6 read block 7's codes
                mj90::fence_proxy_async();
                mj90::mbar_arrive(&full[slot]);
                try_issue(true);
                continue;
            }
            // Groups in flight, oldest first: codes 0-3 of t, codes 4-7 of t, and, once issued, the two of t + 1.
            if (issued && t + 1 < ntiles) mj90::cp_async_wait<3>();
            else mj90::cp_async_wait<1>();
            __syncwarp();  // every lane's codes of blocks 0-3, scales and k_pe of tile t are visible to the warp
            if (t >= kS) mj90::mbar_wait(&empty[slot], (unsigned)((t / kS - 1) & 1));  // warpgroup 0 is done with t - 2
#pragma unroll 1
            for (int b = 0; b < 8; ++b) {
                if (b == 4) {
                    if (issued && t + 1 < ntiles) mj90::cp_async_wait<2>();
                    else mj90::cp_async_wait<0>();
                    __syncwarp();  // the codes of blocks 4-7 too
                }
                convert(slot, b);
                try_issue(false);
            }
            mj90::fence_proxy_async();  // the dequantized stores are read by wgmma (async proxy)
            mj90::mbar_arrive(&full[slot]);
            try_issue(true);
        }
        mj90::cp_async_wait<0>();
        return;
    }
    if (kF8Regs && warp >= 8) {
        // ---- FP8 producer (sparse_mqa/sm90_f8_producer.cuh, 4 warps of 16 rows): rows into registers, dequantized into the
        // slot as the bf16 gathers lay it out; k_pe by cp.async. Rows past the key set store zeros.
        mj90::setmaxnreg_dec<kProducerRegs>();
        mj_f8prod::produce<kN, kS, kTileBytes, 4, MJ_MQA90_DEV_SKIP == 2>(p, rq, irow, ks, nwords, nvalid, ntiles, smem + kOffK, full,
                                                                           empty, warp - 8, lane);
        return;
    }
    if (kSched2 && warp >= 8) {
        // ---- producer, schedule 2: pair i = tiles E = 2i (slot 0) and O = 2i + 1 (slot 1; rows past the key set,
        // a whole tile O for an odd tile count included, load zeros and are masked by the math). Each half of a slot
        // is refilled as soon as its last reader released it, in the order they free up: blocks 0-3 of E (warpgroup
        // 0's P V of E), blocks 4-8 of O (warpgroup 1's P V of O), blocks 4-8 of E (warpgroup 1's P V of E, P of E
        // lives in E's block 8), blocks 0-3 of O (warpgroup 0's P V of O). Warp pw copies rows 16 pw .. + 15, one
        // row an instruction (lanes = 16-byte chunks).
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        unsigned long long* full_hi = (unsigned long long*)(smem + kOffBarHi);
        unsigned long long* empty_hi = full_hi + kS;
        const int npairs = (ntiles + 1) >> 1;
        auto row_of = [&](int t) -> const unsigned char* {
            const int c = t * kN + pw * 16 + (lane & 15);
            return mj_idx::set_row(p, rq, irow, ks, nwords, nvalid, c);
        };
        auto copy_half = [&](int slot, const unsigned char* mine, bool hi, unsigned long long* bar) {
            unsigned char* tile = smem + kOffK + slot * kTileBytes;
#pragma unroll 4
            for (int i = 0; i < 16; ++i) {
                const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                const bool ok = rowp != nullptr;
                const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
                if constexpr (MJ_MQA90_DEV_SKIP == 3) continue;
                auto copy = [&](int c) { mj90::cp_async_16(tile + tile_off(pw * 16 + i, c), src + c * 16, ok); };
                if (!hi) {
                    copy(lane);
                } else {
                    copy(lane + 32);
                    if (lane < 8) copy(lane + 64);
                }
            }
            mj90::cp_async_mbar_arrive_noinc(bar);
        };
        for (int i = 0; i < npairs; ++i) {
            const unsigned char* re = row_of(2 * i);
            const unsigned char* ro = row_of(2 * i + 1);
            const unsigned par = (unsigned)((i - 1) & 1);  // the previous pair's releases
            if (i > 0) mj90::mbar_wait(&empty[0], par);
            copy_half(0, re, false, &full[0]);
            if (i > 0) mj90::mbar_wait(&empty_hi[1], par);
            copy_half(1, ro, true, &full_hi[1]);
            if (i > 0) mj90::mbar_wait(&empty_hi[0], par);
            copy_half(0, re, true, &full_hi[0]);
            if (i > 0) mj90::mbar_wait(&empty[1], par);
            copy_half(1, ro, false, &full[1]);
        }
        mj90::cp_async_wait<0>();
        return;
    }
    if (!kFp8 && warp >= 8) {  // (kFp8 producers returned above)
        // ---- producer: gather tile t into slot t % kS. Warp pw copies rows 16 pw .. 16 pw + 15, one row at
        // a time with all 32 lanes (chunks lane, lane + 32, lane + 64 of its 72): each copy instruction reads
        // 512 contiguous bytes of one latent row, and its shared-memory writes fill every bank 4 times.
        // Pair mode: columns 0..511 of rows 32 crank + 8 pw .. + 7 (this CTA's half), and the rope block (column
        // block 8) of rows 16 pw .. 16 pw + 15 (every row: the block also holds P later, and the bulk copies
        // reading this CTA's half may still run when S is done); warp 3's lane 0 then waits for its CTA's copies
        // to land and copies the half into the peer's slot (8 bulk copies of 32 rows x 128 B, one per column
        // block), completing on the peer's "full" barrier, and announces the peer's half on its own.
        mj90::setmaxnreg_dec<kProducerRegs>();
        const int pw = warp - 8;
        constexpr int kRows = kPair ? 8 : 16;  // rows a warp copies per tile
        const int rbase = (kPair ? 32 * (int)crank : 0) + pw * kRows;
        for (int t = 0; t < ntiles; ++t) {
            const int slot = t % kS;
            const int c = t * kN + rbase + (lane % kRows);  // the other lanes repeat lanes 0..kRows-1's rows
            const unsigned char* mine = mj_idx::set_row(p, rq, irow, ks, nwords, nvalid, c);
            const unsigned char* mine_rope = nullptr;  // pair mode: row 16 pw + lane % 16
            if constexpr (kPair) {
                const int cr = t * kN + pw * 16 + (lane & 15);
                mine_rope = mj_idx::set_row(p, rq, irow, ks, nwords, nvalid, cr);
            }
            if (t >= kS) {
                if constexpr (kPair) mj90::mbar_wait_cluster(&empty[slot], (unsigned)((t / kS - 1) & 1));
                else mj90::mbar_wait(kSplitRel ? &own[slot] : &empty[slot], (unsigned)((t / kS - 1) & 1));
            }
            unsigned char* tile = smem + kOffK + slot * kTileBytes;
            if constexpr (kSplitRel) {  // blocks 4-8 now (empty_hi), blocks 0-3 once warpgroup 0 is done (empty)
#pragma unroll 4
                for (int i = 0; i < kRows; ++i) {
                    const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                    const bool ok = rowp != nullptr;
                    const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
                    mj90::cp_async_16(tile + tile_off(rbase + i, lane + 32), src + (lane + 32) * 16, ok);
                    if (lane < 8) mj90::cp_async_16(tile + tile_off(rbase + i, lane + 64), src + (lane + 64) * 16, ok);
                }
                if (t >= kS) mj90::mbar_wait(&empty[slot], (unsigned)((t / kS - 1) & 1));
#pragma unroll 4
                for (int i = 0; i < kRows; ++i) {
                    const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                    const bool ok = rowp != nullptr;
                    mj90::cp_async_16(tile + tile_off(rbase + i, lane), (ok ? rowp : (const unsigned char*)p.kv) + lane * 16, ok);
                }
            }
#pragma unroll 4
            for (int i = 0; i < (kSplitRel ? 0 : kRows); ++i) {
                const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine, i);
                const int r = rbase + i;
                const bool ok = rowp != nullptr;
                const unsigned char* src = ok ? rowp : (const unsigned char*)p.kv;
                if constexpr (MJ_MQA90_DEV_SKIP == 3) continue;
                mj90::cp_async_16(tile + tile_off(r, lane), src + lane * 16, ok);
                mj90::cp_async_16(tile + tile_off(r, lane + 32), src + (lane + 32) * 16, ok);
                if (!kPair && lane < 8) mj90::cp_async_16(tile + tile_off(r, lane + 64), src + (lane + 64) * 16, ok);
            }
            if constexpr (kPair) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {  // rope block: 4 rows an instruction (8 lanes a row)
                    const int rr = 4 * i + (lane >> 3);
                    const unsigned char* rowp = (const unsigned char*)__shfl_sync(0xffffffffu, (unsigned long long)mine_rope, rr);
                    const bool ok = rowp != nullptr;
                    if constexpr (MJ_MQA90_DEV_SKIP == 3) continue;
                    mj90::cp_async_16(tile + tile_off(pw * 16 + rr, 64 + (lane & 7)), (ok ? rowp : (const unsigned char*)p.kv) + (64 + (lane & 7)) * 16, ok);
                }
                mj90::cp_async_mbar_arrive_noinc(&own[slot]);
                if (pw == 3 && lane == 0) {
                    mj90::mbar_wait(&own[slot], (unsigned)((t / kS) & 1));
                    mj90::fence_proxy_async();  // the half (cp.async writes) is read by the bulk copies (async proxy)
                    const unsigned peer = crank ^ 1u;
                    const unsigned src = mj90::smem_u32(tile) + 32u * crank * 128u;
                    const unsigned dst = mj90::mapa_shared(src, peer), bar = mj90::mapa_shared(mj90::smem_u32(&full[slot]), peer);
#pragma unroll
                    for (int b = 0; b < 8; ++b) mj90::bulk_copy_to_peer(dst + b * kBlk, src + b * kBlk, 32 * 128, bar);
                    mj90::mbar_arrive_expect_tx(&full[slot], kPairHalf);  // ours is in place; the peer's is coming
                }
                __syncwarp();
            } else {
                mj90::cp_async_mbar_arrive_noinc(&full[slot]);
            }
        }
        mj90::cp_async_wait<0>();
        if constexpr (kPair) mj90::cluster_sync();  // nothing of the peer's may reach this CTA after it exits
        return;
    }

    // ---- math warpgroups ----
    const int wg = warp >> 2;                    // 0 or 1
    mj90::setmaxnreg_inc<kMathRegs>();
    const int wt = tid & 127;                    // thread within the warpgroup
    const int row0 = (wt >> 5) * 16 + (lane >> 2);  // accumulator rows row0, row0 + 8
    const int q4 = lane & 3;
    const float sl2 = p.sm_scale_log2;
    const unsigned sq = mj90::smem_u32(smem + kOffQ);
    const unsigned sk = mj90::smem_u32(smem + kOffK);
    const unsigned sp = mj90::smem_u32(smem + kOffP);

    mj90::cp_async_wait<0>();
    mj90::fence_proxy_async();                   // Q, written by cp.async, is read by wgmma
    mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m0 = MJ_NEG_INF, m1 = MJ_NEG_INF, l0 = 0.f, l1 = 0.f;

    float L0, L1;  // total row sums
    if constexpr (kSched2) {
        // Schedule 2 (see kSched2 and the producer above). Per pair, with m the running max both warpgroups share:
        //  warpgroup 0: S_E; mA = max(m, rowmax S_E) -> s_max, kBarM0; P_E at mA, O0 *= exp(m - mA); O0 += P_E V_E[:, 0..255]
        //    (A from registers); release E's blocks 0-3; kBarM1 -> mB; store P_E exp(mA - mB) into E's block 8,
        //    kBarPE; O0, l0 *= exp(mA - mB); kBarPO; O0 += P_O V_O[:, 0..255] (P_O from the P region); S_E of the next
        //    pair issued behind it; release O's blocks 0-3.
        //  warpgroup 1: S_O; kBarM0 -> mA; mB = max(mA, rowmax S_O) -> s_max, kBarM1; P_O at mB, O1 *= exp(m - mB);
        //    O1 += P_O V_O[:, 256..511] (registers); store P_O into the P region; kBarPE; O1 += P_E V_E[:, 256..511];
        //    kBarPO; release O's blocks 4-8, then E's blocks 4-8.
        // The P region is free when P_O is stored: warpgroup 0 released O's blocks 0-3 only after its P V read it,
        // and warpgroup 1 waited for the refill of those blocks (S_O) before storing. s_max: each write is ordered
        // after the other warpgroup's read by the kBarM0 -> kBarM1 -> kBarPE -> kBarPO chain.
        unsigned long long* full_hi = (unsigned long long*)(smem + kOffBarHi);
        unsigned long long* empty_hi = full_hi + kS;
        const int npairs = (ntiles + 1) >> 1;
        const unsigned slot0 = sk, slot1 = sk + kTileBytes;
        float s[32];
        mj_u32 pa[16];  // P as A fragments: k-step j (keys 16j..16j+15) is pa[4j..4j+3]
        auto zero_s = [&] {
#pragma unroll
            for (int i = 0; i < 32; ++i) s[i] = 0.f;
        };
        // Masks the columns of tile t past the key set; returns the tile's row maxima.
        auto mask_max = [&](int t, float& mx0, float& mx1) { mask_tile_max(s, nvalid - t * kN - 2 * q4, mx0, mx1); };
        // P = exp2(S sl2 - ms) kept in s (fp32) and pa (bf16); the row sums of P returned.
        auto exponentiate = [&](float ms0, float ms1, float& rs0, float& rs1) {
            rs0 = rs1 = 0.f;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                s[4 * i] = mj_exp2(fmaf(s[4 * i], sl2, -ms0));
                s[4 * i + 1] = mj_exp2(fmaf(s[4 * i + 1], sl2, -ms0));
                s[4 * i + 2] = mj_exp2(fmaf(s[4 * i + 2], sl2, -ms1));
                s[4 * i + 3] = mj_exp2(fmaf(s[4 * i + 3], sl2, -ms1));
                rs0 += s[4 * i] + s[4 * i + 1];
                rs1 += s[4 * i + 2] + s[4 * i + 3];
                pa[2 * i] = mj_pack_bf16x2(s[4 * i], s[4 * i + 1]);
                pa[2 * i + 1] = mj_pack_bf16x2(s[4 * i + 2], s[4 * i + 3]);
            }
        };
        // Stores pa (warpgroup 1) or s * beta (warpgroup 0) as bf16 [64 rows][64 keys], swizzled like a tile block.
        auto store_p = [&](unsigned char* pbase, bool scaled, float b0, float b1) {
            unsigned char* prow0 = pbase + row0 * 128;
            unsigned char* prow1 = prow0 + 8 * 128;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const mj_u32 v0 = scaled ? mj_pack_bf16x2(s[4 * i] * b0, s[4 * i + 1] * b0) : pa[2 * i];
                const mj_u32 v1 = scaled ? mj_pack_bf16x2(s[4 * i + 2] * b1, s[4 * i + 3] * b1) : pa[2 * i + 1];
                *(mj_u32*)(prow0 + ((i ^ (row0 & 7)) << 4) + q4 * 4) = v0;
                *(mj_u32*)(prow1 + ((i ^ ((row0 + 8) & 7)) << 4) + q4 * 4) = v1;
            }
            mj90::fence_proxy_async();  // P (ordinary stores) is read by the other warpgroup's wgmma
        };
        // Both warpgroups, once the running max m0 / m1 covers their tile: publish it (s_max, then named barrier
        // `bar`), P of the tile at that max, the row sums and O rescaled by al, and O += P V (P from registers, V the
        // four blocks at vbase).
        auto publish_max_then_pv = [&](int bar, unsigned vbase, float ms0, float ms1, float al0, float al1) {
            if (q4 == 0) {
                s_max[row0] = m0;
                s_max[row0 + 8] = m1;
            }
            mj90::named_bar_arrive_unaligned(bar, kConsumers);
            float rs0, rs1;
            exponentiate(ms0, ms1, rs0, rs1);
            l0 = l0 * al0 + rs0;
            l1 = l1 * al1 + rs1;
            rescale_o(o, al0, al1);
            issue_pv_regs(o, pa, vbase);
        };
        if (wg == 0) {
            if (npairs > 0) {
                mj90::mbar_wait(&full[0], 0u);
                zero_s();
                issue_qk<0, 16>(s, sq, slot0);
                mj90::mbar_wait(&full_hi[0], 0u);
                issue_qk<16, 36>(s, sq, slot0);
                mj90::wgmma_wait<0>();
            }
            for (int i = 0; i < npairs; ++i) {
                const unsigned par = (unsigned)(i & 1);
                float mx0, mx1, ms0, ms1, al0, al1;
                mask_max(2 * i, mx0, mx1);
                mj_online_max2(m0, m1, mx0, mx1, sl2, ms0, ms1, al0, al1);  // m = mA now
                publish_max_then_pv(kBarM0, slot0, ms0, ms1, al0, al1);
                if constexpr (!kS2Early) {
                    mj90::wgmma_wait<0>();
                    mj90::mbar_arrive(&empty[0]);  // E's blocks 0-3
                }
                mj90::named_bar_sync_unaligned(kBarM1, kConsumers);
                const float mb0 = s_max[row0], mb1 = s_max[row0 + 8];
                __syncwarp();  // the quad's reads of mB precede lane q4 == 0's write of the next pair's mA
                // mB >= mA; a row with nothing valid in E (mA = -inf) has P_E = 0 and O0 = 0: factor 1.
                const float be0 = m0 == MJ_NEG_INF ? 1.f : mj_exp2(ms0 - __fmul_rn(mb0, sl2));
                const float be1 = m1 == MJ_NEG_INF ? 1.f : mj_exp2(ms1 - __fmul_rn(mb1, sl2));
                store_p(smem + kOffK + 8 * kBlk, true, be0, be1);  // E's rope block: S_E has read it
                mj90::named_bar_arrive_unaligned(kBarPE, kConsumers);
                mj90::mbar_arrive(&empty_hi[0]);  // E's blocks 4-8: this warpgroup is done writing them
                if constexpr (kS2Early) {  // the P V above ran during the wait for mB and the store of P_E
                    mj90::wgmma_wait<0>();
                    mj90::mbar_arrive(&empty[0]);  // E's blocks 0-3
                }
                m0 = mb0;
                m1 = mb1;
                l0 *= be0;
                l1 *= be1;
                rescale_o(o, be0, be1);
                mj90::named_bar_sync_unaligned(kBarPO, kConsumers);
                issue_pv_smem(o, sp, slot1);
                if (i + 1 < npairs) {
                    mj90::mbar_wait(&full[0], par ^ 1u);
                    zero_s();  // s is not read by the P V in flight
                    issue_qk<0, 16>(s, sq, slot0);
                    mj90::wgmma_wait<1>();        // P V of O done
                    mj90::mbar_arrive(&empty[1]);  // O's blocks 0-3
                    mj90::mbar_wait(&full_hi[0], par ^ 1u);
                    issue_qk<16, 36>(s, sq, slot0);
                    mj90::wgmma_wait<0>();
                } else {
                    mj90::wgmma_wait<0>();
                    mj90::mbar_arrive(&empty[1]);
                }
            }
        } else {
            for (int i = 0; i < npairs; ++i) {
                const unsigned par = (unsigned)(i & 1);
                mj90::mbar_wait(&full_hi[1], par);
                zero_s();
                issue_qk<16, 36>(s, sq, slot1);
                mj90::mbar_wait(&full[1], par);
                issue_qk<0, 16>(s, sq, slot1);
                mj90::wgmma_wait<0>();
                float mx0, mx1, ms0, ms1, al0, al1;
                mask_max(2 * i + 1, mx0, mx1);
                mj90::named_bar_sync_unaligned(kBarM0, kConsumers);
                mx0 = fmaxf(mx0, s_max[row0]);  // mA >= m
                mx1 = fmaxf(mx1, s_max[row0 + 8]);
                mj_online_max2(m0, m1, mx0, mx1, sl2, ms0, ms1, al0, al1);  // m = mB now
                __syncwarp();  // the quad's reads of mA precede the write of mB
                publish_max_then_pv(kBarM1, slot1 + 4 * kBlk, ms0, ms1, al0, al1);
                store_p(smem + kOffP, false, 1.f, 1.f);
                mj90::named_bar_sync_unaligned(kBarPE, kConsumers);
                issue_pv_smem(o, slot0 + 8 * kBlk, slot0 + 4 * kBlk);
                mj90::named_bar_arrive_unaligned(kBarPO, kConsumers);
                mj90::wgmma_wait<1>();
                mj90::mbar_arrive(&empty_hi[1]);  // O's blocks 4-8
                mj90::wgmma_wait<0>();
                mj90::mbar_arrive(&empty_hi[0]);  // E's blocks 4-8 (P_E included)
            }
        }
        // ---- epilogue (schedule 2): the two warpgroups' row sums (both hold the same running max) through the P region ----
        l0 = mj_warp_sum4(l0);
        l1 = mj_warp_sum4(l1);
        float* s_lsum = (float*)(smem + kOffP);
        mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);  // every wgmma read of Q, the tiles and P is done
        if (q4 == 0) {
            s_lsum[wg * 64 + row0] = l0;
            s_lsum[wg * 64 + row0 + 8] = l1;
        }
        mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);
        L0 = l0 + s_lsum[(1 - wg) * 64 + row0];
        L1 = l1 + s_lsum[(1 - wg) * 64 + row0 + 8];
    } else if constexpr (kSched1) {
        // Warpgroup 0 computes S of the whole tile and its softmax; P stays in its registers (bf16 A fragments)
        // for O[:, 0..255] += P V (wgmma RS) and is stored into the tile's rope block (dead once S is done) for
        // warpgroup 1, which adds O[:, 256..511] += P V (wgmma SS) after rescaling its O by the factors warpgroup
        // 0 leaves in s_alpha. Named barrier kBarP0 + (t & 1) hands tile t over (two, alternating, so that the
        // bar.arrive form, MJ_MQA90_PSYNC = 0, may run one tile ahead).
        float* s_alpha = (float*)(smem + kOffP);  // [2][64]: O rescale factors of tile t at (t & 1)
        float* s_lsum = s_alpha + 128;            // [64]: the final row sums
        // Slot release after this thread's last read of it (its warpgroup's wgmma completed); pair mode also tells
        // the peer, whose producer copies into this CTA's slot (one arrival per warp).
        auto release = [&](int slot) {
            mj90::mbar_arrive(kSplitEmpty && wg == 1 ? &own[slot] : &empty[slot]);  // split release: warpgroup 1 on empty_hi
            if constexpr (kPair) {
                __syncwarp();
                if (lane == 0) mj90::mbar_arrive_cluster(mj90::mapa_shared(mj90::smem_u32(&empty[slot]), crank ^ 1u));
            }
        };
        if (wg == 0) {
            float s[32];
            mj_u32 pa[16];  // P as A fragments: k-step j (keys 16j..16j+15) is pa[4j..4j+3]
            auto issue_s = [&](unsigned tile) {
#pragma unroll
                for (int i = 0; i < 32; ++i) s[i] = 0.f;
                issue_qk<0, 36>(s, sq, tile);
            };
            auto issue_pv = [&](unsigned tile) { issue_pv_regs(o, pa, tile); };
            auto softmax = [&](int t, unsigned char* tile_g) {
                s1_softmax(s, pa, o, m0, m1, l0, l1, nvalid - t * kN - 2 * q4, sl2, tile_g, s_alpha + (t & 1) * 64, row0, q4);
            };
            auto hand_over = [&](int t) {
                if constexpr (MJ_MQA90_PSYNC) mj90::named_bar_sync_unaligned(kBarP0 + (t & 1), kConsumers);
                else mj90::named_bar_arrive(kBarP0 + (t & 1), kConsumers);
                // Staged FP8: warpgroup 0 is done with blocks 4-8 of the slot (S has read them, P is stored): its own
                // arrival on empty_hi orders its P stores before the producer's next copies into block 8 directly.
                if constexpr (kSplitEmpty) mj90::mbar_arrive(&own[t % kS]);
            };
            if (ntiles > 0) {
                mj90::mbar_wait(&full[0], 0u);
                mj90::fence_proxy_async();
                issue_s(sk);
                mj90::wgmma_wait<0>();
            }
            for (int t = 0; t < ntiles; ++t) {
                const int slot = t % kS;
                softmax(t, smem + kOffK + slot * kTileBytes);  // S of t done, and P V of t - 1: P and O are free
                if (!MJ_MQA90_LATEHO || t + 1 >= ntiles) hand_over(t);
                issue_pv(sk + slot * kTileBytes);
                if (t + 1 < ntiles) {
                    const int ns = (t + 1) % kS;
                    mj90::mbar_wait(&full[ns], (unsigned)(((t + 1) / kS) & 1));
                    mj90::fence_proxy_async();
                    issue_s(sk + ns * kTileBytes);
                    if (MJ_MQA90_LATEHO) hand_over(t);  // warpgroup 1's P V of t queues behind S of t + 1
                    mj90::wgmma_wait<1>();  // P V of t done (groups complete in order)
                    release(slot);
                    mj90::wgmma_wait<0>();
                } else {
                    mj90::wgmma_wait<0>();
                    release(slot);
                }
            }
            l0 = mj_warp_sum4(l0);
            l1 = mj_warp_sum4(l1);
            if (q4 == 0) {
                s_lsum[row0] = l0;
                s_lsum[row0 + 8] = l1;
            }
        } else {
            // MJ_MQA90_F8HELP: this warp's half of tile t's dequantization (row group warp - 4; see the producer).
            auto help = [&](int t) {
                const int hw = warp - 4, slot = t % kS;
                const unsigned scl = mj90::smem_u32(smem + kOffScale);
                mj90::named_bar_sync_unaligned(kBarHelpP + hw, 64);  // the raw rows landed
                f8_convert_pass(sk, scl, hw, slot, 2, lane);
                f8_convert_pass(sk, scl, hw, slot, 3, lane);
                f8_convert_pass(sk, scl, hw, slot, 5, lane);
                mj90::named_bar_arrive(kBarHelpH + hw, 64);
                mj90::named_bar_sync_unaligned(kBarHelpP + hw, 64);  // the producer's pass 6 read block 7's codes
                f8_convert_pass(sk, scl, hw, slot, 7, lane);
                mj90::fence_proxy_async();  // the dequantized stores are read by wgmma (async proxy)
                mj90::mbar_arrive(&full[slot]);
            };
            if constexpr (kF8Help)
                if (ntiles > 0) help(0);
            for (int t = 0; t < ntiles; ++t) {
                const int slot = t % kS;
                const unsigned tile = sk + slot * kTileBytes;
                mj90::named_bar_sync_unaligned(kBarP0 + (t & 1), kConsumers);  // P of t and its rescale factors are in place
                const float al0 = s_alpha[(t & 1) * 64 + row0], al1 = s_alpha[(t & 1) * 64 + row0 + 8];
                rescale_o(o, al0, al1);
                issue_pv_smem(o, tile + 8 * kBlk, tile + 4 * kBlk);
                if constexpr (kF8Help)
                    if (t + 1 < ntiles) help(t + 1);  // while P V of t runs
                mj90::wgmma_wait<0>();
                release(slot);
            }
        }
        // ---- epilogue: lse / max_logits (warpgroup 0 holds the maxima), O normalized and stored ----
        mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);  // every wgmma read of Q and the tiles is done; the row sums are in place
        L0 = s_lsum[row0];
        L1 = s_lsum[row0 + 8];
    } else {
        // S[64 heads x this warpgroup's 32 keys] of the tile in `tile` = Q K^T over 36 k-steps of 16 (issued,
        // committed as one group; the caller waits).
        float s[16];
        auto issue_s = [&](unsigned tile) {
#pragma unroll
            for (int i = 0; i < 16; ++i) s[i] = 0.f;
            mj90::wgmma_fence();
            if constexpr (MJ_MQA90_DEV_SKIP != 1) {  // 2 and 3 time the math too
#pragma unroll
                for (int kk = 0; kk < 36; ++kk) {
                    const unsigned koff = (kk >> 2) * kBlk + (kk & 3) * 32;
                    mj90::wgmma_m64n32k16_ss<0>(s, mj90::smem_desc_addr(sq + koff, 128, 1024, 16),
                                                mj90::smem_desc_addr(tile + koff + wg * 32 * 128, 128, 1024, 16));
                }
            }
            mj90::wgmma_commit();
        };
        // O[:, 256 wg ..] += P V: V = the first 8 column blocks of the tile, read MN-major.
        auto issue_pv = [&](unsigned tile) { issue_pv_smem(o, sp, tile + wg * 4 * kBlk); };
        // Online softmax of tile t (S in s): row maxima exchanged between the warpgroups, O rescaled, this
        // warpgroup's half of P written; ends when both halves of P are in shared memory.
        auto softmax = [&](int t) {
            const int cbase = t * kN + wg * 32 + 2 * q4;
            float mx0 = MJ_NEG_INF, mx1 = MJ_NEG_INF;
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    if (cbase + i * 8 + j >= nvalid) s[4 * i + j] = s[4 * i + 2 + j] = MJ_NEG_INF;
                    mx0 = fmaxf(mx0, s[4 * i + j]);
                    mx1 = fmaxf(mx1, s[4 * i + 2 + j]);
                }
            mx0 = mj_warp_max4(mx0);
            mx1 = mj_warp_max4(mx1);
            if (q4 == 0) {
                s_max[wg * 64 + row0] = mx0;
                s_max[wg * 64 + row0 + 8] = mx1;
            }
            mj90::named_bar_sync_unaligned(kBarMax, kConsumers);
            mx0 = fmaxf(mx0, s_max[(1 - wg) * 64 + row0]);
            mx1 = fmaxf(mx1, s_max[(1 - wg) * 64 + row0 + 8]);
            float ms0, ms1, al0, al1;
            mj_online_max2(m0, m1, mx0, mx1, sl2, ms0, ms1, al0, al1);
            float rs0 = 0.f, rs1 = 0.f;
            unsigned char* prow0 = smem + kOffP + row0 * 128;
            unsigned char* prow1 = prow0 + 8 * 128;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float p00 = mj_exp2(fmaf(s[4 * i], sl2, -ms0)), p01 = mj_exp2(fmaf(s[4 * i + 1], sl2, -ms0));
                const float p10 = mj_exp2(fmaf(s[4 * i + 2], sl2, -ms1)), p11 = mj_exp2(fmaf(s[4 * i + 3], sl2, -ms1));
                rs0 += p00 + p01;
                rs1 += p10 + p11;
                const int ch = wg * 4 + i;  // 16-byte chunk of keys 8ch..8ch+7
                *(mj_u32*)(prow0 + ((ch ^ (row0 & 7)) << 4) + q4 * 4) = mj_pack_bf16x2(p00, p01);
                *(mj_u32*)(prow1 + ((ch ^ ((row0 + 8) & 7)) << 4) + q4 * 4) = mj_pack_bf16x2(p10, p11);
            }
            l0 = l0 * al0 + rs0;
            l1 = l1 * al1 + rs1;
            rescale_o(o, al0, al1);
            mj90::fence_proxy_async();  // P (ordinary stores) is read by wgmma
            mj90::named_bar_sync_unaligned(kBarP, kConsumers);
        };

#if MJ_MQA90_OVERLAP
        // Overlapped: the tensor pipe runs P V of tile t and S of tile t + 1 back to back; the softmax of t + 1
        // follows. A slot is released when its P V completes.
        if (ntiles > 0) {
            mj90::mbar_wait(&full[0], 0u);
            mj90::fence_proxy_async();
            issue_s(sk);
            mj90::wgmma_wait<0>();
        }
        for (int t = 0; t < ntiles; ++t) {
            const int slot = t % kS;
            softmax(t);  // P V of t - 1 completed at the end of the previous iteration: P and O are free
            issue_pv(sk + slot * kTileBytes);
            if (t + 1 < ntiles) {
                const int ns = (t + 1) % kS;
                mj90::mbar_wait(&full[ns], (unsigned)(((t + 1) / kS) & 1));
                mj90::fence_proxy_async();
                issue_s(sk + ns * kTileBytes);
                mj90::wgmma_wait<1>();  // P V of t done (groups complete in order)
                mj90::mbar_arrive(&empty[slot]);
                mj90::wgmma_wait<0>();
            } else {
                mj90::wgmma_wait<0>();
                mj90::mbar_arrive(&empty[slot]);
            }
        }
#else
        for (int t = 0; t < ntiles; ++t) {
            const int slot = t % kS;
            mj90::mbar_wait(&full[slot], (unsigned)((t / kS) & 1));
            mj90::fence_proxy_async();
            const unsigned tile = sk + slot * kTileBytes;
            issue_s(tile);
            mj90::wgmma_wait<0>();
            softmax(t);
            issue_pv(tile);
            mj90::wgmma_wait<0>();
            mj90::mbar_arrive(&empty[slot]);
        }
#endif

        // ---- epilogue (schedule 0): total row sums across the two warpgroups, lse / max_logits, O normalized and stored ----
        l0 = mj_warp_sum4(l0);
        l1 = mj_warp_sum4(l1);
        mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);  // every wgmma read of Q, P and the maxima scratch is done
        if (q4 == 0) {
            s_max[wg * 64 + row0] = l0;
            s_max[wg * 64 + row0 + 8] = l1;
        }
        mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);
        L0 = l0 + s_max[(1 - wg) * 64 + row0];
        L1 = l1 + s_max[(1 - wg) * 64 + row0 + 8];
    }
    if (wg == 0 && q4 == 0) store_lse(p, tok, head0, row0, L0, L1, m0, m1);
    // Stage O (bf16 [64][512], row r = 1024 bytes, 16-byte chunk c at (c ^ (r & 7))) in the Q region.
    const float inv0 = L0 > 0.f ? 1.f / L0 : 0.f, inv1 = L1 > 0.f ? 1.f / L1 : 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const int col = wg * 256 + i * 8 + 2 * q4;
        const int ch = col >> 3;
        *(mj_u32*)(smem + row0 * 1024 + ((ch ^ (row0 & 7)) << 4) + q4 * 4) = mj_pack_bf16x2(o[4 * i] * inv0, o[4 * i + 1] * inv0);
        *(mj_u32*)(smem + (row0 + 8) * 1024 + ((ch ^ ((row0 + 8) & 7)) << 4) + q4 * 4) =
            mj_pack_bf16x2(o[4 * i + 2] * inv1, o[4 * i + 3] * inv1);
    }
    mj90::named_bar_sync_unaligned(kBarEnd, kConsumers);
    unsigned char* otok = (unsigned char*)p.out + (mj_i64)tok * p.o_stride_tok * 2;
    for (int i = tid; i < kH * 64; i += kConsumers) {
        const int r = i >> 6, c = i & 63;
        if (head0 + r < nh) {
            mj_u32 v[4];
            mj_ld_shared_v4(v, mj90::smem_u32(smem) + r * 1024 + ((c ^ (r & 7)) << 4));
            mj_st_global_v4(otok + ((mj_i64)(head0 + r) * p.o_stride_head + c * 8) * 2, v);
        }
    }
    if constexpr (kPair) mj90::cluster_sync();  // see the producer's exit
}
