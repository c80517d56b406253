// The portable MHA kernel's fused K/V up-projection (MJ_UP_PROJ = 1, see MhaUpProj in mlajit_abi.h): the
// block of (head, request) computes [k_nope ; v] of its head for the request's keys, latent rows . W_h^T with
// W_h the head's 256 rows of W_kv_b, and stores them (bf16, as the separate GEMM would) where the attention
// loop then reads them. Worth it for the small steps it is used on: a step of a few dozen keys is bound by
// launches, not by this block's mma.sync rate (each block reads its head's 256 KB of W_kv_b once per 64 keys).
//
// Schedule: passes of 64 keys; per pass 8 k-chunks of 64 latent columns stream through two shared-memory
// stages (64 x 64 latent values and 256 x 64 weights, 128-byte rows, XOR swizzle as the attention's tiles);
// warp w owns output columns [w * CW, (w + 1) * CW) for all 64 keys (4 m16 tiles), so a pass with few keys
// skips the empty m-tiles.
//
// MJ_UP_PROJ = 2: the pages are the FP8 cache (fp8_ds_mla, 656-byte rows): each thread dequantizes its 8
// latent values (bf16(e4m3 x scale), what the paged gather writes) into the stage with an ordinary store
// instead of an async copy; k_pe is read from the row's bf16 tail.
#pragma once
#include "mlajit_device.cuh"
#include "quantize_cache/e4m3.cuh"

