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

// Two e4m3fn values (bits 0-7: the first, 8-15: the second) -> two floats, exact.
// sm_89 and newer convert in hardware (cvt e4m3x2 -> f16x2 is exact: every e4m3 value is an f16 value).
// Older archs (sm_80, sm_86): the e4m3 bits shifted into an f16 (exponent field 4 -> 5 bits, same
// mantissa) read as 2^-8 times the value, for normal and subnormal codes alike; the caller folds 2^8 into
// the scale (exact: a power of two). The NaN code (S.1111.111) must stay NaN: fixed up explicitly.
template <int ARCH>
MJ_DEVICE void e4m3x2_to_f32(mj_u32 two, float& lo, float& hi) {
    unsigned short h0, h1;
    if constexpr (ARCH >= 89) {
        mj_u32 h2;
        asm("{\n .reg .b16 a;\n cvt.u16.u32 a, %1;\n cvt.rn.f16x2.e4m3x2 %0, a;\n}" : "=r"(h2) : "r"(two));
        asm("mov.b32 {%0, %1}, %2;" : "=h"(h0), "=h"(h1) : "r"(h2));
    } else {
        h0 = (unsigned short)(((two & 0x7fu) << 7) | ((two & 0x80u) << 8));
        h1 = (unsigned short)(((two & 0x7f00u) >> 1) | (two & 0x8000u));
    }
    asm("cvt.f32.f16 %0, %1;" : "=f"(lo) : "h"(h0));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hi) : "h"(h1));
    if constexpr (ARCH < 89) {
        if ((two & 0x7fu) == 0x7fu) lo = __int_as_float(0x7fc00000);
        if ((two & 0x7f00u) == 0x7f00u) hi = __int_as_float(0x7fc00000);
    }
}

// The scale as the converter above wants it (2^8 folded in where the software path reads 2^-8 * value).
template <int ARCH>
MJ_DEVICE float scale_for(float scale) {
    if constexpr (ARCH >= 89) return scale;
    else return scale * 256.f;
}

// 16 e4m3 values (4 words, memory order) times `scale` -> 16 bf16 (8 words, memory order).
template <int ARCH>
MJ_DEVICE void dequant16(const mj_u32 (&in)[4], float scale, mj_u32 (&out)[8]) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float a, b;
            e4m3x2_to_f32<ARCH>(half ? in[w] >> 16 : in[w] & 0xffffu, a, b);
            out[2 * w + half] = mj_pack_bf16x2(__fmul_rn(a, scale), __fmul_rn(b, scale));
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
