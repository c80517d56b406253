// The float64 reference checks itself here: every GPU test trusts it, so it is held to hand-worked values
// and to the algebra that ties the MQA and MHA formulations together.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "reference/reference.h"
#include "support/scoped_env.h"

using namespace mlajit::ref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kE = std::exp(1.0);

uint16_t bf(double x) { return double_to_bf16(x); }
bool is_neg_inf(double x) { return std::isinf(x) && x < 0; }

// One request of sparse MQA with the real 576/512 widths, zero-filled so hand cases set a few entries.
struct Mqa {
    int64_t s_q, s_kv, h, topk;
    std::vector<uint16_t> q, kv;
    std::vector<int32_t> idx;
    Mqa(int64_t sq, int64_t skv, int64_t heads, int64_t tk)
        : s_q(sq), s_kv(skv), h(heads), topk(tk), q(size_t(sq * heads * 576), 0), kv(size_t(skv * 576), 0),
          idx(size_t(sq * tk), -1) {}
    void set_q(int64_t t, int64_t hh, int64_t d, double x) { q[size_t((t * h + hh) * 576 + d)] = bf(x); }
    void set_kv(int64_t j, int64_t d, double x) { kv[size_t(j * 576 + d)] = bf(x); }
    void set_idx(int64_t t, std::vector<int32_t> row) {
        for (size_t k = 0; k < row.size(); ++k) idx[size_t(t * topk) + k] = row[k];
    }
    double logit(int64_t t, int64_t hh, int64_t j, double scale) const {
        double s = 0;
        for (int64_t d = 0; d < 576; ++d)
            s += bf16_to_double(q[size_t((t * h + hh) * 576 + d)]) * bf16_to_double(kv[size_t(j * 576 + d)]);
        return scale * s;
    }
    double v(int64_t j, int64_t d) const { return bf16_to_double(kv[size_t(j * 576 + d)]); }
    AttnResult run(double scale, std::span<const int32_t> cu_q = {}, std::span<const int32_t> cu_kv = {},
                   std::span<const int64_t> rows = {}) const {
        return sparse_mqa({.q = View(q.data(), h * 576, 576),
                           .kv = View(kv.data(), 576),
                           .indices = idx.data(),
                           .idx_stride = topk,
                           .s_q = s_q,
                           .s_kv = s_kv,
                           .heads = h,
                           .topk = topk,
                           .sm_scale = scale,
                           .cu_seqlens_q = cu_q,
                           .cu_seqlens_kv = cu_kv,
                           .rows = rows});
    }
};

// A varlen MHA batch with split keys (k_pe shared by heads), zero-filled.
struct Mha {
    std::vector<int32_t> cu_q, cu_k;
    int64_t h;
    std::vector<uint16_t> q, kn, kpe, v;
    Mha(std::vector<int32_t> cq, std::vector<int32_t> ck, int64_t heads)
        : cu_q(std::move(cq)), cu_k(std::move(ck)), h(heads), q(size_t(cu_q.back() * h * 192), 0),
          kn(size_t(cu_k.back() * h * 128), 0), kpe(size_t(cu_k.back() * 64), 0), v(size_t(cu_k.back() * h * 128), 0) {}
    void set_v(int64_t j, int64_t hh, int64_t e, double x) { v[size_t((j * h + hh) * 128 + e)] = bf(x); }
    void randomize(Rng& rng) {
        for (auto* t : {&q, &kn, &kpe, &v}) rng.fill_normal(*t, 1.0);
    }
    AttnResult run(double scale, const uint32_t* mask = nullptr, int64_t stride = 0,
                   std::span<const int64_t> rows = {}) const {
        return mha({.q = View(q.data(), h * 192, 192),
                    .k_nope = View(kn.data(), h * 128, 128),
                    .k_pe = View(kpe.data(), 64, 0),
                    .v = View(v.data(), h * 128, 128),
                    .cu_seqlens_q = cu_q,
                    .cu_seqlens_k = cu_k,
                    .heads = h,
                    .sm_scale = scale,
                    .mask = mask,
                    .mask_stride_words = stride,
                    .rows = rows});
    }
};

}  // namespace

// ---- bf16 and random inputs ------------------------------------------------------------------------------

TEST_CASE("bf16: round to nearest even, NaN stays NaN, double input rounds once") {
    CHECK(float_to_bf16(1.0f) == 0x3f80);
    CHECK(bf16_to_float(0xc040) == -3.0f);
    CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);           // tie -> even (down)
    CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);       // tie -> even (up)
    CHECK(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);  // above the tie
    CHECK(float_to_bf16(INFINITY) == 0x7f80);
    CHECK(float_to_bf16(-INFINITY) == 0xff80);
    CHECK(float_to_bf16(3.4e38f) == 0x7f80);  // rounds past the largest bf16
    CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
    CHECK(std::isnan(bf16_to_float(float_to_bf16(-std::bit_cast<float>(0x7f800001u)))));  // low-bit NaN
    // Just off a bf16 midpoint, where double -> float lands exactly on the midpoint.
    CHECK(double_to_bf16(1.0 + 0x1p-8 + 0x1p-40) == 0x3f81);
    CHECK(double_to_bf16(1.0 + 3 * 0x1p-8 - 0x1p-40) == 0x3f81);
    CHECK(double_to_bf16(-(1.0 + 0x1p-8 + 0x1p-40)) == 0xbf81);
    CHECK(double_to_bf16(1.0 + 0x1p-8) == 0x3f80);
    int bad = 0;
    for (uint32_t b = 0; b < 0x10000; ++b) {
        const float f = bf16_to_float(uint16_t(b));
        if (!std::isnan(f) && (float_to_bf16(f) != b || double_to_bf16(double(f)) != b)) ++bad;
    }
    CHECK(bad == 0);
}

