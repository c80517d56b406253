// The FP8 latent cache (fp8_ds_mla) on the GPU: the writer against the host's own quantization (every
// byte), and the one-call prefill on an FP8 cache written by it, engine-shaped (out-of-order and shared
// pages, partial last pages, a request with no cached context, -1 padding, widths not a multiple of 64,
// 16 and 128 heads), each path forced, against float64 computed from the dequantized cache (the values the
// kernels see), with the error against the original bf16 data stated as a measured figure.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "config/env.h"
#include "gpu/gpu_fixture.h"
#include "mlajit/mlajit.hpp"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "reference/fp8.h"
#include "reference/reference.h"
#include "runtime/handle.h"

using namespace mlajit;
using namespace mlajit::test;
namespace R = mlajit::ref;

namespace {

constexpr int64_t kRow = R::kFp8RowBytes;

// Rows of mixed magnitudes: most N(0, 1), some groups scaled by 1e-3 or 50, one group all zero, one with
// a lone outlier (the rest then falls into e4m3's subnormals).
std::vector<uint16_t> latent_rows(R::Rng& rng, int64_t n, int64_t width) {
    auto v = rng.normal_bf16(size_t(n * width), 1.0);
    for (int64_t t = 0; t < n; ++t) {
        const int kind = int(t % 5);
        if (width < 512 || kind == 0) continue;
        uint16_t* g = v.data() + t * width + 128 * (t % 4);
        for (int i = 0; i < 128; ++i) {
            const float x = R::bf16_to_float(g[i]);
            g[i] = kind == 1 ? R::float_to_bf16(x * 1e-3f) : kind == 2 ? R::float_to_bf16(x * 50.f) : kind == 3 ? uint16_t(0) : g[i];
        }
        if (kind == 4) g[17] = R::float_to_bf16(-3000.f);
    }
    return v;
}

}  // namespace

TEST_CASE("gpu: fp8 writer: every byte equals the host's quantization; skipped slots untouched; the error is bounded") {
    MLAJIT_REQUIRE_GPU();
    R::Rng rng;
    INFO(rng.seed_note());
    const int64_t T = 1000, num_blocks = 40, bs = 64;
    auto kv_c = latent_rows(rng, T, 512);
    auto k_pe = rng.normal_bf16(size_t(T * 64), 1.0);
    // Distinct shuffled slots (crossing page boundaries), some tokens skipped (-1) or past the cache.
    std::vector<int32_t> slots(size_t(num_blocks * bs));
    std::iota(slots.begin(), slots.end(), 0);
    for (size_t i = slots.size() - 1; i > 0; --i) std::swap(slots[i], slots[size_t(rng.uniform_int(0, int64_t(i)))]);
    slots.resize(size_t(T));
    for (int64_t t = 0; t < T; t += 97) slots[size_t(t)] = -1;
    slots[5] = int32_t(num_blocks * bs);  // one past the last slot: skipped on the device
    slots[6] = 1 << 30;
    DeviceBuffer<uint16_t> dkv(kv_c), dpe(k_pe);
    DeviceBuffer<int32_t> dslots(slots);
    DeviceBuffer<uint8_t> cache(size_t(num_blocks * bs * kRow), 0xAB);
    mlajit_quantize_latent_cache_args a = MLAJIT_ARGS_INIT(mlajit_quantize_latent_cache_args);
    a.kv_c = tensor(dkv.get(), MLAJIT_BF16, {T, 512});
    a.k_pe = tensor(dpe.get(), MLAJIT_BF16, {T, 64});
    a.slot_mapping = tensor(dslots.get(), MLAJIT_INT32, {T});
    a.kv_cache = tensor(cache.get(), MLAJIT_UINT8, {num_blocks, bs, kRow});
    MLAJIT_CHECK_OK(mlajit_quantize_latent_cache(G->handle, &a, G->stream));
    auto got = cache.download();

    std::vector<uint8_t> want_rows(size_t(num_blocks * bs * kRow), 0xAB);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t s = slots[size_t(t)];
        if (s < 0 || s >= num_blocks * bs) continue;
        R::quantize_fp8_row(kv_c.data() + t * 512, k_pe.data() + t * 64, want_rows.data() + int64_t(s) * kRow);
    }
    int64_t bad_bytes = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want_rows[i] && bad_bytes++ < 5) FAIL_CHECK("byte " << i << " (slot " << i / kRow << ", offset " << i % kRow << "): got " << int(got[i]) << " want " << int(want_rows[i]));
    CHECK(bad_bytes == 0);

    // Round trip against the bf16 input: within the e4m3 bound per value; the measured error as a figure.
    double worst_rel = 0, err2 = 0, ref2 = 0;
    int64_t out_of_bound = 0;
    std::vector<uint16_t> deq(576);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t s = slots[size_t(t)];
        if (s < 0 || s >= num_blocks * bs) continue;
        const uint8_t* row = got.data() + int64_t(s) * kRow;
        R::dequantize_fp8_row(row, deq.data());
        for (int i = 0; i < 512; ++i) {
            const double x = R::bf16_to_double(kv_c[size_t(t * 512 + i)]), d = R::bf16_to_double(deq[size_t(i)]);
            out_of_bound += std::fabs(x - d) > R::fp8_error_bound(x, R::fp8_row_scale(row, i / 128));
            if (std::fabs(x) > 1e-2 * R::fp8_row_scale(row, i / 128) * 448) worst_rel = std::max(worst_rel, std::fabs(x - d) / std::fabs(x));
            err2 += (x - d) * (x - d);
            ref2 += x * x;
        }
        for (int i = 0; i < 64; ++i) CHECK(deq[size_t(512 + i)] == k_pe[size_t(t * 64 + i)]);
    }
    CHECK(out_of_bound == 0);
    MESSAGE("FIGURE fp8 cache round trip (" << T << " tokens, mixed magnitudes): rel L2 " << std::sqrt(err2 / ref2)
                                            << ", worst relative error of values above 1% of their group's amax " << worst_rel);

    // No tokens: nothing to do, OK.
    a.kv_c = tensor(dkv.get(), MLAJIT_BF16, {0, 512});
    a.k_pe = tensor(dpe.get(), MLAJIT_BF16, {0, 64});
    a.slot_mapping = tensor(dslots.get(), MLAJIT_INT32, {0});
    MLAJIT_CHECK_OK(mlajit_quantize_latent_cache(G->handle, &a, G->stream));
}

