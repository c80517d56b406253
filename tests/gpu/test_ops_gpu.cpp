// The three attention paths and the top-k mask on the GPU against the float64 reference: fresh random
// inputs every run (MLAJIT_TEST_SEED replays one), outputs poisoned first, every output element checked
// for being written, values checked against the reference on every row of small cases and on a sample
// (first/last row of each request plus random ones) of large ones.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "config/env.h"
#include "gpu/gpu_fixture.h"
#include "ops/ops.h"
#include "runtime/handle.h"
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
    int64_t heads, s_q, s_kv, topk;  // topk: keys selected per row (fewer where the causal prefix is shorter)
    bool batched = false;
    int64_t width = 0;        // index row width (0 = topk); wider rows are padded with -1
    bool pad_at_end = false;  // valid entries first, -1 padding at the row end (else scattered over the row)
    int first_req = 0;        // batched: the call covers requests first_req.. only (cu_seqlens[0] > 0)
    int block_size = 0;       // > 0: the latent cache paged into shuffled pages of this many rows
    bool causal = false;      // DSA's causal index semantics (rows also get indices past the query's position)
    bool fp8 = false;         // paged: the FP8 latent cache (fp8_ds_mla rows of 656 bytes) instead of bf16 pages
    int64_t nan_key = -1;     // fp8: this kv row's second scale is NaN (rows attending it must be non-finite)
};

// ---- a host encoder of the FP8 latent cache (mlajit.h "FP8 latent cache"), for these tests only ----
// e4m3fn: bias 7, max 448, S.1111.111 is NaN; round-to-nearest-even onto the grid, saturating.
float e4m3_value(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    return (b & 0x80) ? -v : v;
}
uint8_t e4m3_code(float x) {
    const uint8_t sign = std::signbit(x) ? 0x80 : 0;
    const float a = std::fabs(x);
    if (!(a < 448.0f)) return sign | 0x7e;
    int e = 0;
    std::frexp(a, &e);
    const int E = std::max(e - 1, -6);  // the binade of a; subnormals step 2^-9
    const float q = std::min(std::nearbyint(a / std::ldexp(1.0f, E - 3)) * std::ldexp(1.0f, E - 3), 448.0f);
    for (int c = 0; c < 0x7f; ++c)  // the grid is 127 values: find q's code
        if (e4m3_value(uint8_t(c)) == q) return sign | uint8_t(c);
    return sign | 0x7e;
}
// One 656-byte row from a bf16 row of 576 (kv_c 512, k_pe 64): per-128 scale amax / 448 (1 for all zeros);
// the row is overwritten with what the kernels compute with, bf16(float(e4m3) * scale), k_pe as stored.
void quantize_row(uint16_t* row, uint8_t* out, bool nan_scale) {
    for (int g = 0; g < 4; ++g) {
        float amax = 0;
        for (int i = 0; i < 128; ++i) amax = std::max(amax, std::fabs(R::bf16_to_float(row[g * 128 + i])));
        const float scale = amax > 0 ? amax / 448.0f : 1.0f;
        for (int i = 0; i < 128; ++i) {
            const uint8_t c = e4m3_code(R::bf16_to_float(row[g * 128 + i]) / scale);
            out[g * 128 + i] = c;
            row[g * 128 + i] = R::float_to_bf16(e4m3_value(c) * scale);
        }
        const float stored = nan_scale && g == 1 ? NAN : scale;
        std::memcpy(out + 512 + 4 * g, &stored, 4);
    }
    std::memcpy(out + 528, row + 512, 128);
}

// The reference's view of a row: a key listed twice is attended once (later copies become -1).
std::vector<int32_t> first_copies(const std::vector<int32_t>& idx, int64_t rows, int64_t width) {
    std::vector<int32_t> r = idx;
    std::vector<int32_t> seen;
    for (int64_t t = 0; t < rows; ++t) {
        seen.clear();
        for (int64_t j = 0; j < width; ++j) {
            int32_t& v = r[t * width + j];
            if (std::find(seen.begin(), seen.end(), v) != seen.end()) v = -1;
            else seen.push_back(v);
        }
    }
    return r;
}

