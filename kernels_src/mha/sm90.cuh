// mlajit MHA prefill forward, Hopper tier (sm_90a: TMA, mbarriers, wgmma, setmaxnreg).
// Same contract as the portable tier (MhaFwdParams in mlajit_abi.h: varlen, bottom-right causal, optional
// top-k bitmask, fp32 lse), with five TMA tensor maps added by the host (MhaFwdSm90Params; the mask's only
// when masked: it needs a 16-byte aligned mask with a row stride that is a multiple of 4 words).
//
// Schedule (one block = 128 queries of one (request, head); 3 warpgroups):
//   warpgroup 0, one thread: TMA producer. Q once, then per key tile K = [k_nope | k_pe] (three 64-column
//     boxes; a shared k_pe is one load per tile, no broadcast copy) and V (two boxes), MJ_STAGES deep.
//     K and V complete on separate mbarriers so that Q K^T can start before V has landed.
//   warpgroups 1 and 2: 64 query rows each. Per tile: S = Q K^T (12 wgmma m64n128k16, both operands
//     from shared memory), causal / mask, online softmax in registers, O += P V (8 wgmma with P from
//     registers, V N-major from shared memory). Intra-warpgroup overlap: the Q K^T of tile i is issued
//     together with the P V of tile i-1, so the softmax of tile i runs while the tensor cores finish
//     P V(i-1). MJ_PINGPONG=1 also orders the two warpgroups' GEMM issue through named barriers, so one
//     warpgroup's softmax overlaps the other's GEMMs.
//   Epilogue: O normalized, staged through the warpgroup's own (dead) Q rows, 16-byte coalesced stores.
//   MJ_MASKED = 1 adds, on the same code path (everything else is the dense kernel's, literally):
//     - a per-block bitmap of the key tiles any row attends (tile skipping), built before the loop;
//     - the mask words of each visited tile (128 rows x 4 words, 2 KiB) as one more TMA box beside its K
//       boxes, on K's full barrier (a fifth tensor map, tm_mask); the consumers read their two rows with
//       two 16-byte shared loads and apply a compacted bit test (two integer instructions per 32-key word,
//       then one predicate and one select per score) on every tile, and the dense causal test on the
//       tiles crossing the diagonal. (Until 2026-12-03 evening the producer warpgroup's warps 1-3 copied
//       the words by cp.async into a stage of their own, with its own full / empty barriers.)
//
// SUPPORTED CONFIGS (MJ_BLOCK_M, MJ_BLOCK_N, MJ_STAGES, MJ_PINGPONG): (128, 128, 2, 0|1)
//   shared memory 209.5 KiB (Q 48 KiB + 2 x (K 48 KiB + V 32 KiB) + alignment and barriers), + 4 KiB of
//   mask stages when MJ_MASKED (the host adds MASK_STAGE_BYTES_TOTAL: src/ops/kernel_configs.cpp);
//   shapes MJ_D_NOPE = 128, MJ_D_ROPE = 64, MJ_D_V = 128; MJ_MASKED in {0, 1}; MJ_ARCH == 90 (sm_90a).
//
// Input requirements (the host checks them): base pointers 16-byte aligned, token and head strides
// multiples of 8 elements (TMA strides are multiples of 16 bytes); masked, a mask row stride of a
// multiple of 4 words (src/ops/mha_sm90_maps.h: mha_sm90_mask_ok; the host runs the portable tier if not). Tiles are read with TMA boxes that
// may extend past a request's last key or query into the next request's rows (or are zero-filled past
// the tensor): such keys are masked by the causal test before the softmax, so they contribute P = 0,
// and such query rows are never stored. Masked tile skipping covers the first 64*32*MJ_BLOCK_N keys of
// a request (a 256-byte bitmap); tiles past that are always visited (still correct, only not skipped).
#pragma once
// The shared Hopper wrappers (kernels_src/sm90.cuh). NVRTC resolves this by header name, as the runtime
// passes it; a compiler that searches the including file's folder first (nvcc) finds this file instead,
// which #pragma once makes a no-op: such builds include kernels_src/sm90.cuh before this file
// (tools/dev/mha/wrap_mha90.cu does).
#include "sm90.cuh"
#include "mha/tile_bitmap.cuh"

