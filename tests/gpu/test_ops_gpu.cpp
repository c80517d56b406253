// The three attention paths and the top-k mask on the GPU against the float64 reference: fresh random
// inputs every run (MLAJIT_TEST_SEED replays one), outputs poisoned first, every output element checked
// for being written, values checked against the reference on every row of small cases and on a sample
// (first/last row of each request plus random ones) of large ones.
#include <doctest/doctest.h>

#include <cmath>

#include "gpu/gpu_fixture.h"
#include "reference/reference.h"

using namespace mlajit;
using namespace mlajit::test;
namespace R = mlajit::ref;

namespace {

struct Batch {
    std::vector<int32_t> cu_q{0}, cu_k{0};
    int64_t total_q() const { return cu_q.back(); }
    int64_t total_k() const { return cu_k.back(); }
    int64_t max_k() const {
        int64_t m = 0;
        for (size_t i = 1; i < cu_k.size(); ++i) m = std::max<int64_t>(m, cu_k[i] - cu_k[i - 1]);
        return m;
    }
    int64_t batch() const { return (int64_t)cu_q.size() - 1; }
};

Batch make_batch(std::initializer_list<std::pair<int, int>> reqs) {
    Batch b;
    for (auto [sq, sk] : reqs) {
        b.cu_q.push_back(b.cu_q.back() + sq);
        b.cu_k.push_back(b.cu_k.back() + sk);
    }
    return b;
}

// Rows to compare against the reference: all of them for small batches, else a sample.
std::vector<int64_t> rows_for(R::Rng& rng, const Batch& b, int64_t heads) {
    if (b.total_q() * heads * b.max_k() <= int64_t(4) << 20) {
        std::vector<int64_t> all(b.total_q());
        for (int64_t i = 0; i < b.total_q(); ++i) all[i] = i;
        return all;
    }
    return R::sample_rows(rng, b.cu_q, 6);
}

// Every element must have been written: the poison (0xFF bytes) is a NaN in bf16 and fp32.
void check_all_written(const char* name, const std::vector<uint16_t>& out) {
    int64_t unwritten = 0;
    for (auto x : out) unwritten += (x == 0xFFFF);
    CHECK_MESSAGE(unwritten == 0, name << ": " << unwritten << " of " << out.size() << " elements still hold the poison");
}

void expect_ok(const R::CheckReport& r) { CHECK_MESSAGE(r.ok(), r.summary()); }

struct MhaCase {
    int64_t heads;
    Batch batch;
    bool masked;
    bool split_k;  // k_nope + shared k_pe instead of packed k
    int64_t topk = 2048;
};

void run_mha_case(Gpu* G, const MhaCase& c) {
    R::Rng rng;
    INFO(rng.seed_note());
    const Batch& b = c.batch;
    const int64_t h = c.heads, tq = b.total_q(), tk = b.total_k();
    INFO("heads " << h << ", batch " << b.batch() << ", T_q " << tq << ", T_k " << tk << (c.masked ? ", masked" : ", dense")
                  << (c.split_k ? ", split k" : ", packed k"));
    const double scale = 1.0 / std::sqrt(192.0);
    auto q = rng.normal_bf16(tq * h * 192, 1.0);
    auto v = rng.normal_bf16(tk * h * 128, 1.0);
    std::vector<uint16_t> k, kn, kp;
    if (c.split_k) {
        kn = rng.normal_bf16(tk * h * 128, 1.0);
        kp = rng.normal_bf16(tk * 64, 1.0);
    } else {
        k = rng.normal_bf16(tk * h * 192, 1.0);
    }
    DeviceBuffer<uint16_t> dq(q), dv(v), dout(tq * h * 128);
    DeviceBuffer<uint16_t> dk(c.split_k ? std::vector<uint16_t>{} : k), dkn(kn), dkp(kp);
    DeviceBuffer<float> dlse(tq * h);
    DeviceBuffer<int32_t> dcq(b.cu_q), dck(b.cu_k);

    mlajit_mha_args a = MLAJIT_ARGS_INIT(mlajit_mha_args);
    a.q = tensor(dq.get(), MLAJIT_BF16, {tq, h, 192});
    if (c.split_k) {
        a.k_nope = tensor(dkn.get(), MLAJIT_BF16, {tk, h, 128});
        a.k_pe = tensor(dkp.get(), MLAJIT_BF16, {tk, 64});
    } else {
        a.k = tensor(dk.get(), MLAJIT_BF16, {tk, h, 192});
    }
    a.v = tensor(dv.get(), MLAJIT_BF16, {tk, h, 128});
    a.out = tensor(dout.get(), MLAJIT_BF16, {tq, h, 128});
    a.lse = tensor(dlse.get(), MLAJIT_FP32, {tq, h});
    a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {b.batch() + 1});
    a.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {b.batch() + 1});
    a.cu_seqlens_q_host = b.cu_q.data();
    a.cu_seqlens_k_host = b.cu_k.data();
    a.sm_scale = (float)scale;

    std::vector<uint32_t> ref_mask;
    const int64_t words = mlajit_topk_mask_words(b.max_k());
    DeviceBuffer<uint32_t> dmask(c.masked ? tq * words : 0, 0xAB);
    if (c.masked) {
        auto idx = R::causal_topk_indices(rng, b.cu_q, b.cu_k, c.topk);
        // Out-of-range and negative entries must be skipped; one row attends nothing at all.
        for (int64_t t = 0; t < tq; t += 7) idx[t * c.topk] = (int32_t)(b.max_k() + 3 + t);
        for (int64_t t = 3; t < tq; t += 11) idx[t * c.topk + 1] = -5;
        for (int64_t j = 0; j < c.topk; ++j) idx[j] = -1;
        DeviceBuffer<int32_t> didx(idx);
        mlajit_topk_mask_args m = MLAJIT_ARGS_INIT(mlajit_topk_mask_args);
        m.indices = tensor(didx.get(), MLAJIT_INT32, {tq, c.topk});
        m.cu_seqlens_q = a.cu_seqlens_q;
        m.cu_seqlens_k = a.cu_seqlens_k;
        m.cu_seqlens_q_host = b.cu_q.data();
        m.cu_seqlens_k_host = b.cu_k.data();
        m.mask = tensor(dmask.get(), MLAJIT_UINT32, {tq, words});
        MLAJIT_CHECK_OK(mlajit_topk_mask_build(G->handle, &m, G->stream));
        ref_mask = R::topk_mask(idx.data(), c.topk, c.topk, b.cu_q, b.cu_k, words);
        auto got = dmask.download();
        int64_t diff = 0, first = -1;
        for (size_t i = 0; i < got.size(); ++i)
            if (got[i] != ref_mask[i]) {
                ++diff;
                if (first < 0) first = (int64_t)i;
            }
        CHECK_MESSAGE(diff == 0, "mask: " << diff << " words differ, first at row " << first / words << " word " << first % words);
        a.mask = tensor(dmask.get(), MLAJIT_UINT32, {tq, words});
    }
    MLAJIT_CHECK_OK(mlajit_mha_prefill(G->handle, &a, G->stream));
    auto out = dout.download();
    auto lse = dlse.download();
    check_all_written("out", out);

    R::MhaArgs ra;
    ra.q = R::View(q.data(), h * 192, 192);
    if (c.split_k) {
        ra.k_nope = R::View(kn.data(), h * 128, 128);
        ra.k_pe = R::View(kp.data(), 64, 0);
    } else {
        ra.k_nope = R::View(k.data(), h * 192, 192);
        ra.k_pe = ra.k_nope.shifted(128);
    }
    ra.v = R::View(v.data(), h * 128, 128);
    ra.cu_seqlens_q = b.cu_q;
    ra.cu_seqlens_k = b.cu_k;
    ra.heads = h;
    ra.sm_scale = (float)scale;
    if (c.masked) {
        ra.mask = ref_mask.data();
        ra.mask_stride_words = words;
    }
    auto rows = rows_for(rng, b, h);
    ra.rows = rows;
    auto want = R::mha(ra);
    expect_ok(R::check_out("out", R::View(out.data(), h * 128, 128), want));
    expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want));
}