// The internal handle the paged and causal cases launch through: the C entry point refuses block_table and
// causal until the lead enables them (c_api.cpp), the op itself takes both.
mlajit::Handle& internal_handle() {
    static mlajit::Handle h(-1);
    return h;
}

void run_mqa_case(Gpu* G, const MqaCase& c) {
    R::Rng rng;
    INFO(rng.seed_note());
    // One string, built now: doctest's lazy INFO printed the ternaries' string literals as pointers.
    const std::string what = fmt::format("heads {}, s_q {}, s_kv {}, topk {}, width {}{}{}, first request {}, block size {}{}, NaN-scale key {}",
                                         c.heads, c.s_q, c.s_kv, c.topk, c.width, c.batched ? ", batched" : "",
                                         c.pad_at_end ? ", padding at row end" : "", c.first_req, c.block_size,
                                         c.fp8 ? ", FP8 cache" : "", c.nan_key);
    INFO(what);
    REQUIRE((!c.fp8 || c.block_size > 0));
    const int64_t h = c.heads, sq = c.s_q, skv = c.s_kv, topk = c.width ? c.width : c.topk;
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
    // c.topk keys per row, in rows of width `topk` (the name the kernel ABI gives the width).
    auto sel = R::causal_topk_indices(rng, b.cu_q, b.cu_k, c.topk);
    std::vector<int32_t> idx(size_t(sq * topk), -1);
    for (int64_t t = 0; t < sq; ++t) {
        int64_t n = 0;
        for (int64_t j = 0; j < c.topk; ++j)
            if (sel[t * c.topk + j] >= 0 && n < topk) idx[t * topk + n++] = sel[t * c.topk + j];
        if (!c.pad_at_end)
            for (int64_t j = topk - 1; j > 0; --j) std::swap(idx[t * topk + j], idx[t * topk + rng.uniform_int(0, j)]);
    }
    if (topk > 4) {
        for (int64_t t = 0; t < sq; t += 5) idx[t * topk + 2] = (int32_t)(skv + 17);  // out of range: skipped
        for (int64_t t = 1; t < sq; t += 9) idx[t * topk + 3] = -3;                   // negative: skipped
    }
    for (int64_t t = 2; t < sq; t += 3) {  // duplicates: attended once
        const int64_t n = std::max<int64_t>(1, topk / 8);
        for (int64_t i = 0; i < n; ++i) {
            const int32_t v = idx[t * topk + rng.uniform_int(0, topk - 1)];
            if (v >= 0) idx[t * topk + rng.uniform_int(0, topk - 1)] = v;
        }
    }
    if (c.causal) {  // indices past the query's own position (still < s_kv): skipped under causal = 1
        for (int64_t t = 0; t < sq; t += 2) {
            size_t r = 0;
            while (r + 2 < b.cu_q.size() && b.cu_q[r + 1] <= t) ++r;
            const int64_t skr = b.cu_k[r + 1] - b.cu_k[r], sqr = b.cu_q[r + 1] - b.cu_q[r], pos = skr - sqr + (t - b.cu_q[r]);
            if (pos + 1 < skr)
                for (int64_t i = 0; i < 3; ++i) idx[t * topk + rng.uniform_int(0, topk - 1)] = (int32_t)rng.uniform_int(pos + 1, skr - 1);
        }
    }
    for (int64_t j = 0; j < topk; ++j) idx[(sq / 2) * topk + j] = -1;            // a row with nothing valid
    const int64_t first_tok = c.batched ? b.cu_q[size_t(c.first_req)] : 0;
    const double scale = 1.0 / std::sqrt(192.0);
    auto q = rng.normal_bf16(sq * h * 576, 1.0);
    auto kv = rng.normal_bf16(skv * 576, 1.0);
    // Paged copy: each request's rows in its own shuffled pages (last page partial), request 1's first
    // page shared with request 0's (same rows, copied into the contiguous kv the reference reads), spare
    // pages and unused table entries poisoned / out of range.
    const int64_t bs = c.block_size;
    // FP8: every row quantized; kv then holds the values the kernels compute with (the reference reads them).
    std::vector<uint8_t> rows8;
    if (c.fp8) {
        rows8.assign(size_t(skv * 656), 0);
        for (int64_t r = 0; r < skv; ++r) quantize_row(&kv[size_t(r * 576)], &rows8[size_t(r * 656)], r == c.nan_key);
    }
    std::vector<int32_t> table;
    std::vector<uint16_t> pages;
    std::vector<uint8_t> pages8;
    int64_t max_blocks = 0, num_pages = 0;
    if (bs > 0) {
        const int64_t nreq = b.batch();
        const bool share = nreq >= 2 && b.cu_k[1] - b.cu_k[0] >= bs && b.cu_k[2] - b.cu_k[1] >= bs;
        if (share) {
            for (int64_t i = 0; i < bs * 576; ++i) kv[size_t(b.cu_k[1] * 576 + i)] = kv[size_t(b.cu_k[0] * 576 + i)];
            if (c.fp8)
                for (int64_t i = 0; i < bs * 656; ++i) rows8[size_t(b.cu_k[1] * 656 + i)] = rows8[size_t(b.cu_k[0] * 656 + i)];
        }
        int64_t need = 0;
        for (int64_t r = 0; r < nreq; ++r) {
            const int64_t nb = (b.cu_k[r + 1] - b.cu_k[r] + bs - 1) / bs;
            need += nb;
            max_blocks = std::max(max_blocks, nb);
        }
        max_blocks += 1;
        num_pages = need + 3;
        std::vector<int32_t> perm(static_cast<size_t>(num_pages));
        for (int64_t i = 0; i < num_pages; ++i) perm[size_t(i)] = int32_t(i);
        for (int64_t i = num_pages - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng.uniform_int(0, i))]);
        pages.assign(size_t(num_pages * bs * 576), 0x7f7f);  // ~3e38: a read of a row nobody owns shows
        if (c.fp8) pages8.assign(size_t(num_pages * bs * 656), 0x7f);  // e4m3 NaN codes, scales ~3.4e38
        table.assign(size_t(nreq * max_blocks), int32_t(num_pages + 7));
        int64_t next = 0;
        for (int64_t r = 0; r < nreq; ++r) {
            const int64_t len = b.cu_k[r + 1] - b.cu_k[r];
            for (int64_t blk = 0; blk * bs < len; ++blk) {
                const int32_t pg = (share && r == 1 && blk == 0) ? table[0] : perm[size_t(next++)];
                table[size_t(r * max_blocks + blk)] = pg;
                for (int64_t i = 0; i < bs && blk * bs + i < len; ++i) {
                    std::copy_n(kv.begin() + (b.cu_k[r] + blk * bs + i) * 576, 576, pages.begin() + (pg * bs + i) * 576);
                    if (c.fp8)
                        std::copy_n(rows8.begin() + (b.cu_k[r] + blk * bs + i) * 656, 656, pages8.begin() + (pg * bs + i) * 656);
                }
            }
        }
    }
    DeviceBuffer<uint16_t> dq(q), dkv(bs > 0 ? pages : kv), dout(sq * h * 512);
    DeviceBuffer<uint8_t> dkv8(c.fp8 ? pages8 : std::vector<uint8_t>(16, 0));
    DeviceBuffer<int32_t> didx(idx), dcq(b.cu_q), dck(b.cu_k), dbt(table);
    DeviceBuffer<float> dlse(sq * h), dml(sq * h);
    mlajit_sparse_mqa_args a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
    a.q = tensor(dq.get(), MLAJIT_BF16, {sq, h, 576});
    a.kv = c.fp8 ? tensor(dkv8.get(), MLAJIT_UINT8, {num_pages, bs, 656})
           : bs > 0 ? tensor(dkv.get(), MLAJIT_BF16, {num_pages, bs, 576})
                    : tensor(dkv.get(), MLAJIT_BF16, {skv, 576});
    a.indices = tensor(didx.get(), MLAJIT_INT32, {sq, topk});
    a.out = tensor(dout.get(), MLAJIT_BF16, {sq, h, 512});
    a.lse = tensor(dlse.get(), MLAJIT_FP32, {sq, h});
    a.max_logits = tensor(dml.get(), MLAJIT_FP32, {sq, h});
    if (c.batched) {  // requests first_req.. (cu_seqlens from an offset; tensors still from token 0)
        const int64_t n = 4 - c.first_req;
        a.cu_seqlens_q = tensor(dcq.get() + c.first_req, MLAJIT_INT32, {n});
        a.cu_seqlens_kv = tensor(dck.get() + c.first_req, MLAJIT_INT32, {n});
        a.cu_seqlens_q_host = b.cu_q.data() + c.first_req;
        a.cu_seqlens_kv_host = b.cu_k.data() + c.first_req;
    }
    a.sm_scale = (float)scale;
    a.causal = c.causal ? 1 : 0;
    if (bs > 0) {
        a.block_table = tensor(dbt.get(), MLAJIT_INT32, {b.batch(), max_blocks});
        if (c.batched && c.first_req > 0) {  // the sub-batch's rows of the table
            a.block_table.data = dbt.get() + c.first_req * max_blocks;
            a.block_table.shape[0] = b.batch() - c.first_req;
        }
    }
    auto run = [&](const mlajit_sparse_mqa_args& call) {
        if (bs > 0 || c.causal) {
            sparse_mqa_prefill(internal_handle(), call, G->stream);  // the op itself: plan, pre-pass, launch
        } else {
            MLAJIT_CHECK_OK(mlajit_sparse_mqa_prefill(G->handle, &call, G->stream));
        }
    };
    run(a);
    auto out = dout.download();
    auto lse = dlse.download();
    auto ml = dml.download();
    {
        // With a workspace: the key-set pre-pass builds each token's list once and the kernel reads it. The same bits in
        // every written row (the same keys in the same order); the list's bytes start poisoned.
        size_t ws_bytes = 0;
        MLAJIT_CHECK_OK(mlajit_sparse_mqa_workspace_size(G->handle, &a, &ws_bytes));
        REQUIRE(ws_bytes >= size_t(sq - first_tok) * size_t(topk + 1) * 4);
        DeviceBuffer<uint8_t> dws(ws_bytes);
        DeviceBuffer<uint16_t> dout2(sq * h * 512);
        DeviceBuffer<float> dlse2(sq * h), dml2(sq * h);
        mlajit_sparse_mqa_args w = a;
        w.out.data = dout2.get();
        w.lse.data = dlse2.get();
        w.max_logits.data = dml2.get();
        w.workspace = dws.get();
        w.workspace_bytes = ws_bytes;
        run(w);
        const auto out2 = dout2.download();
        const auto lse2 = dlse2.download(), ml2 = dml2.download();
        int64_t differ = 0;
        for (size_t i = size_t(first_tok * h * 512); i < out.size(); ++i) differ += out[i] != out2[i];
        for (size_t i = size_t(first_tok * h); i < lse.size(); ++i)
            differ += std::memcmp(&lse[i], &lse2[i], 4) != 0 || std::memcmp(&ml[i], &ml2[i], 4) != 0;
        CHECK_MESSAGE(differ == 0, differ << " output / lse / max_logits values differ with the key-set pre-pass");
    }
    // Rows of the call written; rows before a sub-batch untouched (still the poison).
    check_all_written("out", std::vector<uint16_t>(out.begin() + first_tok * h * 512, out.end()));
    for (int64_t i = 0; i < first_tok * h * 512; ++i)
        if (out[size_t(i)] != 0xFFFF) {
            FAIL_CHECK("out: element " << i << " before the sub-batch's first token was written");
            break;
        }
    const auto ref_idx = first_copies(idx, sq, topk);

    R::SparseMqaArgs ra = R::packed_sparse_mqa(q.data(), kv.data(), ref_idx.data(), sq, skv, h, topk, (float)scale);
    ra.causal = c.causal;
    if (c.batched) {
        ra.cu_seqlens_q = b.cu_q;
        ra.cu_seqlens_kv = b.cu_k;
    }
    auto rows = rows_for(rng, b, h * 4);
    rows.push_back(sq / 2);  // the empty row is always checked
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](int64_t r) { return r < first_tok; }), rows.end());
    if (c.nan_key >= 0) {
        // Rows whose set holds the NaN-scale key (single sequence, FlashMLA's semantics: valid iff < s_kv) must
        // be non-finite in every head; the reference checks the others.
        REQUIRE((!c.batched && !c.causal && c.nan_key < skv));
        int64_t affected = 0;
        for (int64_t t = 0; t < sq; ++t) {
            bool hit = false;
            for (int64_t j = 0; j < topk; ++j) hit |= idx[size_t(t * topk + j)] == c.nan_key;
            if (!hit) continue;
            ++affected;
            for (int64_t hh = 0; hh < h; ++hh) {
                bool nonfinite = false;
                for (int64_t d = 0; d < 512; ++d) nonfinite |= !std::isfinite(R::bf16_to_float(out[size_t((t * h + hh) * 512 + d)]));
                if (!nonfinite) FAIL_CHECK("row " << t << " head " << hh << " attends the NaN-scale key but its output is finite");
            }
            rows.erase(std::remove(rows.begin(), rows.end(), t), rows.end());
        }
        CHECK(affected > 0);
        CHECK(affected < sq);
        MESSAGE("NaN-scale key " << c.nan_key << ": " << affected << " of " << sq << " rows attend it");
    }
    ra.rows = rows;
    auto want = R::sparse_mqa(ra);
    expect_ok(R::check_out("out", R::View(out.data(), h * 512, 512), want));
    expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want));
    expect_ok(R::check_max_logits("max_logits", R::View(ml.data(), h, 1), want));
}