static_assert(MJ_ARCH == 90, "mha_fwd_sm90: the Hopper tier needs sm_90a (wgmma, setmaxnreg)");
static_assert(MJ_D_NOPE == 128 && MJ_D_ROPE == 64 && MJ_D_V == 128,
              "mha_fwd_sm90: only d_nope 128, d_rope 64, d_v 128 (DeepSeek MLA after up-projection)");
static_assert(MJ_BLOCK_M == 128 && MJ_BLOCK_N == 128, "mha_fwd_sm90: only 128 x 128 tiles (2 consumer warpgroups)");
static_assert(MJ_STAGES == 2, "mha_fwd_sm90: MJ_STAGES must be 2");
static_assert(MJ_MASKED == 0 || MJ_MASKED == 1, "mha_fwd_sm90: MJ_MASKED must be 0 or 1");
static_assert(MJ_PINGPONG == 0 || MJ_PINGPONG == 1, "mha_fwd_sm90: MJ_PINGPONG must be 0 or 1");

namespace mj_mha90 {

constexpr int BM = MJ_BLOCK_M;
constexpr int BN = MJ_BLOCK_N;
constexpr int ST = MJ_STAGES;
constexpr int NT = mj_mha90_threads(BM);
constexpr int DQK = MJ_D_NOPE + MJ_D_ROPE;
constexpr int BOX_Q = BM * 128;  // bytes of one 64-column box of the Q tile (rows of 128 B)
constexpr int BOX_K = BN * 128;  // ... of a K or V tile
constexpr int OFF_K = 3 * BOX_Q;
constexpr int STAGE_BYTES = 5 * BOX_K;  // k_nope (2 boxes), k_pe (1), v (2)
constexpr int OFF_V = 3 * BOX_K;        // inside a stage
constexpr int OFF_BAR = OFF_K + ST * STAGE_BYTES;
constexpr int OFF_BITMAP = OFF_BAR + 256;
constexpr int BITMAP_WORDS = 64;
constexpr int BITMAP_TILES = BITMAP_WORDS * 32;
static_assert(1024 + OFF_BITMAP + 4 * BITMAP_WORDS == mj_mha90_smem_bytes(BM, BN, ST, DQK, MJ_D_V),
              "mha_fwd_sm90: shared-memory layout disagrees with mj_mha90_smem_bytes");
constexpr int WPT = BN / 32;  // mask words per key tile and row
// Masked only: the mask words of a key tile ([BM rows][WPT words], 16 B a row) travel with its K boxes: one
// more TMA box per K stage (2 KiB), on the same full barrier, into a stage after the bitmap.
constexpr int OFF_MSTAGE = OFF_BITMAP + 4 * BITMAP_WORDS;
constexpr int MSTAGE_BYTES = BM * WPT * 4;
constexpr int MASK_STAGE_BYTES_TOTAL = ST * MSTAGE_BYTES;
static_assert(WPT == 4 && OFF_MSTAGE % 128 == 0, "mask stage rows are one 16-byte vector; TMA wants 128-byte aligned boxes");
static_assert(MASK_STAGE_BYTES_TOTAL == 4096, "the host adds 4096 bytes of shared memory for the mask stages");
// Register split after setmaxnreg: the consumers hold S (64), O (64) and P (32) fp32/bf16x2 registers per
// thread; the producer warpgroup needs few. 24 * 128 + 240 * 256 = 64512 = 168 * 384, the launch allocation.
constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
// Harness-only breakdown knob (never set by the runtime): 1 = mask stage kept, bit test compiled out (the
// dense causal test only); 2 = bit test kept, no mask box (words from a register); 4 = no tile-bitmap scan
// (every tile visited: correct, only no tile skipping); 8 = the 2026-12-03 bit test (one R2P + FSEL per
// score on the raw words) instead of the compacted one. 1 and 2 give wrong outputs.
#ifndef MJ_MASK_EXP
#define MJ_MASK_EXP 0
#endif
constexpr bool MASK_STAGE = MJ_MASKED && MJ_MASK_EXP != 2;
constexpr bool MASK_APPLY = MJ_MASKED && MJ_MASK_EXP != 1;
constexpr bool MASK_COMPACT = MJ_MASK_EXP != 8;
// Masked: tile 0 is always visited (its bitmap bit is forced: an empty tile 0 costs one tile of work), so
// its K, V and mask words are issued before the tile-bitmap scan, as early as the dense kernel issues them.
constexpr bool EARLY_TILE0 = MJ_MASKED;
// Bytes that complete a K stage's full barrier: three 64-column K boxes, and the mask box when masked.
constexpr unsigned K_STAGE_TX = 3 * BOX_K + (MASK_STAGE ? MSTAGE_BYTES : 0);
// Named barriers (0 is __syncthreads): 1, 2 = GEMM-issue turns of consumer 0 / 1; 3, 4 = their epilogues.
constexpr int BAR_TURN = 1, BAR_EPI = 3;

MJ_DEVICE void st_shared_b32(unsigned addr, unsigned v) { asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }
MJ_DEVICE void ld_shared_v4(unsigned r[4], unsigned addr) {
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
MJ_DEVICE void st_global_v4(void* p, const unsigned r[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
template <int N>
MJ_DEVICE void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) mj90::reg_fence(r[i]);
}


// The kernel's body, dense and masked. P is the kernel's __grid_constant__ parameter: the tensor maps are
// used in place, from parameter space.
MJ_DEVICE void fwd(const MhaFwdSm90Params& P) {
    using namespace mj90;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // TMA's 128-byte swizzle repeats every 1024 bytes and the wgmma descriptors assume tiles start on
    // that period: align explicitly (the allocation has 1024 bytes of slack for it).
    unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    const MhaFwdParams& p = P.p;

    const int tid = threadIdx.x, lane = tid & 31, wg = tid >> 7;
    // Longest causal rows first: the last query blocks of a request have the most keys, so launching them
    // first leaves the short ones to fill the tail of the grid.
    const int m_block = gridDim.x - 1 - blockIdx.x;
    const int head = blockIdx.y, b = blockIdx.z;
    const int q_start = p.cu_seqlens_q[b];
    const int s_q = p.cu_seqlens_q[b + 1] - q_start;
    const int m0 = m_block * BM;
    if (m0 >= s_q) return;
    const int k_start = p.cu_seqlens_k[b];
    const int s_k = p.cu_seqlens_k[b + 1] - k_start;
    const int off = s_k - s_q;  // key position of local query 0 (bottom-right alignment)
    const int rows = min(BM, s_q - m0);
    const int last_q = off + m0 + rows - 1;  // the furthest key any row of this block may see
    const int n_tiles = last_q < 0 ? 0 : min(last_q / BN + 1, (s_k + BN - 1) / BN);

    unsigned long long* bar_q = (unsigned long long*)(smem + OFF_BAR);
    unsigned long long* bar_k = bar_q + 1;        // [ST]: K boxes of a stage landed
    unsigned long long* bar_v = bar_k + ST;       // [ST]: V boxes of a stage landed
    // [ST] each: both consumers are done with a stage's K / V. K and V are released separately: K after the
    // Q K^T that read it, V only after the P V one iteration later, so the next K load starts a whole
    // iteration earlier than a joint release would allow.
    unsigned long long* bar_empty_k = bar_v + ST;
    unsigned long long* bar_empty_v = bar_empty_k + ST;
    // The last key tile of a request whose length is not a multiple of BN: TMA fills its rows past the
    // request's end with the next request's keys. Their scores are masked (P = 0), but 0 * a NaN or inf in
    // those V rows would still reach this request's output, so the producer zeroes those V rows once the
    // tile has landed and arrives here; the consumers' last P V waits for it.
    unsigned long long* bar_vz = bar_empty_v + ST;
    unsigned* bitmap = (unsigned*)(smem + OFF_BITMAP);
    if (tid == 0) {
        mbar_init(bar_q, 1);
        for (int s = 0; s < ST; ++s) {
            mbar_init(&bar_k[s], 1);
            mbar_init(&bar_v[s], 1);
            mbar_init(&bar_empty_k[s], 2 * 128);
            mbar_init(&bar_empty_v[s], 2 * 128);
        }
        mbar_init(bar_vz, 1);
        fence_barrier_init();
        // Q first: it depends on nothing, so its load overlaps the masked variant's tile scan below.
        const TensorMap* tm_q = reinterpret_cast<const TensorMap*>(&P.tm_q);
        mbar_arrive_expect_tx(bar_q, 3 * BOX_Q);
#pragma unroll
        for (int i = 0; i < 3; ++i) tma_load_3d(smem + i * BOX_Q, tm_q, bar_q, 64 * i, head, q_start + m0);
        if (EARLY_TILE0 && n_tiles > 0) {  // masked: tile 0's K, mask and V too, not after the tile-bitmap scan
            unsigned char* sk = smem + OFF_K;
            const TensorMap* tm_kn = reinterpret_cast<const TensorMap*>(&P.tm_k_nope);
            const TensorMap* tm_kp = reinterpret_cast<const TensorMap*>(&P.tm_k_pe);
            const TensorMap* tm_v = reinterpret_cast<const TensorMap*>(&P.tm_v);
            mbar_arrive_expect_tx(&bar_k[0], K_STAGE_TX);
            tma_load_3d(sk, tm_kn, &bar_k[0], 0, head, k_start);
            tma_load_3d(sk + BOX_K, tm_kn, &bar_k[0], 64, head, k_start);
            tma_load_3d(sk + 2 * BOX_K, tm_kp, &bar_k[0], 0, P.kp_shared ? 0 : head, k_start);
            if constexpr (MASK_STAGE)
                tma_load_2d(smem + OFF_MSTAGE, reinterpret_cast<const TensorMap*>(&P.tm_mask), &bar_k[0], 0, q_start + m0);
            mbar_arrive_expect_tx(&bar_v[0], 2 * BOX_K);
            tma_load_3d(sk + OFF_V, tm_v, &bar_v[0], 0, head, k_start);
            tma_load_3d(sk + OFF_V + BOX_K, tm_v, &bar_v[0], 64, head, k_start);
        }
    }

    // ---- masked: which key tiles does any row of this block attend? (the first 256 threads) ----
    const unsigned* gmask = p.mask + (mj_i64)(q_start + m0) * p.mask_stride_row;
    const int n_mwords = (s_k + 31) >> 5;  // mask words of a row that can hold bits of this request
    if (MJ_MASKED) {
        constexpr int PT = 256;
        // Tiles crossing the block's causal band (not wholly visible to its first row) are visited without
        // a scan: a column of mask words there is zero for every row above the diagonal, so scanning it
        // would walk row batch after row batch (one memory round trip each) before finding a bit.
        const int full_tiles = min(max(off + m0 + 1, 0) / BN, n_tiles);
        for (int i = tid; i < BITMAP_WORDS; i += NT) {
            const int lo = max(i * 32, MJ_MASK_EXP == 4 ? 0 : full_tiles), hi = min(i * 32 + 32, n_tiles);
            bitmap[i] = (lo < hi ? (hi - lo == 32 ? ~0u : (1u << (hi - lo)) - 1u) << (lo - i * 32) : 0u) |
                        (EARLY_TILE0 && i == 0 && n_tiles > 0 ? 1u : 0u);  // tile 0: always visited (loaded already)
        }
        __syncthreads();
        if (tid < PT && MJ_MASK_EXP != 4) {
            const int words = min(min(full_tiles, BITMAP_TILES) * WPT, n_mwords);
            mj_tile_bitmap::or_mask_columns<PT, WPT>(bitmap, gmask, p.mask_stride_row, rows, words, tid);
        }
    }
    __syncthreads();
    // The key tiles the block visits, in order; producer and consumers walk the same sequence.
    auto next_tile = [&](int t) -> int {  // the first tile after t that the block must visit, or -1
        if constexpr (MJ_MASKED) return mj_tile_bitmap::next_visited_tile<BITMAP_TILES>(bitmap, t, n_tiles);
        return t + 1 < n_tiles ? t + 1 : -1;
    };

    if (wg == 0) {
        // ================================ producer ================================
        setmaxnreg_dec<PRODUCER_REGS>();
        if (tid == 0) {
            const TensorMap* tm_kn = reinterpret_cast<const TensorMap*>(&P.tm_k_nope);
            const TensorMap* tm_kp = reinterpret_cast<const TensorMap*>(&P.tm_k_pe);
            const TensorMap* tm_v = reinterpret_cast<const TensorMap*>(&P.tm_v);
            const int kp_head = P.kp_shared ? 0 : head;
            int i = 0, last = -1;
            for (int tile = next_tile(-1); tile >= 0; last = tile, tile = next_tile(tile), ++i) {
                if (EARLY_TILE0 && i == 0) continue;  // tile 0 (always the first: its bit is forced) is loading
                const int s = i % ST;
                const unsigned free_parity = ((i / ST) & 1) ^ 1;  // the release of this stage's previous use
                unsigned char* sk = smem + OFF_K + s * STAGE_BYTES;
                const int row = k_start + tile * BN;
                if (i >= ST) mbar_wait(&bar_empty_k[s], free_parity);
                mbar_arrive_expect_tx(&bar_k[s], K_STAGE_TX);
                tma_load_3d(sk, tm_kn, &bar_k[s], 0, head, row);
                tma_load_3d(sk + BOX_K, tm_kn, &bar_k[s], 64, head, row);
                tma_load_3d(sk + 2 * BOX_K, tm_kp, &bar_k[s], 0, kp_head, row);
                if constexpr (MASK_STAGE)  // the tile's mask words, [BM rows][WPT words] from (row q_start + m0, word WPT * tile)
                    tma_load_2d(smem + OFF_MSTAGE + s * MSTAGE_BYTES, reinterpret_cast<const TensorMap*>(&P.tm_mask), &bar_k[s],
                                WPT * tile, q_start + m0);
                if (i >= ST) mbar_wait(&bar_empty_v[s], free_parity);
                mbar_arrive_expect_tx(&bar_v[s], 2 * BOX_K);
                tma_load_3d(sk + OFF_V, tm_v, &bar_v[s], 0, head, row);
                tma_load_3d(sk + OFF_V + BOX_K, tm_v, &bar_v[s], 64, head, row);
            }
            if (last >= 0 && (last + 1) * BN > s_k) {  // the request's partial last tile (see bar_vz)
                const int s = (i - 1) % ST;
                mbar_wait(&bar_v[s], ((i - 1) / ST) & 1);
                const int valid = s_k - last * BN;  // rows of this request in the tile
                unsigned char* sv = smem + OFF_K + s * STAGE_BYTES + OFF_V;
                // Whole 128-byte rows: the 128-byte swizzle permutes 16-byte chunks within a row only.
                for (int box = 0; box < 2; ++box)
                    for (int off16 = valid * 128; off16 < BN * 128; off16 += 16)
                        *reinterpret_cast<uint4*>(sv + box * BOX_K + off16) = make_uint4(0u, 0u, 0u, 0u);
                fence_proxy_async();  // the generic-proxy zeros, before the wgmma (async proxy) reads them
                mbar_arrive(bar_vz);
            }
        }
        return;
    }

    // ================================ consumers ================================
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;              // consumer index: query rows 64c..64c+63 of the block
    const int ctid = tid - 128 * wg;   // thread inside the warpgroup
    const int cw = ctid >> 5;          // warp inside the warpgroup: rows 16cw..16cw+15 of the 64
    const int g = lane >> 2, qd = lane & 3;
    const int r_w = m0 + 64 * c + 16 * cw;  // first local query row of this warp
    const int w_min_q = off + r_w;          // its key position
    const int qpos0 = w_min_q + g, qpos1 = qpos0 + 8;
    const float sl2 = p.sm_scale_log2;

    // Q descriptors (K-major, 128-byte swizzle, 8-row groups 1024 B apart); k-step ks reads box ks / 4 at
    // byte 32 * (ks % 4) of each row: +2 in the descriptor's 16-byte address units.
    unsigned long long qdesc[3];
#pragma unroll
    for (int kb = 0; kb < 3; ++kb) qdesc[kb] = smem_desc(smem + kb * BOX_Q + c * 64 * 128, 128, 1024, 0);

    float o[64];
#pragma unroll
    for (int j = 0; j < 64; ++j) o[j] = 0.f;
    float s[64];
    unsigned pf[BN / 16][4];
    float row_max[2] = {MJ_NEG_INF, MJ_NEG_INF};  // raw (unscaled) running max of the two rows
    float row_sum[2] = {0.f, 0.f};                // this thread's partial sums; quad-reduced at the end

    auto issue_qk = [&](int stage) {
        unsigned char* sk = smem + OFF_K + stage * STAGE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < DQK / 16; ++ks) {
            const unsigned long long kd = smem_desc(sk + (ks / 4) * BOX_K, 128, 1024, 0) + 2 * (ks % 4);
            wgmma_m64n128k16_ss<0>(s, qdesc[ks / 4] + 2 * (ks % 4), kd, ks > 0);
        }
        wgmma_commit();
    };
    auto issue_pv = [&](int stage) {
        // V tile: [key][dv] rows of 128 B per 64-column box = B in N-major form: 8-key groups 1024 B apart
        // (stride offset), the second 64-column box BOX_K further (leading offset); k16 step = 16 rows.
        unsigned char* sv = smem + OFF_K + stage * STAGE_BYTES + OFF_V;
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) wgmma_m64n128k16_rs<1>(o, pf[t], smem_desc(sv + t * 16 * 128, 128, 1024, BOX_K), 1);
        wgmma_commit();
    };
    // Masked: this thread's two rows of a stage's mask words ([k] row g, [WPT + k] row g + 8): two 16-byte
    // shared loads (the four threads of a quad read the same row: a broadcast), issued right after the
    // GEMMs (the stage's full barrier was waited on with K's) and before the K stage is handed back.
    unsigned mw[2 * WPT];
    const unsigned mstage_row0 = smem_u32(smem + OFF_MSTAGE) + (r_w - m0 + g) * 16;
    auto load_mask_stage = [&](int stage, int tile) {
        if constexpr (MASK_STAGE) {
            ld_shared_v4(mw, mstage_row0 + stage * MSTAGE_BYTES);
            ld_shared_v4(mw + WPT, mstage_row0 + stage * MSTAGE_BYTES + 8 * 16);
        } else if constexpr (MJ_MASKED) {  // MJ_MASK_EXP 2: words the compiler cannot fold, no stage
#pragma unroll
            for (int k = 0; k < 2 * WPT; ++k) mw[k] = ~0u >> ((tile >> 24) + k);
        }
    };
    // The compacted mask test: of a 32-key word this thread needs the 8 bits 8 jj + 2 qd + t (jj < 4,
    // t < 2: its columns). AND with cm keeps them (byte jj holds its pair at bit 2 qd), and the multiply
    // by cmul moves byte jj's pair to bits 24 + 2 jj: cmul = sum over jj of 2^(24 - 6 jj - 2 qd), and the
    // other 12 partial products land below bit 24 in disjoint 2-bit fields (no carries) or past bit 31.
    // So bit 24 + 2 jj + t of (w & cm) * cmul is column 8 jj + 2 qd + t: one LOP3 and one IMAD per word,
    // then a predicate per bit of one byte (R2P) and one FSEL per score.
    const unsigned cm = 0x03030303u << (2 * qd);
    const unsigned cmul = ((1u << 24) | (1u << 18) | (1u << 12) | (1u << 6)) >> (2 * qd);
    // Causal limit and mask on S, then the online-softmax statistics; S becomes exp2 values in place and
    // alpha the factor that rescales what O and the row sums held before this tile.
    float alpha[2];
    auto softmax = [&](int tile) {
        const int n0 = tile * BN;
        const bool diag = n0 + BN - 1 > w_min_q;  // only tiles crossing some row's diagonal need the causal test
        if constexpr (MASK_APPLY && MASK_COMPACT) {
            // Mask bits on every tile (compacted test above); the causal limit (and the request's end) on the
            // diagonal tiles below, as in the dense kernel.
#pragma unroll
            for (int k = 0; k < 2 * WPT; ++k) {
                const unsigned c = (mw[k] & cm) * cmul;
#pragma unroll
                for (int b = 0; b < 8; ++b)
                    if (!((c >> (24 + b)) & 1u)) s[4 * (4 * (k % WPT) + (b >> 1)) + (k < WPT ? 0 : 2) + (b & 1)] = MJ_NEG_INF;
            }
        } else if constexpr (MASK_APPLY) {  // knob 8: the 2026-12-03 test on the raw words
            unsigned m[2 * WPT];
#pragma unroll
            for (int k = 0; k < 2 * WPT; ++k) m[k] = mw[k] >> (qd * 2);
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (!((m[(e < 2 ? 0 : WPT) + (j >> 2)] >> ((j & 3) * 8 + (e & 1))) & 1u)) s[4 * j + e] = MJ_NEG_INF;
        }
        if (diag) {
            const int lim0 = qpos0 - n0 - qd * 2, lim1 = qpos1 - n0 - qd * 2;  // last allowed key - 2 qd
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (j * 8 + (e & 1) > (e < 2 ? lim0 : lim1)) s[4 * j + e] = MJ_NEG_INF;
        }
        float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            mx[0] = fmaxf(mx[0], fmaxf(s[4 * j], s[4 * j + 1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
        float msub[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            mx[i] = mj_warp_max4(mx[i]);
            // A row with nothing attended so far keeps max -inf; subtracting 0 instead keeps
            // exp2(-inf - -inf) = NaN out of both the scores and the rescale factor.
            msub[i] = mx[i] == MJ_NEG_INF ? 0.f : mx[i] * sl2;
            alpha[i] = mj_exp2(row_max[i] * sl2 - msub[i]);
            row_max[i] = mx[i];
        }
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[4 * j + e] = mj_exp2(fmaf(s[4 * j + e], sl2, -msub[e >> 1]));
            sum[0] += s[4 * j] + s[4 * j + 1];
            sum[1] += s[4 * j + 2] + s[4 * j + 3];
        }
        row_sum[0] = row_sum[0] * alpha[0] + sum[0];
        row_sum[1] = row_sum[1] * alpha[1] + sum[1];
    };
    // After the P V that read the previous P has completed: rescale O, pack this tile's P as the A
    // fragments of the next P V (S's 8-column blocks 2t, 2t+1 are exactly the k16 step t).
    auto rescale_and_pack = [&]() {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            o[4 * j] *= alpha[0];
            o[4 * j + 1] *= alpha[0];
            o[4 * j + 2] *= alpha[1];
            o[4 * j + 3] *= alpha[1];
        }
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) {
            pf[t][0] = mj_pack_bf16x2(s[8 * t], s[8 * t + 1]);
            pf[t][1] = mj_pack_bf16x2(s[8 * t + 2], s[8 * t + 3]);
            pf[t][2] = mj_pack_bf16x2(s[8 * t + 4], s[8 * t + 5]);
            pf[t][3] = mj_pack_bf16x2(s[8 * t + 6], s[8 * t + 7]);
        }
    };
    // Ping-pong: a warpgroup issues its GEMMs only in its turn and hands the turn over right after, so the
    // two warpgroups' softmaxes interleave with each other's tensor-core work. Both walk the same tiles,
    // so both have the same number of turns; consumer 1 gives consumer 0 the first turn and skips its
    // hand-over after its last turn, which leaves every barrier balanced.
    auto turn_begin = [&]() {
        if constexpr (MJ_PINGPONG) named_bar_sync(BAR_TURN + c, 256);
    };
    auto turn_end = [&](bool last) {
        if constexpr (MJ_PINGPONG) {
            if (!(last && c == 1)) named_bar_arrive(BAR_TURN + (c ^ 1), 256);
        }
    };

