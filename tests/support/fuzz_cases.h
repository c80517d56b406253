// The host-side validation fuzz cases, shared by the seeded doctest property test
// (tests/cpu/test_fuzz_validation.cpp) and the libFuzzer target (tests/fuzz/fuzz_validation.cpp): random
// argument sets for every public entry point, each either accepted (a plan the GPU can launch) or refused
// with INVALID_ARGUMENT / UNSUPPORTED and a non-empty message; never a crash, never another exception,
// never a launch on refused input. See test_fuzz_validation.cpp for what is drawn and mutated.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "mlajit/mlajit.hpp"
#include "ops/mla_prefill.h"
#include "ops/ops.h"

namespace mlajit::fuzz {

template <typename T>
inline T new_args() {
    T a = MLAJIT_ARGS_INIT(T);
    return a;
}

// The C entry points read struct_size bytes from the caller's struct: one that claims more than sizeof(T)
// must really have that many bytes, so the struct goes into a larger buffer whose tail is zero, or (to
// test the refusal of unknown fields) not.
template <typename T>
struct PaddedArgs {
    alignas(T) unsigned char bytes[sizeof(T) + 4096] = {};
    T* get() { return reinterpret_cast<T*>(bytes); }
};

// Host cu_seqlens live in fixed buffers longer than any shape the generator gives a cu_seqlens tensor, so
// the library's reads (it trusts the tensor's length for the host copy, as documented) stay in bounds
// whatever the mutation. Sizes in [kHostSlots, 2^31) are never generated; above 2^31 they are refused
// before any read.
inline constexpr int64_t kHostSlots = 70'001;

// Every decision draws from u64(): a seeded generator (the doctest property test), or the bytes libFuzzer
// mutates (tests/fuzz: 8 bytes a draw, zeros once they run out), so coverage guidance steers the choices.
class Gen {
public:
    explicit Gen(uint64_t seed) : rng_(seed), host_q_(kHostSlots), host_k_(kHostSlots) {}
    Gen(const uint8_t* bytes, size_t n)
        : from_bytes_(true), bytes_(bytes), n_bytes_(n), host_q_(kHostSlots), host_k_(kHostSlots) {}

    uint64_t u64() {
        if (!from_bytes_) return rng_();
        uint64_t v = 0;
        const size_t k = std::min<size_t>(8, n_bytes_ - pos_);
        if (k) std::memcpy(&v, bytes_ + pos_, k);
        pos_ += k;
        return v;
    }
    int64_t range(int64_t lo, int64_t hi) { return lo + int64_t(u64() % uint64_t(hi - lo + 1)); }
    bool coin(double p) { return double(u64() >> 11) * 0x1.0p-53 < p; }
    template <typename T>
    T pick(std::initializer_list<T> v) {
        return *(v.begin() + range(0, int64_t(v.size()) - 1));
    }
    // Small values most of the time, now and then large ones.
    int64_t size(int64_t typical_max) {
        return coin(0.9) ? range(0, typical_max) : range(0, 8 * typical_max);
    }

    // A fake device pointer: 256-byte aligned, never dereferenced on the host.
    void* ptr() { return reinterpret_cast<void*>(uintptr_t(range(1, 1 << 20)) << 12); }

    mlajit_tensor tensor(mlajit_dtype dt, std::initializer_list<int64_t> shape) {
        mlajit_tensor t = contiguous_tensor(ptr(), dt, shape);
        // Now and then a padded row stride (still 16-byte aligned), as a view of a wider buffer.
        if (t.ndim >= 2 && coin(0.2)) {
            const int64_t pad = 8 * range(1, 64);
            int64_t s = t.stride[t.ndim - 2] + pad;
            for (int k = t.ndim - 2; k >= 0; --k) {
                t.stride[k] = s;
                s *= std::max<int64_t>(t.shape[k], 1);
            }
        }
        return t;
    }

