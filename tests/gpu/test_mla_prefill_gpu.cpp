// mlajit_mla_prefill end to end: the same DSA inputs through every path the call can take (planned, and
// each path forced), packed and split layouts, mixed batches with cached context and empty requests,
// against the float64 DSA reference. The result must not depend on the path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "config/env.h"
#include "gpu/gpu_fixture.h"
#include "mlajit/mlajit.hpp"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "reference/bf16.h"
#include "reference/reference.h"
#include "runtime/handle.h"

using namespace mlajit;
using namespace mlajit::test;
namespace R = mlajit::ref;

namespace {

struct Req {
    int32_t s_q, s_k;
};

struct MlaCase {
    int64_t heads;
    std::vector<Req> reqs;
    int64_t topk;  // the model's top-k (passed as args.topk)
    bool packed;   // q_nope/q_pe views of one [T, h, 192]; kv_c/k_pe views of one [T_k, 576]
    // Engine-shaped extras: index rows padded with -1 to this width (0 = topk), some keys listed twice in
    // a row, and the latent cache in pages of this many tokens (0 = contiguous kv_c / k_pe).
    int64_t width = 0;
    bool duplicates = false;
    int64_t block_size = 0;
};

// The engine's index rows: the indexer's top-k keys, padded with -1 to `width`, and (duplicates) some
// keys listed twice: a padding slot or a real slot taking a copy of another key of the same row.
std::vector<int32_t> engine_indices(R::Rng& rng, const std::vector<int32_t>& topk_idx, int64_t T, int64_t topk,
                                    int64_t width, bool duplicates) {
    std::vector<int32_t> out(size_t(T * width), -1);
    for (int64_t t = 0; t < T; ++t) {
        int32_t* row = out.data() + t * width;
        std::copy(topk_idx.begin() + t * topk, topk_idx.begin() + (t + 1) * topk, row);
        if (!duplicates || row[0] < 0) continue;
        for (int k = 0; k < 3; ++k) {
            const int64_t from = rng.uniform_int(0, topk - 1), to = rng.uniform_int(0, width - 1);
            if (row[from] >= 0) row[to] = row[from];
        }
    }
    return out;
}

// The latent rows [T_k, 576] laid into shuffled pages of `bs` tokens (with spare pages of noise between
// them): returns the pool and fills the block table [B, max_blocks].
std::vector<uint16_t> page_latents(R::Rng& rng, const std::vector<uint16_t>& rows576, const std::vector<int32_t>& cu_k,
                                   int64_t bs, std::vector<int32_t>& table, int64_t& max_blocks, int64_t& num_blocks) {
    const int64_t B = int64_t(cu_k.size()) - 1;
    max_blocks = 1;
    int64_t used = 0;
    for (int64_t r = 0; r < B; ++r) {
        const int64_t n = (cu_k[size_t(r) + 1] - cu_k[size_t(r)] + bs - 1) / bs;
        max_blocks = std::max(max_blocks, n);
        used += n;
    }
    num_blocks = used * 2 + 3;
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    for (int64_t i = 0; i < num_blocks; ++i) perm[size_t(i)] = int32_t(i);
    for (int64_t i = num_blocks - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng.uniform_int(0, i))]);
    auto pool = rng.normal_bf16(num_blocks * bs * 576, 1.0);  // unused pages hold noise, never read
    table.assign(size_t(B * max_blocks), -1);
    int64_t next = 0;
    for (int64_t r = 0; r < B; ++r) {
        const int64_t s_k = cu_k[size_t(r) + 1] - cu_k[size_t(r)];
        for (int64_t p = 0; p < s_k; ++p) {
            if (p % bs == 0) table[size_t(r * max_blocks + p / bs)] = perm[size_t(next++)];
            const int64_t page = table[size_t(r * max_blocks + p / bs)];
            std::copy_n(rows576.begin() + (cu_k[size_t(r)] + p) * 576, 576, pool.begin() + (page * bs + p % bs) * 576);
        }
    }
    return pool;
}

