// NaN and inf in the inputs: what a bad value may reach. The contract: a non-finite input element reaches
// the output rows that use it — a query element its own (token, head); a key/value row every (token, head)
// whose key set holds it (its causal prefix, its top-k mask or its index row) — and never a row of another
// request or another head.
//
// Method: one clean run, a second clean run (are the kernels bitwise deterministic?), then one run per
// poisoned input. A (token, head) unit is "affected" when the contract lets the bad value reach it.
// Affected units poisoned with NaN must come out non-finite (a NaN that silently vanishes would be a wrong
// answer too). Units of other requests or heads must equal the clean run (bitwise when the clean runs agree
// bitwise, else within the test tolerance): checked. Unaffected units of the same request and head (which
// can share a kernel tile with the bad value) are counted and warned about: the figure says whether the
// kernels keep the row-exact contract. Figures: one MESSAGE line per case.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "gpu/gpu_fixture.h"
#include "mlajit/mlajit.hpp"
#include "reference/reference.h"

using namespace mlajit;
using namespace mlajit::test;
namespace R = mlajit::ref;

namespace {

const uint16_t kNanBf16 = 0x7FC0, kInfBf16 = 0x7F80;

struct Result {
    std::vector<uint16_t> out;  // [T, h, dv]
    std::vector<float> lse;     // [T, h]
};

struct Layout {
    int64_t tokens, heads, dv;
    const std::vector<int32_t>* cu_q;  // request boundaries of the tokens
    int64_t request_of(int64_t t) const {
        int64_t r = 0;
        while ((*cu_q)[size_t(r + 1)] <= t) ++r;
        return r;
    }
};

bool unit_finite(const Result& r, const Layout& L, int64_t t, int64_t h) {
    for (int64_t d = 0; d < L.dv; ++d)
        if (!std::isfinite(R::bf16_to_float(r.out[size_t((t * L.heads + h) * L.dv + d)]))) return false;
    return true;
}

bool unit_same(const Result& a, const Result& b, const Layout& L, int64_t t, int64_t h, bool bitwise) {
    const size_t u = size_t(t * L.heads + h);
    for (int64_t d = 0; d < L.dv; ++d) {
        const size_t i = u * size_t(L.dv) + size_t(d);
        if (bitwise ? a.out[i] != b.out[i]
                    : !(std::fabs(R::bf16_to_double(a.out[i]) - R::bf16_to_double(b.out[i])) <=
                        1e-2 + 1e-2 * std::fabs(R::bf16_to_double(b.out[i]))))
            return false;
    }
    if (a.lse.empty()) return true;
    return bitwise ? std::memcmp(&a.lse[u], &b.lse[u], sizeof(float)) == 0
                   : std::fabs(double(a.lse[u]) - double(b.lse[u])) <= 1e-3;
}

// Unaffected units come in two zones: "neighbours" share a request and a head with an affected unit (the
// same kernel tiles may hold both: a masked key's NaN value times a probability of exactly 0 is still NaN),
// "outside" units share neither (other requests, other heads).
struct Tally {
    int64_t affected = 0, affected_nonfinite = 0;
    int64_t neighbours = 0, neighbours_changed = 0;
    int64_t outside = 0, outside_changed = 0;
};

// Compares a poisoned run with the clean one unit by unit. A changed unit is one that differs from the clean
// run (beyond the tolerance when the kernels are not bitwise deterministic) or is non-finite.
Tally compare(const Result& clean, const Result& bad, const Layout& L, bool bitwise,
              const std::function<bool(int64_t, int64_t)>& affected) {
    Tally t;
    std::set<std::pair<int64_t, int64_t>> zones;  // (request, head) holding an affected unit
    for (int64_t tok = 0; tok < L.tokens; ++tok)
        for (int64_t h = 0; h < L.heads; ++h)
            if (affected(tok, h)) zones.insert({L.request_of(tok), h});
    for (int64_t tok = 0; tok < L.tokens; ++tok)
        for (int64_t h = 0; h < L.heads; ++h) {
            if (affected(tok, h)) {
                ++t.affected;
                t.affected_nonfinite += !unit_finite(bad, L, tok, h);
                continue;
            }
            const bool changed = !unit_same(bad, clean, L, tok, h, bitwise) || !unit_finite(bad, L, tok, h);
            if (zones.count({L.request_of(tok), h})) {
                ++t.neighbours;
                t.neighbours_changed += changed;
            } else {
                ++t.outside;
                t.outside_changed += changed;
            }
        }
    return t;
}

void expect_contained(const char* what, const Tally& t, bool nan_input) {
    MESSAGE("FIGURE nonfinite " << std::string(what) << ": " << t.affected << " affected (token, head) units, "
                                << t.affected_nonfinite << " non-finite; " << t.neighbours
                                << " unaffected in the same request and head, " << t.neighbours_changed << " changed; "
                                << t.outside << " in other requests or heads, " << t.outside_changed << " changed");
    INFO(std::string(what));
    CHECK(t.affected > 0);
    if (nan_input) CHECK(t.affected_nonfinite == t.affected);
    // Never to another request or head.
    CHECK(t.outside_changed == 0);
    // Within the request and head: the contract says the affected rows only; a kernel that multiplies a
    // whole tile of P by V breaks it for masked keys' NaN values. Measured and reported as a warning (the
    // figure above gives the count) until every kernel is known to keep it.
    WARN_MESSAGE(t.neighbours_changed == 0, std::string(what) << ": " << t.neighbours_changed
                                                 << " rows of the same request and head changed (not attending the bad value)");
}

struct Batch {
    std::vector<int32_t> cu_q{0}, cu_k{0};
    int64_t tq() const { return cu_q.back(); }
    int64_t tk() const { return cu_k.back(); }
    int64_t request_of(int64_t t) const {
        int64_t r = 0;
        while (cu_q[size_t(r + 1)] <= t) ++r;
        return r;
    }
    int64_t max_k() const {
        int64_t m = 0;
        for (size_t i = 1; i < cu_k.size(); ++i) m = std::max<int64_t>(m, cu_k[i] - cu_k[i - 1]);
        return m;
    }
};

Batch two_requests(int sq0, int sk0, int sq1, int sk1) {
    Batch b;
    b.cu_q = {0, sq0, sq0 + sq1};
    b.cu_k = {0, sk0, sk0 + sk1};
    return b;
}

// Does row t's index row (request-local keys) hold local key j?
bool selects(const std::vector<int32_t>& idx, int64_t topk, int64_t t, int64_t j) {
    for (int64_t k = 0; k < topk; ++k)
        if (idx[size_t(t * topk + k)] == j) return true;
    return false;
}

}  // namespace

