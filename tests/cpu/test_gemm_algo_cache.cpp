// The cuBLASLt algorithm cache of GemmRunner stays bounded however many token counts an engine sends
// (issue 15): the key is the exact shape (a heuristic result is not reused for another M), and the map
// holding the results (LruMap) drops the least recently used shape. Runs without a GPU: the key and the map
// are host code; the GPU suites run the GEMMs themselves.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "ops/gemm.h"
#include "ops/lru_map.h"

using namespace mlajit;

namespace {
// The one-call prefill's K up-projection for T tokens at 128 heads (the shape whose M varies per call).
GemmDesc up_projection(int64_t tokens) {
    GemmDesc g;
    g.m = tokens;
    g.n = 128 * 128;
    g.k = 512;
    g.a = {reinterpret_cast<const void*>(uintptr_t(0x10000)), 576, 0, false};
    g.b = {reinterpret_cast<const void*>(uintptr_t(0x20000)), 512, 0, true};
    g.c = reinterpret_cast<void*>(uintptr_t(0x30000));
    g.ldc = g.n;
    return g;
}
}  // namespace

TEST_CASE("gemm algo cache: one entry per exact shape, never more than the capacity") {
    LruMap<GemmAlgoKey, int64_t> cache(kGemmAlgoCacheCapacity);
    std::mt19937 rng(20261203);
    std::uniform_int_distribution<int64_t> tokens(1, 1 << 16);
    int64_t misses = 0;
    const int64_t calls = 100000;
    for (int64_t i = 0; i < calls; ++i) {
        // Half the calls reuse one of 8 recurring chunk sizes, half send a fresh count (as a serving mix does).
        const int64_t t = (i % 2) ? 1024 * (1 + (i / 2) % 8) : tokens(rng);
        const GemmAlgoKey key = gemm_algo_key(up_projection(t), size_t(32) << 20);
        if (auto hit = cache.find(key)) {
            REQUIRE(*hit == t);  // never another shape's result
        } else {
            ++misses;
            cache.put(key, t);
        }
        REQUIRE(cache.size() <= kGemmAlgoCacheCapacity);
    }
    CHECK(cache.size() == kGemmAlgoCacheCapacity);
    CHECK(cache.evictions() == size_t(misses) - kGemmAlgoCacheCapacity);
    // The recurring sizes stay resident: between two uses of one come 8 fresh counts and 7 other recurring
    // sizes, far fewer than the capacity, so only older fresh counts are evicted.
    for (int r = 1; r <= 8; ++r) CHECK(cache.find(gemm_algo_key(up_projection(1024 * r), size_t(32) << 20)).has_value());
    MESSAGE("gemm algo cache: " << calls << " calls, " << misses << " heuristic queries, " << cache.size()
                                << " entries held (capacity " << kGemmAlgoCacheCapacity << ")");
}

TEST_CASE("gemm algo cache: the key separates what the heuristic's choice depends on") {
    const GemmDesc base = up_projection(100);
    const GemmAlgoKey k0 = gemm_algo_key(base, 1 << 20);
    GemmDesc g = base;
    g.m = 101;
    CHECK(gemm_algo_key(g, 1 << 20) != k0);
    CHECK(gemm_algo_key(base, 2 << 20) != k0);  // another workspace
    g = base;
    g.a.data = reinterpret_cast<const void*>(uintptr_t(0x10002));  // 2-byte aligned only
    CHECK(gemm_algo_key(g, 1 << 20) != k0);
    g = base;
    g.b.transposed = false;
    CHECK(gemm_algo_key(g, 1 << 20) != k0);
    g = base;
    g.a.data = reinterpret_cast<const void*>(uintptr_t(0x40000));  // other pointers, same alignment: one entry
    CHECK(gemm_algo_key(g, 1 << 20) == k0);
}

TEST_CASE("lru map: least recently used out, a hit refreshes, put replaces") {
    LruMap<int, std::string> m(2);
    m.put(1, "a");
    m.put(2, "b");
    CHECK(m.find(1) == std::optional<std::string>("a"));  // 1 is now the most recent
    m.put(3, "c");                                          // evicts 2
    CHECK_FALSE(m.find(2).has_value());
    CHECK(m.find(1).has_value());
    CHECK(m.find(3).has_value());
    m.put(3, "d");
    CHECK(m.find(3) == std::optional<std::string>("d"));
    CHECK(m.size() == 2);
    CHECK(m.evictions() == 1);
    LruMap<int, int> zero(0);  // a capacity of 0 is taken as 1
    zero.put(1, 1);
    zero.put(2, 2);
    CHECK(zero.size() == 1);
}

TEST_CASE("gemm M classes: powers of two, the class key differs from the exact key only in M") {
    CHECK(gemm_m_class(1) == 1);
    CHECK(gemm_m_class(2) == 2);
    CHECK(gemm_m_class(3) == 4);
    CHECK(gemm_m_class(16) == 16);
    CHECK(gemm_m_class(17) == 32);
    CHECK(gemm_m_class(527) == 1024);
    CHECK(gemm_m_class(int64_t(1) << 40) == int64_t(1) << 40);
    std::mt19937 rng(20261204);
    std::uniform_int_distribution<int64_t> tokens(1, 1 << 20);
    for (int i = 0; i < 10000; ++i) {
        const int64_t m = tokens(rng);
        const int64_t c = gemm_m_class(m);
        REQUIRE(c >= m);
        REQUIRE(c < 2 * m);
        REQUIRE((c & (c - 1)) == 0);
        // Every M of a class shares the class key, which is the exact key of the class's top M.
        REQUIRE(gemm_class_key(up_projection(m), 1 << 20) == gemm_class_key(up_projection(c), 1 << 20));
        REQUIRE(gemm_class_key(up_projection(m), 1 << 20) == gemm_algo_key(up_projection(c), 1 << 20));
        if (m != c) REQUIRE(gemm_algo_key(up_projection(m), 1 << 20) != gemm_algo_key(up_projection(c), 1 << 20));
    }
    // What the class does not absorb: another N, workspace or alignment is another class.
    GemmDesc g = up_projection(20);
    g.n = 16 * 256;
    CHECK(gemm_class_key(g, 1 << 20) != gemm_class_key(up_projection(20), 1 << 20));
    CHECK(gemm_class_key(up_projection(20), 2 << 20) != gemm_class_key(up_projection(20), 1 << 20));
}

TEST_CASE("gemm alignment: the largest power of two up to 256 dividing every pointer") {
    GemmDesc g = up_projection(8);
    CHECK(gemm_alignment(g) == 256);
    g.c = reinterpret_cast<void*>(uintptr_t(0x30000 + 16));
    CHECK(gemm_alignment(g) == 16);
    g.a.data = reinterpret_cast<const void*>(uintptr_t(0x10000 + 2));
    CHECK(gemm_alignment(g) == 2);
    g = up_projection(8);
    g.b.data = reinterpret_cast<const void*>(uintptr_t(0x20000 + 128 + 64));
    CHECK(gemm_alignment(g) == 64);
}
