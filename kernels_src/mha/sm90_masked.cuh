// mlajit MHA prefill forward, Hopper tier, MASKED kernel (MJ_MASKED = 1): included by mha/sm90.cuh, whose
// entry point calls mj_mha90m::fwd_masked when MJ_MASKED (the dense kernel there is v3). Measured on the
// H200 2026-12-03 as harness variant h90t4 (docs/perf_mha_notes.md, v4): masked 1.19x faster than v3's
// masked path at h=128 S=8k (4.550 vs 5.404 ms) and 1.11x at h=16 S=16k.
//
// Differences from the dense kernel (v3) beside it:
//   - Mask words through their own pipeline stage: the producer warpgroup's warps 1-3 (idle in v3) copy
//     each visited key tile's 128 rows x 4 words into a 2 KiB shared stage per K stage (full mbarrier, 96
//     arrivals with release semantics; empty mbarrier, 256 consumer arrivals after their softmax); each
//     consumer thread reads its two rows as two 16-byte shared loads. The consumers' main loop drops from
//     1014 to 696 instructions per tile (the addressing, bounds and global loads moved to idle warps).
//   - Branch-free softmax: the (at most two) tiles crossing the block's diagonal band run in their own
//     loop with the causal test folded into the mask words; P alternates between two register buffers
//     (ptxas completes all wgmma in flight before a divergent join or an in-place write, v4).
//   - The same guarantees: varlen with bottom-right causal alignment, fully masked rows (lse = -inf, out =
//     0), and the producer zeroes V rows past a request in its partial last key tile (a NaN in the next
//     request's V must not reach this one).
// Same parameters, tensor maps, shapes and launch as the dense kernel; shared memory: the dense kernel's
// 214,528 bytes + 4,096 for the mask stages.
#pragma once
namespace mj_mha90m {

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
// The mask stage per K stage, [BM rows][WPT words] (16 B a row), filled by the producer warpgroup's warps
// 1-3. The host allocates it on top of mj_mha90_smem_bytes: mha_smem_bytes (src/ops/kernel_configs.cpp)
// and tools/dev/mha/wrap_mha90.cu add MASK_STAGE_BYTES_TOTAL.
constexpr bool MASK_STAGE = true;
constexpr int OFF_MSTAGE = OFF_BITMAP + 4 * BITMAP_WORDS;
constexpr int MSTAGE_BYTES = BM * WPT * 4;
static_assert(WPT == 4 && OFF_MSTAGE % 16 == 0, "mask stage rows are one 16-byte vector");
static_assert(ST * MSTAGE_BYTES == 4096, "the host adds 4096 bytes of shared memory for the masked kernel's mask stages");
// Register split after setmaxnreg: the consumers hold S (64), O (64) and 2 x P (32) fp32/bf16x2 registers
// per thread; the producer warpgroup runs the TMA thread and the mask-copy warps. 40 * 128 + 232 * 256 =
// 64512 = 168 * 384, the launch allocation. (24 / 240, the dense kernel's split and the measured harness
// variant h90t4's, spills 4 bytes in the producer, which the runtime's no-spill rule rejects; at 232 the
// consumers' loop compiles to the same instruction mix, 696 per tile, without spills.)
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
// Named barriers (0 is __syncthreads): 1, 2 = GEMM-issue turns of consumer 0 / 1; 3, 4 = their epilogues.
constexpr int BAR_TURN = 1, BAR_EPI = 3;

MJ_DEVICE void st_shared_b32(unsigned addr, unsigned v) { asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory"); }
MJ_DEVICE void st_shared_v4(unsigned addr, const unsigned r[4]) {
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
MJ_DEVICE void ld_shared_v4(unsigned r[4], unsigned addr) {
    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
MJ_DEVICE void st_global_v4(void* p, const unsigned r[4]) {
    asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
template <bool B>
struct BoolTag {
    static constexpr bool value = B;
};
template <int N>
MJ_DEVICE void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) mj90::reg_fence(r[i]);
}

}  // namespace mj_mha90m

namespace mj_mha90m {
// The masked kernel's body; the entry point (mha/sm90.cuh) calls it when MJ_MASKED. P is the kernel's
// __grid_constant__ parameter: the tensor maps are used in place, from parameter space.
MJ_DEVICE void fwd_masked(const MhaFwdSm90Params& P) {
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
    unsigned long long* bar_m = bar_vz + 1;          // knob 4, [ST]: a stage's mask words written (96 arrivals)
    unsigned long long* bar_empty_m = bar_m + ST;    // knob 4, [ST]: both consumers done with them (256)
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
        if constexpr (MASK_STAGE)
            for (int s = 0; s < ST; ++s) {
                mbar_init(&bar_m[s], 96);
                mbar_init(&bar_empty_m[s], 2 * 128);
            }
        fence_barrier_init();
        // Q first: it depends on nothing, so its load overlaps the masked variant's tile scan below.
        const TensorMap* tm_q = reinterpret_cast<const TensorMap*>(&P.tm_q);
        mbar_arrive_expect_tx(bar_q, 3 * BOX_Q);
#pragma unroll
        for (int i = 0; i < 3; ++i) tma_load_3d(smem + i * BOX_Q, tm_q, bar_q, 64 * i, head, q_start + m0);
    }

    // ---- masked: which key tiles does any row of this block attend? (the first 256 threads) ----
    const int n_mwords = (s_k + 31) >> 5;  // mask words of a row that can hold bits of this request
    const unsigned* gmask = p.mask + (mj_i64)(q_start + m0) * p.mask_stride_row;
    if (MJ_MASKED) {
        constexpr int PT = 256;
        // Tiles crossing the block's causal band (not wholly visible to its first row) are visited without
        // a scan: a column of mask words there is zero for every row above the diagonal, so scanning it
        // would walk row batch after row batch (one memory round trip each) before finding a bit.
        const int full_tiles = min(max(off + m0 + 1, 0) / BN, n_tiles);
        for (int i = tid; i < BITMAP_WORDS; i += NT) {
            const int lo = max(i * 32, full_tiles), hi = min(i * 32 + 32, n_tiles);
            bitmap[i] = lo < hi ? (hi - lo == 32 ? ~0u : (1u << (hi - lo)) - 1u) << (lo - i * 32) : 0u;
        }
        __syncthreads();
        // Each thread ORs one word column over a strided set of rows, so a block reads each mask row
        // coalesced and issues one shared atomic per (thread, pass). A column stops at its first nonzero
        // batch: with top-k masks spread over the prefix that is the first batch.
        if (tid < PT) {
            const int words = min(min(full_tiles, BITMAP_TILES) * WPT, n_mwords);
            int lg = 0;
            while ((1 << lg) < words && (1 << lg) < PT) ++lg;
            const int wl = 1 << lg, rstep = PT >> lg;
            for (int wb = 0; wb < words; wb += wl) {
                const int wi = wb + (tid & (wl - 1));
                unsigned acc = 0;
                if (wi < words) {
                    for (int r = tid >> lg; r < rows && acc == 0u; r += 8 * rstep) {
#pragma unroll
                        for (int u = 0; u < 8; ++u) {
                            const int rr = r + u * rstep;
                            if (rr < rows) acc |= gmask[(mj_i64)rr * p.mask_stride_row + wi];
                        }
                    }
                }
                if (acc) atomicOr(&bitmap[(wi / WPT) >> 5], 1u << ((wi / WPT) & 31));
            }
        }
    }
    __syncthreads();
    // The key tiles the block visits, in order; producer and consumers walk the same sequence.
    auto next_tile = [&](int t) -> int {  // the first tile after t that the block must visit, or -1
        int c = t + 1;
        if constexpr (MJ_MASKED) {
            while (c < n_tiles) {
                if (c >= BITMAP_TILES) return c;
                const unsigned bits = bitmap[c >> 5] >> (c & 31);
                if (bits) return c + __ffs(bits) - 1;
                c = (c | 31) + 1;
            }
            return -1;
        }
        return c < n_tiles ? c : -1;
    };

    if (wg == 0) {
        // ================================ producer ================================
        setmaxnreg_dec<PRODUCER_REGS>();
        if constexpr (MASK_STAGE) {
            if (tid >= 32) {  // warps 1-3: each visited tile's mask words into its stage, ST tiles ahead at most
                int i = 0;
                for (int tile = next_tile(-1); tile >= 0; tile = next_tile(tile), ++i) {
                    const int s = i % ST;
                    if (i >= ST) mbar_wait(&bar_empty_m[s], ((i / ST) & 1) ^ 1);
                    // One word per item (the copy warps hold 24 registers: a row of 4 at once spilled).
                    const unsigned dst = smem_u32(smem + OFF_MSTAGE + s * MSTAGE_BYTES);
                    for (int j = tid - 32; j < BM * WPT; j += 96) {
                        const int r = j / WPT, wi = tile * WPT + j % WPT;
                        st_shared_b32(dst + 4 * j, (r < rows && wi < n_mwords) ? __ldg(gmask + (mj_i64)r * p.mask_stride_row + wi) : 0u);
                    }
                    mbar_arrive(&bar_m[s]);  // release: the stores above are visible to a consumer's wait
                }
            }
        }
        if (tid == 0) {
            const TensorMap* tm_kn = reinterpret_cast<const TensorMap*>(&P.tm_k_nope);
            const TensorMap* tm_kp = reinterpret_cast<const TensorMap*>(&P.tm_k_pe);
            const TensorMap* tm_v = reinterpret_cast<const TensorMap*>(&P.tm_v);
            const int kp_head = P.kp_shared ? 0 : head;
            int i = 0, last = -1;
            for (int tile = next_tile(-1); tile >= 0; last = tile, tile = next_tile(tile), ++i) {
                const int s = i % ST;
                const unsigned free_parity = ((i / ST) & 1) ^ 1;  // the release of this stage's previous use
                unsigned char* sk = smem + OFF_K + s * STAGE_BYTES;
                const int row = k_start + tile * BN;
                if (i >= ST) mbar_wait(&bar_empty_k[s], free_parity);
                mbar_arrive_expect_tx(&bar_k[s], 3 * BOX_K);
                tma_load_3d(sk, tm_kn, &bar_k[s], 0, head, row);
                tma_load_3d(sk + BOX_K, tm_kn, &bar_k[s], 64, head, row);
                tma_load_3d(sk + 2 * BOX_K, tm_kp, &bar_k[s], 0, kp_head, row);
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
    // P of tile i (bf16 A fragments of its P V) lives in pbuf[i & 1]: the softmax of tile i writes one
    // buffer while the P V of tile i-1 reads the other. (One buffer plus a copy does not work: ptxas
    // merges the two and then serializes every wgmma, C7513.)
    unsigned pbuf[2][BN / 16][4];
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
    auto issue_pv = [&](int stage, const unsigned (&pin)[BN / 16][4]) {
        // V tile: [key][dv] rows of 128 B per 64-column box = B in N-major form: 8-key groups 1024 B apart
        // (stride offset), the second 64-column box BOX_K further (leading offset); k16 step = 16 rows.
        unsigned char* sv = smem + OFF_K + stage * STAGE_BYTES + OFF_V;
        wgmma_fence();
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) wgmma_m64n128k16_rs<1>(o, pin[t], smem_desc(sv + t * 16 * 128, 128, 1024, BOX_K), 1);
        wgmma_commit();
    };
    // Mask words of this thread's rows for a tile: [k] row g, [WPT + k] row g + 8 (0 past the request).
    unsigned mw[2 * WPT];
    // Causal limit and mask on S, then the online-softmax statistics; S becomes exp2 values in place and
    // alpha the factor that rescales what O and the row sums held before this tile.
    float alpha[2];
    // Branch-free on purpose: ptxas completes every wgmma in flight before a divergent branch's join
    // point (seen in the SASS: the wait for P V(i-1) hoisted above the exps), which would serialize the
    // softmax with P V. So the causal test is chosen per tile by the caller (DIAG: the tile crosses the
    // block's diagonal band), not by a branch here, and the mask test is applied to every score.
    auto softmax = [&](auto diag_tag, int tile, unsigned (&pn)[BN / 16][4]) {
        constexpr bool DIAG = decltype(diag_tag)::value;
        const int n0 = tile * BN;
        if constexpr (MJ_MASKED) {
            unsigned m[2 * WPT];
#pragma unroll
            for (int k = 0; k < 2 * WPT; ++k) {
                unsigned w = mw[k];
                if constexpr (DIAG) {
                    const int d = (k < WPT ? qpos0 : qpos1) - n0 - 32 * (k % WPT);  // last allowed bit
                    w &= d < 0 ? 0u : (d >= 31 ? ~0u : (2u << d) - 1u);
                }
                m[k] = w >> (qd * 2);
            }
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (!((m[(e < 2 ? 0 : WPT) + (j >> 2)] >> ((j & 3) * 8 + (e & 1))) & 1u)) s[4 * j + e] = MJ_NEG_INF;
        } else if constexpr (DIAG) {
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
        // P goes straight into pn (bf16 A fragments of the next P V: S's 8-column blocks 2t, 2t+1 are the
        // k16 step t), never back into S: ptxas completes all wgmma in flight before the first in-place
        // write to an accumulator register, which would serialize these exps with P V(i-1).
        float sum[2] = {0.f, 0.f};
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) {
            float e8[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) e8[q] = mj_exp2(fmaf(s[8 * t + q], sl2, -msub[(q >> 1) & 1]));
            sum[0] += (e8[0] + e8[1]) + (e8[4] + e8[5]);
            sum[1] += (e8[2] + e8[3]) + (e8[6] + e8[7]);
            pn[t][0] = mj_pack_bf16x2(e8[0], e8[1]);
            pn[t][1] = mj_pack_bf16x2(e8[2], e8[3]);
            pn[t][2] = mj_pack_bf16x2(e8[4], e8[5]);
            pn[t][3] = mj_pack_bf16x2(e8[6], e8[7]);
        }
        row_sum[0] = row_sum[0] * alpha[0] + sum[0];
        row_sum[1] = row_sum[1] * alpha[1] + sum[1];
    };
    // After the P V that read the previous P has completed: rescale O.
    auto rescale = [&]() {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            o[4 * j] *= alpha[0];
            o[4 * j + 1] *= alpha[0];
            o[4 * j + 2] *= alpha[1];
            o[4 * j + 3] *= alpha[1];
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

    // Tiles wholly at or below the diagonal of the block's first row need no causal test; the others
    // (at most two per block, the last ones) take the DIAG softmax.
    auto is_diag = [&](int t) { return t * BN + BN - 1 > off + m0; };
    int prev_stage = 0;
    unsigned prev_phase = 0;
    // This thread's two rows of a stage's mask words, two 16-byte shared loads (the four threads of
    // a quad read the same row: a broadcast), after the copy warps' arrival.
    const unsigned mstage_row0 = smem_u32(smem + OFF_MSTAGE) + (r_w - m0 + g) * 16;
    auto load_mask_stage = [&](int stage, unsigned phase) {
        if constexpr (MASK_STAGE) {
            mbar_wait(&bar_m[stage], phase);
            ld_shared_v4(mw, mstage_row0 + stage * MSTAGE_BYTES);
            ld_shared_v4(mw + WPT, mstage_row0 + stage * MSTAGE_BYTES + 8 * 16);
        }
    };
    auto release_mask_stage = [&](int stage) {
        if constexpr (MASK_STAGE) mbar_arrive(&bar_empty_m[stage]);
    };
    // Tile i > 0 of the block's list: S_i with P V(i-1) in flight behind it.
    auto step = [&](auto diag_tag, int tile, int i, const unsigned (&pprev)[BN / 16][4], unsigned (&pcur)[BN / 16][4]) {
        const int stage = i % ST;
        const unsigned phase = (i / ST) & 1;
        mbar_wait(&bar_k[stage], phase);
        load_mask_stage(stage, phase);
        turn_begin();
        issue_qk(stage);
        mbar_wait(&bar_v[prev_stage], prev_phase);
        issue_pv(prev_stage, pprev);
        turn_end(false);
        wgmma_wait<1>();  // S of this tile done; P V of the previous one may still run
        fence_regs(s);
        mbar_arrive(&bar_empty_k[stage]);
        softmax(diag_tag, tile, pcur);
        release_mask_stage(stage);
        wgmma_wait<0>();
        fence_regs(o);
        mbar_arrive(&bar_empty_v[prev_stage]);
        rescale();
        prev_stage = stage;
        prev_phase = phase;
    };

    mbar_wait(bar_q, 0);
    int tile = next_tile(-1);
    if (tile >= 0) {
        if (MJ_PINGPONG && c == 1) named_bar_arrive(BAR_TURN + 0, 256);
        // tile 0: S only
        mbar_wait(&bar_k[0], 0);
        load_mask_stage(0, 0);
        turn_begin();
        issue_qk(0);
        turn_end(false);
        wgmma_wait<0>();
        fence_regs(s);
        mbar_arrive(&bar_empty_k[0]);
        if (is_diag(tile)) softmax(BoolTag<true>{}, tile, pbuf[0]);
        else softmax(BoolTag<false>{}, tile, pbuf[0]);
        release_mask_stage(0);
        rescale();
        // Each parity is its own inlined copy of the step, so the buffers stay compile-time indexed.
        int i = 1, last = tile;
        for (tile = next_tile(tile); tile >= 0 && !is_diag(tile); last = tile, tile = next_tile(tile), ++i) {
            if (i & 1) step(BoolTag<false>{}, tile, i, pbuf[0], pbuf[1]);
            else step(BoolTag<false>{}, tile, i, pbuf[1], pbuf[0]);
        }
        for (; tile >= 0; last = tile, tile = next_tile(tile), ++i) {
            if (i & 1) step(BoolTag<true>{}, tile, i, pbuf[0], pbuf[1]);
            else step(BoolTag<true>{}, tile, i, pbuf[1], pbuf[0]);
        }
        mbar_wait(&bar_v[prev_stage], prev_phase);
        if ((last + 1) * BN > s_k) mbar_wait(bar_vz, 0);  // its V rows past the request zeroed
        turn_begin();
        if (i & 1) issue_pv(prev_stage, pbuf[0]);  // P of tile i-1
        else issue_pv(prev_stage, pbuf[1]);
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
}  // namespace mj_mha90m