struct MqaCase {
    int64_t heads, s_q, s_kv, topk;
    bool batched = false;
};

void run_mqa_case(Gpu* G, const MqaCase& c) {
    R::Rng rng;
    INFO(rng.seed_note());
    INFO("heads " << c.heads << ", s_q " << c.s_q << ", s_kv " << c.s_kv << ", topk " << c.topk << (c.batched ? ", batched" : ""));
    const int64_t h = c.heads, sq = c.s_q, skv = c.s_kv, topk = c.topk;
    Batch b;
    if (c.batched) {  // three requests of uneven size, each its own chunk of kv
        int64_t q1 = sq / 3, q2 = sq / 2 - q1, k1 = skv / 4, k2 = skv / 2;
        b.cu_q = {0, (int32_t)q1, (int32_t)(q1 + q2), (int32_t)sq};
        b.cu_k = {0, (int32_t)k1, (int32_t)(k1 + k2), (int32_t)skv};
        for (size_t r = 1; r < 4; ++r)  // the causal rule needs s_k >= s_q per request for full prefixes
            REQUIRE(b.cu_k[r] - b.cu_k[r - 1] >= 0);
    } else {
        b.cu_q = {0, (int32_t)sq};
        b.cu_k = {0, (int32_t)skv};
    }
    auto idx = R::causal_topk_indices(rng, b.cu_q, b.cu_k, topk);
    for (int64_t t = 0; t < sq; t += 5) idx[t * topk + 2] = (int32_t)(skv + 17);  // out of range: skipped
    for (int64_t t = 1; t < sq; t += 9) idx[t * topk + 3] = -3;                   // negative: skipped
    for (int64_t t = 2; t < sq; t += 13)                                         // duplicate: counts twice
        if (idx[t * topk] >= 0) idx[t * topk + 4] = idx[t * topk];
    for (int64_t j = 0; j < topk; ++j) idx[(sq / 2) * topk + j] = -1;            // a row with nothing valid
    const double scale = 1.0 / std::sqrt(192.0);
    auto q = rng.normal_bf16(sq * h * 576, 1.0);
    auto kv = rng.normal_bf16(skv * 576, 1.0);
    DeviceBuffer<uint16_t> dq(q), dkv(kv), dout(sq * h * 512);
    DeviceBuffer<int32_t> didx(idx), dcq(b.cu_q), dck(b.cu_k);
    DeviceBuffer<float> dlse(sq * h), dml(sq * h);
    mlajit_sparse_mqa_args a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
    a.q = tensor(dq.get(), MLAJIT_BF16, {sq, h, 576});
    a.kv = tensor(dkv.get(), MLAJIT_BF16, {skv, 576});
    a.indices = tensor(didx.get(), MLAJIT_INT32, {sq, topk});
    a.out = tensor(dout.get(), MLAJIT_BF16, {sq, h, 512});
    a.lse = tensor(dlse.get(), MLAJIT_FP32, {sq, h});
    a.max_logits = tensor(dml.get(), MLAJIT_FP32, {sq, h});
    if (c.batched) {
        a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {4});
        a.cu_seqlens_kv = tensor(dck.get(), MLAJIT_INT32, {4});
        a.cu_seqlens_q_host = b.cu_q.data();
        a.cu_seqlens_kv_host = b.cu_k.data();
    }
    a.sm_scale = (float)scale;
    MLAJIT_CHECK_OK(mlajit_sparse_mqa_prefill(G->handle, &a, G->stream));
    auto out = dout.download();
    auto lse = dlse.download();
    auto ml = dml.download();
    check_all_written("out", out);

    R::SparseMqaArgs ra;
    ra.q = R::View(q.data(), h * 576, 576);
    ra.kv = R::View(kv.data(), 576, 0);
    ra.indices = idx.data();
    ra.s_q = sq;
    ra.s_kv = skv;
    ra.heads = h;
    ra.topk = topk;
    ra.sm_scale = (float)scale;
    if (c.batched) {
        ra.cu_seqlens_q = b.cu_q;
        ra.cu_seqlens_kv = b.cu_k;
    }
    auto rows = rows_for(rng, b, h * 4);
    rows.push_back(sq / 2);  // the empty row is always checked
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    ra.rows = rows;
    auto want = R::sparse_mqa(ra);
    expect_ok(R::check_out("out", R::View(out.data(), h * 512, 512), want));
    expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want));
    expect_ok(R::check_max_logits("max_logits", R::View(ml.data(), h, 1), want));
}

}  // namespace

