// The one-call prefill's host side: argument checks, per-request paths and the launch schedule (which
// steps run, which tokens each covers, how much workspace they need). No GPU involved.
#include <doctest/doctest.h>

#include <random>

#include "common/error.h"
#include "mlajit/mlajit.hpp"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"
#include "support/expect_invalid.h"

using namespace mlajit;
using mlajit::test::has;
using mlajit::test::invalid;

namespace {

void* fake(uintptr_t n) { return reinterpret_cast<void*>(0x100000 * n); }
mlajit_tensor t(void* data, mlajit_dtype dt, std::initializer_list<int64_t> shape) { return contiguous_tensor(data, dt, shape); }

constexpr int64_t kHeads = 16;
const int32_t kCuQ[] = {0, 100, 300, 300, 1300};
const int32_t kCuK[] = {0, 150, 800, 900, 9900};

mlajit_mla_prefill_args good_args() {
    mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
    a.q_nope = t(fake(1), MLAJIT_BF16, {1300, kHeads, 128});
    a.q_pe = t(fake(2), MLAJIT_BF16, {1300, kHeads, 64});
    a.kv_c = t(fake(3), MLAJIT_BF16, {9900, 512});
    a.k_pe = t(fake(4), MLAJIT_BF16, {9900, 64});
    a.w_kv_b = t(fake(5), MLAJIT_BF16, {kHeads * 256, 512});
    a.indices = t(fake(6), MLAJIT_INT32, {1300, 2048});
    a.cu_seqlens_q = t(fake(7), MLAJIT_INT32, {5});
    a.cu_seqlens_k = t(fake(8), MLAJIT_INT32, {5});
    a.cu_seqlens_q_host = kCuQ;
    a.cu_seqlens_k_host = kCuK;
    a.out = t(fake(9), MLAJIT_BF16, {1300, kHeads, 128});
    a.sm_scale = 0.07f;
    a.force_path = -1;
    return a;
}


// Every query token of every request with queries is covered by exactly one step, MHA steps cover whole
// requests and match cu_seqlens, MQA steps one request each, and each step fits the workspace.
void check_cover(const MlaShapes& s, const int32_t* cu_q, const int32_t* cu_k, const MlaSchedule& sch,
                 const MlaLimits& lim) {
    std::vector<int> seen(size_t(cu_q[s.batch]), 0);
    for (const MlaStep& st : sch.steps) {
        REQUIRE(st.r0 < st.r1);
        const MlaStepLayout l = step_layout(s, st);
        CHECK(l.end <= sch.workspace_bytes);
        // No buffer overlaps cuBLASLt's scratch at the start (0 = not used).
        for (size_t off : {l.kv_up, l.q_pack, l.mask, l.q_mqa, l.latent, l.kv_pack, l.kv_gather, l.kpe, l.lse})
            CHECK((off == 0 || off >= workspace_base(s)));
        CHECK(st.k0 == cu_k[st.r0]);
        CHECK(st.k1 == cu_k[st.r1]);
        for (int64_t r = st.r0; r < st.r1; ++r) CHECK(sch.paths[size_t(r)] == st.path);
        if (st.path == Path::sparse_mqa && st.chunk) {
            CHECK(st.r1 == st.r0 + 1);
            CHECK(st.first_chunk == (st.t0 == cu_q[st.r0]));
            CHECK(st.t1 <= cu_q[st.r1]);
            const size_t per_query = size_t(s.heads) * ((576 + 512) * 2 + (s.has_lse ? 0 : 4)) + size_t(s.width + 1) * 4;
            CHECK(size_t(st.t1 - st.t0) * per_query <= std::max(lim.mqa_chunk_bytes, 64 * per_query));
        } else {
            CHECK(st.t0 == cu_q[st.r0]);
            CHECK(st.t1 == cu_q[st.r1]);
            const size_t budget = st.path == Path::sparse_mqa ? lim.mqa_chunk_bytes : lim.mha_run_bytes;
            if (st.r1 > st.r0 + 1) CHECK(step_layout(s, st).end - workspace_base(s) <= budget);
            for (int64_t r = st.r0; r < st.r1; ++r) CHECK(cu_q[r + 1] > cu_q[r]);  // runs hold requests with queries
            int64_t longest = 0;
            for (int64_t r = st.r0; r < st.r1; ++r) longest = std::max<int64_t>(longest, cu_k[r + 1] - cu_k[r]);
            CHECK(st.max_s_k == longest);
        }
        for (int64_t i = st.t0; i < st.t1; ++i) ++seen[size_t(i)];
    }
    for (size_t i = 0; i < seen.size(); ++i) {
        INFO("query token " << i);
        CHECK(seen[i] == 1);
    }
}

}  // namespace