namespace {

struct Req {
    int32_t s_q, s_k;
};
struct Fp8Case {
    int64_t heads;
    std::vector<Req> reqs;
    int64_t topk, width, block_size;
    std::vector<int> forces;  // paths to run (-1 = planned)
    bool bad_page = false;    // then: a page id past the cache in the last request's table (device-side)
};

// Engine-shaped pages: each request's key positions in pages taken out of order from a pool with spare
// pages between them; request 1 shares request 0's first page when both have a full first page (a common
// prefix: its first block_size latent rows are request 0's). Returns the table [B, max_blocks] and the
// slot of every key (cu_k order).
struct Pages {
    std::vector<int32_t> table, slot_of_key;
    int64_t max_blocks = 1, num_blocks = 0;
};
Pages lay_out_pages(R::Rng& rng, const std::vector<int32_t>& cu_k, int64_t bs, std::vector<uint16_t>& rows576, bool& shared) {
    const int64_t B = int64_t(cu_k.size()) - 1;
    Pages p;
    int64_t used = 0;
    for (int64_t r = 0; r < B; ++r) {
        const int64_t n = (cu_k[size_t(r) + 1] - cu_k[size_t(r)] + bs - 1) / bs;
        p.max_blocks = std::max(p.max_blocks, n);
        used += n;
    }
    p.num_blocks = used * 2 + 3;
    std::vector<int32_t> perm(size_t(p.num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[size_t(rng.uniform_int(0, int64_t(i)))]);
    p.table.assign(size_t(B * p.max_blocks), -1);
    p.slot_of_key.assign(size_t(cu_k.back()), -1);
    shared = B >= 2 && cu_k[1] - cu_k[0] >= bs && cu_k[2] - cu_k[1] >= bs;
    int64_t next = 0;
    for (int64_t r = 0; r < B; ++r) {
        const int64_t s_k = cu_k[size_t(r) + 1] - cu_k[size_t(r)];
        for (int64_t pos = 0; pos < s_k; ++pos) {
            const size_t at = size_t(r * p.max_blocks + pos / bs);
            if (pos % bs == 0) p.table[at] = (shared && r == 1 && pos == 0) ? p.table[0] : perm[size_t(next++)];
            const int64_t key = cu_k[size_t(r)] + pos;
            if (shared && r == 1 && pos < bs) {  // the shared page: the same latent rows as request 0's
                std::copy_n(rows576.begin() + (cu_k[0] + pos) * 576, 576, rows576.begin() + key * 576);
                continue;  // written once, by request 0
            }
            p.slot_of_key[size_t(key)] = int32_t(p.table[at] * bs + pos % bs);
        }
    }
    return p;
}

// The DSA reference over latent rows [T_k, 576] (bf16): out / lse on the sampled rows.
R::AttnResult dsa_reference(const std::vector<uint16_t>& q_nope, const std::vector<uint16_t>& q_pe,
                            const std::vector<uint16_t>& rows576, const std::vector<uint16_t>& w, const std::vector<int32_t>& idx,
                            int64_t width, int64_t h, const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k,
                            double scale, const std::vector<int64_t>& rows) {
    const R::View kv(rows576.data(), 576, 0);
    return mla_reference(R::View(q_nope.data(), h * 128, 128), R::View(q_pe.data(), h * 64, 64), kv, kv.shifted(512), w, idx,
                         width, h, cu_q, cu_k, scale, rows);
}

// Tolerances: kOneCallLseAtol and kOneCallOutAtolScale, the one call's on the bf16 cache (gpu/gpu_fixture.h).

void run_fp8_case(Gpu* G, const Fp8Case& c) {
    R::Rng rng;
    INFO(rng.seed_note());
    const int64_t h = c.heads;
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (auto r : c.reqs) {
        cu_q.push_back(cu_q.back() + r.s_q);
        cu_k.push_back(cu_k.back() + r.s_k);
    }
    const int64_t T = cu_q.back(), Tk = cu_k.back(), B = int64_t(c.reqs.size());
    auto q_nope = rng.normal_bf16(size_t(T * h * 128), 1.0);
    auto q_pe = rng.normal_bf16(size_t(T * h * 64), 1.0);
    auto w = rng.normal_bf16(size_t(h * 256 * 512), 1.0 / std::sqrt(512.0));
    // The original bf16 latent rows [kv_c ; k_pe], N(0, 1): mixed magnitudes (the writer's test) would make
    // logits of order 100, where the one call's bf16 intermediates alone exceed the lse tolerance.
    auto orig = rng.normal_bf16(size_t(Tk * 576), 1.0);
    bool shared = false;
    const Pages pg = lay_out_pages(rng, cu_k, c.block_size, orig, shared);
    // Each request's top-k of its causal prefix, padded with -1 to the width (-1 also inside: random order).
    auto topk_idx = R::causal_topk_indices(rng, cu_q, cu_k, c.topk);
    std::vector<int32_t> idx(size_t(T * c.width), -1);
    for (int64_t t = 0; t < T; ++t) std::copy_n(topk_idx.begin() + t * c.topk, c.topk, idx.begin() + t * c.width);

    // The cache written on the device by the writer, from the rows at their slots (the shared page once).
    std::vector<uint16_t> kvc(size_t(Tk * 512)), kpe(size_t(Tk * 64));
    for (int64_t k = 0; k < Tk; ++k) {
        std::copy_n(orig.begin() + k * 576, 512, kvc.begin() + k * 512);
        std::copy_n(orig.begin() + k * 576 + 512, 64, kpe.begin() + k * 64);
    }
    DeviceBuffer<uint16_t> dkvc(kvc), dkpe(kpe), dqn(q_nope), dqp(q_pe), dw(w), dout(size_t(T * h * 128));
    DeviceBuffer<int32_t> dslots(pg.slot_of_key), dtable(pg.table), didx(idx), dcq(cu_q), dck(cu_k);
    DeviceBuffer<uint8_t> cache(size_t(pg.num_blocks * c.block_size * kRow), 0x7F);  // spare pages: NaN codes
    DeviceBuffer<float> dlse(size_t(T * h));
    mlajit_quantize_latent_cache_args qa = MLAJIT_ARGS_INIT(mlajit_quantize_latent_cache_args);
    qa.kv_c = tensor(dkvc.get(), MLAJIT_BF16, {Tk, 512});
    qa.k_pe = tensor(dkpe.get(), MLAJIT_BF16, {Tk, 64});
    qa.slot_mapping = tensor(dslots.get(), MLAJIT_INT32, {Tk});
    qa.kv_cache = tensor(cache.get(), MLAJIT_UINT8, {pg.num_blocks, c.block_size, kRow});
    MLAJIT_CHECK_OK(mlajit_quantize_latent_cache(G->handle, &qa, G->stream));

    // What the kernels see: every key's row dequantized from the device's cache bytes.
    const auto bytes = cache.download();
    std::vector<uint16_t> deq(size_t(Tk * 576));
    for (int64_t r = 0; r < B; ++r)
        for (int64_t pos = 0; pos < cu_k[size_t(r) + 1] - cu_k[size_t(r)]; ++pos) {
            const int64_t page = pg.table[size_t(r * pg.max_blocks + pos / c.block_size)];
            R::dequantize_fp8_row(bytes.data() + (page * c.block_size + pos % c.block_size) * kRow,
                                  deq.data() + (cu_k[size_t(r)] + pos) * 576);
        }
    const double scale = 1.0 / std::sqrt(192.0);
    const auto rows = R::sample_rows(rng, cu_q, 12);
    const auto want = dsa_reference(q_nope, q_pe, deq, w, idx, c.width, h, cu_q, cu_k, scale, rows);
    const auto want_bf16 = dsa_reference(q_nope, q_pe, orig, w, idx, c.width, h, cu_q, cu_k, scale, rows);

    mlajit_mla_prefill_args a = mla_call_args({.heads = h, .w_kv_b = &dw, .indices = &didx, .width = c.width,
                                               .topk = c.topk, .cu_q = &dcq, .cu_k = &dck, .cu_q_host = &cu_q,
                                               .cu_k_host = &cu_k, .out = &dout, .lse = &dlse, .sm_scale = scale});
    a.q_nope = tensor(dqn.get(), MLAJIT_BF16, {T, h, 128});
    a.q_pe = tensor(dqp.get(), MLAJIT_BF16, {T, h, 64});
    a.kv_cache = qa.kv_cache;
    a.block_table = tensor(dtable.get(), MLAJIT_INT32, {B, pg.max_blocks});
    for (int force : c.forces) {
        INFO("heads " << h << " batch " << B << " topk " << c.topk << " width " << c.width << " block_size "
                      << c.block_size << (shared ? " shared page" : "") << " force_path " << force);
        a.force_path = force;
        auto ws = attach_mla_workspace(G, a);
        dout.poison();
        dlse.poison();
        auto& gemm = handle_of(G->handle).gemm();
        const int64_t gemms_before = gemm.jit_runs() + gemm.cublaslt_runs();
        MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
        if (force == MLAJIT_PATH_DENSE_MHA) {  // small requests only: one launch, the kernel dequantizes the rows
            const int keys = config().small_step_keys, rows_per_block = mha_up_spec(handle_of(G->handle).arch(), true).p[0];
            bool all_small = keys > 0;
            for (auto r : c.reqs) all_small = all_small && (r.s_q == 0 || (r.s_q <= rows_per_block && r.s_k <= keys));
            const int64_t gemms = gemm.jit_runs() + gemm.cublaslt_runs() - gemms_before;
            if (all_small) CHECK_MESSAGE(gemms == 0, "a call of small dense steps ran " << gemms << " GEMMs");
            else CHECK(gemms > 0);
        }
        auto out = dout.download();
        auto lse = dlse.download();
        int64_t unwritten = 0;
        for (uint16_t v : out) unwritten += v == 0xFFFF;
        CHECK_MESSAGE(unwritten == 0, unwritten << " output elements never written");
        const auto r_out = R::check_out("out", R::View(out.data(), h * 128, 128), want, kOneCallOutAtolScale);
        CHECK_MESSAGE(r_out.ok(), r_out.summary());
        const auto r_lse = R::check_lse("lse", R::View(lse.data(), h, 1), want, kOneCallLseAtol);
        CHECK_MESSAGE(r_lse.ok(), r_lse.summary());
        // Against the original bf16 data: a measured figure (the FP8 cache's own error), not a pass bound.
        const auto got_rows = R::gather_rows(R::View(out.data(), h * 128, 128), rows, h, 128);
        MESSAGE("FIGURE fp8 one call, heads " << h << ", force_path " << force << ": out vs float64 of the dequantized "
                << "cache rel L2 " << r_out.rel_l2 << "; vs float64 of the original bf16 rows rel L2 "
                << R::rel_l2_error(got_rows, want_bf16.out));
    }
    if (!c.bad_page) return;
    // A block-table entry out of range is invisible to the host (device memory): the gather writes that
    // page's rows as NaN, so the outputs that attend one of its keys are NaN, and nothing of any other
    // request changes. As mlajit.h says for any NaN key on the MHA paths, rows of the same request that share
    // a kernel tile with it may be NaN too (probability 0 times a NaN value): counted, not failed. Masked MHA;
    // the last request's second page goes bad.
    const auto good = dout.download();
    auto table = pg.table;
    const int64_t last = B - 1;
    REQUIRE(cu_k[size_t(B)] - cu_k[size_t(last)] > c.block_size);
    table[size_t(last * pg.max_blocks + 1)] = int32_t(pg.num_blocks + 5);
    dtable.upload(table);
    a.force_path = MLAJIT_PATH_MASKED_MHA;
    auto ws = attach_mla_workspace(G, a);
    dout.poison();
    MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
    const auto bad = dout.download();
    const BadPageTally n = tally_bad_page(good, bad, idx, c.width, h, cu_q[size_t(last)], c.block_size);
    CHECK(n.changed_elsewhere == 0);
    CHECK(n.nan_rows > 0);
    MESSAGE("FIGURE fp8 bad page id (device-side, masked MHA): " << n.attending << " query rows attend the bad page, "
            << n.nan_rows << " rows NaN (" << n.nan_rows_not_attending << " of them by sharing a tile), "
            << n.changed_elsewhere << " elements of other requests changed");
}

}  // namespace

TEST_CASE("gpu: fp8 cache, the MHA paths of the one call (fused gather-and-dequantize)") {
    MLAJIT_REQUIRE_GPU();
    // 16 heads: a request with no cached context (s_k == s_q), cached context with a partial last page,
    // shared first page (requests 0 and 1), width 200 (not a multiple of 64) over topk 192.
    run_fp8_case(G, {16, {{300, 300}, {77, 900}, {0, 40}, {129, 1000}}, 192, 200, 64, {MLAJIT_PATH_MASKED_MHA}, true});
    // 128 heads, every request within topk: dense MHA is exact and forced too; block size 16.
    run_fp8_case(G, {128, {{200, 200}, {64, 700}}, 2048, 2048, 16, {MLAJIT_PATH_DENSE_MHA, MLAJIT_PATH_MASKED_MHA}});
}

TEST_CASE("gpu small shapes: fp8 cache, small dense steps in one launch (the MHA kernel dequantizes the page rows)") {
    MLAJIT_REQUIRE_GPU();
    // At most 64 new tokens over at most MLAJIT_SMALL_STEP_KEYS keys (default 64): the dense step is one
    // launch whose blocks dequantize their requests' rows out of the FP8 pages (k_pe from the rows' bf16 tail).
    // Requests 0 and 1 share their first page; an empty request; a full 64-row block; pages of 16 and 64.
    run_fp8_case(G, {16, {{16, 16}, {5, 60}, {0, 9}, {64, 64}}, 2048, 2048, 16, {MLAJIT_PATH_DENSE_MHA, -1}});
    run_fp8_case(G, {128, {{33, 50}}, 2048, 2048, 64, {MLAJIT_PATH_DENSE_MHA}});
    // Over the limit (100 keys): the same call through the dequantizing gather + GEMM, for comparison.
    run_fp8_case(G, {16, {{40, 100}}, 2048, 2048, 16, {MLAJIT_PATH_DENSE_MHA}});
}

TEST_CASE("gpu: fp8 cache, the sparse path and the planned call (sparse MQA reads the FP8 pages)") {
    MLAJIT_REQUIRE_GPU();
    run_fp8_case(G, {16, {{300, 300}, {77, 900}, {0, 40}, {129, 1000}}, 192, 200, 64, {MLAJIT_PATH_SPARSE_MQA, -1}});
    run_fp8_case(G, {128, {{200, 200}, {64, 700}}, 2048, 2048, 64, {MLAJIT_PATH_SPARSE_MQA, -1}});
    // A sparse request too long for one step (128 heads: chunks of 3,840 queries): its later, shorter chunk
    // reads the keys the first chunk dequantized (wrong before 2341f4d: rel L2 0.18 in mlajit-bench); the
    // sampled rows include each request's last, in the last chunk.
    run_fp8_case(G, {128, {{4000, 4500}}, 2048, 2048, 64, {MLAJIT_PATH_SPARSE_MQA}});
}
