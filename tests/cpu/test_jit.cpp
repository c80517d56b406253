// The JIT pipeline without a GPU: real kernel templates compile to sm_80 and sm_90a cubins, a broken
// template fails with its log, cache keys change with exactly what changes the binary, and the no-driver
// path gives its clear error.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "config/env.h"
#include "cuda/driver_api.h"
#include "jit/compiler.h"
#include "jit/kernel_store.h"
#include "jit/nvrtc_api.h"
#include "mlajit_abi.h"
#include "ops/kernel_configs.h"
#include "ops/variants.h"
#include "runtime/handle.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

using namespace mlajit;
namespace fs = std::filesystem;

namespace {
PreparedKernel prep(const KernelSpec& s, const KernelFiles& files, std::vector<std::string> flags = {}) {
    return prepare_kernel(s, files, flags, nvrtc_available() ? nvrtc().major : 13, nvrtc_available() ? nvrtc().minor : 0);
}

// A cubin is an ELF file: check the magic, not just "some bytes came back".
bool is_elf(const std::vector<char>& b) { return b.size() > 64 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F'; }
}  // namespace

TEST_CASE("jit: every kernel variant of the model compiles to sm_80 and sm_90a cubins") {
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    auto specs = model_variants(model_preset("deepseek-v3.2"), {1, 8}, {Arch::parse("sm_80"), Arch::parse("sm_90a")});
    CHECK(specs.size() >= 8);
    for (const auto& s : specs) {
        CAPTURE(spec_name(s));
        auto k = prep(s, kernel_files());
        CompileOutput out = compile_kernel(k);
        CHECK(is_elf(out.cubin));
        // Spills would silently cost speed: the kernels are written to have none in the shipped configs.
        const bool no_spills = !std::regex_search(out.log, std::regex("[1-9][0-9]* bytes spill (stores|loads)"));
        CHECK_MESSAGE(no_spills, out.log);
        MESSAGE(fmt::format("{}: {:.0f} ms, {} bytes", spec_name(s), out.compile_ms, out.cubin.size()));
    }
}

TEST_CASE("jit: the keys-as-M sparse MQA kernel on the FP8 cache compiles through NVRTC to its own sm_90a code, without spills") {
    // 768 threads start with 80 registers; its 16 producer warps keep 48 and the math takes 144: a spill here would cost
    // speed silently.
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    const Arch a = Arch::parse("sm_90a");
    const CompileOutput fp8 = compile_kernel(prep(sparse_mqa_spec(a, kMqaHopperTile16, true), kernel_files()));
    const CompileOutput bf16 = compile_kernel(prep(sparse_mqa_spec(a, kMqaHopperTile16, false), kernel_files()));
    CHECK(is_elf(fp8.cubin));
    CHECK(fp8.cubin != bf16.cubin);
    CHECK_MESSAGE(!std::regex_search(fp8.log, std::regex("[1-9][0-9]* bytes spill (stores|loads)")), fp8.log);
}

TEST_CASE("jit: the keys-as-M kernel's persistent grid (PERSIST 1) compiles through NVRTC to its own sm_90a code, without spills") {
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    KernelSpec s = sparse_mqa_spec(Arch::parse("sm_90a"), kMqaHopperTile16, false);
    // On by default (MLAJIT_MQA_PERSIST), so the warmup of a TP8 model (16 heads) builds it.
    KernelSpec want = s;
    want.p[6] = 1;
    const auto tp8 = model_variants(model_preset("deepseek-v3.2"), {8}, {Arch::parse("sm_90a")});
    CHECK(std::find(tp8.begin(), tp8.end(), want) != tp8.end());
    const CompileOutput one_block_a_token = compile_kernel(prep(s, kernel_files()));
    s.p[6] = 1;  // PERSIST
    const CompileOutput persistent = compile_kernel(prep(s, kernel_files()));
    CHECK(is_elf(persistent.cubin));
    CHECK(persistent.cubin != one_block_a_token.cubin);
    CHECK_MESSAGE(!std::regex_search(persistent.log, std::regex("[1-9][0-9]* bytes spill (stores|loads)")), persistent.log);
}

TEST_CASE("jit: the 64-head kernel's persistent grid (PERSIST 1) compiles through NVRTC to its own sm_90a code, without spills") {
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    mlajit::test::ScopedEnv persist64("MLAJIT_MQA_PERSIST64", "1");
    KernelSpec s = sparse_mqa_spec(Arch::parse("sm_90a"), kMqaHopperTile, false);
    KernelSpec want = s;
    want.p[6] = 1;
    // With MLAJIT_MQA_PERSIST64=1 the warmup of the whole model (128 heads) builds it; not by default.
    const auto tp1 = model_variants(model_preset("deepseek-v3.2"), {1}, {Arch::parse("sm_90a")});
    CHECK(std::find(tp1.begin(), tp1.end(), want) != tp1.end());
    persist64.set(nullptr);
    const auto tp1_default = model_variants(model_preset("deepseek-v3.2"), {1}, {Arch::parse("sm_90a")});
    CHECK(std::find(tp1_default.begin(), tp1_default.end(), want) == tp1_default.end());
    const CompileOutput one_block = compile_kernel(prep(s, kernel_files()));
    s.p[6] = 1;  // PERSIST
    const CompileOutput persistent = compile_kernel(prep(s, kernel_files()));
    CHECK(is_elf(persistent.cubin));
    CHECK(persistent.cubin != one_block.cubin);
    CHECK_MESSAGE(!std::regex_search(persistent.log, std::regex("[1-9][0-9]* bytes spill (stores|loads)")), persistent.log);
    // The FP8 cache has no persistent form: the kernel says so at compile time.
    s.p[5] = 1;  // KV_FP8
    CHECK_THROWS(compile_kernel(prep(s, kernel_files())));
}

namespace {
// The smallest loop (a backward branch to a label above it) of a PTX text holding at least `copies` cp.async instructions,
// as its lines; empty when there is none.
std::vector<std::string> smallest_copy_loop(const std::string& ptx, int copies) {
    std::vector<std::string> lines;
    std::istringstream in(ptx);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    std::map<std::string, size_t> labels;
    const std::regex label(R"(^(\$L__BB\d+_\d+):)"), branch(R"(\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);)");
    for (size_t i = 0; i < lines.size(); ++i)
        if (std::smatch m; std::regex_search(lines[i], m, label)) labels[m[1]] = i;
    std::vector<std::string> best;
    for (size_t i = 0; i < lines.size(); ++i) {
        std::smatch m;
        if (!std::regex_search(lines[i], m, branch)) continue;
        auto it = labels.find(m[1]);
        if (it == labels.end() || it->second >= i) continue;
        std::vector<std::string> body(lines.begin() + (long)it->second, lines.begin() + (long)i + 1);
        const auto n = std::count_if(body.begin(), body.end(), [](const std::string& l) { return l.find("cp.async.cg.shared.global") != std::string::npos; });
        if (n >= copies && (best.empty() || body.size() < best.size())) best = std::move(body);
    }
    return best;
}
}  // namespace

TEST_CASE("jit: the persistent grid's gather loop gives cp.async 32-bit shared addresses through NVRTC") {
    // NVRTC keeps shared pointers 64 bits wide (nvcc does not): a destination computed as a pointer costs a 64-bit add and a
    // cvt.u32.u64 per copy, and that made the 16-head persistent kernel 8 % slower through the library than nvcc's code of
    // the same source (H100, docs/PERF.md "Session 34"). The gather loop (4 rows of 3 copies) must carry none of them.
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    mlajit::test::TempDir dir("ptx");  // removed at scope exit, after the variable is restored
    mlajit::test::ScopedEnv dump("MLAJIT_DUMP_DIR", dir.str().c_str());
    KernelSpec s = sparse_mqa_spec(Arch::parse("sm_90a"), kMqaHopperTile16, false);
    s.p[6] = 1;  // PERSIST
    const PreparedKernel k = prep(s, kernel_files());
    const CompileOutput out = compile_kernel(k);
    REQUIRE(is_elf(out.cubin));
    const fs::path ptx_path = dir.path / dump_file_name(k, ".ptx");
    std::ifstream f(ptx_path);
    REQUIRE_MESSAGE(f.good(), "MLAJIT_DUMP_DIR wrote no PTX at " << ptx_path.string());
    const std::string ptx((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto loop = smallest_copy_loop(ptx, 12);
    REQUIRE_MESSAGE(!loop.empty(), "no loop of 12 cp.async copies in the persistent kernel's PTX: if gather_rows changed shape, "
                                   "update this test's count (sparse_mqa/sm90_t.cuh)");
    std::string wide;
    for (const auto& l : loop)
        if (l.find("cvt.u32.u64") != std::string::npos) wide += l + "\n";
    CHECK_MESSAGE(wide.empty(), "the gather loop converts 64-bit shared pointers to addresses (give cp.async a 32-bit address "
                                "made once: mj90::smem_u32 outside the loop, cp_async_16_addr inside):\n" << wide);
}

TEST_CASE("jit: the sparse MQA key-set pre-pass compiles for both width classes and both caches, without spills") {
    REQUIRE_MESSAGE(nvrtc_available(), "NVRTC is needed for this test (CUDA toolkit at /usr/local/cuda)");
    for (const char* arch : {"sm_80", "sm_90a"})
        for (int width : {1, 2048, 2049, mj_mqa_max_width})
            for (bool fp8 : {false, true}) {
                const KernelSpec s = sparse_mqa_compact_spec(Arch::parse(arch), width, fp8);
                CAPTURE(spec_name(s));
                CHECK(s.p[1] >= width);
                const CompileOutput out = compile_kernel(prep(s, kernel_files()));
                CHECK(is_elf(out.cubin));
                CHECK_MESSAGE(!std::regex_search(out.log, std::regex("[1-9][0-9]* bytes spill (stores|loads)")), out.log);
            }
}

TEST_CASE("jit: a broken template fails with the kernel name, options and NVRTC log") {
    REQUIRE(nvrtc_available());
    KernelFiles files = kernel_files();
    files.files["topk_mask/sm80.cuh"] += "\nthis is not CUDA;\n";
    auto k = prep(topk_mask_spec(Arch::parse("sm_80")), files);
    try {
        compile_kernel(k);
        FAIL("a broken template compiled");
    } catch (const Error& e) {
        std::string m = e.what();
        CHECK(e.status() == MLAJIT_ERROR_COMPILE);
        CHECK(m.find("topk_mask[") != std::string::npos);
        CHECK(m.find("--gpu-architecture=sm_80") != std::string::npos);
        CHECK(m.find("topk_mask/sm80.cuh(") != std::string::npos);  // the log points at file(line)
        CHECK(m.find("error") != std::string::npos);
    }
}

TEST_CASE("jit: the cache key changes with source, options, arch, format and NVRTC version, not with the cache path") {
    const KernelFiles& files = kernel_files();
    KernelSpec s80 = mha_spec(Arch::parse("sm_80"), supported_mha_tiles()[0], false);
    auto base = prepare_kernel(s80, files, {}, 13, 0);
    // Same inputs, same key, regardless of where the cache lives (the key never sees a path).
    CHECK(prepare_kernel(s80, files, {}, 13, 0).key == base.key);
    // Arch: sm_90a is not sm_90.
    KernelSpec s90 = s80, s90a = s80;
    s90.arch = Arch::parse("sm_90");
    s90a.arch = Arch::parse("sm_90a");
    CHECK_FALSE(prepare_kernel(s90, files, {}, 13, 0).key == prepare_kernel(s90a, files, {}, 13, 0).key);
    CHECK_FALSE(prepare_kernel(s90a, files, {}, 13, 0).key == base.key);
    // Options (MLAJIT_NVRTC_FLAGS is part of the key).
    CHECK_FALSE(prepare_kernel(s80, files, {"-DX=1"}, 13, 0).key == base.key);
    // NVRTC version changes the key but not the source key (used to find entries when NVRTC is absent).
    auto other_nvrtc = prepare_kernel(s80, files, {}, 12, 8);
    CHECK_FALSE(other_nvrtc.key == base.key);
    CHECK(other_nvrtc.source_key == base.source_key);
    // Spec parameters.
    CHECK_FALSE(prepare_kernel(mha_spec(Arch::parse("sm_80"), supported_mha_tiles()[0], true), files, {}, 13, 0).key == base.key);
    // An included file's text (not only the template's own).
    KernelFiles edited = files;
    edited.files["mlajit_device.cuh"] += "\n// edit\n";
    CHECK_FALSE(prepare_kernel(s80, edited, {}, 13, 0).key == base.key);
    // A file the template does not include does not change its key.
    KernelFiles unrelated = files;
    unrelated.files["sparse_mqa/sm80.cuh"] += "\n// edit\n";
    CHECK(prepare_kernel(s80, unrelated, {}, 13, 0).key == base.key);
    // The format version is hashed first: check it is in the hashed material by construction.
    CHECK(kCacheFormatVersion == DiskCache::kFormatVersion);
}

TEST_CASE("jit: kernel store compiles on a miss, then hits disk in a new process-like store, then memory") {
    REQUIRE(nvrtc_available());
    mlajit::test::TempDir dir("store");
    KernelSpec spec = topk_mask_spec(Arch::parse("sm_90a"));
    KernelStore::Options o;
    o.cache_root = dir.path;
    std::vector<char> first;
    {
        KernelStore st(o);
        auto t0 = std::chrono::steady_clock::now();
        auto c = st.cubin(spec);
        double cold_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        CHECK(c->origin == Cubin::Origin::compiled);
        CHECK(st.stats().compiled == 1);
        first = c->bytes;
        // Memory hit: the hot path of the store (no hashing of source, no I/O).
        const int n = 200000;
        size_t sink = 0;
        auto t1 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) sink += st.cubin(spec)->bytes.size();  // no assertion inside the timed loop
        double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t1).count() / n;
        CHECK(sink == first.size() * n);
        MESSAGE(fmt::format("cold compile+store {:.0f} ms; memory hit {:.0f} ns per lookup", cold_ms, ns));
    }
    {
        KernelStore st(o);
        auto t0 = std::chrono::steady_clock::now();
        auto c = st.cubin(spec);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        CHECK(c->origin == Cubin::Origin::disk);
        CHECK(st.stats().compiled == 0);
        CHECK(c->bytes == first);
        MESSAGE(fmt::format("disk hit (key + load + checksum) {:.2f} ms", ms));
    }
    {
        KernelStore::Options off = o;
        off.offline = true;
        off.cache_root = dir.path / "empty";
        KernelStore st(off);
        try {
            st.cubin(spec);
            FAIL("offline miss did not fail");
        } catch (const Error& e) {
            CHECK(e.status() == MLAJIT_ERROR_CACHE_MISS);
            CHECK(std::string(e.what()).find("mlajit-warmup") != std::string::npos);
        }
    }
}

TEST_CASE("jit: without a driver, launching says so clearly instead of crashing") {
    if (driver_available()) {
        MESSAGE("a GPU driver is present: the no-driver path is not exercised on this machine");
        return;
    }
    try {
        Handle h(0);
        FAIL("a handle was created with no driver");
    } catch (const Error& e) {
        CHECK(e.status() == MLAJIT_ERROR_NO_DRIVER);
        CHECK(std::string(e.what()).find("libcuda.so.1") != std::string::npos);
    }
    mlajit_handle h = nullptr;
    CHECK(mlajit_create(0, &h) == MLAJIT_ERROR_NO_DRIVER);
    CHECK(h == nullptr);
    CHECK(std::string(mlajit_last_error()).find("no CUDA driver") != std::string::npos);
    // An op on a null handle is an argument error, not a crash.
    mlajit_mha_args a = MLAJIT_ARGS_INIT(mlajit_mha_args);
    CHECK(mlajit_mha_prefill(nullptr, &a, nullptr) == MLAJIT_ERROR_INVALID_ARGUMENT);
}
