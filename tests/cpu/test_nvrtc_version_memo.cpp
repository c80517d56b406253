// NVRTC's version without loading NVRTC (issue 15): the prediction of the file dlopen would map agrees
// with what dlopen then maps, the build id is read from ELF headers alone, and the cache root's record
// round-trips and survives damage. A wrong answer here would serve a kernel built by another NVRTC, so the
// prediction is checked against the real loader on this machine's own NVRTC.
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spawn.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cuda/dynlib.h"
#include "jit/kernel_store.h"
#include "jit/nvrtc_api.h"
#include "jit/nvrtc_version_memo.h"
#include "ops/kernel_configs.h"
#include "support/temp_dir.h"

extern char** environ;

using namespace mlajit;
using mlajit::test::TempDir;
namespace fs = std::filesystem;

TEST_CASE("nvrtc memo: the loader cache lookup names the libc this process mapped") {
    const auto path = ld_so_cache_lookup("/etc/ld.so.cache", "libc.so.6");
    REQUIRE(path.has_value());
    REQUIRE_FALSE(path->empty());
    Dl_info info{};
    REQUIRE(dladdr(reinterpret_cast<void*>(&std::fopen), &info));
    CHECK(fs::canonical(*path) == fs::canonical(info.dli_fname));
    CHECK(ld_so_cache_lookup("/etc/ld.so.cache", "libno-such-library-mlajit.so.7") == std::optional<std::string>(""));
    CHECK_FALSE(ld_so_cache_lookup("/nonexistent/ld.so.cache", "libc.so.6").has_value());
}

TEST_CASE("nvrtc memo: build ids come from ELF headers; other files have none") {
    const auto own = elf_build_id("/proc/self/exe");
    if (own) CHECK(own->size() >= 16);  // GNU ld and lld write 20-byte (sha1) ids by default
    TempDir dir;
    {
        std::ofstream(dir.path / "not_elf") << "just text, no ELF header";
    }
    CHECK_FALSE(elf_build_id((dir.path / "not_elf").string()).has_value());
    CHECK_FALSE(elf_build_id((dir.path / "missing").string()).has_value());
}

TEST_CASE("nvrtc memo: prediction of absolute and LD_LIBRARY_PATH candidates, refusals") {
    TempDir dir;
    const fs::path lib = dir.path / "libmlajit-predict-test.so";
    std::ofstream(lib) << "x";
    // An absolute candidate that exists is what dlopen tries first; a missing one is skipped.
    CHECK(predict_dlopen_file({(dir.path / "missing.so").string(), lib.string()}, std::string(""))
          == std::optional<std::string>(fs::canonical(lib).string()));
    // A bare name in an LD_LIBRARY_PATH folder (nullopt is allowed only where the binary carries RUNPATH).
    const auto p = predict_dlopen_file({"libmlajit-predict-test.so"}, dir.path.string());
    if (p) CHECK(*p == fs::canonical(lib).string());
    // An empty LD_LIBRARY_PATH entry (the current folder) and hwcaps subfolders are not followed.
    // (Appended, not `":" + string`: GCC 12 at -O3 flags that operator+'s insert with -Wstringop-overflow.)
    std::string empty_first = ":";
    empty_first += dir.path.string();
    CHECK_FALSE(predict_dlopen_file({"libmlajit-predict-test.so"}, empty_first).has_value());
    fs::create_directories(dir.path / "glibc-hwcaps");
    CHECK_FALSE(predict_dlopen_file({"libmlajit-predict-test.so"}, dir.path.string()).has_value());
    // A library already in the process: not predicted (loading it again is free).
    CHECK_FALSE(predict_dlopen_file({"libc.so.6"}).has_value());
}

TEST_CASE("nvrtc memo: the prediction for NVRTC's candidates is the file dlopen then maps") {
    // In a child: this test process may have loaded NVRTC already (other suites compile).
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const auto candidates = nvrtc_candidates();
        const auto predicted = predict_dlopen_file(candidates);
        DynLib lib(candidates);
        if (!lib.loaded()) _exit(predicted ? 1 : 0);  // no NVRTC here: nothing may be predicted
        if (!predicted) _exit(3);                      // refused (allowed; reported below)
        _exit(*predicted == lib.loaded_file() ? 0 : 2);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    const int code = WEXITSTATUS(status);
    CHECK_MESSAGE(code != 1, "a file was predicted where dlopen loads nothing");
    CHECK_MESSAGE(code != 2, "the predicted NVRTC file differs from the one dlopen mapped");
    if (code == 3) MESSAGE("the prediction refused on this machine (RPATH/RUNPATH or hwcaps): NVRTC is loaded instead");
}

