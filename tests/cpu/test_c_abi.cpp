// The C ABI's growth rules (include/mlajit/mlajit.h): struct_size is checked on entry by every call that
// takes an args struct, a shorter (older) struct reads its missing tail as zero, a longer (newer) one is
// accepted only while the fields this library does not know are zero. Also the C warmup entry point.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config/env.h"
#include "mlajit/mlajit.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace {

std::string last() { return mlajit_last_error(); }
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Calls `call` on args of each struct_size case and checks the outcome. A valid struct_size gets past the
// args check and stops at the NULL handle (so nothing is ever launched here).
template <typename Args, typename Call>
void check_struct_size_rules(const char* type, Call call) {
    CAPTURE(type);
    // A buffer larger than the struct, so a "newer caller" can send a longer one.
    std::vector<unsigned char> buf(sizeof(Args) + 64, 0);
    auto* a = reinterpret_cast<Args*>(buf.data());

    a->struct_size = 0;
    CHECK(call(a) == MLAJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(last(), "struct_size is 0"));
    CHECK(has(last(), type));
    CHECK(has(last(), "MLAJIT_ARGS_INIT"));

    a->struct_size = 8;  // only the size field: smaller than anything ever published
    CHECK(call(a) == MLAJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(last(), "less than any published size"));

    a->struct_size = sizeof(Args);
    const mlajit_status exact = call(a);
    CHECK(exact != MLAJIT_OK);
    CHECK_FALSE(has(last(), "struct_size"));  // got past the check: stopped by the NULL handle or values

    a->struct_size = sizeof(Args) + 64;  // a newer header, its new fields left zero: same as exact
    CHECK(call(a) == exact);
    CHECK_FALSE(has(last(), "struct_size"));

    buf[sizeof(Args) + 17] = 1;  // a newer header that sets a field this library does not know
    CHECK(call(a) == MLAJIT_ERROR_UNSUPPORTED);
    CHECK(has(last(), "newer mlajit header"));
    CHECK(has(last(), type));
}

}  // namespace

TEST_CASE("C ABI: every args struct carries its size, checked on entry") {
    check_struct_size_rules<mlajit_sparse_mqa_args>("mlajit_sparse_mqa_args",
                                                    [](auto* a) { return mlajit_sparse_mqa_prefill(nullptr, a, nullptr); });
    check_struct_size_rules<mlajit_mha_args>("mlajit_mha_args", [](auto* a) { return mlajit_mha_prefill(nullptr, a, nullptr); });
    check_struct_size_rules<mlajit_topk_mask_args>("mlajit_topk_mask_args",
                                                   [](auto* a) { return mlajit_topk_mask_build(nullptr, a, nullptr); });
    check_struct_size_rules<mlajit_mla_prefill_args>("mlajit_mla_prefill_args",
                                                     [](auto* a) { return mlajit_mla_prefill(nullptr, a, nullptr); });
    check_struct_size_rules<mlajit_mla_prefill_args>("mlajit_mla_prefill_args", [](auto* a) {
        size_t bytes = 1;
        return mlajit_mla_prefill_workspace_size(nullptr, a, &bytes);
    });
    check_struct_size_rules<mlajit_quantize_latent_cache_args>(
        "mlajit_quantize_latent_cache_args", [](auto* a) { return mlajit_quantize_latent_cache(nullptr, a, nullptr); });
    // Warmup's "exact" case stops at its arch: an invalid one (nothing compiles).
    check_struct_size_rules<mlajit_warmup_args>("mlajit_warmup_args", [](auto* a) {
        a->arch = "sm_8";
        return mlajit_warmup(a);
    });
}

TEST_CASE("C ABI: NULL args and the init macro") {
    CHECK(mlajit_mha_prefill(nullptr, nullptr, nullptr) == MLAJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(last(), "args is NULL"));
    mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
    CHECK(a.struct_size == sizeof(mlajit_mla_prefill_args));
    CHECK(a.topk == 0);
    CHECK(a.kv_cache.data == nullptr);
    CHECK(a.force_path == 0);
    const std::string v = mlajit_version();
    CHECK(v == std::to_string(MLAJIT_VERSION_MAJOR) + "." + std::to_string(MLAJIT_VERSION_MINOR) + "." +
                   std::to_string(MLAJIT_VERSION_PATCH));
}

TEST_CASE("C ABI: mlajit_warmup compiles a model's kernels for an arch with no GPU, then finds them cached") {
    mlajit::test::TempDir dir("abi-warmup");
    mlajit::test::ScopedEnv cache("MLAJIT_CACHE_DIR", dir.str().c_str());
    mlajit_warmup_args w = MLAJIT_ARGS_INIT(mlajit_warmup_args);
    const int tp[] = {1};
    int compiled = -1, cached = -1;
    w.arch = "sm_80";
    w.heads = 16;  // DeepSeek-V3.2's dims at TP8: 5 kernels (mask, gather, MHA dense/masked, sparse MQA)
    w.tp_degrees = tp;
    w.n_tp = 1;
    w.compiled = &compiled;
    w.cached = &cached;
    REQUIRE_MESSAGE(mlajit_warmup(&w) == MLAJIT_OK, last());
    CHECK(compiled + cached >= 4);
    const int total = compiled + cached;
    REQUIRE_MESSAGE(mlajit_warmup(&w) == MLAJIT_OK, last());
    CHECK(compiled == 0);
    CHECK(cached == total);

    w.tp_degrees = nullptr;
    w.n_tp = 2;
    CHECK(mlajit_warmup(&w) == MLAJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(last(), "tp_degrees is NULL"));
    const int bad_tp[] = {3};
    w.tp_degrees = bad_tp;
    w.n_tp = 1;
    CHECK(mlajit_warmup(&w) == MLAJIT_ERROR_INVALID_ARGUMENT);
    CHECK(has(last(), "does not divide"));
    // Archs NVRTC cannot target are refused before any compile (UNSUPPORTED, not a COMPILE error): an
    // unknown number, and a suffix on an arch that has none (the validation fuzz drew sm_88a).
    w.tp_degrees = tp;
    for (const char* arch : {"sm_7777", "sm_88a", "sm_80a", "sm_90f"}) {
        CAPTURE(arch);
        w.arch = arch;
        CHECK(mlajit_warmup(&w) == MLAJIT_ERROR_UNSUPPORTED);
        CHECK(has(last(), arch));
    }
}