void expect_ok(const R::CheckReport& r) { CHECK_MESSAGE(r.ok(), r.summary()); }

// Tolerances: kOneCallLseAtol and kOneCallOutAtolScale (gpu/gpu_fixture.h says why).

void run_mla_case(Gpu* G, const MlaCase& c) {
    R::Rng rng;
    INFO(rng.seed_note());
    const int64_t h = c.heads, topk = c.topk;
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (auto r : c.reqs) {
        cu_q.push_back(cu_q.back() + r.s_q);
        cu_k.push_back(cu_k.back() + r.s_k);
    }
    const int64_t T = cu_q.back(), Tk = cu_k.back(), B = (int64_t)c.reqs.size();
    bool all_short = true;
    for (auto r : c.reqs) all_short = all_short && r.s_k <= topk;

    // Host inputs in the layout under test; weights scaled so projected values stay O(1).
    const int64_t q_row = c.packed ? 192 : 128, kv_row = c.packed ? 576 : 512;
    auto q_main = rng.normal_bf16(T * h * q_row, 1.0);         // q_nope (or packed q)
    auto q_pe_sep = rng.normal_bf16(c.packed ? 0 : T * h * 64, 1.0);
    auto kv_main = rng.normal_bf16(Tk * kv_row, 1.0);          // kv_c (or packed kv)
    auto k_pe_sep = rng.normal_bf16(c.packed ? 0 : Tk * 64, 1.0);
    auto w = rng.normal_bf16(h * 256 * 512, 1.0 / std::sqrt(512.0));
    const int64_t width = c.width > 0 ? c.width : topk;
    auto idx = engine_indices(rng, R::causal_topk_indices(rng, cu_q, cu_k, topk), T, topk, width, c.duplicates);
    const double scale = 1.0 / std::sqrt(192.0);

    R::View vq_nope(q_main.data(), h * q_row, q_row);
    R::View vq_pe = c.packed ? vq_nope.shifted(128) : R::View(q_pe_sep.data(), h * 64, 64);
    R::View vkv_c(kv_main.data(), kv_row, 0);
    R::View vk_pe = c.packed ? vkv_c.shifted(512) : R::View(k_pe_sep.data(), 64, 0);
    auto rows = R::sample_rows(rng, cu_q, 16);
    const R::AttnResult want = mla_reference(vq_nope, vq_pe, vkv_c, vk_pe, w, idx, width, h, cu_q, cu_k, scale, rows);

    DeviceBuffer<uint16_t> dq(q_main), dqpe(q_pe_sep), dkv(kv_main), dkpe(k_pe_sep), dw(w), dout(T * h * 128);
    DeviceBuffer<int32_t> didx(idx), dcq(cu_q), dck(cu_k);
    DeviceBuffer<float> dlse(T * h);
    // The paged form holds the same latent rows, [kv_c ; k_pe] per token, in shuffled pages.
    std::vector<int32_t> table;
    std::vector<uint16_t> pool;
    int64_t max_blocks = 0, num_blocks = 0;
    if (c.block_size > 0) {
        std::vector<uint16_t> rows576(size_t(Tk * 576));
        for (int64_t k = 0; k < Tk; ++k)
            for (int64_t d = 0; d < 576; ++d)
                rows576[size_t(k * 576 + d)] = d < 512 ? kv_main[size_t(k * kv_row + d)]
                                                       : (c.packed ? kv_main[size_t(k * kv_row + d)] : k_pe_sep[size_t(k * 64 + d - 512)]);
        pool = page_latents(rng, rows576, cu_k, c.block_size, table, max_blocks, num_blocks);
    }
    DeviceBuffer<uint16_t> dpool(pool);
    DeviceBuffer<int32_t> dtable(table);
    mlajit_mla_prefill_args a = mla_call_args({.heads = h, .w_kv_b = &dw, .indices = &didx, .width = width, .topk = topk,
                                               .cu_q = &dcq, .cu_k = &dck, .cu_q_host = &cu_q, .cu_k_host = &cu_k,
                                               .out = &dout, .lse = &dlse, .sm_scale = scale});
    if (c.packed) {
        a.q_nope = strided_tensor(dq.get(), MLAJIT_BF16, {T, h, 128}, {h * 192, 192, 1});
        a.q_pe = strided_tensor(dq.get() + 128, MLAJIT_BF16, {T, h, 64}, {h * 192, 192, 1});
        a.kv_c = strided_tensor(dkv.get(), MLAJIT_BF16, {Tk, 512}, {576, 1});
        a.k_pe = strided_tensor(dkv.get() + 512, MLAJIT_BF16, {Tk, 64}, {576, 1});
    } else {
        a.q_nope = tensor(dq.get(), MLAJIT_BF16, {T, h, 128});
        a.q_pe = tensor(dqpe.get(), MLAJIT_BF16, {T, h, 64});
        a.kv_c = tensor(dkv.get(), MLAJIT_BF16, {Tk, 512});
        a.k_pe = tensor(dkpe.get(), MLAJIT_BF16, {Tk, 64});
    }
    if (c.block_size > 0) {
        a.kv_c = a.k_pe = mlajit_tensor{};
        a.kv_cache = tensor(dpool.get(), MLAJIT_BF16, {num_blocks, c.block_size, 576});
        a.block_table = tensor(dtable.get(), MLAJIT_INT32, {B, max_blocks});
    }

    std::vector<int> forces = {-1, MLAJIT_PATH_MASKED_MHA, MLAJIT_PATH_SPARSE_MQA};
    if (all_short) forces.push_back(MLAJIT_PATH_DENSE_MHA);
    for (int force : forces) {
        INFO("heads " << h << " batch " << B << " topk " << topk << " width " << width
                      << std::string(c.packed ? " packed" : " split") << " block_size " << c.block_size
                      << std::string(c.duplicates ? " duplicates" : "") << " force_path " << force);
        a.force_path = force;
        size_t bytes = 0;
        MLAJIT_CHECK_OK(mlajit_mla_prefill_workspace_size(G->handle, &a, &bytes));
        CHECK(bytes > 0);
        DeviceBuffer<uint8_t> ws(bytes);
        dout.poison();
        dlse.poison();
        // Too small a workspace: refused before anything runs, the output untouched.
        a.workspace = ws.get();
        a.workspace_bytes = bytes - 1;
        CHECK(mlajit_mla_prefill(G->handle, &a, G->stream) == MLAJIT_ERROR_INVALID_ARGUMENT);
        CHECK(std::string(mlajit_last_error()).find("workspace") != std::string::npos);
        a.workspace_bytes = bytes;
        std::vector<mlajit_path> paths((size_t)B, (mlajit_path)99);
        a.paths_out = paths.data();
        auto& gemm = handle_of(G->handle).gemm();
        const int64_t gemms_before = gemm.jit_runs() + gemm.cublaslt_runs();
        MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
        // Every request with queries fits a small step (s_q <= the kernel's block rows, s_k <=
        // MLAJIT_SMALL_STEP_KEYS): a dense call is then one launch, the MHA kernel's own up-projection, and
        // runs no projection GEMM; with the setting 0 it runs the up-projection GEMM.
        if (force == MLAJIT_PATH_DENSE_MHA || (force < 0 && all_short)) {
            const int64_t gemms = gemm.jit_runs() + gemm.cublaslt_runs() - gemms_before;
            const int keys = config().small_step_keys, block_rows = mha_up_spec(handle_of(G->handle).arch()).p[0];
            bool all_small = keys > 0;
            for (auto r : c.reqs) all_small = all_small && (r.s_q == 0 || (r.s_q <= block_rows && r.s_k <= keys));
            if (all_small) CHECK_MESSAGE(gemms == 0, "a call of small dense steps ran " << gemms << " GEMMs");
            if (keys == 0) CHECK(gemms > 0);
        }
        for (int64_t r = 0; r < B; ++r) {
            INFO("request " << r);
            if (force >= 0 && c.reqs[(size_t)r].s_q > 0) CHECK((int)paths[(size_t)r] == force);
            if (force < 0 && c.reqs[(size_t)r].s_q > 0 && c.reqs[(size_t)r].s_k <= topk)
                CHECK(paths[(size_t)r] == MLAJIT_PATH_DENSE_MHA);
            CHECK((int)paths[(size_t)r] <= 2);
        }
        auto out = dout.download();
        auto lse = dlse.download();
        // Every output element written (the poison is NaN), then values on the sampled rows.
        int64_t unwritten = 0;
        for (uint16_t v : out) unwritten += v == 0xFFFF;
        CHECK_MESSAGE(unwritten == 0, unwritten << " output elements never written");
        expect_ok(R::check_out("out", R::View(out.data(), h * 128, 128), want, kOneCallOutAtolScale));
        expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want, kOneCallLseAtol));
    }
    // lse is optional.
    a.lse = mlajit_tensor{};
    a.force_path = -1;
    auto ws = attach_mla_workspace(G, a);
    a.paths_out = nullptr;
    dout.poison();
    MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
    auto out = dout.download();
    expect_ok(R::check_out("out (no lse)", R::View(out.data(), h * 128, 128), want, kOneCallOutAtolScale));
}

}  // namespace