TEST_CASE("mla_prefill: argument checks name the argument") {
    CHECK_NOTHROW(check_mla_args(good_args(), true));
    struct Case {
        const char* name;
        void (*edit)(mlajit_mla_prefill_args&);
        const char* part;
    };
    const Case cases[] = {
        {"w_kv_b rows", [](mlajit_mla_prefill_args& a) { a.w_kv_b.shape[0] = 128 * 256; }, "w_kv_b"},
        {"q_pe heads", [](mlajit_mla_prefill_args& a) { a.q_pe.shape[1] = 8; }, "q_pe"},
        {"k_pe rows", [](mlajit_mla_prefill_args& a) { a.k_pe.shape[0] = 100; }, "k_pe"},
        {"kv_c dtype", [](mlajit_mla_prefill_args& a) { a.kv_c.dtype = MLAJIT_FP32; }, "kv_c"},
        {"index width", [](mlajit_mla_prefill_args& a) { a.indices.shape[1] = 0; a.indices.stride[0] = 1; }, "width"},
        {"negative topk", [](mlajit_mla_prefill_args& a) { a.topk = -5; }, "topk"},
        {"both latent forms", [](mlajit_mla_prefill_args& a) {
             a.kv_cache = t(fake(11), MLAJIT_BF16, {200, 64, 576});
             a.block_table = t(fake(12), MLAJIT_INT32, {4, 200});
         }, "not both"},
        {"out shape", [](mlajit_mla_prefill_args& a) { a.out.shape[2] = 512; }, "out"},
        {"heads", [](mlajit_mla_prefill_args& a) {
             for (auto* x : {&a.q_nope, &a.q_pe, &a.out}) x->shape[1] = 200;
         }, "heads"},
        {"lse head stride", [](mlajit_mla_prefill_args& a) {
             a.lse = t(fake(10), MLAJIT_FP32, {1300, kHeads});
             a.lse.stride[1] = 2;
         }, "lse"},
        {"force_path", [](mlajit_mla_prefill_args& a) { a.force_path = 3; }, "force_path"},
        {"sm_scale", [](mlajit_mla_prefill_args& a) { a.sm_scale = -1.f; }, "sm_scale"},
        {"workspace alignment", [](mlajit_mla_prefill_args& a) {
             a.workspace = reinterpret_cast<void*>(0x100010);
             a.workspace_bytes = 1;
         }, "256-byte"},
        {"cu_seqlens host", [](mlajit_mla_prefill_args& a) { a.cu_seqlens_k_host = nullptr; }, "cu_seqlens_k_host"},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        auto a = good_args();
        c.edit(a);
        CHECK(has(invalid([&] { check_mla_args(a, true); }), c.part));
    }
    // s_k < s_q in one request: named by its index.
    const int32_t cu_k_short[] = {0, 150, 800, 900, 1400};
    auto a = good_args();
    a.cu_seqlens_k_host = cu_k_short;
    a.kv_c.shape[0] = a.k_pe.shape[0] = 1400;
    auto m = invalid([&] { check_mla_args(a, true); });
    CHECK(has(m, "request 3"));
    CHECK(has(m, "s_k = 500"));
}