    // Random partition of `total` into `batch` parts; cumulative from 0, written to a host buffer.
    const int32_t* cu(bool keys, int64_t batch, int64_t total, std::vector<int64_t>* parts = nullptr) {
        auto& h = keys ? host_k_ : host_q_;
        std::vector<int64_t> cuts(size_t(batch - 1));
        for (auto& c : cuts) c = range(0, total);
        std::sort(cuts.begin(), cuts.end());
        h[0] = 0;
        for (int64_t r = 1; r < batch; ++r) h[size_t(r)] = int32_t(cuts[size_t(r - 1)]);
        h[size_t(batch)] = int32_t(total);
        if (parts) {
            parts->resize(size_t(batch));
            for (int64_t r = 0; r < batch; ++r) (*parts)[size_t(r)] = h[size_t(r + 1)] - h[size_t(r)];
        }
        return h.data();
    }
    // A cu_seqlens_k for requests of the given query counts with s_k >= s_q each.
    const int32_t* cu_k_at_least(const std::vector<int64_t>& sq) {
        host_k_[0] = 0;
        for (size_t r = 0; r < sq.size(); ++r) host_k_[r + 1] = host_k_[r] + int32_t(sq[r] + size(300));
        return host_k_.data();
    }
    std::vector<int32_t>& host(bool keys) { return keys ? host_k_ : host_q_; }

    // ---- mutations --------------------------------------------------------------------------------------
    int64_t bad_size() {
        return pick<int64_t>({0, -1, 1, 63, 65, 129, 200, 4097, 65537, int64_t(INT32_MAX), int64_t(1) << 31,
                              int64_t(1) << 40, std::numeric_limits<int64_t>::max(), range(0, 5000)});
    }
    void mutate_tensor(mlajit_tensor& t, bool is_cu) {
        switch (range(0, 9)) {
            case 0: t.data = nullptr; break;
            // Integer arithmetic: the pointer may be null (case 0 drawn earlier), and null + k is UB in C++
            // (UBSan under libFuzzer stopped here, 2026-12-03); (void*)k is the same bad address without it.
            case 1: t.data = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(t.data) + pick<uintptr_t>({1, 2, 4, 8})); break;
            case 2: t.dtype = mlajit_dtype(pick<int>({0, 1, 2, 3, 4, -1, 77})); break;
            case 3: t.ndim = int32_t(pick<int>({-1, 0, 1, 2, 3, 4, 5, 100})); break;
            case 4: {
                const int k = int(range(0, 3));
                int64_t v = bad_size();
                // A cu_seqlens tensor longer than the host buffer would make the (trusted) host read overrun.
                if (is_cu && k == 0 && v >= kHostSlots && v <= INT32_MAX) v = range(0, kHostSlots);
                t.shape[k] = v;
                break;
            }
            case 5: t.stride[range(0, 3)] = pick<int64_t>({-1, 0, 1, 2, 3, 7, int64_t(1) << 40, std::numeric_limits<int64_t>::max()}); break;
            case 6: t = mlajit_tensor{}; break;
            case 7: t.shape[range(0, 3)] = 0; break;
            case 8: std::swap(t.shape[0], t.shape[1]); break;
            default: t.stride[0] = int64_t(uint64_t(t.stride[0]) * 2 + 8); break;  // wraps, never UB
        }
    }
    float bad_scale() {
        return pick<float>({0.f, -0.f, -1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(), 1e-30f, 0.07f});
    }
    void mutate_cu(bool keys, int64_t batch) {
        auto& h = host(keys);
        const size_t r = size_t(range(0, batch));
        switch (range(0, 4)) {
            // Arithmetic in uint32 wraps (earlier mutations may have left INT32_MIN or INT32_MAX there).
            case 0: h[r] = int32_t(uint32_t(h[r]) - uint32_t(range(1, 100))); break;  // non-monotone or negative
            case 1: h[size_t(batch)] = int32_t(uint32_t(h[size_t(batch)]) + uint32_t(pick<int>({-1, 1, 1000}))); break;
            case 2: h[0] = int32_t(pick<int>({-5, 1, 7})); break;
            case 3: h[r] = pick<int32_t>({INT32_MAX, INT32_MIN, -1}); break;
            default: std::swap(h[r], h[size_t(range(0, batch))]); break;
        }
    }

private:
    std::mt19937_64 rng_;
    bool from_bytes_ = false;
    const uint8_t* bytes_ = nullptr;
    size_t n_bytes_ = 0, pos_ = 0;
    std::vector<int32_t> host_q_, host_k_;
};

