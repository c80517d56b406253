// Sparse MQA, both tiers: dequantization of the FP8 latent cache (fp8_ds_mla rows, mlajit.h "FP8 latent
// cache") into the bf16 values the math reads: bf16(float(e4m3) * scale), round-to-nearest-even, exactly as
// the header's contract says (the product is an fp32 multiply, then one rounding to bf16).
// Row layout (656 bytes): 512 e4m3fn | 4 fp32 scales (one per 128 values) | 64 bf16 k_pe.
#pragma once
#include "mlajit_device.cuh"

namespace mj_fp8 {

constexpr int kRowBytes = 656;
constexpr int kScaleOff = 512;  // byte offset of the 4 fp32 scales
constexpr int kRopeOff = 528;   // byte offset of k_pe (bf16 x 64)
constexpr int kRowChunks = kRowBytes / 16;  // 41 16-byte chunks a row

// Development switch: 0 = hardware e4m3x2 -> f16x2 conversion (sm_89+), 1 = the integer unpack below (what
// sm_80 / sm_86 always use). Measured on the H200: the integer unpack is 2.1x slower on both tiers (more
// instructions; the dequantizing warps are issue-bound), docs/perf_mqa_notes.md.
#ifndef MJ_FP8_UNPACK
#define MJ_FP8_UNPACK 0
#endif

// fp32 multiply that keeps subnormal inputs and results (the kernels build with fast math, whose multiplies
// flush them; the unpack below produces subnormal inputs on purpose).
MJ_DEVICE float mul_keep_subnormals(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// Two e4m3fn values (bits 0-7: the first, 8-15: the second) -> two floats, exact (hardware conversion:
// every e4m3 value is an f16 value).
template <int ARCH>  // a template so that sm_80 builds never see the sm_89 instruction
MJ_DEVICE void e4m3x2_to_f32_hw(mj_u32 two, float& lo, float& hi) {
    static_assert(ARCH >= 89, "cvt e4m3x2 needs sm_89");
    unsigned short h0, h1;
    mj_u32 h2;
    asm("{\n .reg .b16 a;\n cvt.u16.u32 a, %1;\n cvt.rn.f16x2.e4m3x2 %0, a;\n}" : "=r"(h2) : "r"(two));
    asm("mov.b32 {%0, %1}, %2;" : "=h"(h0), "=h"(h1) : "r"(h2));
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(h0));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(h1));
}

// Integer unpack: code k of word w as fp32 bits sign << 31 | (code & 0x7f) << 20 reads as 2^-120 times the
// code's value, normal and subnormal codes alike (a subnormal code becomes an fp32 subnormal). One byte
// permute (the code to byte 2, its sign replicated over byte 3), a shift and a mask; no conversion unit.
template <int K>
MJ_DEVICE float e4m3_scaled_bits(mj_u32 w) {
    mj_u32 t;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(w), "n"(((0x8 | K) << 12) | (K << 8) | 0x44));
    return __uint_as_float((t << 4) & 0x87f00000u);
}
// Any of the 4 codes in w the NaN code (S.1111.111)?
MJ_DEVICE bool has_nan_code(mj_u32 w) { return (((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u) != 0u; }

// 16 e4m3 values (4 words, memory order) times `scale` -> 16 bf16 (8 words, memory order):
// bf16(float(e4m3) * scale), the product one fp32 multiply, then one round-to-nearest-even to bf16.
template <int ARCH>
MJ_DEVICE void dequant16(const mj_u32 (&in)[4], float scale, mj_u32 (&out)[8]) {
    if constexpr (ARCH >= 89 && MJ_FP8_UNPACK == 0) {
#pragma unroll
        for (int w = 0; w < 4; ++w) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float a, b;
                e4m3x2_to_f32_hw<ARCH>(half ? in[w] >> 16 : in[w] & 0xffffu, a, b);
                out[2 * w + half] = mj_pack_bf16x2(mul_keep_subnormals(a, scale), mul_keep_subnormals(b, scale));
            }
        }
    } else {
        // Fast path: the 2^120 folded into the scale (exact below 2^8; above, it would overflow) and no NaN
        // code. Otherwise two multiplies (2^120 first: exact) and NaN codes made NaN.
        const bool fast = fabsf(scale) < 256.f && !(has_nan_code(in[0]) | has_nan_code(in[1]) | has_nan_code(in[2]) | has_nan_code(in[3]));
        const float s = fast ? scale * 0x1p120f : 0x1p120f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            float f[4] = {e4m3_scaled_bits<0>(in[w]), e4m3_scaled_bits<1>(in[w]), e4m3_scaled_bits<2>(in[w]), e4m3_scaled_bits<3>(in[w])};
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                f[k] = mul_keep_subnormals(f[k], s);
                if (!fast) {
                    f[k] = ((in[w] >> (8 * k)) & 0x7fu) == 0x7fu ? __int_as_float(0x7fc00000) : mul_keep_subnormals(f[k], scale);
                }
            }
            out[2 * w] = mj_pack_bf16x2(f[0], f[1]);
            out[2 * w + 1] = mj_pack_bf16x2(f[2], f[3]);
        }
    }
}

MJ_DEVICE float ld_shared_f32(mj_u32 smem) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem) : "memory");
    return v;
}
MJ_DEVICE void st_shared_v4(mj_u32 smem, mj_u32 a, mj_u32 b, mj_u32 c, mj_u32 d) {
    asm volatile("st.shared.v4.b32 [%0], {%1,%2,%3,%4};" ::"r"(smem), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// The 32 bytes of a dequantized chunk (o[0..3]: the even 16-byte chunk, o[4..7]: the odd one) to their two
// destinations, the odd one first when `odd_first`: lanes that alternate this make a quarter-warp's
// 16-byte stores hit 8 distinct bank groups. (Selects, not indexing, so o stays in registers.)
MJ_DEVICE void st_pair_swizzled(mj_u32 row_base, mj_u32 off_even, mj_u32 off_odd, int odd_first, const mj_u32 (&o)[8]) {
    const bool f = odd_first != 0;
    st_shared_v4(row_base + (f ? off_odd : off_even), f ? o[4] : o[0], f ? o[5] : o[1], f ? o[6] : o[2], f ? o[7] : o[3]);
    st_shared_v4(row_base + (f ? off_even : off_odd), f ? o[0] : o[4], f ? o[1] : o[5], f ? o[2] : o[6], f ? o[3] : o[7]);
}

}  // namespace mj_fp8