TEST_CASE("mla_prefill: packed q and latent layouts are recognised") {
    auto a = good_args();
    CHECK_FALSE(check_mla_args(a, true).q_packed);
    // q_nope / q_pe as views of one [T, h, 192] tensor, kv_c / k_pe of one [T_k, 576] tensor.
    char* q = static_cast<char*>(fake(20));
    a.q_nope = strided_tensor(q, MLAJIT_BF16, {1300, kHeads, 128}, {kHeads * 192, 192, 1});
    a.q_pe = strided_tensor(q + 256, MLAJIT_BF16, {1300, kHeads, 64}, {kHeads * 192, 192, 1});
    char* kv = static_cast<char*>(fake(40));
    a.kv_c = strided_tensor(kv, MLAJIT_BF16, {9900, 512}, {576, 1});
    a.k_pe = strided_tensor(kv + 1024, MLAJIT_BF16, {9900, 64}, {576, 1});
    MlaShapes s = check_mla_args(a, true);
    CHECK(s.q_packed);
    CHECK(s.kv_packed);
    // Size query with NULL pointers: the unpacked upper bound.
    auto n = good_args();
    for (auto* x : {&n.q_nope, &n.q_pe, &n.kv_c, &n.k_pe, &n.w_kv_b, &n.indices, &n.out}) x->data = nullptr;
    MlaShapes u = check_mla_args(n, false);
    CHECK_FALSE(u.q_packed);
    CHECK_FALSE(u.kv_packed);
    const std::vector<Path> paths = {Path::dense_mha, Path::masked_mha, Path::dense_mha, Path::sparse_mqa};
    CHECK(schedule_mla(s, kCuQ, kCuK, paths).workspace_bytes < schedule_mla(u, kCuQ, kCuK, paths).workspace_bytes);
    CHECK_THROWS(check_mla_args(n, true));  // the real call needs its data
}

TEST_CASE("mla_prefill: a mixed batch becomes runs and chunks") {
    const MlaShapes s = check_mla_args(good_args(), true);
    // request 2 has no queries: it runs nothing and ends the MHA run before it.
    const std::vector<Path> paths = {Path::dense_mha, Path::dense_mha, Path::dense_mha, Path::sparse_mqa};
    MlaLimits lim;
    auto sch = schedule_mla(s, kCuQ, kCuK, paths, lim);
    REQUIRE(sch.steps.size() == 2);
    CHECK(sch.steps[0].path == Path::dense_mha);
    CHECK(sch.steps[0].r0 == 0);
    CHECK(sch.steps[0].r1 == 2);
    CHECK(sch.steps[0].max_s_k == 650);
    CHECK(sch.steps[1].path == Path::sparse_mqa);
    CHECK(sch.steps[1].t0 == 300);
    CHECK(sch.steps[1].t1 == 1300);
    check_cover(s, kCuQ, kCuK, sch, lim);
    // The workspace is the largest step, not the sum.
    size_t largest = 0;
    for (const auto& st : sch.steps) largest = std::max(largest, step_layout(s, st).end);
    CHECK(sch.workspace_bytes == largest);
    // MHA K/V of the first run: 800 keys x 16 heads x 256 bf16.
    const MlaStepLayout l = step_layout(s, sch.steps[0]);
    CHECK(l.q_pack - l.kv_up >= size_t(800) * kHeads * 256 * 2);

    // Small budgets: the MQA request splits into 64-multiple chunks, the MHA run into single requests.
    lim.mqa_chunk_bytes = 300 * (kHeads * (576 + 512) * 2 + (s.width + 1) * 4) + 1000;  // + each query's key-set list
    lim.mha_run_bytes = 1000;
    sch = schedule_mla(s, kCuQ, kCuK, paths, lim);
    REQUIRE(sch.steps.size() == 2 + 4);  // runs {0}, {1}; chunks of 256 over 1000 queries
    CHECK(sch.steps[1].r0 == 1);
    CHECK(sch.steps[2].t1 - sch.steps[2].t0 == 256);
    CHECK(sch.steps[2].first_chunk);
    CHECK_FALSE(sch.steps[3].first_chunk);
    check_cover(s, kCuQ, kCuK, sch, lim);
}

