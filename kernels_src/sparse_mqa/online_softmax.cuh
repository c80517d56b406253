// The online-softmax step both sparse MQA tiers take per key tile for a thread's two query rows (the rows
// r and r + 8 of an mma / wgmma accumulator fragment). No toolkit headers.
#pragma once
#include "mlajit_device.cuh"

// From each row's running max m and this tile's max: the new running max (stored in m), the exponent offset
// ms (scores enter exp2 as s * sl2 - ms) and alpha, the factor for the old O and row sum. A row with nothing
// valid yet keeps max -inf and exponentiates against 0, so P and alpha are 0, not NaN. The products are
// unfused so that an unchanged max gives alpha exactly 1 and the O rescale can be skipped.
MJ_DEVICE void mj_online_max2(float& m0, float& m1, float tile_max0, float tile_max1, float sl2, float& ms0, float& ms1,
                              float& al0, float& al1) {
    const float mn0 = fmaxf(m0, tile_max0), mn1 = fmaxf(m1, tile_max1);
    ms0 = mn0 == MJ_NEG_INF ? 0.f : __fmul_rn(mn0, sl2);
    ms1 = mn1 == MJ_NEG_INF ? 0.f : __fmul_rn(mn1, sl2);
    al0 = mj_exp2(__fmul_rn(m0, sl2) - ms0);
    al1 = mj_exp2(__fmul_rn(m1, sl2) - ms1);
    m0 = mn0;
    m1 = mn1;
}
