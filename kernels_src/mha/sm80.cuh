// mlajit MHA prefill forward, portable tier (mma.sync m16n8k16 bf16, sm_80 and newer).
// FlashAttention-2 schedule: one block = MJ_BLOCK_M queries of one (request, head); each warp owns 16 query
// rows end to end (its S, P, O and, below 128-key tiles, Q fragments live in its registers), K/V tiles of
// MJ_BLOCK_N keys stream through double-buffered shared memory. Causal with bottom-right alignment;
// MJ_MASKED=1 also ANDs the packed top-k bitmask (see MhaFwdParams in mlajit_abi.h for the layout).
//
// SUPPORTED CONFIGS (MJ_BLOCK_M, MJ_BLOCK_N, MJ_WARPS, MJ_STAGES):
//   (128,  64, 8, 2)   default (130.25 KiB shared memory, 1 block/SM; fits sm_80's 163 KiB)
//   ( 64,  64, 4, 2)   smaller query tile (105.25 KiB, 2 blocks/SM on sm_90)
//   ( 64,  32, 4, 2)   for GPUs with ~100 KiB of shared memory per block (sm_86/sm_89; 64.75 KiB)
//   (128, 128, 8, 2)   Q re-read from shared memory (212.25 KiB: sm_90 / sm_100 class only)
//   Rule behind the list: MJ_BLOCK_M == 16 * MJ_WARPS, MJ_WARPS in {4, 8}, MJ_BLOCK_N in {32, 64}
//   (128 with 8 warps), MJ_STAGES == 2; shapes MJ_D_NOPE = 128, MJ_D_ROPE = 64, MJ_D_V = 128;
//   MJ_MASKED in {0, 1}; MJ_UP_PROJ in {0, 1, 2} (dense only: the block first computes its head's k_nope
//   / v rows itself from bf16 (1) or FP8 (2) latent rows, mha/up_proj.cuh; one block per (head, request):
//   s_q <= MJ_BLOCK_M);
//   MJ_ARCH >= 80. Other combinations of the rule compile but only the four
//   above are tested. H200, h=128, S=8192 dense causal: (128,128) 8.49 ms, (64,64) 8.68 ms,
//   (128,64) 8.72 ms, (64,32) 9.75 ms; at S=4096 (64,64) is fastest (docs/perf_mha_notes.md).
//
// Input requirements (the host checks them): every row (q, k_nope, k_pe, v, out) starts 16-byte aligned,
// i.e. base pointers 16-byte aligned and token/head strides multiples of 8 elements; lse and mask may
// have any stride. Masked tile skipping covers the first 64*32*MJ_BLOCK_N keys of a request (a 256-byte
// bitmap); tiles past that are always visited (still correct, only not skipped).
#include "mlajit_device.cuh"
#include "mha/tile_bitmap.cuh"
#include "mha/up_proj.cuh"

static_assert(MJ_ARCH >= 80, "mha_fwd: the portable tier needs sm_80 or newer (bf16 mma.sync)");
static_assert(MJ_D_NOPE == 128 && MJ_D_ROPE == 64 && MJ_D_V == 128,
              "mha_fwd: only d_nope 128, d_rope 64, d_v 128 (DeepSeek MLA after up-projection)");
static_assert(MJ_WARPS == 4 || MJ_WARPS == 8, "mha_fwd: MJ_WARPS must be 4 or 8");
static_assert(MJ_BLOCK_M == 16 * MJ_WARPS, "mha_fwd: each warp owns 16 query rows (MJ_BLOCK_M = 16 * MJ_WARPS)");
static_assert(MJ_BLOCK_N == 32 || MJ_BLOCK_N == 64 || (MJ_BLOCK_N == 128 && MJ_WARPS == 8),
              "mha_fwd: MJ_BLOCK_N must be 32 or 64, or 128 with 8 warps");
static_assert(MJ_STAGES == 2, "mha_fwd: MJ_STAGES must be 2 (one tile in flight while one is consumed)");
static_assert(MJ_MASKED == 0 || MJ_MASKED == 1, "mha_fwd: MJ_MASKED must be 0 or 1");
static_assert(MJ_UP_PROJ == 0 || ((MJ_UP_PROJ == 1 || MJ_UP_PROJ == 2) && MJ_MASKED == 0),
              "mha_fwd: MJ_UP_PROJ must be 0, or 1 / 2 (fused K/V up-projection from bf16 / FP8 rows, dense only)");