    mbar_wait(bar_q, 0);
    int tile = next_tile(-1);
    if (tile >= 0) {
        if (MJ_PINGPONG && c == 1) named_bar_arrive(BAR_TURN + 0, 256);
        // tile 0: S only
        mbar_wait(&bar_k[0], 0);
        turn_begin();
        issue_qk(0);
        turn_end(false);
        load_mask_stage(0, tile);
        // The next tile to visit, looked up while the tensor cores run Q K^T: masked, next_tile is a shared
        // load of a bitmap word and a few dependent integer steps, which at the end of the iteration sat on
        // the chain from one GEMM issue to the next (2026-12-03 evening: ~7 % of a masked tile at h16 S8k).
        int nxt = next_tile(tile);
        wgmma_wait<0>();
        fence_regs(s);
        mbar_arrive(&bar_empty_k[0]);
        softmax(tile);
        rescale_and_pack();
        int prev_stage = 0;
        unsigned prev_phase = 0;
        int i = 1, last = tile;
        for (tile = nxt; tile >= 0; last = tile, tile = nxt, ++i) {
            const int stage = i % ST;
            const unsigned phase = (i / ST) & 1;
            mbar_wait(&bar_k[stage], phase);
            turn_begin();
            issue_qk(stage);
            mbar_wait(&bar_v[prev_stage], prev_phase);
            issue_pv(prev_stage);
            turn_end(false);
            load_mask_stage(stage, tile);
            nxt = next_tile(tile);
            wgmma_wait<1>();  // S of this tile done; P V of the previous one may still run
            fence_regs(s);
            mbar_arrive(&bar_empty_k[stage]);
            softmax(tile);
            wgmma_wait<0>();
            fence_regs(o);
            mbar_arrive(&bar_empty_v[prev_stage]);
            rescale_and_pack();
            prev_stage = stage;
            prev_phase = phase;
        }
        mbar_wait(&bar_v[prev_stage], prev_phase);
        if ((last + 1) * BN > s_k) mbar_wait(bar_vz, 0);  // its V rows past the request zeroed
        turn_begin();
        issue_pv(prev_stage);
        turn_end(true);
        wgmma_wait<0>();
        fence_regs(o);
        mbar_arrive(&bar_empty_v[prev_stage]);
    }