TEST_CASE("nvrtc memo: the record round-trips, keeps other builds, and survives damage") {
    TempDir dir;
    CHECK_FALSE(nvrtc_memo_lookup(dir.path, "abc").has_value());
    REQUIRE(nvrtc_memo_record(dir.path, "abc", {13, 0}));
    REQUIRE(nvrtc_memo_record(dir.path, "def", {12, 9}));
    CHECK(nvrtc_memo_lookup(dir.path, "abc") == std::optional<NvrtcVersion>(NvrtcVersion{13, 0}));
    CHECK(nvrtc_memo_lookup(dir.path, "def") == std::optional<NvrtcVersion>(NvrtcVersion{12, 9}));
    {
        std::ofstream(dir.path / "nvrtc-versions.json", std::ios::trunc) << "{\"abc\": {\"major\": 13, \"min";
    }
    CHECK_FALSE(nvrtc_memo_lookup(dir.path, "abc").has_value());  // damaged: unknown, NVRTC is loaded
    REQUIRE(nvrtc_memo_record(dir.path, "abc", {13, 1}));       // and the next load rewrites it
    CHECK(nvrtc_memo_lookup(dir.path, "abc") == std::optional<NvrtcVersion>(NvrtcVersion{13, 1}));
    {
        std::ofstream(dir.path / "nvrtc-versions.json", std::ios::trunc) << "{\"abc\": {\"major\": \"13\", \"minor\": 0}}";
    }
    CHECK_FALSE(nvrtc_memo_lookup(dir.path, "abc").has_value());  // wrong types: unknown
    size_t leftovers = 0;
    for (auto& e : fs::directory_iterator(dir.path)) leftovers += e.path().filename().string() != "nvrtc-versions.json";
    CHECK(leftovers == 0);  // no temporary files left behind
}

namespace {
// Runs this test binary again, on one test case, with extra environment: a fresh process, NVRTC unloaded.
int rerun_self(const std::string& test_case, const std::vector<std::string>& extra_env) {
    const std::string exe = fs::read_symlink("/proc/self/exe").string();
    std::vector<std::string> args{exe, "--test-case=" + test_case, "--no-version"}, envs;
    for (char** e = environ; *e; ++e) envs.emplace_back(*e);
    envs.insert(envs.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}
}  // namespace

// The child half of the next test: only does something when the parent set MLAJIT_MEMO_TEST_ROOT.
TEST_CASE("nvrtc memo (child): a cubin from the warm cache, NVRTC loaded or not as the parent expects") {
    const char* root = std::getenv("MLAJIT_MEMO_TEST_ROOT");
    if (!root) return;
    const bool expect_load = std::getenv("MLAJIT_MEMO_TEST_EXPECT_LOAD") != nullptr;
    REQUIRE_FALSE(nvrtc_loaded());
    KernelStore::Options o;
    o.cache_root = root;
    KernelStore st(o);
    auto c = st.cubin(topk_mask_spec(Arch::parse("sm_90a")));
    CHECK(c->origin == Cubin::Origin::disk);
    CHECK(st.stats().compiled == 0);
    CHECK(nvrtc_loaded() == expect_load);
}

TEST_CASE("nvrtc memo: a warm cache is served without loading NVRTC; a wrong record only costs the load") {
    if (std::getenv("MLAJIT_MEMO_TEST_ROOT")) return;  // in the child
    REQUIRE(nvrtc_available());
    TempDir dir;
    {
        KernelStore::Options o;
        o.cache_root = dir.path;
        KernelStore st(o);
        REQUIRE(st.cubin(topk_mask_spec(Arch::parse("sm_90a"))) != nullptr);  // compiles (or loads): NVRTC is loaded, recorded
    }
    const NvrtcApi& nv = nvrtc();
    REQUIRE_FALSE(nv.build_id.empty());
    CHECK(nvrtc_memo_lookup(dir.path, nv.build_id) == std::optional<NvrtcVersion>(NvrtcVersion{nv.major, nv.minor}));
    const std::string root = "MLAJIT_MEMO_TEST_ROOT=" + dir.path.string();
    const bool predictable = predict_dlopen_file(nvrtc_candidates()).has_value() || nvrtc_loaded();
    if (!predictable) MESSAGE("the loader's choice is not predictable here (RUNPATH/hwcaps): only the fallback is tested");
    const char* child = "nvrtc memo (child)*";
    // The record is right: the child finds the entry without NVRTC (where the prediction works).
    if (predictable) CHECK(rerun_self(child, {root}) == 0);
    // The record says another version: the key misses, the child loads NVRTC and finds the entry anyway.
    REQUIRE(nvrtc_memo_record(dir.path, nv.build_id, {nv.major + 7, 0}));
    CHECK(rerun_self(child, {root, "MLAJIT_MEMO_TEST_EXPECT_LOAD=1"}) == 0);
    // ... and put the right version back (a load records what it found only when the build id is absent
    // or differs: here it differed).
    CHECK(nvrtc_memo_lookup(dir.path, nv.build_id) == std::optional<NvrtcVersion>(NvrtcVersion{nv.major, nv.minor}));
    // No record at all: the same fallback.
    fs::remove(dir.path / "nvrtc-versions.json");
    CHECK(rerun_self(child, {root, "MLAJIT_MEMO_TEST_EXPECT_LOAD=1"}) == 0);
}