TEST_CASE("mla_prefill: random batches are covered exactly once") {
    std::mt19937 rng(12345);
    for (int trial = 0; trial < 200; ++trial) {
        const int batch = 1 + int(rng() % 9);
        std::vector<int32_t> cu_q{0}, cu_k{0};
        std::vector<Path> paths;
        for (int r = 0; r < batch; ++r) {
            const int sq = rng() % 4 == 0 ? 0 : 1 + int(rng() % 3000);
            const int sk = sq + int(rng() % 5000);
            cu_q.push_back(cu_q.back() + sq);
            cu_k.push_back(cu_k.back() + sk);
            paths.push_back(sk <= 2048 && rng() % 2 ? Path::dense_mha : Path(1 + rng() % 2));
        }
        MlaShapes s;
        s.total_q = cu_q.back();
        s.total_k = cu_k.back();
        s.heads = 1 << (rng() % 8);
        s.topk = 2048;
        s.batch = batch;
        s.q_packed = rng() % 2;
        s.kv_packed = rng() % 2;
        s.has_lse = rng() % 2;
        s.gemm_scratch = rng() % 2 ? kGemmWorkspaceBytes : 0;
        MlaLimits lim;
        lim.mha_run_bytes = size_t(1) << (20 + rng() % 10);
        lim.mqa_chunk_bytes = size_t(1) << (20 + rng() % 10);
        INFO("trial " << trial);
        check_cover(s, cu_q.data(), cu_k.data(), schedule_mla(s, cu_q.data(), cu_k.data(), paths, lim), lim);
    }
}

TEST_CASE("mla_prefill: without cuBLASLt's scratch (the Hopper GEMM) the workspace shrinks by it") {
    // GemmRunner::scratch_bytes() is 0 when the projections run mlajit's own GEMM: the buffers start at 256
    // (offset 0 means "not used" in a step layout).
    constexpr size_t kSaved = kGemmWorkspaceBytes - 256;
    MlaShapes s = check_mla_args(good_args(), true);
    MlaShapes jit = s;
    jit.gemm_scratch = 0;
    const std::vector<Path> paths = {Path::masked_mha, Path::dense_mha, Path::dense_mha, Path::sparse_mqa};
    MlaLimits lim;
    lim.mqa_chunk_bytes = 300 * (kHeads * (576 + 512) * 2 + (s.width + 1) * 4) + 1000;  // several steps (+ each query's key-set list)
    const MlaSchedule with = schedule_mla(s, kCuQ, kCuK, paths, lim), without = schedule_mla(jit, kCuQ, kCuK, paths, lim);
    REQUIRE(with.steps.size() == without.steps.size());
    REQUIRE(with.steps.size() > 2);
    CHECK(with.workspace_bytes == without.workspace_bytes + kSaved);
    // Where a step's first buffer starts (offset 0: the buffer is not used).
    auto first_buffer = [](const MlaStepLayout& l) {
        auto at = [&](size_t off) { return off ? off : l.end; };
        return std::min({at(l.kv_up), at(l.kv_pack), at(l.q_mqa)});
    };
    for (size_t i = 0; i < with.steps.size(); ++i) {
        const MlaStepLayout a = step_layout(s, with.steps[i]), b = step_layout(jit, without.steps[i]);
        INFO("step " << i);
        CHECK(a.end == b.end + kSaved);
        // The first buffer of a step starts right at the scratch's end (kGemmWorkspaceBytes is 256-aligned).
        CHECK(first_buffer(a) == kGemmWorkspaceBytes);
        CHECK(first_buffer(b) == 256);
    }
    check_cover(jit, kCuQ, kCuK, without, lim);
    // The size query takes it from the handle (c_api.cpp passes GemmRunner::scratch_bytes()).
    const mlajit_mla_prefill_args a = good_args();
    CHECK(mla_prefill_workspace_size("NVIDIA H200", a, 0, kGemmWorkspaceBytes) ==
          mla_prefill_workspace_size("NVIDIA H200", a, 0, 0) + kSaved);
}

TEST_CASE("mla_prefill: paths follow the rules and the forced path") {
    const MlaShapes s = check_mla_args(good_args(), true);
    auto auto_paths = plan_mla_paths("", s, kCuQ, kCuK, -1);
    REQUIRE(auto_paths.size() == 4);
    CHECK(auto_paths[0] == Path::dense_mha);  // s_k 150 <= topk 2048
    CHECK(auto_paths[1] == Path::dense_mha);  // s_k 650
    CHECK(auto_paths[3] != Path::dense_mha);  // s_k 9000 > topk: masked MHA or sparse MQA
    for (int f : {MLAJIT_PATH_MASKED_MHA, MLAJIT_PATH_SPARSE_MQA}) {
        auto p = plan_mla_paths("", s, kCuQ, kCuK, f);
        for (size_t r = 0; r < p.size(); ++r)
            if (r != 2) CHECK(int(p[r]) == f);  // request 2 has no queries
    }
    auto m = invalid([&] { plan_mla_paths("", s, kCuQ, kCuK, MLAJIT_PATH_DENSE_MHA); });
    CHECK(has(m, "request 3"));
    CHECK(has(m, "masked_mha"));
    const int32_t short_k[] = {0, 150, 800, 900, 2000};
    auto dense = plan_mla_paths("", s, kCuQ, short_k, MLAJIT_PATH_DENSE_MHA);
    CHECK(dense[3] == Path::dense_mha);
}

