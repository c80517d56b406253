// OCP float8 e4m3fn (bias 7, 3 mantissa bits, max 448, no inf, NaN = S.1111.111) in software: the FP8 latent
// cache's writer and its readers (the paged gather) use these on every arch from sm_80 (the cvt.e4m3 PTX
// instructions exist only from sm_89). Written to match the host reference bit for bit
// (tests/reference/fp8.h): explicit round-to-nearest-even PTX, no dependence on --use_fast_math or FTZ.
#pragma once
#include "mlajit_device.cuh"

// x / y rounded to nearest even, whatever flags the kernel is compiled with.
MJ_DEVICE float mj_div_rn(float x, float y) {
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
    return r;
}
MJ_DEVICE float mj_mul_rn(float x, float y) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
    return r;
}

// float -> e4m3fn code, round to nearest even, saturating at +-448 (an infinity too); NaN -> 0x7f.
MJ_DEVICE unsigned mj_e4m3_encode(float x) {
    const unsigned bits = __float_as_uint(x);
    const unsigned sign = (bits >> 24) & 0x80u;
    const unsigned mag = bits & 0x7fffffffu;
    if (mag > 0x7f800000u) return 0x7fu;                           // NaN
    if (mag >= 0x43e00000u) return sign | 0x7eu;                   // |x| >= 448 (inf included): saturate
    if (mag < 0x3c800000u) {                                       // |x| < 2^-6: subnormal step 2^-9
        // |x| * 2^9 < 8 is exact; adding 2^23 rounds it to an integer with the FPU's nearest-even.
        const float q = mj_mul_rn(__uint_as_float(mag), 512.f);
        float r;
        asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(q), "f"(8388608.f));
        return sign | (__float_as_uint(r) - 0x4b000000u);          // 0..8 (8 = the smallest normal, 2^-6)
    }
    // Normal: keep 3 of the 23 mantissa bits, nearest-even on the 20 dropped ones (a carry bumps the exponent).
    const unsigned rounded = mag + 0x7ffffu + ((mag >> 20) & 1u);
    const unsigned code = ((rounded >> 23) - 120u) << 3 | ((rounded >> 20) & 7u);
    return sign | code;  // |x| < 448 here, so at most 0x7e (448) after rounding
}

// e4m3fn code -> float (exact).
MJ_DEVICE float mj_e4m3_decode(unsigned c) {
    const unsigned mag = c & 0x7fu;
    float v;
    if (mag == 0x7fu) v = __uint_as_float(0x7fc00000u);
    else if (mag < 8u) v = float(mag) * 0.001953125f;               // subnormal: m * 2^-9
    else v = __uint_as_float(((mag >> 3) + 120u) << 23 | (mag & 7u) << 20);
    return (c & 0x80u) ? -v : v;
}

// The value the kernels compute with: bf16(float(e4m3) * scale), as the cache contract says.
MJ_DEVICE mj_u32 mj_e4m3x2_dequant_bf16x2(unsigned c_lo, unsigned c_hi, float scale) {
    return mj_pack_bf16x2(mj_mul_rn(mj_e4m3_decode(c_lo), scale), mj_mul_rn(mj_e4m3_decode(c_hi), scale));
}