TEST_CASE("gpu: mla_prefill gives the DSA result on every path") {
    MLAJIT_REQUIRE_GPU();
    // Mixed batch: a short request (dense when planned), chunked prefill over cached context, a request
    // with no queries, a long one; topk 256 so every path has work at test sizes.
    run_mla_case(G, {16, {{300, 300}, {200, 2600}, {0, 50}, {700, 3000}}, 256, false});
    run_mla_case(G, {16, {{300, 300}, {200, 2600}, {0, 50}, {700, 3000}}, 256, true});
    // Every request short: dense MHA is exact and can be forced; 128 heads (TP1) and 20 (padded MQA tile).
    run_mla_case(G, {128, {{500, 500}, {64, 1000}}, 2048, true});
    run_mla_case(G, {20, {{1, 1}, {900, 1800}, {33, 2000}}, 2048, false});
    // DeepSeek topk over longer requests, 64 heads.
    run_mla_case(G, {64, {{1500, 4000}, {2500, 2500}}, 2048, false});
}

TEST_CASE("gpu: mla_prefill takes the engine's inputs: model top-k below the padded width, duplicates, paged cache") {
    MLAJIT_REQUIRE_GPU();
    // Top-k 200 padded to 256 (vLLM's test width): requests with 200 < s_k <= 256 must not go dense.
    run_mla_case(G, {16, {{250, 250}, {100, 230}, {64, 1000}}, 200, true, 256, false, 0});
    // Odd widths, keys listed twice.
    run_mla_case(G, {16, {{300, 300}, {77, 900}}, 192, false, 199, true, 0});
    // Paged latent cache: block sizes 64, 16 and 1, partial last pages, shuffled pages, cached context.
    run_mla_case(G, {16, {{300, 300}, {200, 2600}, {0, 50}, {700, 3000}}, 256, true, 0, false, 64});
    run_mla_case(G, {20, {{1, 1}, {129, 700}, {33, 2000}}, 256, false, 300, true, 16});
    run_mla_case(G, {16, {{40, 100}, {7, 77}}, 64, true, 0, false, 1});
}