TEST_CASE("Rng: a seed replays its stream; normal draws have the requested sigma") {
    Rng a(42), b(42), c(43);
    const auto va = a.normal_bf16(1000, 1.0);
    CHECK(va == b.normal_bf16(1000, 1.0));
    CHECK(va != c.normal_bf16(1000, 1.0));

    Rng r;
    MESSAGE(r.seed_note());
    const double sigma = 0.5;
    const auto x = to_double(r.normal_bf16(200000, sigma));
    double mean = 0, sq = 0;
    for (double v : x) mean += v;
    mean /= double(x.size());
    for (double v : x) sq += (v - mean) * (v - mean);
    const double sd = std::sqrt(sq / double(x.size()));
    CHECK(std::fabs(mean) < 0.01);
    CHECK(sd == doctest::Approx(sigma).epsilon(0.02));

    bool lo = false, hi = false;
    for (int i = 0; i < 1000; ++i) {
        const int64_t k = r.uniform_int(-3, 3);
        REQUIRE((k >= -3 && k <= 3));
        lo |= k == -3;
        hi |= k == 3;
    }
    CHECK((lo && hi));
}

TEST_CASE("Rng: a large fill (parallel chunks) replays and its chunks are independent") {
    const size_t chunk = size_t(1) << 20, n = 2 * chunk + 12345;
    Rng a(7), b(7);
    const auto va = a.normal_bf16(n, 1.0);
    CHECK(va == b.normal_bf16(n, 1.0));
    CHECK(a.next_u64() == b.next_u64());  // a fill advances the parent stream by a fixed amount
    int same = 0;
    for (size_t i = 0; i < 1000; ++i) same += va[i] == va[chunk + i];
    CHECK(same < 100);  // equal bf16 draws happen (~1%), equal chunks would give 1000
}

TEST_CASE("Rng: MLAJIT_TEST_SEED fixes the seed, and a bad value is an error") {
    mlajit::test::ScopedEnv seed("MLAJIT_TEST_SEED", "0x3039");
    CHECK(test_seed() == 12345u);
    CHECK(Rng().seed() == 12345u);
    CHECK(Rng().seed_note().find("MLAJIT_TEST_SEED=12345") != std::string::npos);
    seed.set("12x");
    CHECK_THROWS_AS(test_seed(), std::invalid_argument);
    seed.set(nullptr);
    CHECK(Rng().seed() != Rng().seed());  // fresh seeds (a 2^-64 chance of a false failure)
}

// ---- sparse MQA ------------------------------------------------------------------------------------------

TEST_CASE("sparse MQA: one valid key gives that key's V and its scaled logit") {
    Rng rng;
    INFO(rng.seed_note());
    Mqa m(1, 5, 2, 4);
    rng.fill_normal(m.q, 1.0);
    rng.fill_normal(m.kv, 1.0);
    m.set_idx(0, {-1, 2, 5, -9});  // 5 and -9 are out of [0, s_kv)
    const double scale = 0.1;
    const AttnResult r = m.run(scale);
    REQUIRE(r.rows == std::vector<int64_t>{0});
    for (int64_t h = 0; h < 2; ++h) {
        for (int64_t d = 0; d < 512; ++d) CHECK(r.out_at(0, h)[d] == m.v(2, d));
        CHECK(r.lse_at(0, h) == doctest::Approx(m.logit(0, h, 2, scale)).epsilon(1e-12));
        CHECK(r.max_logits[size_t(h)] == doctest::Approx(m.logit(0, h, 2, scale)).epsilon(1e-12));
    }
}

TEST_CASE("sparse MQA: two keys with known logits 0 and 1") {
    Mqa m(1, 2, 1, 2);
    m.set_q(0, 0, 0, 1.0);
    m.set_kv(0, 0, 0.0);  // logit 0.5 * 1 * 0
    m.set_kv(1, 0, 2.0);  // logit 0.5 * 1 * 2 = 1
    m.set_kv(0, 1, 3.0);
    m.set_kv(1, 1, -1.0);
    m.set_kv(1, 511, 8.0);
    m.set_kv(0, 575, 100.0);  // rope column: in K (times q = 0) but not in V
    m.set_idx(0, {1, 0});
    const AttnResult r = m.run(0.5);
    const double w0 = 1 / (1 + kE), w1 = kE / (1 + kE);
    CHECK(r.out_at(0, 0)[0] == doctest::Approx(w1 * 2.0).epsilon(1e-12));
    CHECK(r.out_at(0, 0)[1] == doctest::Approx(w0 * 3.0 - w1).epsilon(1e-12));
    CHECK(r.out_at(0, 0)[511] == doctest::Approx(w1 * 8.0).epsilon(1e-12));
    CHECK(r.out_at(0, 0)[2] == 0.0);
    CHECK(r.lse_at(0, 0) == doctest::Approx(std::log(1 + kE)).epsilon(1e-12));
    CHECK(r.max_logits[0] == doctest::Approx(1.0).epsilon(1e-12));
}