// Calls a C entry point with args whose struct_size may be anything (0, short, sizeof, longer with a zero or
// non-zero tail) and a NULL handle: refused either way, before anything could launch.
template <typename T, typename Call>
inline mlajit_status call_c(Gen& g, const T& a, bool mutate_size, Call&& call) {
    auto padded = std::make_unique<PaddedArgs<T>>();
    std::memcpy(padded->bytes, &a, sizeof(T));
    if (mutate_size) {
        const size_t n = g.pick<size_t>({0, 1, 8, sizeof(T) / 2, sizeof(T) - 8, sizeof(T) + 8, sizeof(T) + 4096});
        padded->get()->struct_size = n;
        if (n > sizeof(T) && g.coin(0.5)) padded->bytes[sizeof(T) + size_t(g.range(0, int64_t(n - sizeof(T)) - 1))] = 1;
    }
    return call(padded->get());
}

struct Tally {
    int64_t cases = 0, accepted = 0, refused = 0;
    std::map<std::string, int64_t> failures;  // what went wrong -> count (must stay empty)
    std::string first_failure;
    void fail(const std::string& what, uint64_t case_seed) {
        if (failures[what]++ == 0 && first_failure.empty())
            first_failure = what + " (MLAJIT_FUZZ_SEED=" + std::to_string(case_seed) + " replays the case)";
    }
};

// Runs one call: accepted, or refused with the right status and a message; anything else is a failure.
inline void run_case(Tally& t, uint64_t case_seed, const std::function<void()>& call) {
    ++t.cases;
    try {
        call();
        ++t.accepted;
    } catch (const Error& e) {
        ++t.refused;
        if (e.status() != MLAJIT_ERROR_INVALID_ARGUMENT && e.status() != MLAJIT_ERROR_UNSUPPORTED)
            t.fail(std::string("refused with ") + mlajit_status_name(e.status()) + ": " + e.what(), case_seed);
        if (std::string(e.what()).empty()) t.fail("refused with an empty message", case_seed);
    } catch (const std::exception& e) {
        t.fail(std::string("another exception: ") + e.what(), case_seed);
    }
}

// Through the C ABI: a status and, unless OK, a message.
inline void run_c_case(Tally& t, uint64_t case_seed, const std::function<mlajit_status()>& call, bool no_driver_ok = false) {
    ++t.cases;
    const mlajit_status s = call();
    if (s == MLAJIT_OK) {
        ++t.accepted;
        return;
    }
    ++t.refused;
    if (s != MLAJIT_ERROR_INVALID_ARGUMENT && s != MLAJIT_ERROR_UNSUPPORTED && !(no_driver_ok && s == MLAJIT_ERROR_NO_DRIVER))
        t.fail(std::string("refused with ") + mlajit_status_name(s) + ": " + mlajit_last_error(), case_seed);
    if (std::string(mlajit_last_error()).empty()) t.fail("refused with an empty message", case_seed);
}

// An accepted plan must be launchable as planned: CUDA's grid limits, a block size, shared memory an H100/
// H200 block can have. A plan beyond them would turn a bad argument into a CUDA error after "accepting" it.
template <typename P>
inline void check_launchable(Tally& t, uint64_t case_seed, const LaunchPlan<P>& p, const char* op) {
    const bool empty = p.grid.x == 0 || p.grid.y == 0 || p.grid.z == 0;  // launches nothing (an empty batch)
    if (!empty && (uint64_t(p.grid.x) > uint64_t(INT32_MAX) || p.grid.y > 65535 || p.grid.z > 65535))
        t.fail(std::string(op) + ": accepted a plan with a grid beyond CUDA's limits", case_seed);
    if (p.threads < 1 || p.threads > 1024) t.fail(std::string(op) + ": accepted a plan with a bad block size", case_seed);
    if (p.smem < 0 || p.smem > 227 * 1024) t.fail(std::string(op) + ": accepted a plan needing > 227 KiB shared memory", case_seed);
}

inline const Arch kArch = Arch::parse("sm_90a");

// ---- one case per entry point --------------------------------------------------------------------------