TEST_CASE("mla_prefill: topk is the model's, not the index width; any width is accepted") {
    // An engine whose model has top-k 200 pads its index rows to 256 with -1: the dense shortcut must use
    // 200, so a request with 250 keys (> 200, < 256) is never planned dense.
    const int32_t cu_q[] = {0, 250, 251};
    const int32_t cu_k[] = {0, 250, 450};
    auto a = good_args();
    a.q_nope.shape[0] = a.q_pe.shape[0] = a.out.shape[0] = 251;
    a.kv_c.shape[0] = a.k_pe.shape[0] = 450;
    a.cu_seqlens_q = t(fake(7), MLAJIT_INT32, {3});
    a.cu_seqlens_k = t(fake(8), MLAJIT_INT32, {3});
    a.cu_seqlens_q_host = cu_q;
    a.cu_seqlens_k_host = cu_k;
    for (int64_t width : {1, 7, 200, 256, 2053}) {
        INFO("width " << width);
        a.indices = t(fake(6), MLAJIT_INT32, {251, width});
        a.topk = 0;
        MlaShapes s = check_mla_args(a, true);
        CHECK(s.width == width);
        CHECK(s.topk == width);  // 0 = the width
        a.topk = 200;
        s = check_mla_args(a, true);
        CHECK(s.width == width);
        CHECK(s.topk == 200);
        const auto paths = plan_mla_paths("NVIDIA H200", s, cu_q, cu_k, -1);
        CHECK(paths[0] != Path::dense_mha);  // s_k 250 > topk 200, whatever the width
        CHECK(paths[1] == Path::dense_mha);  // s_k 200 <= topk 200: exact
        auto m = invalid([&] { plan_mla_paths("NVIDIA H200", s, cu_q, cu_k, MLAJIT_PATH_DENSE_MHA); });
        CHECK(has(m, "exceeds topk 200"));
    }
    a.indices = t(fake(6), MLAJIT_INT32, {251, 256});
    a.topk = 256;  // every prefix fits: dense is exact and planned
    const MlaShapes s = check_mla_args(a, true);
    const int32_t cu_k_short[] = {0, 250, 500};
    a.cu_seqlens_k_host = cu_k_short;
    a.kv_c.shape[0] = a.k_pe.shape[0] = 500;
    CHECK(plan_mla_paths("NVIDIA H200", check_mla_args(a, true), cu_q, cu_k_short, -1)[0] == Path::dense_mha);
    (void)s;
}