TEST_CASE("sparse MQA: widths other than 576/512 (d_v < d_qk, odd sizes)") {
    // d_qk = 11, d_v = 3: two keys, q = all ones, so a logit is scale * (sum of the key row).
    const std::vector<uint16_t> q(11, bf(1.0));
    std::vector<uint16_t> kv(2 * 11, 0);
    kv[0] = bf(1.0);       // key 0: V = (1, 0, 0), K sum 1 + 2 = 3
    kv[10] = bf(2.0);      // column 10 is outside V
    kv[11 + 2] = bf(4.0);  // key 1: V = (0, 0, 4), K sum 4
    const std::vector<int32_t> idx{0, 1};
    const AttnResult r = sparse_mqa({.q = View(q.data(), 11, 11), .kv = View(kv.data(), 11), .indices = idx.data(),
                                     .s_q = 1, .s_kv = 2, .heads = 1, .topk = 2, .sm_scale = 0.5, .d_qk = 11,
                                     .d_v = 3});
    const double z = std::exp(1.5) + std::exp(2.0);
    REQUIRE(r.out.size() == 3);
    CHECK(r.out[0] == doctest::Approx(std::exp(1.5) / z).epsilon(1e-12));
    CHECK(r.out[1] == 0.0);
    CHECK(r.out[2] == doctest::Approx(4 * std::exp(2.0) / z).epsilon(1e-12));
    CHECK(r.lse[0] == doctest::Approx(std::log(z)).epsilon(1e-12));
    CHECK(r.max_logits[0] == doctest::Approx(2.0).epsilon(1e-12));
}

TEST_CASE("sparse MQA: a row of only invalid indices gives out 0, lse and max_logits -inf") {
    Mqa m(3, 4, 2, 3);
    Rng rng;
    INFO(rng.seed_note());
    rng.fill_normal(m.q, 1.0);
    rng.fill_normal(m.kv, 1.0);
    m.set_idx(0, {-1, -1, -1});
    m.set_idx(1, {3, -1, -1});
    m.set_idx(2, {4, -7, std::numeric_limits<int32_t>::max()});
    const AttnResult r = m.run(0.3);
    for (int64_t t : {0, 2})
        for (int64_t h = 0; h < 2; ++h) {
            for (int64_t d = 0; d < 512; ++d) CHECK(r.out_at(size_t(t), h)[d] == 0.0);
            CHECK(is_neg_inf(r.lse_at(size_t(t), h)));
            CHECK(is_neg_inf(r.max_logits[size_t(t * 2 + h)]));
        }
    CHECK(std::isfinite(r.lse_at(1, 0)));
    CHECK(r.out_at(1, 1)[7] == m.v(3, 7));
}

TEST_CASE("sparse MQA: a duplicated index is attended once (a top-k selection is a set)") {
    Mqa m(1, 2, 1, 3);
    m.set_q(0, 0, 0, 1.0);
    m.set_kv(1, 0, 2.0);  // logits: key 0 -> 0, key 1 -> 1 (scale 0.5)
    m.set_kv(0, 1, 4.0);
    m.set_idx(0, {0, 1, 0});
    const AttnResult r = m.run(0.5);
    const double z = 1 + kE;  // key 0 once: weights 1/z and e/z
    CHECK(r.out_at(0, 0)[0] == doctest::Approx(kE / z * 2.0).epsilon(1e-12));
    CHECK(r.out_at(0, 0)[1] == doctest::Approx(1 / z * 4.0).epsilon(1e-12));
    CHECK(r.lse_at(0, 0) == doctest::Approx(std::log(z)).epsilon(1e-12));
}

TEST_CASE("sparse MQA batched: indices are local to the request and bounded by its own s_kv") {
    Rng rng;
    INFO(rng.seed_note());
    Mqa m(2, 5, 1, 2);
    rng.fill_normal(m.q, 1.0);
    rng.fill_normal(m.kv, 1.0);
    const std::vector<int32_t> cu_q{0, 1, 2}, cu_kv{0, 3, 5};
    m.set_idx(0, {1, 3});  // 3 is past request 0's 3 keys
    m.set_idx(1, {1, 2});  // local 1 -> kv row 4; local 2 is past request 1's 2 keys
    const AttnResult r = m.run(0.2, cu_q, cu_kv);
    for (int64_t d = 0; d < 512; ++d) {
        CHECK(r.out_at(0, 0)[d] == m.v(1, d));
        CHECK(r.out_at(1, 0)[d] == m.v(4, d));
    }
    CHECK(r.lse_at(1, 0) == doctest::Approx(m.logit(1, 0, 4, 0.2)).epsilon(1e-12));
}

TEST_CASE("sparse MQA: a row subset equals the same rows of the full evaluation") {
    Rng rng;
    INFO(rng.seed_note());
    Mqa m(6, 9, 3, 5);
    rng.fill_normal(m.q, 1.0);
    rng.fill_normal(m.kv, 1.0);
    for (auto& i : m.idx) i = int32_t(rng.uniform_int(-1, 9));
    const AttnResult full = m.run(0.07);
    const std::vector<int64_t> rows{4, 0, 5};
    const AttnResult sub = m.run(0.07, {}, {}, rows);
    REQUIRE(sub.rows == rows);
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t h = 0; h < 3; ++h) {
            CHECK(sub.lse_at(i, h) == full.lse_at(size_t(rows[i]), h));
            for (int64_t d = 0; d < 512; ++d) CHECK(sub.out_at(i, h)[d] == full.out_at(size_t(rows[i]), h)[d]);
        }
}