inline void sparse_mqa_case(Gen& g, Tally& t, uint64_t cs) {
    const int64_t h = g.coin(0.9) ? g.range(1, 128) : g.pick<int64_t>({0, 129, 1024});
    const int64_t sq = g.size(300), skv = std::max<int64_t>(1, g.size(2000));
    const int64_t topk = g.coin(0.8) ? 64 * g.range(1, 32) : g.range(1, 5000);
    auto a = new_args<mlajit_sparse_mqa_args>();
    a.q = g.tensor(MLAJIT_BF16, {sq, h, 576});
    a.kv = g.tensor(MLAJIT_BF16, {skv, 576});
    a.indices = g.tensor(MLAJIT_INT32, {sq, topk});
    a.out = g.tensor(MLAJIT_BF16, {sq, h, 512});
    a.lse = g.tensor(MLAJIT_FP32, {sq, h});
    if (g.coin(0.5)) a.max_logits = g.tensor(MLAJIT_FP32, {sq, h});
    a.sm_scale = float(g.range(1, 1000)) / 1000.f;
    int64_t batch = 0;
    if (g.coin(0.5)) {
        batch = g.coin(0.95) ? g.range(1, 8) : g.range(1, kHostSlots - 1);
        a.cu_seqlens_q = g.tensor(MLAJIT_INT32, {batch + 1});
        a.cu_seqlens_kv = g.tensor(MLAJIT_INT32, {batch + 1});
        a.cu_seqlens_q_host = g.cu(false, batch, sq);
        a.cu_seqlens_kv_host = g.cu(true, batch, skv);
    }
    bool size_mutated = false;
    const int mutations = int(g.range(0, 4));
    for (int m = 0; m < mutations; ++m) {
        switch (g.range(0, 10)) {
            case 0: g.mutate_tensor(a.q, false); break;
            case 1: g.mutate_tensor(a.kv, false); break;
            case 2: g.mutate_tensor(a.indices, false); break;
            case 3: g.mutate_tensor(a.out, false); break;
            case 4: g.mutate_tensor(g.coin(0.5) ? a.lse : a.max_logits, false); break;
            case 5: g.mutate_tensor(g.coin(0.5) ? a.cu_seqlens_q : a.cu_seqlens_kv, true); break;
            case 6: a.sm_scale = g.bad_scale(); break;
            case 7:
                if (batch > 0) g.mutate_cu(g.coin(0.5), batch);
                break;
            case 8: (g.coin(0.5) ? a.cu_seqlens_q_host : a.cu_seqlens_kv_host) = nullptr; break;
            case 9: size_mutated = true; break;
            default: a.q.shape[1] = g.pick<int64_t>({0, 129, -3}); break;
        }
    }
    if (size_mutated || g.coin(0.03)) {  // the C entry point without a handle: refused, nothing launched
        if (g.coin(0.3)) a.block_table = g.tensor(MLAJIT_INT32, {std::max<int64_t>(batch, 1), g.range(1, 64)});
        if (g.coin(0.3)) a.causal = int32_t(g.range(-1, 2));
        run_c_case(t, cs, [&] {
            return call_c(g, a, size_mutated, [](auto* p) { return mlajit_sparse_mqa_prefill(nullptr, p, nullptr); });
        });
        return;
    }
    a.causal = int32_t(g.coin(0.3));  // the one call's internal use
    run_case(t, cs, [&] { check_launchable(t, cs, plan_sparse_mqa(kArch, a), "sparse MQA"); });
}