TEST_CASE("gpu: mla_prefill, a sparse request longer than one step (chunked): split and paged latents") {
    MLAJIT_REQUIRE_GPU();
    // 128 heads: the sparse step takes 3,840 queries at most, so 4,000 queries run as two chunks, the second
    // of 160 queries, reading the keys the first packed (or gathered) into the workspace (wrong before
    // 2341f4d: their offset followed the chunk's query count). The sampled rows include the last one.
    run_mla_case(G, {128, {{4000, 4500}, {30, 60}}, 2048, false});
    run_mla_case(G, {128, {{4000, 4500}}, 2048, false, 0, false, 64});
}

TEST_CASE("gpu: mla_prefill is right at every token count of a GEMM class (the class's algorithm, checked, reused)") {
    MLAJIT_REQUIRE_GPU();
    // The projections' cuBLASLt algorithm is chosen once per power-of-two class of M (the token count) and
    // reused for the class's other counts once cublasLtMatmulAlgoCheck accepts it (ops/gemm.h). Counts of
    // two classes, the top first and out of order after it, through every path (dense MHA: the K/V
    // up-projection; sparse MQA: the batched absorption and output projection).
    ScopedEnv gemm_steps("MLAJIT_SMALL_STEP_KEYS", "0");  // else the dense calls of <= 64 tokens run no GEMM
    auto& gemm = handle_of(G->handle).gemm();
    const auto before = gemm.counts();
    for (int32_t t : {16, 9, 13, 11, 15, 128, 65, 100, 127})
        run_mla_case(G, {16, {{t, t}}, 2048, true});
    const auto after = gemm.counts();
    MESSAGE("gemm: " << after.heuristic_queries - before.heuristic_queries << " heuristic queries, "
                     << after.class_reuses - before.class_reuses << " class reuses, "
                     << after.checks_refused - before.checks_refused << " checks refused");
    // On the Hopper tier the projections run mlajit's own GEMM kernel (ops/gemm.h): no cuBLASLt algorithm at all.
    if (gemm.jit()) CHECK(after.heuristic_queries == before.heuristic_queries);
    else CHECK(after.class_reuses > before.class_reuses);
}