TEST_CASE("mla_prefill: the paged latent cache (kv_cache + block_table) is checked and scheduled") {
    auto a = good_args();
    a.kv_c = mlajit_tensor{};
    a.k_pe = mlajit_tensor{};
    // 9900 keys in the longest request: 9000 positions need ceil(9000 / 64) = 141 pages.
    a.kv_cache = t(fake(30), MLAJIT_BF16, {600, 64, 576});
    a.block_table = t(fake(31), MLAJIT_INT32, {4, 141});
    MlaShapes s = check_mla_args(a, true);
    CHECK(s.paged);
    CHECK_FALSE(s.kv_packed);
    CHECK(s.total_k == 9900);
    CHECK(s.block_size == 64);
    CHECK(s.num_blocks == 600);
    CHECK(s.max_blocks == 141);
    // Every step that reads latent rows gets a gathered buffer of its keys.
    const std::vector<Path> paths = {Path::dense_mha, Path::masked_mha, Path::masked_mha, Path::sparse_mqa};
    const MlaSchedule sch = schedule_mla(s, kCuQ, kCuK, paths);
    for (const MlaStep& st : sch.steps) {
        const MlaStepLayout l = step_layout(s, st);
        if (st.path == Path::sparse_mqa) CHECK((l.kv_pack > 0) == st.chunk);  // pages read in place, gathered for chunks
        else CHECK(l.kv_gather > 0);
        CHECK(l.kpe == 0);
        CHECK(l.end <= sch.workspace_bytes);
    }
    // The Hopper GEMM gathering inside the up-projection (paged_fused): MHA steps keep only their keys' k_pe
    // rows [tk, 64] instead of the full rows [tk, 576]; sparse MQA steps are unchanged; the call needs less.
    // By head count (GemmRunner::fused_paged_max_heads(): kFusedPagedAutoMaxHeads by default on the Hopper tier).
    CHECK(mla_paged_fused(s, s.heads));
    CHECK_FALSE(mla_paged_fused(s, s.heads - 1));
    CHECK_FALSE(mla_paged_fused(s, 0));
    CHECK(fused_paged_max_heads(Arch::parse("sm_80")) == 0);  // the Hopper tier's kernel only
    MlaShapes f8 = s;
    f8.kv_fp8 = true;
    CHECK_FALSE(mla_paged_fused(f8, s.heads));  // the FP8 cache keeps its dequantizing gather
    MlaShapes f = s;
    f.paged_fused = true;
    const MlaSchedule fsch = schedule_mla(f, kCuQ, kCuK, paths);
    REQUIRE(fsch.steps.size() == sch.steps.size());
    for (size_t i = 0; i < sch.steps.size(); ++i) {
        const MlaStep& st = fsch.steps[i];
        const MlaStepLayout l = step_layout(f, st), old = step_layout(s, st);
        if (st.path == Path::sparse_mqa) {
            CHECK(l.end == old.end);
            continue;
        }
        CHECK(l.kv_gather == 0);
        CHECK(l.kpe > 0);
        const size_t tk = size_t(st.k1 - st.k0);
        CHECK(old.end - l.end >= tk * (576 - 64) * 2 - 512);  // 256-byte alignment of the buffers
        CHECK(l.end <= fsch.workspace_bytes);
    }
    CHECK(fsch.workspace_bytes <= sch.workspace_bytes);  // the largest step here is the sparse one
    // Too few pages per request for the longest one: named, with the columns it needs.
    a.block_table = t(fake(31), MLAJIT_INT32, {4, 140});
    auto m = invalid([&] { check_mla_args(a, true); });
    CHECK(has(m, "block_table"));
    CHECK(has(m, "141"));
    // One block-table row per request.
    a.block_table = t(fake(31), MLAJIT_INT32, {3, 141});
    CHECK(has(invalid([&] { check_mla_args(a, true); }), "block_table"));
    // Pages must be [num_blocks, block_size, 576] bf16.
    a.block_table = t(fake(31), MLAJIT_INT32, {4, 141});
    a.kv_cache = t(fake(30), MLAJIT_BF16, {600, 64, 656});
    CHECK(has(invalid([&] { check_mla_args(a, true); }), "kv_cache"));
    // The size query takes NULL pointers in the paged form too.
    a.kv_cache = t(nullptr, MLAJIT_BF16, {600, 64, 576});
    a.block_table = t(nullptr, MLAJIT_INT32, {4, 141});
    CHECK(check_mla_args(a, false).paged);
}

TEST_CASE("mla_prefill: consecutive sparse requests run as one batched step") {
    // 64 requests of 64 new tokens over 3000 cached tokens each (16 heads): one step, not 64.
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (int r = 0; r < 64; ++r) {
        cu_q.push_back(cu_q.back() + 64);
        cu_k.push_back(cu_k.back() + 3064);
    }
    MlaShapes s;
    s.heads = 16;
    s.batch = 64;
    s.total_q = cu_q.back();
    s.total_k = cu_k.back();
    s.width = s.topk = 2048;
    s.has_lse = true;
    for (bool packed : {true, false}) {
        s.kv_packed = packed;
        const std::vector<Path> paths(64, Path::sparse_mqa);
        MlaLimits lim;
        auto sch = schedule_mla(s, cu_q.data(), cu_k.data(), paths, lim);
        REQUIRE(sch.steps.size() == 1);
        CHECK_FALSE(sch.steps[0].chunk);
        CHECK(sch.steps[0].r0 == 0);
        CHECK(sch.steps[0].r1 == 64);
        check_cover(s, cu_q.data(), cu_k.data(), sch, lim);
        // A smaller budget splits the run between requests, never inside one.
        lim.mqa_chunk_bytes = size_t(20) * 64 * 16 * (576 + 512) * 2 + (packed ? 0 : size_t(20) * 3064 * 576 * 2);
        sch = schedule_mla(s, cu_q.data(), cu_k.data(), paths, lim);
        CHECK(sch.steps.size() > 1);
        for (const auto& st : sch.steps) CHECK_FALSE(st.chunk);
        check_cover(s, cu_q.data(), cu_k.data(), sch, lim);
    }
}

