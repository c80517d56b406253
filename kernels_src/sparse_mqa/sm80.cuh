// Sparse MQA prefill (DeepSeek sparse attention, FlashMLA's sparse-prefill semantics), portable tier:
// mma.sync m16n8k16 bf16 with fp32 accumulation, cp.async gathers, sm_80 and newer.
// Semantics: DESIGN.md section 2 and the SparseMqaFwdParams comment in mlajit_abi.h.
//
// Supported specializations. The runtime validates overrides against this table; the static_asserts below
// enforce the same rule (BLOCK_H in {16,32,64}, BLOCK_N in {32,64}, WARPS 8, STAGES 2..4, shared memory
// within the arch's per-block opt-in limit: sm_80 166912 B, sm_90 232448 B).
//
//   BLOCK_H BLOCK_N WARPS STAGES  smem (B)  arch        blocks/SM      use
//      64      64     8     2      231824   sm_90       1              default sm_90 (portable tier), h > 32 (ping-pong)
//      64      32     8     3      190832   sm_90       1
//      64      32     8     2      153936   sm_80 sm_90 1              default sm_80, h > 32
//      32      64     8     2      190736   sm_90       1              default sm_90 (portable tier), 16 < h <= 32
//      32      32     8     2      114896   sm_80 sm_90 1              default sm_80, 16 < h <= 32
//      16      64     8     2      170192   sm_90       1
//      16      32     8     2       95376   sm_80 sm_90 1 (sm_90: 2)   default h <= 16 (also on the Hopper tier)
//      16      32     8     3      132272   sm_80 sm_90 1
//      16      32     8     4      169168   sm_90       1
//   KV_FP8 = 1 (the FP8 latent cache): every row but 64 x 64, with mj_mqa_smem_bytes_fp8 (16 x 32 x 2: 100,496 B,
//   two blocks a SM on sm_90); defaults 64 x 32 x 2 above 32 heads, 32 x 64 (sm_90) / 32 x 32 up to 32, 16 x 32 x 2.
//
// Requirements on the caller beyond the ABI comment: q, kv, out 16-byte aligned and their token/head strides
// multiples of 8 elements (the gathers and stores move 16-byte chunks); index rows 1..mj_mqa_max_width wide
// (any value: the loop runs over the row's compacted key set). grid.x as mlajit_abi.h says.
//
// Design (one block = one query token x BLOCK_H heads; the loop runs over BLOCK_N-key tiles of its indices):
//  * Q [BLOCK_H x 576] stays in shared memory for the whole block; each gathered K tile [BLOCK_N x 576]
//    arrives by cp.async into a STAGES-deep ring, and V is the first 512 columns of that same tile.
//    Rows are XOR-swizzled by 16-byte chunk so every ldmatrix and cp.async is bank-conflict free.
//  * S = Q K^T: warps tile S (WM x WN per warp). For BLOCK_H = 64 each pair of warps splits the 576-long
//    reduction in half (KSPLIT = 2): that cuts the ldmatrix traffic of this phase by a third, which is
//    what bounds mma.sync here. The pair then reduce-scatters its two 32x32 partials through shared memory
//    (each warp keeps 16 rows).
//  * Softmax: the warps owning one row exchange their tile maxima through shared memory (named barrier
//    over that row group only), then write P (bf16) and the rescale factor of each row.
//  * O = P V: every thread holds 128 fp32 accumulators at BLOCK_H = 64 (64 heads x 512 columns over 8 warps).
//  * The index row becomes a compacted set of distinct valid keys before the loop (index_set.cuh): tiles
//    are full BLOCK_N-key slices of that set, so -1 padding and duplicates cost nothing wherever they sit.
//  * Row sums stay per thread until the epilogue; O is normalized, staged through shared memory and
//    written with 16-byte stores.
// The FP8 latent cache (KV_FP8 = 1, fp8.cuh): raw 656-byte rows gathered into their own ring, dequantized
// by the whole block into ONE bf16 K tile at the top of each tile (lock-step schedule only; see the layout
// below). Measured on the H200 at 16 heads (16 x 32): 1.37x the bf16 time (docs/perf_mqa_notes.md).
// Two schedules of the same math:
//  * lock-step (every config): the whole block moves tile by tile between block barriers; each warp's
//    P V tile is all BLOCK_H rows x 64 columns. The exchange borrows the P tile and the rope columns of the
//    ring slot being refilled (its rope gather is issued after the exchange), since a 64-head block leaves
//    no other room on sm_90.
//  * ping-pong (default for 64 x 64 tiles; MJ_MQA_PINGPONG): the two 32-head halves of the block run as
//    independent 4-warp groups that take turns at S = Q K^T (ldmatrix-bound) while the other group does
//    softmax and P V (tensor-bound), so both pipes stay busy. Only the K ring is shared: per-slot mbarriers
//    (full: cp.async completion of all 256 threads; empty: every thread after its P V reads). Each group
//    gathers its own 32 rows of every tile, which is what lets its exchange use only its own P rows.
//    Measured on H200 (h 128, 4096 tokens, topk 2048): 5.94 ms against 6.57 ms lock-step. Both are held
//    back by the 2-slot ring (one 72 KB tile in flight per SM; the loop without the S math still takes
//    4.4 ms): a deeper ring needs shared memory this tier does not have at 64 heads x 64 keys.
#include "mlajit_device.cuh"
#include "sparse_mqa/fp8.cuh"
#include "sparse_mqa/index_set.cuh"
#include "sparse_mqa/online_softmax.cuh"