namespace {

// The paged bf16 cache against the contiguous form on the same latent rows (issue 15: MLAJIT_GEMM=unfused, the
// separate gather; MLAJIT_GEMM=fused, on the Hopper tier, the K/V up-projection reads the pages itself): every form must
// give the same bits (the up-projection's GEMM sums in the same order whichever way A arrives), and the
// paged form the float64 DSA result.
// small: with small dense steps on (MLAJIT_SMALL_STEP_KEYS as set; the forms then differ only where a step
// is not small) and the bad page under forced dense MHA; else they are off, so every dense step runs the forms' GEMMs.
void run_paged_equal(Gpu* G, int64_t h, const std::vector<Req>& reqs, int64_t topk, int64_t bs, bool all_paths = true,
                     bool bad_page = false, bool small = false) {
    std::optional<ScopedEnv> gemm_steps;
    if (!small) gemm_steps.emplace("MLAJIT_SMALL_STEP_KEYS", "0");
    R::Rng rng;
    INFO(rng.seed_note());
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (auto r : reqs) {
        cu_q.push_back(cu_q.back() + r.s_q);
        cu_k.push_back(cu_k.back() + r.s_k);
    }
    const int64_t T = cu_q.back(), Tk = cu_k.back(), B = (int64_t)reqs.size();
    bool all_short = true;
    for (auto r : reqs) all_short = all_short && r.s_k <= topk;
    auto q = rng.normal_bf16(T * h * 192, 1.0);
    auto rows576 = rng.normal_bf16(Tk * 576, 1.0);
    auto w = rng.normal_bf16(h * 256 * 512, 1.0 / std::sqrt(512.0));
    auto idx = R::causal_topk_indices(rng, cu_q, cu_k, topk);
    const double scale = 1.0 / std::sqrt(192.0);
    R::View vq_nope(q.data(), h * 192, 192);
    R::View vkv(rows576.data(), 576, 0);
    auto sample = R::sample_rows(rng, cu_q, 16);
    const R::AttnResult want = mla_reference(vq_nope, vq_nope.shifted(128), vkv, vkv.shifted(512), w, idx, topk, h, cu_q, cu_k, scale, sample);

    std::vector<int32_t> table;
    int64_t max_blocks = 0, num_blocks = 0;
    auto pool = page_latents(rng, rows576, cu_k, bs, table, max_blocks, num_blocks);
    DeviceBuffer<uint16_t> dq(q), drows(rows576), dw(w), dpool(pool), dout(T * h * 128);
    DeviceBuffer<int32_t> didx(idx), dcq(cu_q), dck(cu_k), dtable(table);
    DeviceBuffer<float> dlse(T * h);
    mlajit_mla_prefill_args a = mla_call_args({.heads = h, .w_kv_b = &dw, .indices = &didx, .width = topk, .topk = topk,
                                               .cu_q = &dcq, .cu_k = &dck, .cu_q_host = &cu_q, .cu_k_host = &cu_k,
                                               .out = &dout, .lse = &dlse, .sm_scale = scale});
    a.q_nope = strided_tensor(dq.get(), MLAJIT_BF16, {T, h, 128}, {h * 192, 192, 1});
    a.q_pe = strided_tensor(dq.get() + 128, MLAJIT_BF16, {T, h, 64}, {h * 192, 192, 1});
    const mlajit_tensor kv_c = strided_tensor(drows.get(), MLAJIT_BF16, {Tk, 512}, {576, 1});
    const mlajit_tensor k_pe = strided_tensor(drows.get() + 512, MLAJIT_BF16, {Tk, 64}, {576, 1});
    const mlajit_tensor kv_cache = tensor(dpool.get(), MLAJIT_BF16, {num_blocks, bs, 576});
    const mlajit_tensor block_table = tensor(dtable.get(), MLAJIT_INT32, {B, max_blocks});

    auto& gemm = handle_of(G->handle).gemm();
    const char* prev_env = std::getenv("MLAJIT_GEMM");
    const std::optional<std::string> prev_gemm = prev_env ? std::optional<std::string>(prev_env) : std::nullopt;
    if (prev_gemm && *prev_gemm != "auto") {
        MESSAGE("MLAJIT_GEMM=" << *prev_gemm << " is set: forms 1 and 2 run the same way");
    }
    std::vector<int> forces = {-1, MLAJIT_PATH_MASKED_MHA};
    if (all_short && all_paths) forces.push_back(MLAJIT_PATH_DENSE_MHA);
    for (int force : forces) {
        a.force_path = force;
        // form 0: contiguous kv_c / k_pe; 1: the pages, MLAJIT_GEMM=unfused (the separate gather); 2: the pages,
        // MLAJIT_GEMM=fused (the up-projection reads them, on the Hopper tier). Forced both ways (the default
        // picks by head count); with MLAJIT_GEMM set otherwise by the caller, that setting runs both.
        std::vector<uint16_t> outs[3];
        std::vector<float> lses[3];
        size_t bytes[3] = {0, 0, 0};
        for (int form = 0; form < 3; ++form) {
            INFO("heads " << h << " batch " << B << " block_size " << bs << " force_path " << force << " form " << form);
            std::optional<ScopedEnv> gemm_form;
            if (form > 0 && !prev_gemm) gemm_form.emplace("MLAJIT_GEMM", form == 1 ? "unfused" : "fused");
            a.kv_c = form == 0 ? kv_c : mlajit_tensor{};
            a.k_pe = form == 0 ? k_pe : mlajit_tensor{};
            a.kv_cache = form == 0 ? mlajit_tensor{} : kv_cache;
            a.block_table = form == 0 ? mlajit_tensor{} : block_table;
            MLAJIT_CHECK_OK(mlajit_mla_prefill_workspace_size(G->handle, &a, &bytes[form]));
            DeviceBuffer<uint8_t> ws(bytes[form]);
            a.workspace = ws.get();
            a.workspace_bytes = bytes[form];
            dout.poison();
            dlse.poison();
            const int64_t jit_before = gemm.jit_runs();
            const mlajit_status st = mlajit_mla_prefill(G->handle, &a, G->stream);
            gemm_form.reset();
            MLAJIT_CHECK_OK(st);
            outs[form] = dout.download();
            lses[form] = dlse.download();
            if (gemm.jit() && !small) CHECK(gemm.jit_runs() > jit_before);
            if (form > 0) {
                expect_ok(R::check_out("out (paged)", R::View(outs[form].data(), h * 128, 128), want, kOneCallOutAtolScale));
                expect_ok(R::check_lse("lse (paged)", R::View(lses[form].data(), h, 1), want, kOneCallLseAtol));
            }
        }
        INFO("heads " << h << " batch " << B << " block_size " << bs << " force_path " << force);
        int64_t diff_fused = 0, diff_unfused = 0;
        for (size_t i = 0; i < outs[0].size(); ++i) {
            diff_unfused += outs[1][i] != outs[0][i];
            diff_fused += outs[2][i] != outs[0][i];
        }
        CHECK_MESSAGE(diff_unfused == 0, diff_unfused << " output elements of the paged form (MLAJIT_GEMM=unfused) differ from the contiguous form");
        CHECK_MESSAGE(diff_fused == 0, diff_fused << " output elements of the paged form (MLAJIT_GEMM=fused) differ from the contiguous form");
        CHECK(std::memcmp(lses[1].data(), lses[0].data(), lses[0].size() * 4) == 0);
        CHECK(std::memcmp(lses[2].data(), lses[0].data(), lses[0].size() * 4) == 0);
        // The fused form keeps only the keys' k_pe rows (64 wide) instead of a gathered copy (576 wide).
        if (gemm.jit() && !prev_gemm) CHECK(bytes[2] < bytes[1]);
        else if (!prev_gemm) CHECK(bytes[2] == bytes[1]);
    }
    if (!bad_page) return;
    // A block-table entry out of range (device memory: the host cannot see it). The fused up-projection reads
    // that page's rows as zeros and writes their k_pe as NaN (the separate gather: the whole rows as NaN), so
    // every query attending one of its keys is NaN, and no other request changes. Masked MHA; the last
    // request's second page goes bad. Both ways (MLAJIT_GEMM=unfused, then fused).
    for (int fused = 0; fused < 2; ++fused) {
        INFO("MLAJIT_GEMM=fused " << fused);
        std::optional<ScopedEnv> gemm_form;
        if (!prev_gemm) gemm_form.emplace("MLAJIT_GEMM", fused ? "fused" : "unfused");
        a.force_path = small ? MLAJIT_PATH_DENSE_MHA : MLAJIT_PATH_MASKED_MHA;
        a.kv_c = a.k_pe = mlajit_tensor{};
        a.kv_cache = kv_cache;
        a.block_table = block_table;
        auto ws = attach_mla_workspace(G, a);
        dout.poison();
        MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
        const auto good = dout.download();
        const int64_t last = B - 1;
        REQUIRE(cu_k[size_t(B)] - cu_k[size_t(last)] > bs);
        auto bad_table = table;
        bad_table[size_t(last * max_blocks + 1)] = int32_t(num_blocks + 5);
        dtable.upload(bad_table);
        dout.poison();
        MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
        const auto bad = dout.download();
        dtable.upload(table);
        const BadPageTally n = tally_bad_page(good, bad, idx, topk, h, cu_q[size_t(last)], bs);
        CHECK(n.changed_elsewhere == 0);
        CHECK(n.attending > 0);
        MESSAGE("FIGURE bf16 paged bad page id (" << std::string(small ? "dense MHA, small steps" : "masked MHA") << ", block size "
                << bs << std::string(fused ? ", MLAJIT_GEMM=fused" : ", MLAJIT_GEMM=unfused") << "): "
                << n.attending << " query rows attend it, " << n.nan_rows << " rows NaN, " << n.changed_elsewhere
                << " elements of other requests changed");
    }
}

}  // namespace