TEST_CASE("gpu: a NaN or inf in sparse MQA inputs reaches only the rows that use it") {
    MLAJIT_REQUIRE_GPU();
    R::Rng rng;
    INFO(rng.seed_note());
    const int64_t h = 16, topk = 64;
    const Batch b = two_requests(100, 400, 80, 300);
    const int64_t tq = b.tq(), tk = b.tk();
    const Layout L{tq, h, 512, &b.cu_q};
    const auto idx = R::causal_topk_indices(rng, b.cu_q, b.cu_k, topk);
    const auto q0 = rng.normal_bf16(tq * h * 576, 1.0);
    const auto kv0 = rng.normal_bf16(tk * 576, 1.0);
    DeviceBuffer<int32_t> didx(idx), dcq(b.cu_q), dck(b.cu_k);
    auto run = [&](const std::vector<uint16_t>& q, const std::vector<uint16_t>& kv) {
        DeviceBuffer<uint16_t> dq(q), dkv(kv), dout(tq * h * 512);
        DeviceBuffer<float> dlse(tq * h), dml(tq * h);
        auto a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
        a.q = tensor(dq.get(), MLAJIT_BF16, {tq, h, 576});
        a.kv = tensor(dkv.get(), MLAJIT_BF16, {tk, 576});
        a.indices = tensor(didx.get(), MLAJIT_INT32, {tq, topk});
        a.out = tensor(dout.get(), MLAJIT_BF16, {tq, h, 512});
        a.lse = tensor(dlse.get(), MLAJIT_FP32, {tq, h});
        a.max_logits = tensor(dml.get(), MLAJIT_FP32, {tq, h});
        a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {3});
        a.cu_seqlens_kv = tensor(dck.get(), MLAJIT_INT32, {3});
        a.cu_seqlens_q_host = b.cu_q.data();
        a.cu_seqlens_kv_host = b.cu_k.data();
        a.sm_scale = float(1.0 / std::sqrt(192.0));
        MLAJIT_CHECK_OK(mlajit_sparse_mqa_prefill(G->handle, &a, G->stream));
        return Result{dout.download(), dlse.download()};
    };
    const Result clean = run(q0, kv0), clean2 = run(q0, kv0);
    const bool bitwise = clean.out == clean2.out && clean.lse == clean2.lse;
    MESSAGE("sparse MQA clean runs bitwise identical: " << bitwise);

    {  // one query element of (token 37, head 5)
        auto q = q0;
        q[size_t((37 * h + 5) * 576 + 100)] = kNanBf16;
        expect_contained("sparse MQA, NaN in q[37, head 5]", compare(clean, run(q, kv0), L, bitwise,
                                                                     [](int64_t t, int64_t hh) { return t == 37 && hh == 5; }),
                         true);
    }
    // A key of request 0 that token 60 selects (in its K part and its V part).
    int64_t j = -1;
    for (int64_t k = 0; k < topk && j < 0; ++k) j = idx[size_t(60 * topk + k)];
    REQUIRE(j >= 0);
    for (auto [bits, col, name] : {std::tuple{kNanBf16, 7, "NaN in kv (K and V part)"},
                                   std::tuple{kNanBf16, 540, "NaN in kv (rope part)"},
                                   std::tuple{kInfBf16, 3, "+inf in kv"}}) {
        auto kv = kv0;
        kv[size_t(j * 576 + col)] = bits;  // request 0 starts at key 0: local j is global j
        auto affected = [&](int64_t t, int64_t) { return b.request_of(t) == 0 && selects(idx, topk, t, j); };
        expect_contained((std::string("sparse MQA, ") + name + " row selected by some tokens").c_str(),
                         compare(clean, run(q0, kv), L, bitwise, affected), bits == kNanBf16);
    }
    {  // a whole request of NaN queries: the other request is untouched
        auto q = q0;
        for (int64_t i = b.cu_q[1] * h * 576; i < tq * h * 576; ++i) q[size_t(i)] = kNanBf16;
        expect_contained("sparse MQA, request 1 all NaN", compare(clean, run(q, kv0), L, bitwise,
                                                                   [&](int64_t t, int64_t) { return b.request_of(t) == 1; }),
                         true);
    }
}