#ifndef MJ_MQA_KSPLIT  // development overrides only; the runtime never sets them
#define MJ_MQA_KSPLIT (MJ_BLOCK_H == 64 ? 2 : 1)
#endif
#ifndef MJ_MQA_PINGPONG  // default: ping-pong where it was measured faster (64 heads x 64 keys, sm_90)
#define MJ_MQA_PINGPONG (MJ_BLOCK_H == 64 && MJ_BLOCK_N == 64 && MJ_MQA_KSPLIT == 2 && !MJ_KV_FP8)
#endif
#ifndef MJ_MQA_PP_TURNS  // ping-pong: S phases of the two groups strictly alternate (0: free-running)
#define MJ_MQA_PP_TURNS 1
#endif
#ifndef MJ_MQA_DEV_SKIP  // 1: no P V mma, 2: no S mma (timing breakdown only: results are wrong)
#define MJ_MQA_DEV_SKIP 0
#endif

namespace mj_mqa {

constexpr int kH = MJ_BLOCK_H;
constexpr int kN = MJ_BLOCK_N;
constexpr int kS = MJ_STAGES;
constexpr int kThreads = mj_mqa_threads(MJ_WARPS);
constexpr bool kFp8 = MJ_KV_FP8 != 0;  // the FP8 latent cache (fp8.cuh): raw rows gathered, dequantized in smem
static_assert(MJ_D_LATENT == 512 && MJ_D_ROPE == 64, "sparse MQA is specialized for 512 latent + 64 rope");
static_assert(MJ_WARPS == 8, "sparse MQA: WARPS must be 8");
static_assert(kH == 16 || kH == 32 || kH == 64, "sparse MQA: BLOCK_H must be 16, 32 or 64");
static_assert(kN == 32 || kN == 64, "sparse MQA: BLOCK_N must be 32 or 64");
static_assert(kS >= 2 && kS <= 4, "sparse MQA: STAGES must be 2..4");

// S = Q K^T warp grid: RG row groups x CG column groups x KH reduction halves.
constexpr int kKH = MJ_MQA_KSPLIT;
static_assert(kKH == 1 || (kKH == 2 && kH == 64), "sparse MQA: the split reduction needs BLOCK_H = 64");
constexpr int kWM = kKH == 2 ? 32 : 16;
constexpr int kRG = kH / kWM;
constexpr int kCGmax = 8 / (kRG * kKH);
constexpr int kCG = kCGmax < kN / 8 ? kCGmax : kN / 8;
constexpr int kWN = kN / kCG;
constexpr int kNTW = kWN / 8;             // n-tiles (8 keys) per warp
constexpr int kMTW = kWM / 16;            // m-tiles (16 heads) per warp before the reduce-scatter
constexpr int kQW = kRG * kCG * kKH;      // warps doing S; the rest (BLOCK_H 16, BLOCK_N 32) only do P V
static_assert(kNTW == 1 || kNTW == 2 || kNTW == 4, "warp tile width");
static_assert(kQW == 8 || kRG == 1, "idle S warps join the single row group's barrier");
constexpr int kRgThreads = kQW == 8 ? kCG * kKH * 32 : kThreads;  // threads at a row group's barrier

constexpr bool kPP = MJ_MQA_PINGPONG != 0;
static_assert(!kPP || (kH == 64 && kKH == 2), "ping-pong needs BLOCK_H 64 with the split reduction");
static_assert(!kPP || !kFp8, "the FP8 cache runs the lock-step schedule");
// O = P V warp tile: lock-step all kH rows x 64 columns; ping-pong its group's 32 rows x 128 columns.
constexpr int kOM = kPP ? 2 : kH / 16;    // m-tiles
constexpr int kON = kPP ? 16 : 8;         // n-tiles

// Named barrier ids (0 is __syncthreads): row group rg -> 1 + rg, S pair -> 5 + pair, ping-pong turns 9, 10.
constexpr int kBarRg = 1, kBarPair = 5, kBarTurn = 9;

// Loader: kTPR threads per gathered row; each copies 16-byte chunks of it.
constexpr int kTPR = kThreads / kN;
constexpr int kNopeCpt = 64 / kTPR;       // 1024-byte latent part = 64 chunks
constexpr int kRopeCpt = 8 / kTPR;        // 128-byte rope part = 8 chunks

// Shared memory layout (bytes). Q and every ring slot hold the latent part [rows][1024 B] followed by the
// rope part [rows][128 B]. FP8 cache: ONE bf16 K tile (the dequantization writes it at the top of each
// tile, after the previous tile's P V), then the ring of raw 656-byte rows the gathers land in, then the
// split reduction's exchange (what the bf16 form borrows from the slot being refilled).
constexpr int kQBytes = kH * 1152;
constexpr int kStageBytes = kN * 1152;
constexpr int kKSlots = kFp8 ? 1 : kS;            // bf16 K tiles
constexpr int kRawBytes = kN * mj_fp8::kRowBytes;  // FP8: one raw ring slot
constexpr int kOffK = kQBytes;
constexpr int kOffRaw = kOffK + kKSlots * kStageBytes;          // FP8: raw ring [kS][kN][656]
constexpr int kOffX = kOffRaw + (kFp8 ? kS * kRawBytes : 0);     // FP8, split reduction: exchange [kN * 128]
constexpr int kOffP = kOffX + (kFp8 && kKH == 2 ? kN * 128 : 0); // P tile, bf16 [kH][kN]
constexpr int kOffMax = kOffP + kH * kN * 2;       // row maxima / row sums by column group, fp32 [kH][kCG]
constexpr int kOffAlpha = kOffMax + 512;           // per-row rescale of O, fp32 [kH]
constexpr int kOffVm = kOffAlpha + kH * 4;         // lock-step: validity byte per slot row [kS][kN];
                                                   // ping-pong: mbarriers full[kS], empty[kS]
constexpr int kOffSet = kOffVm + kS * kN;          // the row's key set: keep bitmap, prefix counts, count
constexpr int kSmem = kOffSet + mj_idx::kSetBytes;
static_assert(kOffP - kOffK >= mj_idx::kHashBytes, "the ring doubles as the index set's hash scratch");
static_assert(kH * kCG * 4 <= 512, "row-stat scratch");
static_assert(2 * kS * 8 <= kS * kN, "mbarrier space");
static_assert(kSmem == (kFp8 ? mj_mqa_smem_bytes_fp8(kH, kN, kS) : mj_mqa_smem_bytes(kH, kN, kS, MJ_D_LATENT + MJ_D_ROPE, MJ_D_LATENT)),
              "sparse MQA: layout and mj_mqa_smem_bytes disagree");
constexpr int kSmemLimit = MJ_ARCH >= 90 ? 232448 : 166912;
constexpr int kSmemPerSM = MJ_ARCH >= 90 ? 233472 : 167936;
static_assert(kSmem <= kSmemLimit, "sparse MQA: this config does not fit the arch's shared memory");
// Two blocks per SM only where 128 registers suffice without spills (BLOCK_H 16); dev override MJ_MQA_MINB.
#ifndef MJ_MQA_MINB
#define MJ_MQA_MINB (kH == 16 ? 2 : 1)
#endif
constexpr int kMinBlocks = MJ_MQA_MINB >= 2 && 2 * (kSmem + 1024) <= kSmemPerSM ? 2 : 1;
// The lock-step exchange borrows the P tile and one slot's rope columns: each must hold 4 warps' halves.
static_assert(kKH == 1 || (kRG * kCG * kNTW * 512 == kH * kN * 2 && kRG * kCG * kNTW * 512 == kN * 128),
              "KSPLIT exchange space");

constexpr int kPChunks = kN / 8;  // 16-byte chunks per P row

// 16-byte-chunk XOR swizzle for 1024- and 128-byte rows: the 8 rows an ldmatrix phase touches land in 8
// distinct bank groups.
MJ_DEVICE mj_u32 swz(int row, int chunk) { return (mj_u32)((chunk ^ (row & 7)) << 4); }
// P rows are 128 B (BLOCK_N 64) or 64 B (BLOCK_N 32, two rows per 128 B).
MJ_DEVICE mj_u32 swz_p(int row, int chunk) {
    return kPChunks >= 8 ? (mj_u32)((chunk ^ (row & 7)) << 4) : (mj_u32)((chunk ^ ((row >> 1) & 3)) << 4);
}

// Partial S over k-steps [KS0, KS0 + NKS) of the 36 (32 latent + 4 rope). oa/ob: per-lane swizzled chunk
// offsets for the 4 k-steps of a 128-byte span (A: Q rows, B: K rows).
template <int KS0, int NKS>
MJ_DEVICE void qk_steps(float (&acc)[kMTW][kNTW][4], mj_u32 qn, mj_u32 qr, mj_u32 kn, mj_u32 kr,
                        const mj_u32 (&oa)[4], const mj_u32 (&ob)[4]) {
#pragma unroll
    for (int i = 0; i < NKS; ++i) {
        const int ks = KS0 + i;
        const bool rope = ks >= 32;
        const int kq = rope ? ks - 32 : ks;
        const mj_u32 qbase = rope ? qr : qn;
        const mj_u32 kbase = rope ? kr : kn;
        const int rstride = rope ? 16 * 128 : 16 * 1024;  // 16 rows
        const int seg = (kq >> 2) * 128;
        mj_u32 a[kMTW][4];
#pragma unroll
        for (int mt = 0; mt < kMTW; ++mt) mj_ldmatrix_x4(a[mt], qbase + mt * rstride + seg + oa[kq & 3]);
        mj_u32 b[kNTW][2];
        if constexpr (kNTW == 1) {
            mj_ldmatrix_x2(b[0], kbase + seg + ob[kq & 3]);
        } else {
#pragma unroll
            for (int pr = 0; pr < kNTW / 2; ++pr) {
                mj_u32 r[4];
                mj_ldmatrix_x4(r, kbase + pr * rstride + seg + ob[kq & 3]);
                b[2 * pr][0] = r[0];
                b[2 * pr][1] = r[1];
                b[2 * pr + 1][0] = r[2];
                b[2 * pr + 1][1] = r[3];
            }
        }
#pragma unroll
        for (int mt = 0; mt < kMTW; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNTW; ++nt) mj_mma_bf16_16816(acc[mt][nt], a[mt], b[nt]);
    }
}

// O[this warp's kOM m-tiles][its kON n-tiles] += P V for one tile. pa: P rows of the warp's first m-tile;
// va: V rows (keys) of this lane, at the warp's first column.
MJ_DEVICE void pv_tile(float (&o)[kOM][kON][4], mj_u32 pa, const mj_u32 (&op)[kN / 16], mj_u32 va,
                       const mj_u32 (&ov)[4]) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
        mj_u32 a[kOM][4];
#pragma unroll
        for (int mt = 0; mt < kOM; ++mt) mj_ldmatrix_x4(a[mt], pa + mt * 16 * kN * 2 + op[kk]);
#pragma unroll
        for (int pr = 0; pr < kON / 2; ++pr) {
            mj_u32 r[4];
            mj_ldmatrix_x4_trans(r, va + kk * 16 * 1024 + (pr >> 2) * 128 + ov[pr & 3]);
            const mj_u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
            for (int mt = 0; mt < kOM; ++mt) {
                mj_mma_bf16_16816(o[mt][2 * pr], a[mt], b0);
                mj_mma_bf16_16816(o[mt][2 * pr + 1], a[mt], b1);
            }
        }
    }
}

}  // namespace mj_mqa