inline void mha_case(Gen& g, Tally& t, uint64_t cs) {
    const int64_t h = g.coin(0.9) ? g.range(1, 128) : g.pick<int64_t>({0, 129, 1025});
    const int64_t batch = g.coin(0.97) ? g.range(1, 8) : g.range(1, kHostSlots - 1);
    const int64_t tq = g.size(400), tk = g.size(1500);
    auto a = new_args<mlajit_mha_args>();
    a.cu_seqlens_q = g.tensor(MLAJIT_INT32, {batch + 1});
    a.cu_seqlens_k = g.tensor(MLAJIT_INT32, {batch + 1});
    a.cu_seqlens_q_host = g.cu(false, batch, tq);
    a.cu_seqlens_k_host = g.cu(true, batch, tk);
    a.q = g.tensor(MLAJIT_BF16, {tq, h, 192});
    if (g.coin(0.5)) {
        a.k = g.tensor(MLAJIT_BF16, {tk, h, 192});
    } else {
        a.k_nope = g.tensor(MLAJIT_BF16, {tk, h, 128});
        a.k_pe = g.coin(0.5) ? g.tensor(MLAJIT_BF16, {tk, 64}) : g.tensor(MLAJIT_BF16, {tk, g.coin(0.5) ? 1 : h, 64});
    }
    a.v = g.tensor(MLAJIT_BF16, {tk, h, 128});
    a.out = g.tensor(MLAJIT_BF16, {tq, h, 128});
    a.lse = g.tensor(MLAJIT_FP32, {tq, h});
    a.sm_scale = float(g.range(1, 1000)) / 1000.f;
    if (g.coin(0.5)) {
        int64_t max_k = 0;
        for (int64_t r = 0; r < batch; ++r) max_k = std::max<int64_t>(max_k, a.cu_seqlens_k_host[r + 1] - a.cu_seqlens_k_host[r]);
        a.mask = g.tensor(MLAJIT_UINT32, {tq, mlajit_topk_mask_words(max_k) + g.range(0, 3)});
    }
    bool size_mutated = false;
    const int mutations = int(g.range(0, 4));
    for (int m = 0; m < mutations; ++m) {
        switch (g.range(0, 10)) {
            case 0: g.mutate_tensor(a.q, false); break;
            case 1: g.mutate_tensor(g.coin(0.5) ? a.k : a.k_nope, false); break;
            case 2: g.mutate_tensor(a.k_pe, false); break;
            case 3: g.mutate_tensor(a.v, false); break;
            case 4: g.mutate_tensor(g.coin(0.5) ? a.out : a.lse, false); break;
            case 5: g.mutate_tensor(g.coin(0.5) ? a.cu_seqlens_q : a.cu_seqlens_k, true); break;
            case 6: a.sm_scale = g.bad_scale(); break;
            case 7: g.mutate_cu(g.coin(0.5), batch); break;
            case 8: g.mutate_tensor(a.mask, false); break;
            case 9: size_mutated = true; break;
            default: (g.coin(0.5) ? a.cu_seqlens_q_host : a.cu_seqlens_k_host) = nullptr; break;
        }
    }
    if (size_mutated || g.coin(0.03)) {
        run_c_case(t, cs, [&] {
            return call_c(g, a, size_mutated, [](auto* p) { return mlajit_mha_prefill(nullptr, p, nullptr); });
        });
        return;
    }
    run_case(t, cs, [&] { check_launchable(t, cs, plan_mha(kArch, a), "MHA"); });
}

inline void topk_mask_case(Gen& g, Tally& t, uint64_t cs) {
    const int64_t batch = g.coin(0.97) ? g.range(1, 8) : g.range(1, kHostSlots - 1);
    const int64_t tq = g.size(400), tk = g.size(3000);
    const int64_t topk = g.coin(0.5) ? 64 * g.range(1, 32) : g.range(1, 5000);
    auto a = new_args<mlajit_topk_mask_args>();
    a.cu_seqlens_q = g.tensor(MLAJIT_INT32, {batch + 1});
    a.cu_seqlens_k = g.tensor(MLAJIT_INT32, {batch + 1});
    std::vector<int64_t> sk;
    a.cu_seqlens_q_host = g.cu(false, batch, tq);
    a.cu_seqlens_k_host = g.cu(true, batch, tk, &sk);
    int64_t max_k = 0;
    for (auto x : sk) max_k = std::max(max_k, x);
    a.indices = g.tensor(MLAJIT_INT32, {tq, topk});
    a.mask = g.tensor(MLAJIT_UINT32, {tq, mlajit_topk_mask_words(max_k) + g.range(0, 2)});
    bool size_mutated = false;
    const int mutations = int(g.range(0, 4));
    for (int m = 0; m < mutations; ++m) {
        switch (g.range(0, 6)) {
            case 0: g.mutate_tensor(a.indices, false); break;
            case 1: g.mutate_tensor(a.mask, false); break;
            case 2: g.mutate_tensor(g.coin(0.5) ? a.cu_seqlens_q : a.cu_seqlens_k, true); break;
            case 3: g.mutate_cu(g.coin(0.5), batch); break;
            case 4: (g.coin(0.5) ? a.cu_seqlens_q_host : a.cu_seqlens_k_host) = nullptr; break;
            case 5: size_mutated = true; break;
            default: a.mask.shape[1] = g.range(0, 3); break;
        }
    }
    if (size_mutated || g.coin(0.03)) {
        run_c_case(t, cs, [&] {
            return call_c(g, a, size_mutated, [](auto* p) { return mlajit_topk_mask_build(nullptr, p, nullptr); });
        });
        return;
    }
    run_case(t, cs, [&] { check_launchable(t, cs, plan_topk_mask(kArch, a), "top-k mask"); });
}