// ---- MHA -------------------------------------------------------------------------------------------------

TEST_CASE("MHA: one key gives its V and the scaled logit, with shared or per-head k_pe") {
    Rng rng;
    INFO(rng.seed_note());
    const int64_t h = 2;
    Mha m({0, 1}, {0, 1}, h);
    m.randomize(rng);
    const double scale = 0.07;
    auto qd = [&](int64_t hh, int64_t d) { return bf16_to_double(m.q[size_t(hh * 192 + d)]); };
    const AttnResult r = m.run(scale);
    for (int64_t hh = 0; hh < h; ++hh) {
        double s = 0;
        for (int64_t d = 0; d < 128; ++d) s += qd(hh, d) * bf16_to_double(m.kn[size_t(hh * 128 + d)]);
        for (int64_t d = 0; d < 64; ++d) s += qd(hh, 128 + d) * bf16_to_double(m.kpe[size_t(d)]);
        CHECK(r.lse_at(0, hh) == doctest::Approx(scale * s).epsilon(1e-12));
        for (int64_t e = 0; e < 128; ++e) CHECK(r.out_at(0, hh)[e] == bf16_to_double(m.v[size_t(hh * 128 + e)]));
    }
    // Packed k [1, h, 192] whose rope part differs per head.
    const auto kp = rng.normal_bf16(size_t(h * 192), 1.0);
    const View packed(kp.data(), h * 192, 192);
    const AttnResult rp = mha({.q = View(m.q.data(), h * 192, 192), .k_nope = packed, .k_pe = packed.shifted(128),
                               .v = View(m.v.data(), h * 128, 128), .cu_seqlens_q = m.cu_q, .cu_seqlens_k = m.cu_k,
                               .heads = h, .sm_scale = scale});
    for (int64_t hh = 0; hh < h; ++hh) {
        double s = 0;
        for (int64_t d = 0; d < 192; ++d) s += qd(hh, d) * bf16_to_double(kp[size_t(hh * 192 + d)]);
        CHECK(rp.lse_at(0, hh) == doctest::Approx(scale * s).epsilon(1e-12));
    }
}

TEST_CASE("MHA: split and packed K agree on random multi-key input") {
    Rng rng;
    INFO(rng.seed_note());
    const int64_t h = 3;
    Mha m({0, 4, 9}, {0, 6, 20}, h);
    m.randomize(rng);
    std::vector<uint16_t> kp(size_t(20 * h * 192));
    for (int64_t j = 0; j < 20; ++j)
        for (int64_t hh = 0; hh < h; ++hh) {
            for (int64_t d = 0; d < 128; ++d) kp[size_t((j * h + hh) * 192 + d)] = m.kn[size_t((j * h + hh) * 128 + d)];
            for (int64_t d = 0; d < 64; ++d) kp[size_t((j * h + hh) * 192 + 128 + d)] = m.kpe[size_t(j * 64 + d)];
        }
    const View packed(kp.data(), h * 192, 192);
    const AttnResult r = m.run(0.1);
    const AttnResult rp = mha({.q = View(m.q.data(), h * 192, 192), .k_nope = packed, .k_pe = packed.shifted(128),
                               .v = View(m.v.data(), h * 128, 128), .cu_seqlens_q = m.cu_q, .cu_seqlens_k = m.cu_k,
                               .heads = h, .sm_scale = 0.1});
    CHECK(rp.out == r.out);
    CHECK(rp.lse == r.lse);
}

TEST_CASE("MHA: bottom-right causal alignment, s_q < s_k and s_q > s_k in one varlen batch") {
    // q = 0 makes every logit 0, so out is the mean of the attended V rows and lse = log(count).
    Mha m({0, 2, 5}, {0, 5, 7}, 1);
    for (int64_t j = 0; j < 7; ++j) {
        m.set_v(j, 0, 0, double(j));  // global key id
        m.set_v(j, 0, 1, 1.0);
    }
    const AttnResult r = m.run(0.3);
    // Request 0: 2 queries over 5 keys: query 0 attends local 0..3, query 1 local 0..4.
    CHECK(r.out_at(0, 0)[0] == doctest::Approx(1.5));
    CHECK(r.lse_at(0, 0) == doctest::Approx(std::log(4.0)));
    CHECK(r.out_at(1, 0)[0] == doctest::Approx(2.0));
    CHECK(r.lse_at(1, 0) == doctest::Approx(std::log(5.0)));
    // Request 1: 3 queries over 2 keys (global 5, 6): query 0 attends nothing, 1 local 0, 2 local 0..1.
    CHECK(r.out_at(2, 0)[0] == 0.0);
    CHECK(r.out_at(2, 0)[1] == 0.0);
    CHECK(is_neg_inf(r.lse_at(2, 0)));
    CHECK(r.out_at(3, 0)[0] == doctest::Approx(5.0));
    CHECK(r.lse_at(3, 0) == doctest::Approx(0.0));
    CHECK(r.out_at(4, 0)[0] == doctest::Approx(5.5));
    CHECK(r.out_at(4, 0)[1] == doctest::Approx(1.0));
    CHECK(r.lse_at(4, 0) == doctest::Approx(std::log(2.0)));
}