namespace {

// Dense or masked MHA (a top-k mask from causal indices) over two requests, packed k.
void run_mha_nonfinite(Gpu* G, bool masked) {
    R::Rng rng;
    INFO(rng.seed_note());
    const int64_t h = 16, topk = 64;
    const Batch b = two_requests(150, 150, 60, 200);  // a plain prefill and one over cached context
    const int64_t tq = b.tq(), tk = b.tk();
    const Layout L{tq, h, 128, &b.cu_q};
    const auto q0 = rng.normal_bf16(tq * h * 192, 1.0);
    const auto k0 = rng.normal_bf16(tk * h * 192, 1.0);
    const auto v0 = rng.normal_bf16(tk * h * 128, 1.0);
    const auto idx = R::causal_topk_indices(rng, b.cu_q, b.cu_k, topk);
    const int64_t words = mlajit_topk_mask_words(b.max_k());
    const auto mask = R::topk_mask(idx.data(), topk, topk, b.cu_q, b.cu_k, words);
    DeviceBuffer<int32_t> dcq(b.cu_q), dck(b.cu_k);
    DeviceBuffer<uint32_t> dmask(mask);
    auto run = [&](const std::vector<uint16_t>& q, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v) {
        DeviceBuffer<uint16_t> dq(q), dk(k), dv(v), dout(tq * h * 128);
        DeviceBuffer<float> dlse(tq * h);
        auto a = MLAJIT_ARGS_INIT(mlajit_mha_args);
        a.q = tensor(dq.get(), MLAJIT_BF16, {tq, h, 192});
        a.k = tensor(dk.get(), MLAJIT_BF16, {tk, h, 192});
        a.v = tensor(dv.get(), MLAJIT_BF16, {tk, h, 128});
        a.out = tensor(dout.get(), MLAJIT_BF16, {tq, h, 128});
        a.lse = tensor(dlse.get(), MLAJIT_FP32, {tq, h});
        a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {3});
        a.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {3});
        a.cu_seqlens_q_host = b.cu_q.data();
        a.cu_seqlens_k_host = b.cu_k.data();
        a.sm_scale = float(1.0 / std::sqrt(192.0));
        if (masked) a.mask = tensor(dmask.get(), MLAJIT_UINT32, {tq, words});
        MLAJIT_CHECK_OK(mlajit_mha_prefill(G->handle, &a, G->stream));
        return Result{dout.download(), dlse.download()};
    };
    const Result clean = run(q0, k0, v0), clean2 = run(q0, k0, v0);
    const bool bitwise = clean.out == clean2.out && clean.lse == clean2.lse;
    const std::string tag = masked ? "masked MHA" : "dense MHA";
    MESSAGE(tag << " clean runs bitwise identical: " << bitwise);
    // Does local query i of request r attend local key j (causal, bottom-right, and the mask)?
    auto attends = [&](int64_t t, int64_t j) {
        const int64_t r = b.request_of(t), i = t - b.cu_q[size_t(r)];
        const int64_t sq = b.cu_q[size_t(r) + 1] - b.cu_q[size_t(r)], sk = b.cu_k[size_t(r) + 1] - b.cu_k[size_t(r)];
        if (j > sk - sq + i) return false;
        return !masked || ((mask[size_t(t * words + j / 32)] >> (j % 32)) & 1u);
    };
    // Key 70 of request 0, head 3: in the middle of a tile, so that the queries before it (which must not
    // see it) share tiles with those after it.
    const int64_t j = 70, hh = 3;
    auto affected = [&](int64_t t, int64_t head) { return head == hh && b.request_of(t) == 0 && attends(t, j); };
    {
        auto v = v0;
        v[size_t((j * h + hh) * 128 + 9)] = kNanBf16;
        expect_contained((tag + ", NaN in v[key 70, head 3]").c_str(), compare(clean, run(q0, k0, v), L, bitwise, affected), true);
    }
    {
        auto k = k0;
        k[size_t((j * h + hh) * 192 + 150)] = kNanBf16;
        expect_contained((tag + ", NaN in k[key 70, head 3]").c_str(), compare(clean, run(q0, k, v0), L, bitwise, affected), true);
    }
    {
        auto k = k0;
        k[size_t((j * h + hh) * 192 + 20)] = kInfBf16;
        expect_contained((tag + ", +inf in k[key 70, head 3]").c_str(), compare(clean, run(q0, k, v0), L, bitwise, affected),
                         false);
    }
    {
        auto q = q0;
        q[size_t((40 * h + 2) * 192 + 5)] = kNanBf16;
        expect_contained((tag + ", NaN in q[40, head 2]").c_str(),
                         compare(clean, run(q, k0, v0), L, bitwise,
                                 [](int64_t t, int64_t head) { return t == 40 && head == 2; }),
                         true);
    }
    {
        auto v = v0;
        for (int64_t i = b.cu_k[1] * h * 128; i < tk * h * 128; ++i) v[size_t(i)] = kNanBf16;
        expect_contained((tag + ", request 1's v all NaN").c_str(),
                         compare(clean, run(q0, k0, v), L, bitwise, [&](int64_t t, int64_t) { return b.request_of(t) == 1; }),
                         false);  // a request-1 row that attends nothing (masked) stays finite
    }
}

}  // namespace