inline void mla_case(Gen& g, Tally& t, uint64_t cs) {
    const int64_t h = g.coin(0.9) ? g.range(1, 128) : g.pick<int64_t>({0, 129});
    const int64_t batch = g.coin(0.97) ? g.range(1, 6) : g.range(1, 2000);
    const int64_t tq = g.size(300);
    std::vector<int64_t> sq;
    auto a = new_args<mlajit_mla_prefill_args>();
    a.cu_seqlens_q_host = g.cu(false, batch, tq, &sq);
    a.cu_seqlens_k_host = g.cu_k_at_least(sq);
    const int64_t tk = a.cu_seqlens_k_host[batch];
    const int64_t topk = g.coin(0.8) ? 64 * g.range(1, 32) : g.range(1, 5000);
    a.cu_seqlens_q = g.tensor(MLAJIT_INT32, {batch + 1});
    a.cu_seqlens_k = g.tensor(MLAJIT_INT32, {batch + 1});
    if (g.coin(0.5)) {  // packed q: views of one buffer
        void* q = g.ptr();
        a.q_nope = strided_tensor(q, MLAJIT_BF16, {tq, h, 128}, {h * 192, 192, 1});
        a.q_pe = strided_tensor(static_cast<char*>(q) + 256, MLAJIT_BF16, {tq, h, 64}, {h * 192, 192, 1});
    } else {
        a.q_nope = g.tensor(MLAJIT_BF16, {tq, h, 128});
        a.q_pe = g.tensor(MLAJIT_BF16, {tq, h, 64});
    }
    const int64_t layout = g.range(0, 2);
    if (layout == 0) {  // packed kv: views of one buffer
        void* kv = g.ptr();
        a.kv_c = strided_tensor(kv, MLAJIT_BF16, {tk, 512}, {576, 1});
        a.k_pe = strided_tensor(static_cast<char*>(kv) + 1024, MLAJIT_BF16, {tk, 64}, {576, 1});
    } else if (layout == 1) {
        a.kv_c = g.tensor(MLAJIT_BF16, {tk, 512});
        a.k_pe = g.tensor(MLAJIT_BF16, {tk, 64});
    } else {  // the paged latent cache
        int64_t max_k = 0;
        for (int64_t r = 0; r < batch; ++r) max_k = std::max<int64_t>(max_k, a.cu_seqlens_k_host[r + 1] - a.cu_seqlens_k_host[r]);
        const int64_t block = g.pick<int64_t>({1, 16, 64, 128});
        a.kv_cache = g.tensor(MLAJIT_BF16, {g.range(1, 4096), block, 576});
        a.block_table = g.tensor(MLAJIT_INT32, {batch, (max_k + block - 1) / block + g.range(0, 2)});
    }
    a.topk = g.coin(0.7) ? 0 : g.pick<int32_t>({2048, 200, 64, 1, -1, INT32_MAX, int32_t(g.range(1, 5000))});
    a.w_kv_b = g.tensor(MLAJIT_BF16, {h * 256, 512});
    a.indices = g.tensor(MLAJIT_INT32, {tq, topk});
    a.out = g.tensor(MLAJIT_BF16, {tq, h, 128});
    if (g.coin(0.5)) a.lse = g.tensor(MLAJIT_FP32, {tq, h});
    a.sm_scale = float(g.range(1, 1000)) / 1000.f;
    a.force_path = int(g.range(-1, 2));
    a.workspace = g.ptr();
    a.workspace_bytes = size_t(g.coin(0.5) ? g.range(0, int64_t(1) << 34) : int64_t(1) << 40);
    bool size_mutated = false;
    const int mutations = int(g.range(0, 4));
    for (int m = 0; m < mutations; ++m) {
        switch (g.range(0, 12)) {
            case 0: g.mutate_tensor(g.coin(0.5) ? a.q_nope : a.q_pe, false); break;
            case 1: g.mutate_tensor(g.coin(0.5) ? a.kv_c : a.k_pe, false); break;
            case 2: g.mutate_tensor(a.w_kv_b, false); break;
            case 3: g.mutate_tensor(a.indices, false); break;
            case 4: g.mutate_tensor(g.coin(0.5) ? a.out : a.lse, false); break;
            case 5: g.mutate_tensor(g.coin(0.5) ? a.cu_seqlens_q : a.cu_seqlens_k, true); break;
            case 6: a.sm_scale = g.bad_scale(); break;
            case 7: g.mutate_cu(g.coin(0.5), batch); break;
            case 8: a.force_path = g.pick<int>({-2, 3, 99, INT32_MIN}); break;
            case 9:
                a.workspace = g.coin(0.5) ? nullptr : static_cast<char*>(a.workspace) + 16;
                break;
            case 10: size_mutated = true; break;
            case 11: g.mutate_tensor(g.coin(0.5) ? a.kv_cache : a.block_table, false); break;
            default: (g.coin(0.5) ? a.cu_seqlens_q_host : a.cu_seqlens_k_host) = nullptr; break;
        }
    }
    if (size_mutated || g.coin(0.03)) {
        run_c_case(t, cs, [&] {
            if (g.coin(0.5)) return call_c(g, a, size_mutated, [](auto* p) { return mlajit_mla_prefill(nullptr, p, nullptr); });
            size_t bytes = 0;
            return call_c(g, a, size_mutated, [&](auto* p) { return mlajit_mla_prefill_workspace_size(nullptr, p, &bytes); });
        });
        return;
    }
    if (g.coin(0.5)) {  // the workspace query (device pointers may be NULL)
        run_case(t, cs, [&] { (void)mla_prefill_workspace_size("NVIDIA H200", a); });
        return;
    }
    // mla_prefill up to its first launch: what it checks and plans, in its order.
    run_case(t, cs, [&] {
        const MlaShapes s = check_mla_args(a, true);
        const auto paths = plan_mla_paths("NVIDIA H200", s, a.cu_seqlens_q_host, a.cu_seqlens_k_host, a.force_path);
        const MlaSchedule sch = schedule_mla(s, a.cu_seqlens_q_host, a.cu_seqlens_k_host, paths);
        if (a.workspace_bytes < sch.workspace_bytes) fail_arg("workspace: this call needs {} bytes", sch.workspace_bytes);
    });
}

