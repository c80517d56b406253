// Where the CUDA toolkit libraries are looked for: NVIDIA's PyPI packages beside a pip-installed mlajit
// (site-packages/nvidia/<sub>/lib), only files that exist, in a stable order, before the loader path.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "cuda/dynlib.h"

namespace fs = std::filesystem;
using namespace mlajit;

namespace {

struct TempTree {
    fs::path root;
    TempTree() {
        std::random_device rd;
        root = fs::temp_directory_path() / ("mlajit-dynlib-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
        fs::create_directories(root);
    }
    ~TempTree() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    void touch(const fs::path& rel) {
        fs::create_directories((root / rel).parent_path());
        std::ofstream(root / rel) << "x";
    }
};

}  // namespace

TEST_CASE("wheel layout: nvidia/*/lib two levels above the library's folder, existing files only") {
    TempTree t;
    t.touch("site-packages/mlajit/lib/libmlajit.so");
    t.touch("site-packages/nvidia/cu13/lib/libnvrtc.so.13");
    t.touch("site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    t.touch("site-packages/nvidia/cu13/lib/libcublasLt.so.13");
    const auto own = (t.root / "site-packages/mlajit/lib").string();

    const auto nvrtc = wheel_library_candidates_near(own, {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"});
    REQUIRE(nvrtc.size() == 2);
    // CUDA 13's consolidated folder first, then the CUDA 12 package's.
    CHECK(nvrtc[0] == (t.root / "site-packages/nvidia/cu13/lib/libnvrtc.so.13").string());
    CHECK(nvrtc[1] == (t.root / "site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12").string());

    const auto lt = wheel_library_candidates_near(own, {"libcublasLt.so", "libcublasLt.so.13", "libcublasLt.so.12"});
    REQUIRE(lt.size() == 1);
    CHECK(lt[0] == (t.root / "site-packages/nvidia/cu13/lib/libcublasLt.so.13").string());

    // The warmup CLI's folder (site-packages/mlajit/bin) finds the same files.
    CHECK(wheel_library_candidates_near((t.root / "site-packages/mlajit/bin").string(), {"libnvrtc.so.13"}).size() == 1);
}

TEST_CASE("no nvidia packages nearby: no wheel candidates, and the loader-path names still come after") {
    TempTree t;
    t.touch("prefix/lib/libmlajit.so");
    CHECK(wheel_library_candidates_near((t.root / "prefix/lib").string(), {"libnvrtc.so.13"}).empty());
    const auto all = toolkit_library_candidates(std::string("/explicit/libnvrtc.so"), {"libnvrtc.so.13"});
    REQUIRE(all.size() >= 3);
    CHECK(all.front() == "/explicit/libnvrtc.so");
    CHECK(std::find(all.begin(), all.end(), std::string("libnvrtc.so.13")) != all.end());
    CHECK(all.back() == "/usr/local/cuda/lib64/libnvrtc.so.13");
}

TEST_CASE("own_object_directory names an existing folder") {
    const auto d = own_object_directory();
    REQUIRE(d.has_value());
    CHECK(fs::is_directory(*d));
}