TEST_CASE("gpu: a NaN or inf in dense MHA inputs reaches only the rows that attend it") {
    MLAJIT_REQUIRE_GPU();
    run_mha_nonfinite(G, false);
}

TEST_CASE("gpu: a NaN or inf in masked MHA inputs reaches only the rows whose mask holds it") {
    MLAJIT_REQUIRE_GPU();
    run_mha_nonfinite(G, true);
}

TEST_CASE("gpu: a NaN in one request of mla_prefill stays in that request, on every path") {
    MLAJIT_REQUIRE_GPU();
    R::Rng rng;
    INFO(rng.seed_note());
    const int64_t h = 16, topk = 64;
    const Batch b = two_requests(100, 300, 50, 200);
    const int64_t T = b.tq(), Tk = b.tk();
    const Layout L{T, h, 128, &b.cu_q};
    const auto q0 = rng.normal_bf16(T * h * 192, 1.0);
    const auto kv0 = rng.normal_bf16(Tk * 576, 1.0);
    const auto w = rng.normal_bf16(h * 256 * 512, 1.0 / std::sqrt(512.0));
    const auto idx = R::causal_topk_indices(rng, b.cu_q, b.cu_k, topk);
    DeviceBuffer<int32_t> didx(idx), dcq(b.cu_q), dck(b.cu_k);
    DeviceBuffer<uint16_t> dw(w);
    auto run = [&](const std::vector<uint16_t>& q, const std::vector<uint16_t>& kv, int force) {
        DeviceBuffer<uint16_t> dq(q), dkv(kv), dout(T * h * 128);
        DeviceBuffer<float> dlse(T * h);
        auto a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
        a.q_nope = strided_tensor(dq.get(), MLAJIT_BF16, {T, h, 128}, {h * 192, 192, 1});
        a.q_pe = strided_tensor(dq.get() + 128, MLAJIT_BF16, {T, h, 64}, {h * 192, 192, 1});
        a.kv_c = strided_tensor(dkv.get(), MLAJIT_BF16, {Tk, 512}, {576, 1});
        a.k_pe = strided_tensor(dkv.get() + 512, MLAJIT_BF16, {Tk, 64}, {576, 1});
        a.w_kv_b = tensor(dw.get(), MLAJIT_BF16, {h * 256, 512});
        a.indices = tensor(didx.get(), MLAJIT_INT32, {T, topk});
        a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {3});
        a.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {3});
        a.cu_seqlens_q_host = b.cu_q.data();
        a.cu_seqlens_k_host = b.cu_k.data();
        a.out = tensor(dout.get(), MLAJIT_BF16, {T, h, 128});
        a.lse = tensor(dlse.get(), MLAJIT_FP32, {T, h});
        a.sm_scale = float(1.0 / std::sqrt(192.0));
        a.force_path = force;
        size_t bytes = 0;
        MLAJIT_CHECK_OK(mlajit_mla_prefill_workspace_size(G->handle, &a, &bytes));
        DeviceBuffer<uint8_t> ws(std::max<size_t>(bytes, 1));
        a.workspace = ws.get();
        a.workspace_bytes = bytes;
        MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
        return Result{dout.download(), dlse.download()};
    };
    int64_t j = -1;  // a key of request 0 that token 80 selects
    for (int64_t k = 0; k < topk && j < 0; ++k) j = idx[size_t(80 * topk + k)];
    REQUIRE(j >= 0);
    for (int force : {-1, int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)}) {
        const std::string tag = "mla_prefill force_path " + std::to_string(force);
        const Result clean = run(q0, kv0, force), clean2 = run(q0, kv0, force);
        const bool bitwise = clean.out == clean2.out && clean.lse == clean2.lse;
        {
            auto kv = kv0;
            kv[size_t(j * 576 + 11)] = kNanBf16;  // latent: K and V of every head
            expect_contained((tag + ", NaN in kv_c of a selected key").c_str(),
                             compare(clean, run(q0, kv, force), L, bitwise,
                                     [&](int64_t t, int64_t) { return b.request_of(t) == 0 && selects(idx, topk, t, j); }),
                             true);
        }
        {
            auto q = q0;
            for (int64_t i = b.cu_q[1] * h * 192; i < T * h * 192; ++i) q[size_t(i)] = kNanBf16;
            expect_contained((tag + ", request 1 all NaN").c_str(),
                             compare(clean, run(q, kv0, force), L, bitwise, [&](int64_t t, int64_t) { return b.request_of(t) == 1; }),
                             true);
        }
    }
}