inline void plan_prefill_case(Gen& g, Tally& t, uint64_t cs) {
    const int heads = g.coin(0.8) ? int(g.range(1, 128)) : g.pick<int>({0, -1, 129, INT32_MAX, INT32_MIN});
    const int topk = g.coin(0.8) ? int(g.range(1, 4096)) : g.pick<int>({0, -1, 4097, INT32_MAX});
    const int n = g.coin(0.95) ? int(g.range(0, 16)) : g.pick<int>({-1, INT32_MIN});
    std::vector<int64_t> s_q(size_t(std::max(n, 0))), s_k(s_q.size());
    for (size_t i = 0; i < s_q.size(); ++i) {
        s_q[i] = g.coin(0.9) ? g.size(4000) : g.pick<int64_t>({-1, 0, int64_t(1) << 31, int64_t(1) << 62});
        s_k[i] = g.coin(0.9) ? s_q[i] + g.size(4000) : g.pick<int64_t>({-1, 0, s_q[i] - 1, int64_t(1) << 40});
    }
    std::vector<mlajit_path> paths(s_q.size());
    std::vector<double> mha(s_q.size()), mqa(s_q.size());
    const std::string junk(size_t(g.range(0, 300)), char(g.range(1, 255)));
    const char* gpu = g.pick<const char*>({nullptr, "NVIDIA H200", "NVIDIA H100 80GB HBM3", "", junk.c_str()});
    const bool null_arrays = g.coin(0.05);
    run_c_case(t, cs, [&] {
        return mlajit_plan_prefill(gpu, heads, topk, n, null_arrays ? nullptr : s_q.data(), s_k.data(),
                                   g.coin(0.05) ? nullptr : paths.data(), g.coin(0.5) ? nullptr : mha.data(),
                                   g.coin(0.5) ? nullptr : mqa.data());
    });
}

