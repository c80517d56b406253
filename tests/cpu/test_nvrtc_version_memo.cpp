// NVRTC's version without loading NVRTC (issue 15): the prediction of the file dlopen would map agrees
// with what dlopen then maps, the build id is read from ELF headers alone, and the cache root's record
// round-trips and survives damage. A wrong answer here would serve a kernel built by another NVRTC, so the
// prediction is checked against the real loader on this machine's own NVRTC.
#include <doctest/doctest.h>

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cuda/dynlib.h"
#include "jit/nvrtc_api.h"
#include "jit/nvrtc_version_memo.h"
#include "support/temp_dir.h"

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
    CHECK_FALSE(predict_dlopen_file({"libmlajit-predict-test.so"}, ":" + dir.path.string()).has_value());
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