namespace mj_mha {

constexpr int BM = MJ_BLOCK_M;
constexpr int BN = MJ_BLOCK_N;
constexpr int NT = MJ_WARPS * 32;
constexpr int DQK = MJ_D_NOPE + MJ_D_ROPE;
constexpr int DV = MJ_D_V;
constexpr int QK_PITCH = DQK * 2;  // bytes per Q or K row in shared memory
constexpr int V_PITCH = DV * 2;
constexpr int Q_BYTES = BM * QK_PITCH;
constexpr int K_BYTES = BN * QK_PITCH;
constexpr int V_BYTES = BN * V_PITCH;
constexpr int OFF_K = Q_BYTES;
constexpr int OFF_V = OFF_K + MJ_STAGES * K_BYTES;
constexpr int WPT = BN / 32;      // mask words per key tile and row
constexpr int MW_BYTES = BM * WPT * 4;  // one stage of mask words, [row][WPT]
constexpr int OFF_MW = OFF_V + MJ_STAGES * V_BYTES;
constexpr int OFF_BITMAP = OFF_MW + MJ_STAGES * MW_BYTES;
constexpr int BITMAP_WORDS = 64;
constexpr int BITMAP_TILES = BITMAP_WORDS * 32;
static_assert(OFF_BITMAP + 4 * BITMAP_WORDS == mj_mha_smem_bytes(BM, BN, MJ_STAGES, DQK, DV),
              "mha_fwd: shared-memory layout disagrees with mj_mha_smem_bytes");
constexpr int KSTEPS = DQK / 16;  // k-steps of S = Q K^T
constexpr int NTN = BN / 8;       // 8-wide n-tiles of S per warp
constexpr int NTO = DV / 8;       // 8-wide n-tiles of O per warp
// Async-copy mapping: a row of 16 chunks (128 elements) is filled by 16 consecutive threads, a row of 8
// chunks (the 64-wide rope part) by 8; rows per pass are multiples of 8, so a thread's swizzled chunk is
// the same in every pass and is computed once.
constexpr int R16 = NT / 16;
constexpr int R8 = NT / 8;
static_assert(R16 % 8 == 0 && BM % R16 == 0 && BN % R16 == 0 && BM % R8 == 0 && BN % R8 == 0, "");
constexpr int MIN_BLOCKS = NT == 256 ? 1 : 2;
// With 128-key tiles S and P take 96 registers, so the Q fragments (48) no longer fit beside them and are
// re-read from shared memory at every k-step instead (+15 % ldmatrix traffic). Measured on H200: this
// costs 8 % at 64-key tiles, where the registers are not needed.
constexpr bool Q_IN_SMEM = BN == 128;

// Rows are 256 or 384 bytes, a multiple of the 128-byte bank period, so without a swizzle the 8 rows one
// ldmatrix phase reads would all hit the same 4 banks. XOR-ing the chunk's low 3 bits with the row's
// spreads any 8 consecutive rows over all 32 banks (reads, cp.async writes and the O staging alike).
MJ_DEVICE int swz(int row, int chunk) { return chunk ^ (row & 7); }

// 4-byte async copy for mask words (rows of any stride are only 4-byte aligned); zero-fills when !valid.
MJ_DEVICE void cp_async_4(mj_u32 smem, const void* gmem, bool valid) {
    int src_size = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem), "l"(gmem), "r"(src_size));
}
MJ_DEVICE mj_u32 ld_shared_b32(mj_u32 addr) {
    mj_u32 v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
MJ_DEVICE void st_shared_b32(mj_u32 addr, mj_u32 v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
MJ_DEVICE void ld_shared_v4(mj_u32 r[4], mj_u32 addr) {
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
MJ_DEVICE void st_global_v4(void* p, const mj_u32 r[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

}  // namespace mj_mha

extern "C" __global__ void __launch_bounds__(mj_mha::NT, mj_mha::MIN_BLOCKS) mlajit_mha_fwd(const MhaFwdParams p) {
    using namespace mj_mha;
    extern __shared__ __align__(128) unsigned char smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
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

    const mj_bf16* gq = (const mj_bf16*)p.q + (mj_i64)(q_start + m0) * p.q_stride_tok + (mj_i64)head * p.q_stride_head;
    const mj_bf16* gqp = p.q_pe ? (const mj_bf16*)p.q_pe + (mj_i64)(q_start + m0) * p.qp_stride_tok + (mj_i64)head * p.qp_stride_head
                                : gq + 128;
    const mj_i64 qp_stride_tok = p.q_pe ? p.qp_stride_tok : p.q_stride_tok;

    const mj_u32 sQ = mj_smem_addr(smem);
    const mj_u32 sK0 = sQ + OFF_K;
    const mj_u32 sV0 = sQ + OFF_V;
    const mj_u32 sMW0 = sQ + OFF_MW;
    unsigned* bitmap = (unsigned*)(smem + OFF_BITMAP);

    const int ld_r16 = tid >> 4, ld_c16 = tid & 15;
    const int ld_r8 = tid >> 3, ld_c8 = tid & 7;
    const mj_u32 so16_qk = ld_r16 * QK_PITCH + (swz(ld_r16, ld_c16) << 4);
    const mj_u32 so8_qk = ld_r8 * QK_PITCH + (swz(ld_r8, 16 + ld_c8) << 4);
    const mj_u32 so16_v = ld_r16 * V_PITCH + (swz(ld_r16, ld_c16) << 4);

    // Small dense steps of the one-call prefill: this head's k_nope / v rows of the request first.
    if constexpr (MJ_UP_PROJ != 0) mj_up::project<NT>(p, head, b, k_start, s_k, sQ, tid);

    // ---- Q tile -> shared memory (rows past s_q are zero-filled and never stored) ----
#pragma unroll
    for (int i = 0; i < BM / R16; ++i) {
        const int r = ld_r16 + i * R16;
        const bool ok = r < rows;
        mj_cp_async_16(sQ + so16_qk + i * R16 * QK_PITCH, gq + (mj_i64)(ok ? r : 0) * p.q_stride_tok + ld_c16 * 8, ok);
    }
#pragma unroll
    for (int i = 0; i < BM / R8; ++i) {
        const int r = ld_r8 + i * R8;
        const bool ok = r < rows;
        mj_cp_async_16(sQ + so8_qk + i * R8 * QK_PITCH, gqp + (mj_i64)(ok ? r : 0) * qp_stride_tok + ld_c8 * 8, ok);
    }
    mj_cp_async_commit();

    // K = [k_nope ; k_pe] is assembled in shared memory (chunks 0-15 and 16-23 of a row). Keys past s_k
    // are zero-filled: their scores are masked, but P = 0 times a garbage V row could still be NaN.
    // The masked variant copies the tile's mask words of every block row in the same group, so the bit
    // tests cost neither registers across the Q K^T loop nor exposed global latency.
    const int n_mwords = (s_k + 31) >> 5;  // mask words of a row that can hold bits of this request
    const unsigned* gmask = p.mask + (mj_i64)(q_start + m0) * p.mask_stride_row;
    auto load_kv = [&](int tile, int stage) {
        if constexpr (MJ_MASKED) {
#pragma unroll
            for (int i = 0; i < (BM * WPT + NT - 1) / NT; ++i) {
                const int e = tid + i * NT;  // (row, word) = (e / WPT, e % WPT)
                const int r = e / WPT, wi = tile * WPT + e % WPT;
                const bool ok = r < rows && wi < n_mwords;
                if (e < BM * WPT)
                    cp_async_4(sMW0 + stage * MW_BYTES + e * 4, gmask + (ok ? (mj_i64)r * p.mask_stride_row + wi : 0), ok);
            }
        }
        // Base pointers are rebuilt from the (constant-bank) parameters per tile rather than held in six
        // registers across the key loop, where the masked variant has none to spare.
        const mj_bf16* gkn = (const mj_bf16*)p.k_nope + (mj_i64)k_start * p.kn_stride_tok + (mj_i64)head * p.kn_stride_head;
        const mj_bf16* gkp = (const mj_bf16*)p.k_pe + (mj_i64)k_start * p.kp_stride_tok + (mj_i64)head * p.kp_stride_head;
        const mj_bf16* gv = (const mj_bf16*)p.v + (mj_i64)k_start * p.v_stride_tok + (mj_i64)head * p.v_stride_head;
        const int n0 = tile * BN;
        const mj_u32 sK = sK0 + stage * K_BYTES, sV = sV0 + stage * V_BYTES;
#pragma unroll
        for (int i = 0; i < BN / R16; ++i) {
            const int j = n0 + ld_r16 + i * R16;
            const bool ok = j < s_k;
            const mj_i64 jj = ok ? j : 0;
            mj_cp_async_16(sK + so16_qk + i * R16 * QK_PITCH, gkn + jj * p.kn_stride_tok + ld_c16 * 8, ok);
            mj_cp_async_16(sV + so16_v + i * R16 * V_PITCH, gv + jj * p.v_stride_tok + ld_c16 * 8, ok);
        }
#pragma unroll
        for (int i = 0; i < BN / R8; ++i) {
            const int j = n0 + ld_r8 + i * R8;
            const bool ok = j < s_k;
            const mj_i64 jj = ok ? j : 0;
            if (MJ_UP_PROJ != 0 && p.up.pages) {  // k_pe from the key's page row (NaN where it has no page)
                const char* row = ok ? mj_up::latent_row(p.up, b, k_start + j, j) : (const char*)gkp;
                if (ok && !row) mj_up::st_shared_nan16(sK + so8_qk + i * R8 * QK_PITCH);
                else mj_cp_async_16(sK + so8_qk + i * R8 * QK_PITCH, (const mj_bf16*)(row + mj_up::KPE_AT) + ld_c8 * 8, ok);
            } else {
                mj_cp_async_16(sK + so8_qk + i * R8 * QK_PITCH, gkp + jj * p.kp_stride_tok + ld_c8 * 8, ok);
            }
        }
    };

    // ---- masked: which key tiles does any row of this block attend? ----
    if (MJ_MASKED) {
        for (int i = tid; i < BITMAP_WORDS; i += NT) bitmap[i] = 0;
        __syncthreads();
        const int words = min(min(n_tiles, BITMAP_TILES) * WPT, n_mwords);
        mj_tile_bitmap::or_mask_columns<NT, WPT>(bitmap, gmask, p.mask_stride_row, rows, words, tid);
        __syncthreads();
    }
    auto next_tile = [&](int t) -> int {  // the first tile after t that the block must visit, or -1
        if constexpr (MJ_MASKED) return mj_tile_bitmap::next_visited_tile<BITMAP_TILES>(bitmap, t, n_tiles);
        return t + 1 < n_tiles ? t + 1 : -1;
    };

    int tile = next_tile(-1);
    if (tile >= 0) load_kv(tile, 0);
    mj_cp_async_commit();  // always a group, so that wait<1> below means "Q has landed"
    mj_cp_async_wait<1>();
    __syncthreads();

    // ---- per-warp row bookkeeping ----
    const int wrow0 = m0 + warp * 16;  // first local query row of this warp
    const bool warp_live = wrow0 < s_q;
    const int w_min_q = off + wrow0;
    const int w_max_q = off + min(wrow0 + 15, s_q - 1);
    const int g = lane >> 2, qd = lane & 3;  // mma fragment row group and column pair
    const int qpos0 = w_min_q + g, qpos1 = qpos0 + 8;

    // Q stays in registers for the whole key loop (12 k-steps x 4 registers) unless Q_IN_SMEM.
    const int q_r = warp * 16 + (lane & 15);
    const int q_y = (lane >> 4) ^ (q_r & 7);  // (2kk + hi) ^ (r & 7) == 2kk ^ (hi ^ (r & 7)): no carry into bit 0
    const mj_u32 sQw = sQ + q_r * QK_PITCH;
    mj_u32 qf[Q_IN_SMEM ? 1 : KSTEPS][4];
    if constexpr (!Q_IN_SMEM) {
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) mj_ldmatrix_x4(qf[kk], sQw + (((2 * kk) ^ q_y) << 4));
    }
    // ldmatrix lane addressing (row inside the tile, XOR term of the chunk) for K (B of Q K^T, no
    // transpose: K rows are n, columns are k) and V (B of P V, transposed: V rows are k).
    const int k_row = (lane & 7) + ((lane >> 4) << 3);
    const int k_y = ((lane >> 3) & 1) ^ (k_row & 7);
    const int v_row = (lane & 7) + (((lane >> 3) & 1) << 3);
    const int v_y = (lane >> 4) ^ (v_row & 7);


    float o[NTO][4];
#pragma unroll
    for (int j = 0; j < NTO; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float row_max[2] = {MJ_NEG_INF, MJ_NEG_INF};  // raw (unscaled) running max of the two rows
    float row_sum[2] = {0.f, 0.f};                // this thread's partial sums; quad-reduced at the end
    const float sl2 = p.sm_scale_log2;

    // O += P V for one tile: P (the S accumulators of two adjacent n-tiles, packed to bf16) is exactly the
    // A fragment of one 16-key step, so it never leaves registers.
    mj_u32 pf[BN / 16][4];
    auto pv = [&](int pv_stage) {
        const mj_u32 sV = sV0 + pv_stage * V_BYTES + v_row * V_PITCH;
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) {
#pragma unroll
            for (int pp = 0; pp < DV / 16; ++pp) {
                mj_u32 bv[4];
                mj_ldmatrix_x4_trans(bv, sV + t * 16 * V_PITCH + (((2 * pp) ^ v_y) << 4));
                mj_mma_bf16_16816(o[2 * pp], pf[t], bv);
                mj_mma_bf16_16816(o[2 * pp + 1], pf[t], bv + 2);
            }
        }
    };
    int stage = 0;
    while (tile >= 0) {
        const int next = next_tile(tile);
        mj_cp_async_wait<0>();
        // One barrier per tile: it publishes this tile's copies and also proves every warp has finished
        // the step before, so the stage the prefetch below overwrites is no longer read by anyone.
        // (A 3-stage ping-pong variant that ran half the warps' P V one step late, to overlap softmax
        // with MMAs across warps, measured no faster: each warp's own dependency chains dominate.)
        __syncthreads();
        if (next >= 0) load_kv(next, stage + 1 == MJ_STAGES ? 0 : stage + 1);
        mj_cp_async_commit();

        const int n0 = tile * BN;
        bool live = warp_live && n0 <= w_max_q;  // tiles wholly in this warp's future: nothing to do
        // This thread's mask words for rows g and g + 8: [k] and [WPT + k].
        const mj_u32 s_mw = sMW0 + stage * MW_BYTES + (warp * 16 + g) * WPT * 4;
        if constexpr (MJ_MASKED) {  // ... and tiles where none of the warp's 16 rows has a bit
            unsigned any = 0;
#pragma unroll
            for (int k = 0; k < WPT; ++k) any |= ld_shared_b32(s_mw + k * 4) | ld_shared_b32(s_mw + 8 * WPT * 4 + k * 4);
            live = __any_sync(0xffffffffu, live && any != 0u);
        }
        if (live) {
            const mj_u32 sK = sK0 + stage * K_BYTES + k_row * QK_PITCH;

            float s[NTN][4];
#pragma unroll
            for (int j = 0; j < NTN; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                mj_u32 qs[4];
                if constexpr (Q_IN_SMEM) mj_ldmatrix_x4(qs, sQw + (((2 * kk) ^ q_y) << 4));
                const mj_u32* qa = Q_IN_SMEM ? qs : qf[Q_IN_SMEM ? 0 : kk];
#pragma unroll
                for (int pp = 0; pp < BN / 16; ++pp) {
                    mj_u32 bk[4];
                    mj_ldmatrix_x4(bk, sK + pp * 16 * QK_PITCH + (((2 * kk) ^ k_y) << 4));
                    mj_mma_bf16_16816(s[2 * pp], qa, bk);
                    mj_mma_bf16_16816(s[2 * pp + 1], qa, bk + 2);
                }
            }

            // Only tiles crossing the diagonal of some row of this warp need the causal test.
            const bool diag = n0 + BN - 1 > w_min_q;
            if constexpr (MJ_MASKED) {
                // The causal limit is folded into the mask words (one op per word, not per score), so a
                // score needs only its bit test. mw[k] / mw[WPT + k]: rows g / g + 8, shifted so that bit
                // (j & 3) * 8 + (e & 1) is this thread's score s[j][e].
                unsigned mw[2 * WPT];
#pragma unroll
                for (int k = 0; k < 2 * WPT; ++k) {
                    unsigned w = ld_shared_b32(s_mw + (k < WPT ? k : 8 * WPT + k - WPT) * 4);
                    if (diag) {
                        const int d = (k < WPT ? qpos0 : qpos1) - n0 - 32 * (k % WPT);  // last allowed bit
                        w &= d < 0 ? 0u : (d >= 31 ? ~0u : (2u << d) - 1u);
                    }
                    mw[k] = w >> (qd * 2);
                }
#pragma unroll
                for (int j = 0; j < NTN; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (!((mw[(e < 2 ? 0 : WPT) + (j >> 2)] >> ((j & 3) * 8 + (e & 1))) & 1u)) s[j][e] = MJ_NEG_INF;
            } else if (diag) {
                const int lim0 = qpos0 - n0 - qd * 2, lim1 = qpos1 - n0 - qd * 2;  // last allowed key - qd*2
#pragma unroll
                for (int j = 0; j < NTN; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (j * 8 + (e & 1) > (e < 2 ? lim0 : lim1)) s[j][e] = MJ_NEG_INF;
            }

            // Online softmax in the exp2 domain with the scale folded into one FMA per score.
            float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
            for (int j = 0; j < NTN; ++j) {
                mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
            }
            float msub[2], alpha[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                mx[i] = mj_warp_max4(mx[i]);
                // A row with nothing attended so far keeps max -inf; subtracting 0 instead keeps
                // exp2(-inf - -inf) = NaN out of both the scores and the rescale factor.
                msub[i] = mx[i] == MJ_NEG_INF ? 0.f : mx[i] * sl2;
                alpha[i] = mj_exp2(row_max[i] * sl2 - msub[i]);
                row_max[i] = mx[i];
                row_sum[i] *= alpha[i];
            }
            // Unconditional: skipping it when every alpha is 1 was measured slower (a warp's 16 rows
            // rarely all keep their max, and the branch splits the exps from the P V MMAs).
#pragma unroll
            for (int j = 0; j < NTO; ++j) {
                o[j][0] *= alpha[0];
                o[j][1] *= alpha[0];
                o[j][2] *= alpha[1];
                o[j][3] *= alpha[1];
            }
#pragma unroll
            for (int t = 0; t < BN / 16; ++t) {
                float p[2][4];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    p[h][0] = mj_exp2(fmaf(s[2 * t + h][0], sl2, -msub[0]));
                    p[h][1] = mj_exp2(fmaf(s[2 * t + h][1], sl2, -msub[0]));
                    p[h][2] = mj_exp2(fmaf(s[2 * t + h][2], sl2, -msub[1]));
                    p[h][3] = mj_exp2(fmaf(s[2 * t + h][3], sl2, -msub[1]));
                    row_sum[0] += p[h][0] + p[h][1];
                    row_sum[1] += p[h][2] + p[h][3];
                }
                pf[t][0] = mj_pack_bf16x2(p[0][0], p[0][1]);
                pf[t][1] = mj_pack_bf16x2(p[0][2], p[0][3]);
                pf[t][2] = mj_pack_bf16x2(p[1][0], p[1][1]);
                pf[t][3] = mj_pack_bf16x2(p[1][2], p[1][3]);
            }
            pv(stage);
        }
        tile = next;
        stage = stage + 1 == MJ_STAGES ? 0 : stage + 1;
    }

    // ---- epilogue: normalize, stage through this warp's own (dead) Q rows, 16-byte coalesced stores ----
    if (!warp_live) return;
    float inv[2], lse[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const float l = mj_warp_sum4(row_sum[i]);
        inv[i] = l > 0.f ? 1.f / l : 0.f;
        lse[i] = l > 0.f ? (row_max[i] * sl2 + mj_log2(l)) * MJ_LN2 : MJ_NEG_INF;
    }
    const mj_u32 sO = sQ + warp * 16 * QK_PITCH;  // 16 rows x 256 B fit in the warp's 16 x 384 B of Q
#pragma unroll
    for (int j = 0; j < NTO; ++j) {
        st_shared_b32(sO + g * V_PITCH + (swz(g, j) << 4) + qd * 4, mj_pack_bf16x2(o[j][0] * inv[0], o[j][1] * inv[0]));
        st_shared_b32(sO + (g + 8) * V_PITCH + (swz(g + 8, j) << 4) + qd * 4,
                      mj_pack_bf16x2(o[j][2] * inv[1], o[j][3] * inv[1]));
    }
    __syncwarp();
    mj_bf16* gout = (mj_bf16*)p.out + (mj_i64)head * p.o_stride_head;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = 2 * i + (lane >> 4), c = lane & 15;
        if (wrow0 + r < s_q) {
            mj_u32 v4[4];
            ld_shared_v4(v4, sO + r * V_PITCH + (swz(r, c) << 4));
            st_global_v4(gout + (mj_i64)(q_start + wrow0 + r) * p.o_stride_tok + c * 8, v4);
        }
    }
    if (qd == 0) {
        float* gl = p.lse + (mj_i64)head * p.lse_stride_head;
        if (wrow0 + g < s_q) gl[(mj_i64)(q_start + wrow0 + g) * p.lse_stride_tok] = lse[0];
        if (wrow0 + g + 8 < s_q) gl[(mj_i64)(q_start + wrow0 + g + 8) * p.lse_stride_tok] = lse[1];
    }
}