TEST_CASE("MHA: every key masked (or only non-causal keys selected) gives out 0, lse -inf") {
    Rng rng;
    INFO(rng.seed_note());
    Mha m({0, 3}, {0, 40}, 2);
    m.randomize(rng);
    std::vector<uint32_t> mask(3 * 2, 0u);
    mask[1 * 2 + 1] = 1u << 7;  // row 1 (position 38) selects key 39: in range but in its future
    const AttnResult r = m.run(0.1, mask.data(), 2);
    for (size_t t = 0; t < 3; ++t)
        for (int64_t h = 0; h < 2; ++h) {
            CHECK(is_neg_inf(r.lse_at(t, h)));
            for (int64_t e = 0; e < 128; ++e) CHECK(r.out_at(t, h)[e] == 0.0);
        }
}

TEST_CASE("top-k mask: bits at key offsets not multiple of 32, across a request boundary") {
    // Request 0: 2 queries over 37 keys; request 1: 2 queries over 70 keys, its keys start at global 37.
    const std::vector<int32_t> cu_q{0, 2, 4}, cu_k{0, 37, 107};
    const int64_t topk = 6, stride = 4;  // one spare word, which must stay zero
    const std::vector<int32_t> idx{
        31, 32, 36, -1, 35, 5,    // pos 35: 36 is non-causal (mask has it, attention must not)
        36, 0,  40, -1, 33, 33,   // pos 36: 40 >= s_k is skipped, duplicate 33 is one bit
        0,  31, 32, 63, 64, 69,   // pos 68 of request 1: 69 is non-causal
        69, 70, 5,  -1, 37, 100,  // pos 69: 70 >= s_k skipped (globally it would be a valid key)
    };
    const std::vector<uint32_t> mask = topk_mask(idx.data(), 0, topk, cu_q, cu_k, stride);
    const std::vector<uint32_t> want{
        0x80000020u, 0x00000019u, 0x0u,        0x0u,  // keys 5, 31 | 32, 35, 36
        0x00000001u, 0x00000012u, 0x0u,        0x0u,  // keys 0 | 33, 36
        0x80000001u, 0x80000001u, 0x00000021u, 0x0u,  // keys 0, 31 | 32, 63 | 64, 69
        0x00000020u, 0x00000020u, 0x00000020u, 0x0u,  // keys 5 | 37 | 69
    };
    CHECK(mask == want);

    // Through MHA with q = 0: out is the mean of the attended global key ids, lse = log(count).
    Mha m(cu_q, cu_k, 2);
    for (int64_t j = 0; j < 107; ++j)
        for (int64_t h = 0; h < 2; ++h) {
            m.set_v(j, h, 0, double(j));
            m.set_v(j, h, 1, 1.0);
        }
    const AttnResult r = m.run(0.1, mask.data(), stride);
    const double means[] = {(5 + 31 + 32 + 35) / 4.0, (0 + 33 + 36) / 3.0, (37 + 68 + 69 + 100 + 101) / 5.0,
                            (42 + 74 + 106) / 3.0};
    const double counts[] = {4, 3, 5, 3};
    for (size_t t = 0; t < 4; ++t)
        for (int64_t h = 0; h < 2; ++h) {
            CHECK(r.out_at(t, h)[0] == doctest::Approx(means[t]).epsilon(1e-12));
            CHECK(r.out_at(t, h)[1] == doctest::Approx(1.0).epsilon(1e-12));
            CHECK(r.lse_at(t, h) == doctest::Approx(std::log(counts[t])).epsilon(1e-12));
        }
    CHECK_THROWS_AS(topk_mask(idx.data(), 0, topk, cu_q, cu_k, 2), std::invalid_argument);  // 70 keys > 64 bits
}

TEST_CASE("MHA: a row subset equals the same rows of the full evaluation") {
    Rng rng;
    INFO(rng.seed_note());
    Mha m({0, 5, 8}, {0, 9, 30}, 2);
    m.randomize(rng);
    const AttnResult full = m.run(0.1);
    const std::vector<int64_t> rows{7, 2, 5};
    const AttnResult sub = m.run(0.1, nullptr, 0, rows);
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t h = 0; h < 2; ++h) {
            CHECK(sub.lse_at(i, h) == full.lse_at(size_t(rows[i]), h));
            for (int64_t e = 0; e < 128; ++e) CHECK(sub.out_at(i, h)[e] == full.out_at(size_t(rows[i]), h)[e]);
        }
    CHECK_THROWS_AS(m.run(0.1, nullptr, 0, std::vector<int64_t>{8}), std::invalid_argument);
}

// ---- DSA algebra -----------------------------------------------------------------------------------------

