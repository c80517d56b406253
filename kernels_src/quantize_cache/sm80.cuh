// mlajit FP8 latent-cache writer (any arch from sm_80): bf16 kv_c [T, 512] and k_pe [T, 64] into 656-byte
// fp8_ds_mla rows at slot_mapping (see mlajit.h, "FP8 latent cache", and QuantizeCacheParams). One warp
// per token: lane l quantizes kv_c values [16 l, 16 l + 16), so the 8 lanes of a 128-value group reduce
// their amax with three shuffles; lanes 0..7 copy k_pe; lane 0 writes the 4 scales as one 16-byte store.
//
// SUPPORTED CONFIGS: MJ_TOKENS_PER_BLOCK in 1..32 (warps per block).
#include "quantize_cache/e4m3.cuh"

static_assert(MJ_TOKENS_PER_BLOCK >= 1 && MJ_TOKENS_PER_BLOCK <= 32, "quantize_cache: MJ_TOKENS_PER_BLOCK must be 1..32");
static_assert(MJ_ARCH >= 80, "quantize_cache: mlajit targets sm_80 and newer");

extern "C" __global__ void __launch_bounds__(mj_quant_threads(MJ_TOKENS_PER_BLOCK))
    mlajit_quantize_cache(const QuantizeCacheParams p) {
    const int lane = threadIdx.x & 31;
    const mj_i64 t = (mj_i64)blockIdx.x * MJ_TOKENS_PER_BLOCK + (threadIdx.x >> 5);
    if (t >= p.tokens) return;  // whole warps leave together: the shuffles below see all 32 lanes
    const int slot = p.slot_mapping[t];
    // A negative slot skips the token (the engines' padding); one past the cache is skipped too (the host
    // cannot see device-side slots: documented in mlajit.h).
    if (slot < 0 || (mj_i64)slot >= (mj_i64)p.num_blocks * p.block_size) return;
    unsigned char* row = static_cast<unsigned char*>(p.cache) + (mj_i64)(slot / p.block_size) * p.page_stride +
                         (mj_i64)(slot % p.block_size) * p.tok_stride;

    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const mj_bf16*>(p.kv_c) + t * p.kvc_stride) + lane * 2;
    const uint4 a = __ldg(src), b = __ldg(src + 1);
    const mj_u32 w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float x[16];
    float amax = 0.f;
    for (int i = 0; i < 8; ++i) {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        amax = fmaxf(amax, fmaxf(fabsf(x[2 * i]), fabsf(x[2 * i + 1])));  // fmaxf skips NaN, as the host does
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    float scale = mj_div_rn(amax, 448.f);
    if (!(scale > 0.f)) scale = 1.f;  // amax 0 (or so small that amax / 448 underflows): the contract's 1
    mj_u32 q[4];
    for (int i = 0; i < 4; ++i) {
        q[i] = 0;
        for (int j = 0; j < 4; ++j) q[i] |= mj_e4m3_encode(mj_div_rn(x[4 * i + j], scale)) << (8 * j);
    }
    *reinterpret_cast<uint4*>(row + lane * 16) = make_uint4(q[0], q[1], q[2], q[3]);
    const float s1 = __shfl_sync(0xffffffffu, scale, 8), s2 = __shfl_sync(0xffffffffu, scale, 16),
                s3 = __shfl_sync(0xffffffffu, scale, 24);
    if (lane == 0)
        *reinterpret_cast<uint4*>(row + 512) =
            make_uint4(__float_as_uint(scale), __float_as_uint(s1), __float_as_uint(s2), __float_as_uint(s3));
    if (lane < 8) {
        const uint4* pe = reinterpret_cast<const uint4*>(static_cast<const mj_bf16*>(p.k_pe) + t * p.kpe_stride) + lane;
        *reinterpret_cast<uint4*>(row + 528 + lane * 16) = __ldg(pe);
    }
}