namespace mj_up {

constexpr bool FP8 = MJ_UP_PROJ == 2;
constexpr int ROW_UNIT = FP8 ? 1 : 2;             // bytes per unit of the pages' strides (their dtype)
constexpr int KPE_AT = FP8 ? mj_fp8_rope_at : 1024; // byte offset of k_pe inside a latent row

constexpr int KEYS = mj_mha_up_keys;  // keys per pass
constexpr int KC = 64;                // latent columns per k-chunk
constexpr int COLS = 256;             // k_nope (128) ; v (128) of one head
constexpr int PITCH = KC * 2;         // bytes per shared-memory row (8 chunks of 16 bytes)
constexpr int A_BYTES = KEYS * PITCH;
constexpr int STAGE_BYTES = A_BYTES + COLS * PITCH;
static_assert(2 * STAGE_BYTES == mj_mha_up_smem_bytes(), "up_proj: shared-memory layout disagrees with mlajit_abi.h");

MJ_DEVICE int swz(int row, int chunk) { return chunk ^ (row & 7); }

// The latent row (kv_c ; k_pe: 576 bf16, or an FP8 cache row) of key j of request b (global key number t),
// as bytes, or NULL where the block table names no valid page.
MJ_DEVICE const char* latent_row(const MhaUpProj& u, int b, int t, int j) {
    if (!u.pages) return (const char*)u.kv_c + (mj_i64)t * u.kv_stride * 2;
    const int blk = j / u.block_size;
    const int page = blk < u.max_blocks ? u.block_table[(mj_i64)b * u.bt_stride + blk] : -1;
    if (page < 0 || page >= u.num_blocks) return nullptr;
    return (const char*)u.pages + ((mj_i64)page * u.page_stride + (mj_i64)(j % u.block_size) * u.tok_stride) * ROW_UNIT;
}

MJ_DEVICE void st_shared_v4(mj_u32 addr, mj_u32 a, mj_u32 b, mj_u32 c, mj_u32 d) {
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
MJ_DEVICE void st_shared_nan16(mj_u32 addr) {
    const mj_u32 nan2 = 0x7fc07fc0u;  // two bf16 quiet NaNs
    st_shared_v4(addr, nan2, nan2, nan2, nan2);
}

// Latent values [col, col + 8) of an FP8 cache row as 8 bf16 into shared memory.
MJ_DEVICE void dequant8(mj_u32 dst, const char* row, int col) {
    const uint2 c = __ldg(reinterpret_cast<const uint2*>(row + col));
    const float scale = __ldg(reinterpret_cast<const float*>(row + mj_fp8_scales_at) + col / 128);
    st_shared_v4(dst, mj_e4m3x2_dequant_bf16x2(c.x & 0xffu, (c.x >> 8) & 0xffu, scale),
                 mj_e4m3x2_dequant_bf16x2((c.x >> 16) & 0xffu, c.x >> 24, scale),
                 mj_e4m3x2_dequant_bf16x2(c.y & 0xffu, (c.y >> 8) & 0xffu, scale),
                 mj_e4m3x2_dequant_bf16x2((c.y >> 16) & 0xffu, c.y >> 24, scale));
}

// Computes and stores the head's k_nope / v rows of request b (keys [k_start, k_start + s_k)). Every thread
// of the block calls it; it ends with the stores visible to the block's later cp.async reads and the shared
// memory free for the attention.
template <int NT>
MJ_DEVICE void project(const MhaFwdParams& p, int head, int b, int k_start, int s_k, mj_u32 smem, int tid) {
    constexpr int WARPS = NT / 32;
    constexpr int CW = COLS / WARPS;  // output columns per warp
    constexpr int NTN = CW / 8;       // n8 tiles per warp
    constexpr int A_ITEMS = KEYS * 8 / NT, B_ITEMS = COLS * 8 / NT;  // 16-byte copies per thread and stage
    static_assert(COLS % (16 * WARPS) == 0 && (KEYS * 8) % NT == 0, "up_proj: 4 or 8 warps");
    const MhaUpProj& u = p.up;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, qd = lane & 3;
    const int c8 = tid & 7, r8 = tid >> 3;  // this thread's 16-byte column and first row of every copy
    const mj_bf16* gw = (const mj_bf16*)u.w + (mj_i64)head * COLS * u.w_stride;
    const int passes = (s_k + KEYS - 1) / KEYS, steps = passes * (512 / KC);

    auto load = [&](int step, int stage) {
        const int k0 = (step / (512 / KC)) * KEYS, kc = (step % (512 / KC)) * KC;
        const mj_u32 sA = smem + stage * STAGE_BYTES, sB = sA + A_BYTES;
#pragma unroll
        for (int i = 0; i < A_ITEMS; ++i) {
            const int r = r8 + i * (NT / 8), j = k0 + r;
            const mj_u32 dst = sA + r * PITCH + (swz(r, c8) << 4);
            const char* row = j < s_k ? latent_row(u, b, k_start + j, j) : (const char*)u.w;
            if (j < s_k && !row) st_shared_nan16(dst);
            else if (FP8 && j < s_k) dequant8(dst, row, kc + c8 * 8);
            else if (FP8) st_shared_v4(dst, 0u, 0u, 0u, 0u);  // keys past s_k: zeros (never stored)
            else mj_cp_async_16(dst, (const mj_bf16*)row + kc + c8 * 8, j < s_k);
        }
#pragma unroll
        for (int i = 0; i < B_ITEMS; ++i) {
            const int r = r8 + i * (NT / 8);
            mj_cp_async_16(sB + r * PITCH + (swz(r, c8) << 4), gw + (mj_i64)r * u.w_stride + kc + c8 * 8, true);
        }
    };

    // ldmatrix lane addressing: A (latent rows = m, columns = k) as the attention's Q, B (W rows = n,
    // columns = k) as its K.
    const int a_y = (lane >> 4) ^ (lane & 7);
    const int b_row = (lane & 7) + ((lane >> 4) << 3);
    const int b_y = ((lane >> 3) & 1) ^ (b_row & 7);

    float acc[KEYS / 16][NTN][4];
    load(0, 0);
    mj_cp_async_commit();
    for (int step = 0; step < steps; ++step) {
        const int stage = step & 1, kstep = step % (512 / KC), k0 = (step / (512 / KC)) * KEYS;
        const int m_tiles = (min(KEYS, s_k - k0) + 15) / 16;  // m16 tiles holding keys of this pass
        if (kstep == 0) {
#pragma unroll
            for (int mt = 0; mt < KEYS / 16; ++mt)
#pragma unroll
                for (int j = 0; j < NTN; ++j) acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.f;
        }
        mj_cp_async_wait<0>();
        __syncthreads();  // this stage landed for everyone; everyone is done with the other stage
        if (step + 1 < steps) load(step + 1, stage ^ 1);
        mj_cp_async_commit();

        const mj_u32 sA = smem + stage * STAGE_BYTES, sB = sA + A_BYTES + (warp * CW + b_row) * PITCH;
#pragma unroll
        for (int kk = 0; kk < KC / 16; ++kk) {
            mj_u32 bw[NTN / 2][4];
#pragma unroll
            for (int pp = 0; pp < NTN / 2; ++pp) mj_ldmatrix_x4(bw[pp], sB + pp * 16 * PITCH + (((2 * kk) ^ b_y) << 4));
#pragma unroll
            for (int mt = 0; mt < KEYS / 16; ++mt) {
                if (mt < m_tiles) {
                    mj_u32 a[4];
                    mj_ldmatrix_x4(a, sA + (mt * 16 + (lane & 15)) * PITCH + (((2 * kk) ^ a_y) << 4));
#pragma unroll
                    for (int pp = 0; pp < NTN / 2; ++pp) {
                        mj_mma_bf16_16816(acc[mt][2 * pp], a, bw[pp]);
                        mj_mma_bf16_16816(acc[mt][2 * pp + 1], a, bw[pp] + 2);
                    }
                }
            }
        }
        if (kstep == 512 / KC - 1) {  // the pass is complete: its rows to k_nope / v (bf16, like the GEMM's C)
#pragma unroll
            for (int mt = 0; mt < KEYS / 16; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int j = k0 + mt * 16 + g + 8 * h;
                    if (mt < m_tiles && j < s_k) {
                        const mj_i64 t = k_start + j;
#pragma unroll
                        for (int n = 0; n < NTN; ++n) {
                            const int c = warp * CW + n * 8 + qd * 2;  // (a warp's CW columns lie in one half)
                            mj_bf16* dst = c < 128 ? (mj_bf16*)p.k_nope + t * p.kn_stride_tok + (mj_i64)head * p.kn_stride_head + c
                                                   : (mj_bf16*)p.v + t * p.v_stride_tok + (mj_i64)head * p.v_stride_head + (c - 128);
                            *reinterpret_cast<mj_u32*>(dst) = mj_pack_bf16x2(acc[mt][n][2 * h], acc[mt][n][2 * h + 1]);
                        }
                    }
                }
            }
        }
    }
    mj_cp_async_wait<0>();
    // The attention reads these rows with cp.async (through L2) from other threads of this block.
    __threadfence();
    __syncthreads();
}

}  // namespace mj_up