TEST_CASE("DSA helpers read W_kv_b in the checkpoint layout (W_UK rows first, then W_UV, per head)") {
    Rng rng;
    INFO(rng.seed_note());
    const int64_t heads = 2;
    const auto w = rng.normal_bf16(size_t(heads * 256 * 512), 1.0);
    const View wv(w.data(), 512);
    auto W = [&](int64_t row, int64_t col) { return bf16_to_double(w[size_t(row * 512 + col)]); };

    std::vector<uint16_t> qn(size_t(heads * 128), 0), qpe = rng.normal_bf16(size_t(heads * 64), 1.0);
    qn[size_t(1 * 128 + 5)] = bf(1.0);  // head 1 selects W_UK row 5
    const auto qa = absorb_q(View(qn.data(), heads * 128, 128), View(qpe.data(), heads * 64, 64), wv, 1, heads);
    REQUIRE(qa.size() == size_t(heads * 576));
    for (int64_t c = 0; c < 512; ++c) {
        CHECK(qa[size_t(c)] == 0.0);
        CHECK(qa[size_t(576 + c)] == W(256 + 5, c));
    }
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < 64; ++d)
            CHECK(qa[size_t(h * 576 + 512 + d)] == bf16_to_double(qpe[size_t(h * 64 + d)]));

    std::vector<uint16_t> kvc(512, 0);
    kvc[7] = bf(1.0);  // latent basis vector 7 picks column 7
    const DecompressedKv dk = decompress_kv(View(kvc.data(), 512), wv, 1, heads);
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < 128; ++d) {
            CHECK(dk.k_nope[size_t(h * 128 + d)] == W(h * 256 + d, 7));
            CHECK(dk.v[size_t(h * 128 + d)] == W(h * 256 + 128 + d, 7));
        }

    std::vector<double> lat(size_t(heads * 512), 0.0);
    lat[size_t(1 * 512 + 9)] = 1.0;
    const auto po = project_out(lat, 1, heads, wv);
    for (int64_t e = 0; e < 128; ++e) {
        CHECK(po[size_t(e)] == 0.0);
        CHECK(po[size_t(128 + e)] == W(256 + 128 + e, 9));
    }
}

TEST_CASE("causal_topk_indices: distinct causal keys, min(topk, prefix) of them, -1 elsewhere") {
    Rng rng;
    INFO(rng.seed_note());
    const std::vector<int32_t> cu_q{0, 5, 9, 12}, cu_k{0, 5, 49, 50};
    const int64_t topk = 8;
    const auto idx = causal_topk_indices(rng, cu_q, cu_k, topk);
    bool minus_one_not_last = false;
    for (size_t r = 0; r + 1 < cu_q.size(); ++r) {
        const int64_t s_q = cu_q[r + 1] - cu_q[r], s_k = cu_k[r + 1] - cu_k[r];
        for (int64_t i = 0; i < s_q; ++i) {
            const int64_t pos = s_k - s_q + i;
            std::set<int32_t> seen;
            int64_t invalid = 0;
            for (int64_t k = 0; k < topk; ++k) {
                const int32_t j = idx[size_t((cu_q[r] + i) * topk + k)];
                if (j == -1) {
                    ++invalid;
                    minus_one_not_last |= k + 1 < topk && idx[size_t((cu_q[r] + i) * topk + k + 1)] != -1;
                    continue;
                }
                CHECK((j >= 0 && j <= pos));
                CHECK(seen.insert(j).second);
            }
            CHECK(int64_t(seen.size()) == std::min<int64_t>(topk, std::max<int64_t>(0, pos + 1)));
            CHECK(invalid == topk - int64_t(seen.size()));
        }
    }
    CHECK(minus_one_not_last);  // -1 entries are scattered, not only trailing
    const auto rows = sample_rows(rng, cu_q, 2);
    for (int64_t t : {0, 4, 5, 8, 9, 11}) CHECK(std::find(rows.begin(), rows.end(), t) != rows.end());
    CHECK(std::is_sorted(rows.begin(), rows.end()));
    CHECK(std::adjacent_find(rows.begin(), rows.end()) == rows.end());
}