// Runs body once per MHA tier: MLAJIT_TIER=auto (the Hopper tier on sm_90a, else the portable one) and
// MLAJIT_TIER=portable, so that one H200 keeps both tiers tested. The caller's setting is restored.
template <class F>
void for_each_tier(F body) {
    for (const char* tier : {"auto", "portable"}) {
        ScopedEnv env("MLAJIT_TIER", tier);
        INFO("MLAJIT_TIER=" << tier);
        body();
    }
}

}  // namespace

TEST_CASE("gpu: top-k mask + masked MHA + dense MHA over the grid") {
    MLAJIT_REQUIRE_GPU();
    for_each_tier([&] {
    for (int64_t h : {16, 32, 64, 128}) {
        for (int sq : {1, 63, 200, 1000, 3000}) {
            if (h >= 64 && sq == 3000) continue;  // covered by the large case below at 128 heads
            Batch pure = make_batch({{sq, sq}});
            run_mha_case(G, {h, pure, false, h % 32 == 0});
            run_mha_case(G, {h, pure, true, h % 32 != 0, sq < 500 ? 64 : 2048});
        }
    }
    run_mha_case(G, {128, make_batch({{3000, 3000}}), true, true});
    run_mha_case(G, {128, make_batch({{3000, 3000}}), false, true});
    });
}