// mlajit_warmup compiles every kernel of a model when its arguments are valid (seconds each), so every case
// here carries at least one argument refused before any compile, among others drawn at random.
inline void warmup_case(Gen& g, Tally& t, uint64_t cs) {
    auto a = new_args<mlajit_warmup_args>();
    const std::string junk(size_t(g.range(0, 40)), char(g.range(1, 255)));
    const std::string digits = "sm_" + std::string(size_t(g.range(1, 30)), char('0' + g.range(0, 9))) + (g.coin(0.5) ? "a" : "");
    a.arch = g.pick<const char*>({"sm_90a", "sm_80", "sm_100f", nullptr});
    a.device = int(g.range(-2, 8));
    a.heads = g.pick<int>({0, 128, 64, 16, -1, 7, INT32_MAX});
    a.topk = g.pick<int>({0, 2048, 200, -5, INT32_MAX});
    std::vector<int> tp(size_t(g.range(0, 8)));
    for (auto& d : tp) d = g.pick<int>({1, 2, 4, 8, 16});
    a.tp_degrees = tp.empty() ? nullptr : tp.data();
    a.n_tp = int(tp.size());
    int compiled = -1, cached = -1;
    a.compiled = g.coin(0.5) ? &compiled : nullptr;
    a.cached = g.coin(0.5) ? &cached : nullptr;
    bool size_mutated = false;
    switch (g.range(0, 5)) {  // the one that cannot pass
        case 0: size_mutated = true; break;
        case 1: a.n_tp = int(g.pick<int>({-1, INT32_MIN})); break;
        case 2: a.tp_degrees = nullptr; a.n_tp = int(g.range(1, 8)); break;
        case 3: a.arch = g.coin(0.5) ? junk.c_str() : digits.c_str(); break;
        case 4: tp.push_back(g.pick<int>({0, -2, 3, 5, 1000})); a.tp_degrees = tp.data(); a.n_tp = int(tp.size()); break;
        default: a.arch = g.pick<const char*>({"sm_70", "sm_75", "sm_9", "sm_", "SM_90"}); break;
    }
    if (a.arch != junk.c_str() && a.arch != digits.c_str() && a.n_tp >= 0 && (a.tp_degrees || a.n_tp == 0)) {
        // Make sure this one is refused before compiling: a TP degree that divides no head count. (With arch
        // NULL a machine without GPU refuses earlier, with NO_DRIVER: no arch to compile for.)
        tp.push_back(0);
        a.tp_degrees = tp.data();
        a.n_tp = int(tp.size());
    }
    run_c_case(t, cs, [&] { return call_c(g, a, size_mutated, [](auto* p) { return mlajit_warmup(p); }); },
               /*no_driver_ok=*/a.arch == nullptr);
}


// The entry points and how often each is drawn.
struct Entry {
    const char* name;
    int weight;
    void (*fn)(Gen&, Tally&, uint64_t);
};
inline constexpr Entry kEntries[] = {{"sparse_mqa (plan + C entry)", 30, sparse_mqa_case},
                                     {"mha (plan + C entry)", 30, mha_case},
                                     {"topk_mask (plan + C entry)", 15, topk_mask_case},
                                     {"mla_prefill (+ workspace_size)", 20, mla_case},
                                     {"mlajit_plan_prefill (C)", 5, plan_prefill_case},
                                     {"mlajit_warmup (C, refusals only)", 3, warmup_case}};

// Draws an entry point and runs one case of it; returns its index in kEntries.
inline size_t run_one(Gen& g, Tally* tallies, uint64_t case_seed) {
    int total = 0;
    for (const auto& e : kEntries) total += e.weight;
    int w = int(g.range(0, total - 1));
    for (size_t i = 0; i < std::size(kEntries); ++i) {
        if (w < kEntries[i].weight) {
            kEntries[i].fn(g, tallies[i], case_seed);
            return i;
        }
        w -= kEntries[i].weight;
    }
    return 0;
}

}  // namespace mlajit::fuzz