TEST_CASE("gpu: paged bf16 cache: the up-projection reading the pages equals the contiguous form, bit for bit") {
    MLAJIT_REQUIRE_GPU();
    // Odd lengths, several requests per step (a request with no queries splits the run: two MHA steps),
    // chunked prefill over cached context, partial last pages, shuffled pages with noise between them.
    const std::vector<Req> mixed = {{37, 37}, {1, 129}, {130, 701}, {0, 20}, {250, 1001}, {64, 300}};
    for (int64_t bs : {1, 16, 64, 100}) run_paged_equal(G, 16, mixed, 256, bs);
    // 128 heads (TP1): 128 x 256 tiles, the column-tile-0 blocks writing k_pe among 128 column tiles.
    run_paged_equal(G, 128, {{300, 700}, {45, 45}, {200, 200}}, 2048, 64);
    // A step longer than one 128-row tile many times over, block size not dividing it.
    run_paged_equal(G, 16, {{1000, 3000}, {513, 513}}, 2048, 100, false);
}

TEST_CASE("gpu: paged bf16 cache, small (for compute-sanitizer): the fused up-projection") {
    MLAJIT_REQUIRE_GPU();
    run_paged_equal(G, 16, {{5, 70}, {3, 3}, {0, 9}, {20, 130}}, 128, 16, false, true);
    run_paged_equal(G, 16, {{5, 70}, {17, 17}}, 128, 1, false);
}