extern "C" __global__ void __launch_bounds__(mj_mqa::kThreads, mj_mqa::kMinBlocks)
    mlajit_sparse_mqa_fwd(const SparseMqaFwdParams p) {
    using namespace mj_mqa;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    // Later tokens have more valid keys: start them first so the short blocks fill the tail.
    const int tok = mj_idx::token_of_block(p, (int)blockIdx.x, (int)gridDim.x);
    const int head0 = blockIdx.y * kH;
    const int nh = p.num_heads;
    const mj_u32 sb = mj_smem_addr(smem);
    const mj_idx::SetView ks = mj_idx::set_view(smem + kOffSet);
    unsigned char* s_vm = smem + kOffVm;
    float* s_stat = (float*)(smem + kOffMax);
    float* s_alpha = (float*)(smem + kOffAlpha);
    const mj_u32 mb_full = sb + kOffVm, mb_empty = sb + kOffVm + kS * 8;  // ping-pong ring barriers

    // Q first: it depends on nothing, so its latency hides behind the index scan.
    {
        const unsigned char* qtok = (const unsigned char*)p.q + (mj_i64)tok * p.q_stride_tok * 2;
#pragma unroll
        for (int i0 = 0; i0 < kH * 72; i0 += kThreads) {
            const int i = i0 + tid;
            if (kH * 72 % kThreads == 0 || i < kH * 72) {
                const int row = i / 72, c = i - row * 72;
                const bool ok = head0 + row < nh;
                const unsigned char* src =
                    ok ? qtok + ((mj_i64)(head0 + row) * p.q_stride_head + c * 8) * 2 : (const unsigned char*)p.q;
                const mj_u32 dst = c < 64 ? sb + row * 1024 + swz(row, c) : sb + kH * 1024 + row * 128 + swz(row, c - 64);
                mj_cp_async_16(dst, src, ok);
            }
        }
        mj_cp_async_commit();
    }

    const mj_idx::Request rq = mj_idx::request_of_token(p, tok);

    const int topk = p.topk;
    const int* irow = p.indices + (mj_i64)tok * p.idx_stride_tok;
    if constexpr (kPP) {
        if (tid == 0) {
#pragma unroll
            for (int s = 0; s < kS; ++s) {
                mj_mbar_init(mb_full + 8 * s, kThreads);  // one cp.async-completion arrive per thread
                mj_mbar_init(mb_empty + 8 * s, kThreads); // every thread arrives after its P V reads
            }
        }
    }
    // The row's compacted key set; the ring is its hash scratch (nothing is gathered yet).
    mj_idx::build_set<kThreads>(p, rq, irow, topk, ks.keep, ks.pref, ks.nvalid, (unsigned long long*)(smem + kOffK));
    const int nvalid = *ks.nvalid;
    const int nwords = (topk + 31) >> 5;
    const int ntiles = (nvalid + kN - 1) / kN;

    // ---- gather machinery: thread -> (row lrow of the tile, 16-byte chunks lsub + i * kTPR) ----
    // With 4 threads a row, the two rows sharing an 8-lane store phase walk the two 64-byte halves of each
    // 128-byte group in opposite order, so the phase's 8 chunks hit 8 bank groups.
    const int lrow = tid / kTPR, lsub = tid % kTPR;
    const int lflip = kTPR == 4 ? (lrow & 1) : 0;
    const unsigned char* kvb = (const unsigned char*)p.kv;
    const unsigned char* rowp = kvb;
    bool rvalid = false;
    // Latent row of this thread's gather row in tile `tile` (nullptr past the key set's end).
    auto fetch_idx = [&](int tile) -> const unsigned char* {
        return mj_idx::set_row(p, rq, irow, ks, nwords, nvalid, tile * kN + lrow);
    };
    // Copy i of a row goes to chunk kTPR * (e ^ lflip) + lsub of 128-byte group i / kCPG (e = i % kCPG):
    // per-thread source/destination offsets for the kCPG values of e, plus compile-time group offsets.
    constexpr int kCPG = 8 / kTPR;
    mj_u32 soff[kCPG], doff[kCPG];
#pragma unroll
    for (int e = 0; e < kCPG; ++e) {
        const int c = kTPR * (e ^ lflip) + lsub;
        soff[e] = (mj_u32)(c * 16);
        doff[e] = (mj_u32)((c ^ (lrow & 7)) << 4);
    }
    auto issue_latent = [&](int slot, const unsigned char* row) {
        rvalid = row != nullptr;
        rowp = rvalid ? row : kvb;
        const mj_u32 dst = sb + kOffK + slot * kStageBytes + lrow * 1024;
#pragma unroll
        for (int i = 0; i < kNopeCpt; ++i)
            mj_cp_async_16(dst + (i / kCPG) * 128 + doff[i % kCPG], rowp + (i / kCPG) * 128 + soff[i % kCPG], rvalid);
        if constexpr (!kPP)
            if (lsub == 0) s_vm[slot * kN + lrow] = rvalid;
    };
    auto issue_rope = [&](int slot) {
        const mj_u32 dst = sb + kOffK + slot * kStageBytes + kN * 1024 + lrow * 128;
#pragma unroll
        for (int i = 0; i < kRopeCpt; ++i)
            mj_cp_async_16(dst + doff[i % kCPG], rowp + 1024 + soff[i % kCPG], rvalid);
    };

    // FP8 cache: a whole 656-byte row into raw slot `slot` (41 chunks; zero-filled past the key set, which
    // dequantizes to 0: scale 0 times code 0).
    auto issue_raw = [&](int slot, const unsigned char* row) {
        const bool ok = row != nullptr;
        const unsigned char* src = ok ? row : kvb;
        const mj_u32 dst = sb + kOffRaw + slot * kRawBytes + lrow * mj_fp8::kRowBytes;
#pragma unroll
        for (int i = 0; i < (mj_fp8::kRowChunks + kTPR - 1) / kTPR; ++i) {
            const int c = lsub + i * kTPR;
            if (c < mj_fp8::kRowChunks) mj_cp_async_16(dst + c * 16, src + c * 16, ok);
        }
    };
    // FP8 cache: raw slot -> the bf16 K tile (latent swizzled as the gathers would write it, k_pe copied).
    // A warp converts 32 chunks (16 values each) of one row: its shared reads are consecutive 16-byte chunks
    // and, writing the odd half of each pair first in every other group of four lanes, so are its stores.
    auto dequant = [&](int slot) {
        const mj_u32 raw = sb + kOffRaw + slot * kRawBytes;
        const mj_u32 kt = sb + kOffK;
#pragma unroll
        for (int i = 0; i < kN * 32 / kThreads; ++i) {
            const int j = i * kThreads + tid, row = j >> 5, c = j & 31;
            const mj_u32 src = raw + row * mj_fp8::kRowBytes;
            mj_u32 in[4], o[8];
            mj_ld_shared_v4(in, src + c * 16);
            const float sc = mj_fp8::ld_shared_f32(src + mj_fp8::kScaleOff + 4 * (c >> 3));
            mj_fp8::dequant16<MJ_ARCH>(in, sc, o);
            mj_fp8::st_pair_swizzled(kt + row * 1024, swz(row, 2 * c), swz(row, 2 * c + 1), (c >> 2) & 1, o);
        }
#pragma unroll
        for (int i = 0; i < (kN * 8 + kThreads - 1) / kThreads; ++i) {
            const int j = i * kThreads + tid, row = j >> 3, c = j & 7;
            if (kN * 8 % kThreads == 0 || j < kN * 8) {
                mj_u32 v[4];
                mj_ld_shared_v4(v, raw + row * mj_fp8::kRowBytes + mj_fp8::kRopeOff + c * 16);
                mj_fp8::st_shared_v4(kt + kN * 1024 + row * 128 + swz(row, c), v[0], v[1], v[2], v[3]);
            }
        }
    };

    int t_issue = 0;
    int t_cur = 0;
    const unsigned char* pf = fetch_idx(t_issue);
    // FP8: one commit group per raw slot, kS tiles ahead (a raw slot is free again right after its
    // dequantization), also when nothing is left to issue, so the wait count in the loop is a constant.
    if constexpr (kFp8) {
#pragma unroll
        for (int k = 0; k < kS; ++k) {
            if (t_issue < ntiles) {
                issue_raw(k, pf);
                t_issue = t_issue + 1;
                pf = fetch_idx(t_issue);
            }
            mj_cp_async_commit();
        }
    }
    // Lock-step: two commit groups per ring slot (latent, rope), also when nothing is left to issue, so the
    // wait count below is a constant. Ping-pong: each thread's completion arrives on the slot's mbarrier.
#pragma unroll
    for (int k = 0; k < (kFp8 ? 0 : kS - 1); ++k) {
        if (t_issue < ntiles) issue_latent(k, pf);
        if constexpr (!kPP) mj_cp_async_commit();
        if (t_issue < ntiles) {
            issue_rope(k);
            if constexpr (kPP) mj_cp_async_mbar_arrive_noinc(mb_full + 8 * k);
            t_issue = t_issue + 1;
            pf = fetch_idx(t_issue);
        }
        if constexpr (!kPP) mj_cp_async_commit();
    }

    // ---- per-thread fragment addressing ----
    // S warp role (only for w < kQW).
    const int kh = w % kKH;
    const int cg = (w / kKH) % kCG;
    const int rg = w / (kKH * kCG);
    const int orow0 = rg * kWM + kh * 16 + g;  // rows this thread owns after the reduce-scatter: orow0, +8
    mj_u32 oa[4], ob[4], op[kN / 16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        oa[q] = (mj_u32)((((2 * q) | (lane >> 4)) ^ (lane & 7)) << 4);
        ob[q] = (mj_u32)((((2 * q) | ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
    }
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) op[kk] = swz_p(lane & 15, (2 * kk) | (lane >> 4));
    const int qrow = rg * kWM + (lane & 15);
    const mj_u32 qn = sb + qrow * 1024;
    const mj_u32 qr = sb + kH * 1024 + qrow * 128;
    const int krow = cg * kWN + (lane & 7) + ((lane >> 4) << 3);
    // P V role: rows o_row0.., columns o_col0..
    const int o_row0 = kPP ? rg * 32 : 0;
    const int o_col0 = kPP ? (w & 3) * 128 : w * 64;
    const mj_u32 pa = sb + kOffP + (o_row0 + (lane & 15)) * kN * 2;
    const mj_u32 va_off = ((lane & 7) + (((lane >> 3) & 1) << 3)) * 1024 + o_col0 * 2;
    const float sl2 = p.sm_scale_log2;

    float o[kOM][kON][4];
#pragma unroll
    for (int mt = 0; mt < kOM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kON; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[mt][nt][i] = 0.f;
    float m0 = MJ_NEG_INF, m1 = MJ_NEG_INF, l0 = 0.f, l1 = 0.f;  // raw-logit running max, partial row sums

    // Row maxima across the row group, online-softmax update, P (bf16) and alpha to shared memory.
    // vbits: validity of this thread's columns (bit 2*nt + j: column nt*8 + 2t + j of its warp tile).
    // active: this warp does S (the idle warps of configs with kQW < 8 only take part in the barrier, at the
    // same instruction, which is what compute-sanitizer's synccheck expects of a barrier).
    auto softmax = [&](float (&s)[kNTW][4], unsigned vbits, bool active) {
        float mx0 = MJ_NEG_INF, mx1 = MJ_NEG_INF;
        if (active) {
#pragma unroll
        for (int nt = 0; nt < kNTW; ++nt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                if (!((vbits >> (2 * nt + j)) & 1u)) s[nt][j] = s[nt][2 + j] = MJ_NEG_INF;
                mx0 = fmaxf(mx0, s[nt][j]);
                mx1 = fmaxf(mx1, s[nt][2 + j]);
            }
        mx0 = mj_warp_max4(mx0);
        mx1 = mj_warp_max4(mx1);
        if (t == 0) {
            s_stat[orow0 * kCG + cg] = mx0;
            s_stat[(orow0 + 8) * kCG + cg] = mx1;
        }
        }
        mj_bar_sync(kBarRg + (kQW == 8 ? rg : 0), kRgThreads);  // the warps sharing these rows
        if (!active) return;
        float tm0 = MJ_NEG_INF, tm1 = MJ_NEG_INF;
#pragma unroll
        for (int c = 0; c < kCG; ++c) {
            tm0 = fmaxf(tm0, s_stat[orow0 * kCG + c]);
            tm1 = fmaxf(tm1, s_stat[(orow0 + 8) * kCG + c]);
        }
        float ms0, ms1, al0, al1;
        mj_online_max2(m0, m1, tm0, tm1, sl2, ms0, ms1, al0, al1);
        float rs0 = 0.f, rs1 = 0.f;
        unsigned char* prow0 = smem + kOffP + orow0 * kN * 2;
        unsigned char* prow1 = prow0 + 8 * kN * 2;
#pragma unroll
        for (int nt = 0; nt < kNTW; ++nt) {
            const float p00 = mj_exp2(fmaf(s[nt][0], sl2, -ms0)), p01 = mj_exp2(fmaf(s[nt][1], sl2, -ms0));
            const float p10 = mj_exp2(fmaf(s[nt][2], sl2, -ms1)), p11 = mj_exp2(fmaf(s[nt][3], sl2, -ms1));
            rs0 += p00 + p01;
            rs1 += p10 + p11;
            const int ch = cg * kNTW + nt;
            *(mj_u32*)(prow0 + swz_p(orow0, ch) + t * 4) = mj_pack_bf16x2(p00, p01);
            *(mj_u32*)(prow1 + swz_p(orow0 + 8, ch) + t * 4) = mj_pack_bf16x2(p10, p11);
        }
        l0 = l0 * al0 + rs0;
        l1 = l1 * al1 + rs1;
        if (cg == 0 && t == 0) {
            s_alpha[orow0] = al0;
            s_alpha[orow0 + 8] = al1;
        }
    };
    auto rescale_and_pv = [&](mj_u32 stage) {
        float al[kOM][2];
        bool need = false;
#pragma unroll
        for (int mt = 0; mt < kOM; ++mt) {
            al[mt][0] = s_alpha[o_row0 + mt * 16 + g];
            al[mt][1] = s_alpha[o_row0 + mt * 16 + g + 8];
            need |= al[mt][0] != 1.f || al[mt][1] != 1.f;
        }
        if (__any_sync(0xffffffffu, need)) {
#pragma unroll
            for (int mt = 0; mt < kOM; ++mt)
#pragma unroll
                for (int nt = 0; nt < kON; ++nt) {
                    o[mt][nt][0] *= al[mt][0];
                    o[mt][nt][1] *= al[mt][0];
                    o[mt][nt][2] *= al[mt][1];
                    o[mt][nt][3] *= al[mt][1];
                }
        }
        if constexpr (MJ_MQA_DEV_SKIP != 1) pv_tile(o, pa, op, stage + va_off, oa);
    };
    auto zero_acc = [&](float (&acc)[kMTW][kNTW][4]) {
#pragma unroll
        for (int mt = 0; mt < kMTW; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNTW; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
    };

    if constexpr (kPP) {
        // ---- ping-pong: group rg (4 warps, heads 32*rg..) runs its own pipeline ----
        const int pair = rg * kCG + cg;
        // The pair's reduce-scatter slot inside its group's own P rows (free until that group's softmax).
        const mj_u32 xslot = sb + kOffP + rg * 32 * kN * 2 + cg * kNTW * 512 + lane * 16;
        int k = 0;
        // Gather tile number k + kS - 1 of the sequence into its slot, once that slot's previous tile is
        // done by both groups; this thread's share is its row.
        auto issue_next = [&]() {
            const int kn2 = k + kS - 1, slot2 = kn2 % kS;
            if (kn2 >= kS) mj_mbar_wait(mb_empty + 8 * slot2, (unsigned)((kn2 / kS - 1) & 1));
            issue_latent(slot2, pf);
            issue_rope(slot2);
            mj_cp_async_mbar_arrive_noinc(mb_full + 8 * slot2);
            t_issue = t_issue + 1;
            pf = fetch_idx(t_issue);
        };
        for (; t_cur < ntiles; ++k) {
            const int slot = k % kS;
            const int t_next = t_cur + 1;
            const bool have = t_issue < ntiles;
            // Group 1 follows group 0 by an S phase: by its tile start the slot to refill is free.
            if (rg == 1 && have) issue_next();
            mj_mbar_wait(mb_full + 8 * slot, (unsigned)((k / kS) & 1));
            mj_bar_sync(kBarRg + rg, 128);  // this group's P V of the previous tile is done (P, stats reusable)
            // S turns alternate: group 0 for tile k, group 1 for tile k, group 0 for tile k + 1, ...
            if constexpr (MJ_MQA_PP_TURNS != 0) {
                if (rg == 1) mj_bar_sync(kBarTurn + 1, kThreads);
                else if (k > 0) mj_bar_sync(kBarTurn, kThreads);
            }

            const mj_u32 stage = sb + kOffK + slot * kStageBytes;
            float acc[kMTW][kNTW][4];
            zero_acc(acc);
            if constexpr (MJ_MQA_DEV_SKIP != 2) {
                if (kh == 0) qk_steps<0, 18>(acc, qn, qr, stage + krow * 1024, stage + kN * 1024 + krow * 128, oa, ob);
                else qk_steps<18, 18>(acc, qn, qr, stage + krow * 1024, stage + kN * 1024 + krow * 128, oa, ob);
            }
            if constexpr (MJ_MQA_PP_TURNS != 0) {
                if (rg == 0) mj_bar_arrive(kBarTurn + 1, kThreads);
                else if (t_next < ntiles) mj_bar_arrive(kBarTurn, kThreads);
            }
            if (rg == 0 && have) issue_next();

            // Reduce-scatter in two rounds through the pair's slot: warp 0 sends its m-tile 1 partial, warp 1
            // adds it, then sends its m-tile 0 partial back into the same slot (each lane rewrites only what it
            // just read).
            float s[kNTW][4];
            if (kh == 0) {
#pragma unroll
                for (int nt = 0; nt < kNTW; ++nt)
                    mj_st_shared_v4f(xslot + nt * 512, acc[1][nt][0], acc[1][nt][1], acc[1][nt][2], acc[1][nt][3]);
            }
            // Validity of this thread's columns: slots before the key set's end.
            unsigned vbits = 0;
            {
                const int cbase = t_cur * kN + cg * kWN + 2 * t;
#pragma unroll
                for (int nt = 0; nt < kNTW; ++nt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) vbits |= (cbase + nt * 8 + j < nvalid ? 1u : 0u) << (2 * nt + j);
            }
            mj_bar_sync(kBarPair + pair, 64);
            if (kh == 1) {
#pragma unroll
                for (int nt = 0; nt < kNTW; ++nt) {
                    float r[4];
                    mj_ld_shared_v4f(r, xslot + nt * 512);
#pragma unroll
                    for (int i = 0; i < 4; ++i) s[nt][i] = acc[1][nt][i] + r[i];
                    mj_st_shared_v4f(xslot + nt * 512, acc[0][nt][0], acc[0][nt][1], acc[0][nt][2], acc[0][nt][3]);
                }
            }
            mj_bar_sync(kBarPair + pair, 64);
            if (kh == 0) {
#pragma unroll
                for (int nt = 0; nt < kNTW; ++nt) {
                    float r[4];
                    mj_ld_shared_v4f(r, xslot + nt * 512);
#pragma unroll
                    for (int i = 0; i < 4; ++i) s[nt][i] = acc[0][nt][i] + r[i];
                }
            }
            softmax(s, vbits, true);
            mj_bar_sync(kBarRg + rg, 128);  // this group's P rows and alphas are complete
            rescale_and_pv(stage);
            mj_mbar_arrive(mb_empty + 8 * slot);  // release: this thread's reads of the slot are done
            t_cur = t_next;
        }
    } else {
        // ---- lock-step ----
        int st = 0;
        for (; t_cur < ntiles; ++t_cur) {
            const int rs = st == 0 ? kS - 1 : st - 1;  // the slot refilled during this tile
            const bool have = t_issue < ntiles;
            if constexpr (kFp8) {
                // Raw slot st holds this tile: dequantize it into the K tile once every warp is done with the
                // previous tile (its P V read the K tile), then refill the raw slot kS tiles ahead.
                mj_cp_async_wait<kS - 1>();
                __syncthreads();
                dequant(st);
                __syncthreads();
                if (have) {
                    issue_raw(st, pf);
                    t_issue = t_issue + 1;
                    pf = fetch_idx(t_issue);
                }
                mj_cp_async_commit();
            } else {
                mj_cp_async_wait<2 * (kS - 2)>();
                // Slot st is visible to all; every warp is done with the previous tile (slot rs, P, row stats).
                __syncthreads();
                if (have) issue_latent(rs, pf);
                mj_cp_async_commit();
            }

            const mj_u32 stage = sb + kOffK + (kFp8 ? 0 : st * kStageBytes);
            float s[kNTW][4];
            unsigned vbits = 0;
            if (w < kQW) {
                float acc[kMTW][kNTW][4];
                zero_acc(acc);
                const mj_u32 kn = stage + krow * 1024;
                const mj_u32 kr = stage + kN * 1024 + krow * 128;
                if constexpr (kKH == 2) {
                    if constexpr (MJ_MQA_DEV_SKIP != 2) {
                        if (kh == 0) qk_steps<0, 18>(acc, qn, qr, kn, kr, oa, ob);
                        else qk_steps<18, 18>(acc, qn, qr, kn, kr, oa, ob);
                    }
                    // Reduce-scatter within the pair: warp kh keeps m-tile kh and receives the partner's half
                    // of it. Warp 0 of each pair writes into the P tile, warp 1 into the rope columns of slot rs
                    // (its rope gather is only issued after the block barrier below). A row group's P rows
                    // overlap only its own pairs' slots, whose reads precede the row-group barrier.
                    const int pair = rg * kCG + cg;
                    const mj_u32 rope_rs = kFp8 ? sb + kOffX : sb + kOffK + rs * kStageBytes + kN * 1024;
                    const mj_u32 xs = (kh == 0 ? sb + kOffP : rope_rs) + pair * kNTW * 512 + lane * 16;
                    const mj_u32 xr = (kh == 0 ? rope_rs : sb + kOffP) + pair * kNTW * 512 + lane * 16;
#pragma unroll
                    for (int nt = 0; nt < kNTW; ++nt)
                        mj_st_shared_v4f(xs + nt * 512, kh ? acc[0][nt][0] : acc[1][nt][0], kh ? acc[0][nt][1] : acc[1][nt][1],
                                         kh ? acc[0][nt][2] : acc[1][nt][2], kh ? acc[0][nt][3] : acc[1][nt][3]);
                    mj_bar_sync(kBarPair + pair, 64);
#pragma unroll
                    for (int nt = 0; nt < kNTW; ++nt) {
                        float r[4];
                        mj_ld_shared_v4f(r, xr + nt * 512);
#pragma unroll
                        for (int i = 0; i < 4; ++i) s[nt][i] = (kh ? acc[1][nt][i] : acc[0][nt][i]) + r[i];
                    }
                } else {
                    if constexpr (MJ_MQA_DEV_SKIP != 2) qk_steps<0, 36>(acc, qn, qr, kn, kr, oa, ob);
#pragma unroll
                    for (int nt = 0; nt < kNTW; ++nt)
#pragma unroll
                        for (int i = 0; i < 4; ++i) s[nt][i] = acc[0][nt][i];
                }
                if constexpr (kFp8) {
                    // Slots before the key set's end (the raw slot's next tile is already in flight).
                    const int cbase = t_cur * kN + cg * kWN + 2 * t;
#pragma unroll
                    for (int nt = 0; nt < kNTW; ++nt)
#pragma unroll
                        for (int j = 0; j < 2; ++j) vbits |= (cbase + nt * 8 + j < nvalid ? 1u : 0u) << (2 * nt + j);
                } else {
                    // Invalid keys were zero-filled; their flags come from the loaders.
                    const unsigned char* vflag = s_vm + st * kN + cg * kWN + 2 * t;
#pragma unroll
                    for (int nt = 0; nt < kNTW; ++nt) {
                        const unsigned f2 = *(const unsigned short*)(vflag + nt * 8);  // columns 2t, 2t+1
                        vbits |= ((f2 & 0xffu) ? 1u : 0u) << (2 * nt);
                        vbits |= ((f2 >> 8) ? 1u : 0u) << (2 * nt + 1);
                    }
                }
            }
            softmax(s, vbits, w < kQW);  // idle S warps still take part in the row-group barrier
            // P and alpha complete; every exchange read is done, so slot rs's rope columns may be gathered into.
            __syncthreads();
            if constexpr (!kFp8) {
                if (have) {
                    issue_rope(rs);
                    t_issue = t_issue + 1;
                    pf = fetch_idx(t_issue);  // consumed one tile later: its latency hides behind this tile's math
                }
                mj_cp_async_commit();
            }
            rescale_and_pv(stage);
            st = st + 1 == kS ? 0 : st + 1;
        }
    }

    // ---- epilogue ----
    mj_cp_async_wait<0>();
    __syncthreads();  // all math done: row-stat scratch and the Q region are free
    if (w < kQW) {
        l0 = mj_warp_sum4(l0);
        l1 = mj_warp_sum4(l1);
        if (t == 0) {
            s_stat[orow0 * kCG + cg] = l0;
            s_stat[(orow0 + 8) * kCG + cg] = l1;
        }
    }
    __syncthreads();
    if (w < kQW && cg == 0 && t == 0) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int r = orow0 + 8 * hr;
            const float m = hr ? m1 : m0;
            float L = 0.f;
#pragma unroll
            for (int c = 0; c < kCG; ++c) L += s_stat[r * kCG + c];
            if (head0 + r < nh) {
                p.lse[(mj_i64)tok * p.lse_stride_tok + head0 + r] = L > 0.f ? (mj_log2(L) + m * sl2) * MJ_LN2 : MJ_NEG_INF;
                if (p.max_logits)  // optional output (the API allows NULL)
                    p.max_logits[(mj_i64)tok * p.ml_stride_tok + head0 + r] = L > 0.f ? m * p.sm_scale : MJ_NEG_INF;
            }
        }
    }
    // Normalize and stage O (bf16 [kH][512], swizzled) in the Q region for 16-byte stores.
#pragma unroll
    for (int mt = 0; mt < kOM; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
            const int r = o_row0 + mt * 16 + g + 8 * hr;
            float L = 0.f;
#pragma unroll
            for (int c = 0; c < kCG; ++c) L += s_stat[r * kCG + c];
            const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
            for (int nt = 0; nt < kON; ++nt)
                *(mj_u32*)(smem + r * 1024 + swz(r, o_col0 / 8 + nt) + t * 4) =
                    mj_pack_bf16x2(o[mt][nt][2 * hr] * inv, o[mt][nt][2 * hr + 1] * inv);
        }
    __syncthreads();
    unsigned char* otok = (unsigned char*)p.out + (mj_i64)tok * p.o_stride_tok * 2;
#pragma unroll
    for (int i0 = 0; i0 < kH * 64; i0 += kThreads) {
        const int i = i0 + tid;
        const int r = i >> 6, c = i & 63;
        if (head0 + r < nh) {
            mj_u32 v[4];
            mj_ld_shared_v4(v, sb + r * 1024 + swz(r, c));
            mj_st_global_v4(otok + ((mj_i64)(head0 + r) * p.o_stride_head + c * 8) * 2, v);
        }
    }
}