TEST_CASE("DSA: masked MHA over decompressed K/V equals sparse MQA over the latent cache") {
    Rng rng;
    INFO(rng.seed_note());
    const int64_t heads = 3, topk = 8;
    // Plain prefill, chunked prefill with context, random-length context, an empty request, and more
    // queries than keys (its first rows attend nothing: both paths must say out 0, lse -inf).
    const int32_t ctx = int32_t(rng.uniform_int(9, 40));
    std::vector<int32_t> lens_q{5, 4, 6, 0, 3}, lens_k{5, 40, ctx + 6, 3, 1};
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (size_t r = 0; r < lens_q.size(); ++r) {
        cu_q.push_back(cu_q.back() + lens_q[r]);
        cu_k.push_back(cu_k.back() + lens_k[r]);
    }
    const int64_t T = cu_q.back(), T_k = cu_k.back();
    const auto q = rng.normal_bf16(size_t(T * heads * 192), 1.0);   // [T, h, q_nope 128 ; q_pe 64]
    const auto kv = rng.normal_bf16(size_t(T_k * 576), 1.0);        // [T_k, kv_c 512 ; k_pe 64]
    const auto w = rng.normal_bf16(size_t(heads * 256 * 512), 0.05);  // k_nope, v ~ N(0, ~1.1)
    const auto idx = causal_topk_indices(rng, cu_q, cu_k, topk);
    const double scale = 1.0 / std::sqrt(192.0);

    const View qn(q.data(), heads * 192, 192), kvc(kv.data(), 576), wv(w.data(), 512);
    const AttnResult mqa = dsa_prefill_reference({.q_nope = qn, .q_pe = qn.shifted(128), .kv_c = kvc,
                                                  .k_pe = kvc.shifted(512), .w_kv_b = wv, .indices = idx.data(),
                                                  .topk = topk, .heads = heads, .cu_seqlens_q = cu_q,
                                                  .cu_seqlens_k = cu_k, .sm_scale = scale});

    const DecompressedKv dk = decompress_kv(kvc, wv, T_k, heads);
    const int64_t stride = 3;  // 40 keys need 2 words; one spare
    const auto mask = topk_mask(idx.data(), 0, topk, cu_q, cu_k, stride);
    const MhaArgs margs{.q = qn, .k_nope = View(dk.k_nope.data(), heads * 128, 128), .k_pe = kvc.shifted(512),
                        .v = View(dk.v.data(), heads * 128, 128), .cu_seqlens_q = cu_q, .cu_seqlens_k = cu_k,
                        .heads = heads, .sm_scale = scale, .mask = mask.data(), .mask_stride_words = stride};
    const AttnResult mh = mha(margs);

    // The comparison has something to compare: real outputs, and the expected empty rows (request 4).
    CHECK(rms(mqa.out) > 0.1);
    int64_t empty = 0;
    for (double l : mqa.lse) empty += is_neg_inf(l);
    CHECK(empty == 2 * heads);

    const int64_t shape[] = {T, heads, 128};
    const CheckReport ro = check_close("out mha vs mqa", mh.out, mqa.out, {1e-9, 1e-9 * rms(mqa.out), 0.0}, shape);
    CHECK_MESSAGE(ro.ok(), ro.summary());
    const int64_t lshape[] = {T, heads};
    const CheckReport rl = check_close("lse mha vs mqa", mh.lse, mqa.lse, {1e-9, 1e-9, 0.0}, lshape);
    CHECK_MESSAGE(rl.ok(), rl.summary());

    // Same through the public pieces: absorbed q into sparse_mqa (batched), then project_out.
    const auto qa = absorb_q(qn, qn.shifted(128), wv, T, heads);
    const AttnResult lat = sparse_mqa({.q = View(qa.data(), heads * 576, 576), .kv = kvc, .indices = idx.data(),
                                       .s_q = T, .s_kv = T_k, .heads = heads, .topk = topk, .sm_scale = scale,
                                       .cu_seqlens_q = cu_q, .cu_seqlens_kv = cu_k});
    const auto po = project_out(lat.out, T, heads, wv);
    const CheckReport rp = check_close("out project(mqa) vs dsa", po, mqa.out, {1e-12, 1e-12, 0.0}, shape);
    CHECK_MESSAGE(rp.ok(), rp.summary());

    // A row sample of the DSA reference is the same rows of the full one.
    const auto rows = sample_rows(rng, cu_q, 1);
    const AttnResult sub = dsa_prefill_reference({.q_nope = qn, .q_pe = qn.shifted(128), .kv_c = kvc,
                                                  .k_pe = kvc.shifted(512), .w_kv_b = wv, .indices = idx.data(),
                                                  .topk = topk, .heads = heads, .cu_seqlens_q = cu_q,
                                                  .cu_seqlens_k = cu_k, .sm_scale = scale, .rows = rows});
    REQUIRE(sub.rows == rows);
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t h = 0; h < heads; ++h) {
            CHECK(sub.lse_at(i, h) == mqa.lse_at(size_t(rows[i]), h));
            CHECK(sub.out_at(i, h)[17] == mqa.out_at(size_t(rows[i]), h)[17]);
        }

    // The comparison can fail: drop one selected key from one row and the outputs must disagree.
    auto mask2 = mask;
    const int64_t t_drop = cu_q[2] + 3;  // last query of the 40-key request: 8 selected keys
    for (int64_t wd = 0; wd < stride; ++wd)
        if (uint32_t& word = mask2[size_t(t_drop * stride + wd)]; word) {
            word &= word - 1;
            break;
        }
    MhaArgs margs2 = margs;
    margs2.mask = mask2.data();
    const CheckReport neg =
        check_close("dropped key", mha(margs2).out, mqa.out, {1e-9, 1e-9 * rms(mqa.out), 0.0}, shape);
    CHECK_FALSE(neg.ok());
    CHECK(neg.first_bad.find("dropped key[" + std::to_string(t_drop) + ",") == 0);
}

TEST_CASE("DSA dense shortcut: when the top-k covers every causal prefix, masked MHA equals dense MHA") {
    Rng rng;
    INFO(rng.seed_note());
    Mha m({0, 6, 10}, {0, 6, 13}, 2);
    m.randomize(rng);
    const int64_t topk = 16;  // >= every prefix
    const auto idx = causal_topk_indices(rng, m.cu_q, m.cu_k, topk);
    const auto mask = topk_mask(idx.data(), 0, topk, m.cu_q, m.cu_k, 1);
    const AttnResult masked = m.run(0.1, mask.data(), 1);
    const AttnResult dense = m.run(0.1);
    CHECK(masked.out == dense.out);
    CHECK(masked.lse == dense.lse);
}

// ---- comparison helpers ----------------------------------------------------------------------------------

