// The Hopper-tier GEMM without a GPU: every variant the projections can launch compiles for sm_90a with no
// spills and fits the shared memory of one block; the tile choice, the shapes it refuses (those run on
// cuBLASLt) and the variants warmup precompiles.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <regex>

#include "config/env.h"
#include "jit/compiler.h"
#include "jit/kernel_sources.h"
#include "jit/nvrtc_api.h"
#include "ops/gemm_sm90_maps.h"
#include "ops/kernel_configs.h"
#include "ops/variants.h"
#include "support/scoped_env.h"

using namespace mlajit;

namespace {
GemmDesc up_projection(int64_t m, int heads) {
    GemmDesc g;
    g.m = m;
    g.n = heads * 256;
    g.k = 512;
    g.a = {reinterpret_cast<const void*>(uintptr_t(1) << 20), 576, 0, false};
    g.b = {reinterpret_cast<const void*>(uintptr_t(2) << 20), 512, 0, true};
    g.c = reinterpret_cast<void*>(uintptr_t(3) << 20);
    g.ldc = g.n;
    return g;
}
}  // namespace

TEST_CASE("gemm sm90: every projection variant compiles for sm_90a without spills, within one block's shared memory") {
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    std::vector<KernelSpec> specs;
    // Per tile (4): the up/output projection and the query absorption, and the up-projection reading the
    // pages of a paged bf16 cache (A_PAGED = 1: K 512, B K-major): compiled here whatever the environment.
    for (int bm : {128, 64})
        for (int bn : {256, 128}) {
            specs.push_back(gemm_sm90_spec(Arch::parse("sm_90a"), bm, bn, false, 8));
            specs.push_back(gemm_sm90_spec(Arch::parse("sm_90a"), bm, bn, true, 2));
            specs.push_back(gemm_sm90_spec(Arch::parse("sm_90a"), bm, bn, false, 8, true));
        }
    for (const KernelSpec& s : specs) {
        CAPTURE(spec_name(s));
        CHECK(gemm_smem_bytes(s) <= 232448);  // sm_90's opt-in limit per block
        const PreparedKernel k = prepare_kernel(s, kernel_files(), {}, nvrtc().major, nvrtc().minor);
        const CompileOutput out = compile_kernel(k);
        CHECK(out.cubin.size() > 64);
        CHECK_MESSAGE(!std::regex_search(out.log, std::regex("[1-9][0-9]* bytes spill (stores|loads)")), out.log);
    }
}

TEST_CASE("gemm sm90: tile choice: 64-row tiles for short M, 128-column tiles where 256 would leave SMs idle") {
    const int sms = 132;
    GemmSm90Tile t = gemm_sm90_tile(up_projection(8192, 128), sms);
    CHECK(t.block_m == 128);
    CHECK(t.block_n == 256);
    CHECK(t.stages == 3);
    t = gemm_sm90_tile(up_projection(16, 128), sms);  // 128 tiles of 64 x 256: more than half the SMs
    CHECK(t.block_m == 64);
    CHECK(t.block_n == 256);
    t = gemm_sm90_tile(up_projection(16, 16), sms);  // 16 tiles of 256 columns: 128 columns instead
    CHECK(t.block_m == 64);
    CHECK(t.block_n == 128);
    CHECK(t.stages == 8);
    GemmDesc o = up_projection(8192, 1);
    o.n = 128;  // the output projection's N
    CHECK(gemm_sm90_tile(o, sms).block_n == 128);
    CHECK(gemm_sm90_k_tiles(512) == 8);
    CHECK(gemm_sm90_k_tiles(128) == 2);
    CHECK(gemm_sm90_k_tiles(100) == 2);  // rounded up: TMA zero-fills the tail
}

TEST_CASE("gemm sm90: what the kernel cannot read is refused (cuBLASLt runs it), with the reason") {
    GemmDesc g = up_projection(100, 16);
    CHECK(gemm_sm90_refusal(g) == nullptr);
    GemmDesc x = g;
    x.a.data = static_cast<const char*>(x.a.data) + 8;  // 8 bytes off: TMA needs 16
    CHECK(std::string(gemm_sm90_refusal(x)).find("16-byte") != std::string::npos);
    x = g;
    x.a.ld = 577;
    CHECK(std::string(gemm_sm90_refusal(x)).find("multiple of 8") != std::string::npos);
    x = g;
    x.a.transposed = true;
    CHECK(gemm_sm90_refusal(x) != nullptr);
    x = g;
    x.k = 8192;
    CHECK(gemm_sm90_refusal(x) != nullptr);
    x = g;
    x.batch = 4;
    x.a.batch_stride = 0;  // a broadcast A: not a TMA stride
    CHECK(gemm_sm90_refusal(x) != nullptr);
}

TEST_CASE("gemm sm90: warmup's variants hold the projections' GEMM kernels on sm_90a only") {
    const ModelConfig m = model_preset("deepseek-v3.2");
    auto count = [](const std::vector<KernelSpec>& v) {
        return std::count_if(v.begin(), v.end(), [](const KernelSpec& s) { return s.family == Family::gemm_sm90; });
    };
    auto paged = [](const std::vector<KernelSpec>& v) {
        return std::count_if(v.begin(), v.end(), [](const KernelSpec& s) {
            return s.family == Family::gemm_sm90 && s.p[5] == 1 && s.p[4] == 8 && s.p[3] == 0;
        });
    };
    // Per tile: the up/output projection, the query absorption and (by default: the paged up-projection reads
    // the pages up to kFusedPagedAutoMaxHeads heads) the paged-A up-projection. MLAJIT_GEMM=unfused: not the last.
    mlajit::test::ScopedEnv gemm("MLAJIT_GEMM", nullptr);
    const auto by_default = model_variants(m, {1, 8}, {Arch::parse("sm_90a")});
    const auto on_sm80 = count(model_variants(m, {1, 8}, {Arch::parse("sm_80")}));
    gemm.set("unfused");
    const auto unfused = model_variants(m, {1, 8}, {Arch::parse("sm_90a")});
    CHECK(count(by_default) == 12);
    CHECK(paged(by_default) == 4);
    CHECK(count(unfused) == 8);
    CHECK(paged(unfused) == 0);
    CHECK(on_sm80 == 0);
}
