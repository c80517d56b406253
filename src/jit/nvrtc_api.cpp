#include "jit/nvrtc_api.h"

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "common/error.h"
#include "common/log.h"
#include "config/env.h"
#include "cuda/dynlib.h"
#include "runtime/startup_times.h"

namespace mlajit {

namespace {

#define MLAJIT_STR2(x) #x
#define MLAJIT_STR(x) MLAJIT_STR2(x)

struct NvrtcState {
    std::unique_ptr<DynLib> lib;
    NvrtcApi api;
    std::string error;
};

std::atomic<bool> g_loaded{false};

NvrtcState load_nvrtc() {
    NvrtcState s;
    s.lib = std::make_unique<DynLib>(nvrtc_candidates());
    if (!s.lib->loaded()) {
        s.error = fmt::format(
            "NVRTC (libnvrtc.so, the run-time CUDA compiler) is missing, and this kernel is not in the cache, so "
            "it cannot be compiled. Install it: `pip install nvidia-cuda-nvrtc` (CUDA 13; nvidia-cuda-nvrtc-cu12 "
            "for a CUDA 12 driver) or the CUDA toolkit's NVRTC; or set MLAJIT_NVRTC_LIB to libnvrtc.so's path; "
            "or ship a prebuilt kernel cache (mlajit-warmup export/import). mlajit {}; dlopen said: {}",
            toolkit_library_search_text("MLAJIT_NVRTC_LIB"), s.lib->error());
        return s;
    }
    std::string missing;
#define MLAJIT_LOAD_FIELD(fn)                                                                         \
    s.api.fn = reinterpret_cast<decltype(s.api.fn)>(s.lib->symbol(MLAJIT_STR(fn)));                   \
    if (!s.api.fn) missing += std::string(missing.empty() ? "" : ", ") + MLAJIT_STR(fn);
    MLAJIT_NVRTC_FUNCS(MLAJIT_LOAD_FIELD)
#undef MLAJIT_LOAD_FIELD
    if (!missing.empty()) {
        s.error = fmt::format("NVRTC at {} lacks {}: mlajit needs NVRTC from CUDA 12.0 or newer", s.lib->path(), missing);
        return s;
    }
    s.api.library_path = s.lib->path();
    s.api.nvrtcVersion(&s.api.major, &s.api.minor);
    s.api.build_id = elf_build_id(s.lib->loaded_file()).value_or("");
    g_loaded = true;
    log().debug("NVRTC {}.{} loaded from {}", s.api.major, s.api.minor, s.lib->path());
    return s;
}

NvrtcState& state() {
    static NvrtcState s = [] {
        StartupTimer t(StartupStep::nvrtc_load);
        return load_nvrtc();
    }();
    return s;
}

}  // namespace

bool nvrtc_available() { return state().error.empty(); }

bool nvrtc_loaded() { return g_loaded.load(); }

std::vector<std::string> nvrtc_candidates() {
    return toolkit_library_candidates(config().nvrtc_lib, {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"});
}

std::optional<NvrtcVersion> nvrtc_version_without_loading(const std::filesystem::path& cache_root) {
    static std::mutex m;
    static std::map<std::filesystem::path, std::optional<NvrtcVersion>> known;  // per root, once per process
    std::lock_guard lock(m);
    auto it = known.find(cache_root);
    if (it != known.end()) return it->second;
    std::optional<NvrtcVersion> v;
    if (auto file = predict_dlopen_file(nvrtc_candidates()))
        if (auto id = elf_build_id(*file)) v = nvrtc_memo_lookup(cache_root, *id);
    if (v) log().debug("NVRTC {}.{} (not loaded: its build id is in {}'s record)", v->major, v->minor, cache_root.string());
    known.emplace(cache_root, v);
    return v;
}

void remember_nvrtc_version(const std::filesystem::path& cache_root) {
    if (!nvrtc_loaded()) return;
    static std::mutex m;
    static std::map<std::filesystem::path, bool> done;  // once per root and process: a JSON read, not per kernel
    std::lock_guard lock(m);
    if (!done.emplace(cache_root, true).second) return;
    const NvrtcApi& nv = nvrtc();
    if (nv.build_id.empty()) return;
    const NvrtcVersion v{nv.major, nv.minor};
    if (nvrtc_memo_lookup(cache_root, nv.build_id) == std::optional<NvrtcVersion>(v)) return;
    nvrtc_memo_record(cache_root, nv.build_id, v);
}

const NvrtcApi& nvrtc() {
    auto& s = state();
    if (!s.error.empty()) throw Error(MLAJIT_ERROR_NO_NVRTC, s.error);
    return s.api;
}

}  // namespace mlajit
