// Host-side bf16 conversion and the seeded random inputs every test draws from.
// Header-only so that the benchmark (which compiles only reference.cpp) can use it too.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace mlajit::ref {

inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }
inline double bf16_to_double(uint16_t b) { return double(bf16_to_float(b)); }

// Round-to-nearest-even, matching the device's __float2bfloat16_rn; NaN stays a (quiet) NaN instead of
// carrying into the exponent and becoming inf.
inline uint16_t float_to_bf16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

// Rounding double -> float -> bf16 can round twice: a double just off a bf16 midpoint may land exactly on
// it in float and then tie-break the wrong way. Undo that one case so the result is correctly rounded.
inline uint16_t double_to_bf16(double d) {
    const float f = float(d);
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0xffffu) == 0x8000u && std::isfinite(f) && double(f) != d) {
        const bool away = std::fabs(d) > std::fabs(double(f));
        return uint16_t(away ? (u + 0x8000u) >> 16 : u >> 16);
    }
    return float_to_bf16(f);
}

inline std::vector<uint16_t> to_bf16(std::span<const double> x) {
    std::vector<uint16_t> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = double_to_bf16(x[i]);
    return r;
}
inline std::vector<uint16_t> to_bf16(std::span<const float> x) {
    std::vector<uint16_t> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = float_to_bf16(x[i]);
    return r;
}
inline std::vector<double> to_double(std::span<const uint16_t> x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_double(x[i]);
    return r;
}

// The seed for a fresh generator: MLAJIT_TEST_SEED (decimal or 0x-hex) replays a failed run, otherwise
// std::random_device so that every run explores new inputs.
inline uint64_t test_seed() {
    if (const char* s = std::getenv("MLAJIT_TEST_SEED"); s && *s) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(s, &end, 0);
        if (*end != '\0' || *s == '-')
            throw std::invalid_argument(std::string("MLAJIT_TEST_SEED='") + s +
                                        "' is not an unsigned integer: unset it or give e.g. 12345 or 0x3039");
        return uint64_t(v);
    }
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ uint64_t(rd());
}

// A fixed, fully specified generator (splitmix64-seeded xoshiro256**) and transforms written here, unlike
// std::normal_distribution, so a seed replays the same inputs on every compiler and machine. One generator
// per test case: draw all tensors from it in order.
class Rng {
public:
    Rng() : Rng(test_seed()) {}
    explicit Rng(uint64_t seed) : seed_(seed) {
        uint64_t x = seed;
        for (auto& w : s_) w = splitmix64(x);
    }

    uint64_t seed() const { return seed_; }
    // Meant for INFO()/MESSAGE(): tells how to replay this test's inputs.
    std::string seed_note() const { return "inputs from MLAJIT_TEST_SEED=" + std::to_string(seed_); }

    uint64_t next_u64() {
        const uint64_t r = std::rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = std::rotl(s_[3], 45);
        return r;
    }
    double uniform() { return double(next_u64() >> 11) * 0x1.0p-53; }  // [0, 1)

    // Inclusive range; rejection sampling avoids modulo bias.
    int64_t uniform_int(int64_t lo, int64_t hi) {
        if (hi < lo) throw std::invalid_argument("Rng::uniform_int: empty range");
        const uint64_t span = uint64_t(hi) - uint64_t(lo) + 1;
        if (span == 0) return int64_t(next_u64());  // the full 64-bit range
        const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
        uint64_t x;
        do x = next_u64(); while (x >= limit);
        return int64_t(uint64_t(lo) + x % span);
    }

    double normal(double sigma) {
        if (have_spare_) {
            have_spare_ = false;
            return spare_ * sigma;
        }
        // Box-Muller; 1 - uniform() is in (0, 1], so the log is finite.
        const double r = std::sqrt(-2.0 * std::log(1.0 - uniform()));
        const double a = 2.0 * std::numbers::pi * uniform();
        spare_ = r * std::sin(a);
        have_spare_ = true;
        return r * std::cos(a) * sigma;
    }

    // Realistic GPU test tensors hold 10^8 elements, so the fill runs on all cores: chunk k draws from its
    // own generator seeded by the k-th draw of this one. The values depend on the seed and on the order of
    // fills only, never on the thread count.
    void fill_normal(std::span<uint16_t> dst, double sigma) {
        constexpr size_t kChunk = size_t(1) << 20;
        const size_t chunks = (dst.size() + kChunk - 1) / kChunk;
        std::vector<uint64_t> seeds(chunks);
        for (auto& sd : seeds) sd = next_u64();
        auto fill_chunk = [&](size_t c) {
            Rng sub(seeds[c]);
            const size_t end = std::min(dst.size(), (c + 1) * kChunk);
            for (size_t i = c * kChunk; i < end; ++i) dst[i] = double_to_bf16(sub.normal(sigma));
        };
        const size_t nt = std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
        if (nt <= 1) {
            for (size_t c = 0; c < chunks; ++c) fill_chunk(c);
            return;
        }
        std::atomic<size_t> next{0};
        std::vector<std::jthread> pool;
        for (size_t w = 0; w < nt; ++w)
            pool.emplace_back([&] {
                for (size_t c; (c = next.fetch_add(1)) < chunks;) fill_chunk(c);
            });
    }
    std::vector<uint16_t> normal_bf16(size_t n, double sigma) {
        std::vector<uint16_t> v(n);
        fill_normal(v, sigma);
        return v;
    }

private:
    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    uint64_t seed_;
    uint64_t s_[4];
    double spare_ = 0.0;
    bool have_spare_ = false;
};

}  // namespace mlajit::ref