TEST_CASE("mla_prefill: the chunks of one sparse request find its packed keys where the first chunk put them") {
    // 128 heads, one request of 8192 new tokens: chunks of 3712 queries (the 1 GiB budget), the last one
    // shorter. The first chunk packs (or gathers) the request's latent rows into kv_pack and every later
    // chunk reads them there, so kv_pack's offset must not depend on the chunk's query count (it did before
    // 2026-12-04: the last chunk read stale bytes; seen as call_fp8 vs engine rel L2 0.18 at h128, 8k).
    const int32_t cu_q[] = {0, 8192}, cu_k[] = {0, 8192};
    for (int form = 0; form < 3; ++form) {  // split kv_c / k_pe, paged bf16, paged FP8
        MlaShapes s;
        s.heads = 128;
        s.batch = 1;
        s.total_q = s.total_k = 8192;
        s.width = s.topk = 2048;
        s.has_lse = form == 1;
        s.paged = form > 0;
        s.kv_fp8 = form == 2;
        const std::vector<Path> paths(1, Path::sparse_mqa);
        const MlaSchedule sch = schedule_mla(s, cu_q, cu_k, paths);
        CAPTURE(form);
        REQUIRE(sch.steps.size() >= 3);
        CHECK(sch.steps.back().t1 - sch.steps.back().t0 < sch.steps.front().t1 - sch.steps.front().t0);
        const size_t first = step_layout(s, sch.steps.front()).kv_pack;
        CHECK(first > 0);
        for (const MlaStep& st : sch.steps) {
            CHECK(st.chunk);
            CHECK(step_layout(s, st).kv_pack == first);
        }
    }
}

TEST_CASE("mla schedule: small dense steps run in one launch, with a subset of the step's buffers") {
    // Requests 16/16, 64/128, 1/100 (small), 100/100 (more queries than one MHA block), 19/19 (small).
    const int32_t cu_q[] = {0, 16, 80, 81, 181, 200};
    const int32_t cu_k[] = {0, 16, 144, 244, 344, 363};
    MlaShapes s;
    s.heads = 16;
    s.batch = 5;
    s.total_q = 200;
    s.total_k = 363;
    s.width = s.topk = 2048;
    s.small_max_q = 64;
    s.small_max_keys = 128;
    const std::vector<Path> all_dense(5, Path::dense_mha);
    const MlaSchedule one = schedule_mla(s, cu_q, cu_k, all_dense);
    REQUIRE(one.steps.size() == 1);
    CHECK_FALSE(one.steps[0].small);  // request 3 has 100 queries: the step keeps the GEMM
    const std::vector<Path> split = {Path::dense_mha, Path::dense_mha, Path::dense_mha, Path::masked_mha, Path::dense_mha};
    const MlaSchedule sch = schedule_mla(s, cu_q, cu_k, split);
    REQUIRE(sch.steps.size() == 3);
    CHECK(sch.steps[0].small);
    CHECK_FALSE(sch.steps[1].small);  // masked MHA is never a small step
    CHECK(sch.steps[2].small);
    for (const MlaStep& st : sch.steps) {
        const MlaStepLayout l = step_layout(s, st);
        CHECK(l.end <= sch.workspace_bytes);
        if (!st.small) continue;
        CHECK(l.kv_up > 0);
        CHECK(l.q_pack == 0);  // q is read in place, split or packed
        CHECK(l.kv_gather == 0);
        CHECK(l.kpe == 0);
        MlaStep big = st;
        big.small = false;
        CHECK(step_layout(s, big).end >= l.end);  // so the size query (small steps off) is an upper bound
    }
    MlaShapes off = s;
    off.small_max_keys = 0;
    const MlaSchedule off_sch = schedule_mla(off, cu_q, cu_k, split);
    for (const MlaStep& st : off_sch.steps) CHECK_FALSE(st.small);
    // The workspace query runs with small steps off: the call must need exactly what it said.
    CHECK(sch.workspace_bytes == off_sch.workspace_bytes);
    MlaShapes few_keys = s;
    few_keys.small_max_keys = 100;  // request 1 has 128 keys
    CHECK_FALSE(schedule_mla(few_keys, cu_q, cu_k, split).steps[0].small);
}