TEST_CASE("gpu: top-k mask + masked MHA + dense MHA over the grid") {
    MLAJIT_REQUIRE_GPU();
    for (int64_t h : {16, 32, 64, 128}) {
        for (int sq : {1, 63, 200, 1000, 3000}) {
            if (h >= 64 && sq == 3000) continue;  // covered by the large case below at 128 heads
            Batch pure = make_batch({{sq, sq}});
            run_mha_case(G, {h, pure, false, h % 32 == 0});
            run_mha_case(G, {h, pure, true, h % 32 != 0, sq < 500 ? 64 : 2048});
        }
    }
    run_mha_case(G, {128, make_batch({{3000, 3000}}), true, true});
}

TEST_CASE("gpu: MHA varlen batches with chunked context (s_k > s_q) and odd key offsets") {
    MLAJIT_REQUIRE_GPU();
    // Key offsets 37, 37+301, ...: not multiples of 32 (a known pitfall of word-shifted masks).
    Batch mixed = make_batch({{5, 37}, {63, 301}, {200, 1200}, {1, 999}, {130, 130}});
    for (bool masked : {false, true})
        for (bool split : {false, true}) run_mha_case(G, {32, mixed, masked, split, 64});
    run_mha_case(G, {16, make_batch({{1000, 5000}, {77, 2100}}), true, true, 2048});
    run_mha_case(G, {128, make_batch({{200, 2500}, {1, 3000}, {63, 63}}), true, true, 2048});
    // s_q > s_k: the first s_q - s_k queries see no key at all (bottom-right alignment).
    run_mha_case(G, {16, make_batch({{50, 20}, {10, 0}}), false, true});
}

TEST_CASE("gpu: sparse MQA over heads, topk, invalid and duplicate indices, batched form") {
    MLAJIT_REQUIRE_GPU();
    for (int64_t h : {16, 20, 32, 64, 128})
        for (int64_t topk : {64, 2048})
            for (int64_t sq : {1, 63, 200, 1000}) run_mqa_case(G, {h, sq, std::max<int64_t>(sq, topk == 64 ? 300 : 2500), topk});
    run_mqa_case(G, {128, 3000, 3000, 2048});
    run_mqa_case(G, {64, 600, 4000, 2048, true});
    run_mqa_case(G, {16, 300, 900, 64, true});
}
