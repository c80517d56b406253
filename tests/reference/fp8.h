// Host reference of the FP8 latent cache (mlajit.h, "FP8 latent cache"; the layout engines call
// fp8_ds_mla): OCP e4m3fn encode/decode from the format's definition, the writer's quantization of one
// row, and the dequantized bf16 row every kernel computes with. Header-only: the tests, the benchmark and
// the check tool share it.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "bf16.h"

namespace mlajit::ref {

inline constexpr int kFp8RowBytes = 656, kFp8ScalesAt = 512, kFp8RopeAt = 528;
inline constexpr double kE4m3Max = 448.0;

// e4m3fn by definition: sign bit, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
// (m/8 * 2^-6); S.1111.111 is NaN; there is no infinity.
inline double e4m3_value(uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    return s ? -mag : mag;
}
inline float e4m3_decode(uint8_t c) { return float(e4m3_value(c)); }  // exact in float

// float -> e4m3fn, round to nearest with ties to the even code (the even mantissa), saturating at +-448
// (infinities too), NaN -> 0x7f. By search over the 127 finite magnitudes, in exact double arithmetic.
inline uint8_t e4m3_encode(float x) {
    if (std::isnan(x)) return 0x7f;
    static const std::array<double, 127> mags = [] {
        std::array<double, 127> m{};
        for (int c = 0; c < 127; ++c) m[size_t(c)] = e4m3_value(uint8_t(c));
        return m;
    }();
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs(double(x));
    if (a >= kE4m3Max) return sign | 0x7e;
    const size_t hi = size_t(std::upper_bound(mags.begin(), mags.end(), a) - mags.begin());  // mags[hi-1] <= a
    const size_t lo = hi - 1;
    if (mags[lo] == a) return sign | uint8_t(lo);
    const double dl = a - mags[lo], dh = mags[hi] - a;
    const size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | uint8_t(pick);
}

// The scale of one 128-value group as the writer computes it: amax / 448 in float (NaN values do not
// count, as fmaxf skips them), 1 where that is 0.
inline float fp8_group_scale(const uint16_t* x128) {
    float amax = 0.f;
    for (int i = 0; i < 128; ++i) amax = std::fmax(amax, std::fabs(bf16_to_float(x128[i])));
    const float s = amax / 448.f;
    return s > 0.f ? s : 1.f;
}

// One 656-byte row from bf16 kv_c [512] and k_pe [64], exactly as mlajit_quantize_latent_cache writes it.
inline void quantize_fp8_row(const uint16_t* kv_c, const uint16_t* k_pe, uint8_t* row) {
    for (int g = 0; g < 4; ++g) {
        const float s = fp8_group_scale(kv_c + g * 128);
        for (int i = 0; i < 128; ++i) row[g * 128 + i] = e4m3_encode(bf16_to_float(kv_c[g * 128 + i]) / s);
        std::memcpy(row + kFp8ScalesAt + 4 * g, &s, 4);
    }
    std::memcpy(row + kFp8RopeAt, k_pe, 64 * 2);
}

inline float fp8_row_scale(const uint8_t* row, int group) {
    float s;
    std::memcpy(&s, row + kFp8ScalesAt + 4 * group, 4);
    return s;
}

// The bf16 latent row [576] the kernels compute with: bf16(float(e4m3) * scale) for kv_c, k_pe as stored.
inline void dequantize_fp8_row(const uint8_t* row, uint16_t* out576) {
    for (int i = 0; i < 512; ++i) out576[i] = float_to_bf16(e4m3_decode(row[i]) * fp8_row_scale(row, i / 128));
    std::memcpy(out576 + 512, row + kFp8RopeAt, 64 * 2);
}

// What the e4m3 rounding alone may cost a value x quantized with scale s (the bound the round-trip tests
// state): half a step of 3 mantissa bits relative (2^-4 |x|), or half the subnormal step (2^-10 s) near 0,
// plus the final bf16 rounding of the dequantized value (2^-9 relative).
inline double fp8_error_bound(double x, double s) {
    return std::max(std::ldexp(std::fabs(x), -4), std::ldexp(s, -10)) + std::ldexp(std::fabs(x), -8);
}

}  // namespace mlajit::ref