TEST_CASE("mla schedule: enable_small_steps takes aligned bf16 inputs only") {
    const Arch hopper = Arch::parse("sm_90a"), ampere = Arch::parse("sm_80");
    mlajit_mla_prefill_args a = good_args();
    MlaShapes s = check_mla_args(a, true);
    enable_small_steps(s, hopper, a);
    CHECK(s.small_max_q == mha_up_spec(hopper).p[0]);
    CHECK(s.small_max_q == 64);
    CHECK(s.small_max_keys == 64);
    enable_small_steps(s, ampere, a);
    CHECK(s.small_max_q == mha_up_spec(ampere).p[0]);
    CHECK(mha_up_spec(ampere).p[8] == 1);
    CHECK(mha_up_spec(hopper).family == Family::mha_fwd);  // the portable kernel on Hopper too
    // Rows off 16 bytes: the kernel's 16-byte copies cannot read them. check_mla_args refuses most such
    // inputs itself; whatever it accepts must keep the separate up-projection.
    auto unaligned = [&](auto mutate) {
        mlajit_mla_prefill_args b = a;
        mutate(b);
        MlaShapes sb;
        try {
            sb = check_mla_args(b, true);
        } catch (const Error&) {
            return true;  // refused before any schedule
        }
        enable_small_steps(sb, hopper, b);
        return sb.small_max_keys == 0;
    };
    CHECK(unaligned([](mlajit_mla_prefill_args& b) { b.kv_c.data = static_cast<char*>(b.kv_c.data) + 2; }));
    CHECK(unaligned([](mlajit_mla_prefill_args& b) { b.k_pe.data = static_cast<char*>(b.k_pe.data) + 8; }));
    CHECK(unaligned([](mlajit_mla_prefill_args& b) {
        b.q_pe.stride[1] = 68;  // a head stride that is not a multiple of 8 elements
        b.q_pe.stride[0] = 68 * kHeads;
    }));
    CHECK(unaligned([](mlajit_mla_prefill_args& b) { b.w_kv_b.stride[0] = 516; }));
}

TEST_CASE("mla schedule: small dense steps on the FP8 cache (the kernel dequantizes the pages' rows)") {
    const Arch hopper = Arch::parse("sm_90a");
    mlajit_mla_prefill_args a = good_args();
    a.kv_c = a.k_pe = mlajit_tensor{};
    a.kv_cache = t(fake(10), MLAJIT_UINT8, {600, 64, 656});
    a.block_table = t(fake(11), MLAJIT_INT32, {4, 160});
    MlaShapes s = check_mla_args(a, true);
    REQUIRE(s.kv_fp8);
    enable_small_steps(s, hopper, a);
    CHECK(s.small_max_keys == 64);
    CHECK(mha_up_spec(hopper, true).p[8] == 2);
    CHECK(mha_up_spec(hopper, true) != mha_up_spec(hopper, false));  // its own kernel and cache key
    // Page rows off 16 bytes (a byte stride the 16-byte copies of k_pe cannot follow): the gather path stays.
    mlajit_mla_prefill_args b = a;
    b.kv_cache.stride[1] = 664;
    b.kv_cache.stride[0] = 664 * 64;
    MlaShapes sb;
    bool refused = false;
    try {
        sb = check_mla_args(b, true);
    } catch (const Error&) {
        refused = true;
    }
    if (!refused) {
        enable_small_steps(sb, hopper, b);
        CHECK(sb.small_max_keys == 0);
    }
}