TEST_CASE("metrics: rel L2, max abs, rms") {
    const std::vector<double> a{1, 2, 3}, b{1, 1, 1};
    CHECK(rel_l2_error(a, b) == doctest::Approx(std::sqrt(5.0 / 3.0)));
    CHECK(max_abs_error(a, b) == 2.0);
    CHECK(rms(a) == doctest::Approx(std::sqrt(14.0 / 3.0)));
    CHECK(rel_l2_error(b, b) == 0.0);
}

TEST_CASE("check_close names the first bad element and counts non-finite values") {
    const std::vector<double> want{1, 2, 3, 4, 5, 6};
    std::vector<double> got = want;
    const int64_t shape[] = {2, 3};
    const int64_t rows[] = {17, 40};
    const Tolerance tol{1e-2, 1e-3, 0.0};
    CHECK(check_close("x", got, want, tol, shape, rows).ok());

    got[4] = 5.2;                                  // [tok 40, 1]
    got[5] = std::numeric_limits<double>::quiet_NaN();
    got[0] = kInf;
    const CheckReport r = check_close("out", got, want, tol, shape, rows);
    CHECK_FALSE(r.ok());
    CHECK(r.bad == 3);
    CHECK(r.nonfinite == 2);
    CHECK(r.first_bad.find("out[tok 17, 0]: got inf expected 1") == 0);
    CHECK(r.summary().find("FAILED") != std::string::npos);
    got[0] = want[0];
    got[5] = want[5];
    const CheckReport r2 = check_close("out", got, want, tol, shape, rows);
    CHECK(r2.first_bad.find("out[tok 40, 1]: got 5.2 expected 5") == 0);
    CHECK(r2.max_abs == doctest::Approx(0.2));

    // lse conventions: -inf matches -inf; -inf against a finite value, or the reverse, is an error.
    const std::vector<double> lw{-kInf, 0.5, -kInf};
    CHECK(check_close("lse", std::vector<double>{-kInf, 0.5, -kInf}, lw, {0, 1e-3, 0}).ok());
    const CheckReport rl = check_close("lse", std::vector<double>{-kInf, -kInf, 0.0}, lw, {0, 1e-3, 0});
    CHECK(rl.bad == 2);
    CHECK(rl.nonfinite == 1);
    CHECK(rl.first_bad == "lse[1]: got -inf expected 0.5");

    // A bias that every element tolerates still fails the aggregate bound.
    std::vector<double> biased(want.size());
    for (size_t i = 0; i < want.size(); ++i) biased[i] = want[i] * 1.015;
    CHECK(check_close("b", biased, want, {2e-2, 0, 0}).ok());
    CHECK_FALSE(check_close("b", biased, want, {2e-2, 0, 1e-2}).ok());
}

TEST_CASE("GPU tolerances: bf16 rounding of the reference passes, a wrong element fails") {
    Rng rng;
    INFO(rng.seed_note());
    Mqa m(4, 64, 4, 32);
    rng.fill_normal(m.q, 1.0);
    rng.fill_normal(m.kv, 1.0);
    for (auto& i : m.idx) i = int32_t(rng.uniform_int(-1, 63));
    const AttnResult ref = m.run(1.0 / std::sqrt(576.0));
    // What a perfect kernel returns: bf16 out, fp32 lse / max_logits, in full [s_q, h, ...] tensors.
    std::vector<uint16_t> out = to_bf16(ref.out);
    std::vector<float> lse(ref.lse.begin(), ref.lse.end()), ml(ref.max_logits.begin(), ref.max_logits.end());
    const CheckReport ro = check_out("out", View(out.data(), 4 * 512, 512), ref);
    CHECK_MESSAGE(ro.ok(), ro.summary());
    CHECK(check_lse("lse", View(lse.data(), 4, 1), ref).ok());
    CHECK(check_max_logits("max_logits", View(ml.data(), 4, 1), ref).ok());

    out[size_t((2 * 4 + 3) * 512 + 100)] = bf(ref.out_at(2, 3)[100] + 0.5);
    const CheckReport bad = check_out("out", View(out.data(), 4 * 512, 512), ref);
    CHECK_FALSE(bad.ok());
    CHECK(bad.first_bad.find("out[tok 2, 3, 100]") == 0);
    lse[5] += 2e-3f;
    CHECK_FALSE(check_lse("lse", View(lse.data(), 4, 1), ref).ok());
}

TEST_CASE("reference arguments are validated") {
    Mha m({0, 2}, {0, 3}, 1);
    const std::vector<int32_t> short_cu{0, 2, 2};
    CHECK_THROWS_AS(mha({.q = View(m.q.data(), 192, 192), .k_nope = View(m.kn.data(), 128, 128),
                         .k_pe = View(m.kpe.data(), 64), .v = View(m.v.data(), 128, 128), .cu_seqlens_q = short_cu,
                         .cu_seqlens_k = m.cu_k, .heads = 1, .sm_scale = 1.0}),
                    std::invalid_argument);
    const std::vector<uint32_t> mask(2, ~0u);
    CHECK_THROWS_AS(m.run(1.0, mask.data(), 0), std::invalid_argument);  // stride 0 cannot hold 3 keys
    Mqa q(2, 4, 1, 1);
    const std::vector<int32_t> cu{0, 1}, cu_kv{0, 4};
    CHECK_THROWS_AS(q.run(1.0, cu, cu_kv), std::invalid_argument);  // cu_seqlens_q ends at 1, s_q is 2
}