TEST_CASE("gpu: MHA varlen batches with chunked context (s_k > s_q) and odd key offsets") {
    MLAJIT_REQUIRE_GPU();
    for_each_tier([&] {
    // Key offsets 37, 37+301, ...: not multiples of 32 (a known pitfall of word-shifted masks).
    Batch mixed = make_batch({{5, 37}, {63, 301}, {200, 1200}, {1, 999}, {130, 130}});
    for (bool masked : {false, true})
        for (bool split : {false, true}) run_mha_case(G, {32, mixed, masked, split, 64});
    run_mha_case(G, {16, make_batch({{1000, 5000}, {77, 2100}}), true, true, 2048});
    run_mha_case(G, {128, make_batch({{200, 2500}, {1, 3000}, {63, 63}}), true, true, 2048});
    // s_q > s_k: the first s_q - s_k queries see no key at all (bottom-right alignment).
    run_mha_case(G, {16, make_batch({{50, 20}, {10, 0}}), false, true});
    // cu_seqlens[0] > 0 is covered by the op validation tests; here odd s_q around the 64/128-row halves.
    run_mha_case(G, {16, make_batch({{65, 65}, {127, 129}, {129, 4000}, {191, 191}}), false, false});
    run_mha_case(G, {16, make_batch({{65, 65}, {127, 129}, {129, 4000}, {191, 191}}), true, true, 64});
    });
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

// The contract (DESIGN.md section 2): any width, duplicates attended once, padding anywhere, sub-batches,
// a paged latent cache; on the Hopper tier and (MLAJIT_TIER=portable) on the portable one.
void mqa_contract_cases(Gpu* G) {
    for (int64_t h : {16, 64, 128}) {
        for (int64_t width : {1, 7, 200, 2048 + 5}) run_mqa_case(G, {h, 150, 2600, std::min<int64_t>(width, 2048), false, width});
        for (bool end : {false, true}) run_mqa_case(G, {h, 300, 2600, 2048, false, 2048 + 64, end});
    }
    run_mqa_case(G, {100, 200, 3000, 200, false, 256, true});            // top-k 200 padded to 256 at the row end
    run_mqa_case(G, {64, 600, 4000, 2048, true, 0, false, 1});          // cu_seqlens[0] > 0
    run_mqa_case(G, {16, 300, 900, 64, true, 0, false, 2});
    for (int bs : {1, 16, 64}) {
        run_mqa_case(G, {64, 600, 4000, 2048, true, 0, false, 0, bs});  // paged, out-of-order + shared pages
        run_mqa_case(G, {20, 300, 1000, 256, true, 0, false, 1, bs});   // paged sub-batch
    }
    run_mqa_case(G, {64, 300, 2600, 2048, false, 0, false, 0, 0, true});  // causal index semantics
    run_mqa_case(G, {16, 600, 4000, 256, true, 0, false, 1, 16, true});   // causal, paged sub-batch
}

// The FP8 latent cache (fp8_ds_mla pages) against float64 from the dequantized rows: paged forms, head counts
// of every kernel choice, block sizes 1..64, shared pages, sub-batches, causal; a NaN scale reaches only the
// rows attending its key.
void mqa_fp8_cases(Gpu* G) {
    for (int64_t h : {16, 32, 64, 128}) {
        run_mqa_case(G, {h, 600, 4000, 2048, true, 0, false, 0, 64, false, true});        // batched, shuffled + shared pages
        run_mqa_case(G, {h, 150, 2600, 200, false, 256, true, 0, 16, false, true});       // width 256, single sequence
    }
    for (int bs : {1, 16}) run_mqa_case(G, {20, 300, 1000, 256, true, 0, false, 1, bs, false, true});  // sub-batch
    run_mqa_case(G, {100, 300, 2600, 2048, true, 2048 + 5, false, 0, 64, true, true});           // causal, width 2053
    run_mqa_case(G, {64, 200, 3000, 512, false, 0, false, 0, 64, false, true, 1700});           // a NaN scale
    run_mqa_case(G, {16, 200, 3000, 512, false, 0, false, 0, 64, false, true, 1700});
}

TEST_CASE("gpu: sparse MQA on the FP8 latent cache (both tiers)") {
    MLAJIT_REQUIRE_GPU();
    mqa_fp8_cases(G);
    ScopedEnv portable("MLAJIT_TIER", "portable");
    mqa_fp8_cases(G);
}

TEST_CASE("gpu: sparse MQA contract: widths, duplicates, padding, sub-batches, paged cache (both tiers)") {
    MLAJIT_REQUIRE_GPU();
    mqa_contract_cases(G);
    ScopedEnv portable("MLAJIT_TIER", "portable");
    mqa_contract_cases(G);
}