    // ---- epilogue: normalize, stage through this warpgroup's (dead) Q rows, 16-byte coalesced stores ----
    float inv[2], lse[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float l = mj_warp_sum4(row_sum[i]);
        inv[i] = l > 0.f ? 1.f / l : 0.f;
        lse[i] = l > 0.f ? (row_max[i] * sl2 + mj_log2(l)) * MJ_LN2 : MJ_NEG_INF;
    }
    // O columns 0-63 go to the rows of Q box 0, 64-127 to box 1, chunks XOR-swizzled by row like the TMA's.
    const unsigned sO = smem_u32(smem) + c * 64 * 128;
    const int rl0 = 16 * cw + g, rl1 = rl0 + 8;  // rows inside the warpgroup's 64
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const unsigned box = sO + (j >> 3) * BOX_Q;
        st_shared_b32(box + rl0 * 128 + (((j & 7) ^ (rl0 & 7)) << 4) + qd * 4, mj_pack_bf16x2(o[4 * j] * inv[0], o[4 * j + 1] * inv[0]));
        st_shared_b32(box + rl1 * 128 + (((j & 7) ^ (rl1 & 7)) << 4) + qd * 4,
                      mj_pack_bf16x2(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]));
    }
    named_bar_sync(BAR_EPI + c, 128);
    const int r_c = m0 + 64 * c;  // first local query row of this warpgroup
    mj_bf16* gout = (mj_bf16*)p.out + (mj_i64)head * p.o_stride_head;
#pragma unroll
    for (int it = 0; it < 8; ++it) {
        const int r = it * 8 + (ctid >> 4), c16 = ctid & 15;
        if (r_c + r < s_q) {
            unsigned v4[4];
            ld_shared_v4(v4, sO + (c16 >> 3) * BOX_Q + r * 128 + (((c16 & 7) ^ (r & 7)) << 4));
            st_global_v4(gout + (mj_i64)(q_start + r_c + r) * p.o_stride_tok + c16 * 8, v4);
        }
    }
    if (qd == 0) {
        float* gl = p.lse + (mj_i64)head * p.lse_stride_head;
        if (r_w + g < s_q) gl[(mj_i64)(q_start + r_w + g) * p.lse_stride_tok] = lse[0];
        if (r_w + g + 8 < s_q) gl[(mj_i64)(q_start + r_w + g + 8) * p.lse_stride_tok] = lse[1];
    }
}
}  // namespace mj_mha90

extern "C" __global__ void __launch_bounds__(mj_mha90::NT, 1) mlajit_mha_fwd_sm90(const __grid_constant__ MhaFwdSm90Params P) {
    mj_mha90::fwd(P);
}