TEST_CASE("gpu small shapes: the one call's small dense steps run in one launch (the MHA kernel's own K/V up-projection)") {
    MLAJIT_REQUIRE_GPU();
    // Requests of at most 64 new tokens over at most MLAJIT_SMALL_STEP_KEYS keys (default 64): the whole
    // dense step is the portable MHA kernel computing its head's k_nope / v rows itself (on every arch);
    // run_mla_case checks that such calls run no GEMM. tools/device/small_steps.sh also runs this with the
    // setting 0 (the up-projection GEMM + MHA) and 128 (two 64-key passes): the same float64 result. No
    // setenv here: compute-sanitizer runs this case.
    MESSAGE("MLAJIT_SMALL_STEP_KEYS=" << config().small_step_keys);
    run_mla_case(G, {128, {{16, 16}}, 2048, true});  // the host-cost benchmark's call
    // Odd sizes, one query, a full 64-row block, cached context, an empty request.
    run_mla_case(G, {16, {{1, 1}, {64, 64}, {5, 60}, {0, 20}, {33, 41}}, 2048, false});
    run_mla_case(G, {20, {{64, 64}, {2, 2}, {7, 50}}, 2048, true, 0, false, 16});  // pages of 16
    run_mla_case(G, {16, {{17, 63}}, 2048, false, 0, false, 1});                   // pages of 1
    // Up to 128 keys: small only with MLAJIT_SMALL_STEP_KEYS >= 128 (two passes of the up-projection).
    run_mla_case(G, {16, {{33, 128}, {64, 100}}, 2048, false, 0, false, 0});
    run_mla_case(G, {16, {{20, 128}}, 2048, true, 0, false, 16});
}

TEST_CASE("gpu: small dense steps: the paged form equals the contiguous one, a bad page NaNs its queries") {
    MLAJIT_REQUIRE_GPU();
    // Bit for bit (the same kernel reads the rows either way); a bad block-table entry NaNs exactly the
    // queries that attend its keys (dense: every later query of the request), nothing else.
    run_paged_equal(G, 16, {{5, 40}, {3, 3}, {0, 9}, {20, 60}}, 2048, 16, true, true, true);
    run_paged_equal(G, 64, {{64, 64}, {1, 1}}, 2048, 1, true, false, true);
}
