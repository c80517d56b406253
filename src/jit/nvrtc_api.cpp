#include "jit/nvrtc_api.h"

#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "config/env.h"
#include "cuda/dynlib.h"

namespace mlajit {

namespace {

#define MLAJIT_STR2(x) #x
#define MLAJIT_STR(x) MLAJIT_STR2(x)

struct NvrtcState {
    std::unique_ptr<DynLib> lib;
    NvrtcApi api;
    std::string error;
};

NvrtcState load_nvrtc() {
    NvrtcState s;
    const auto candidates =
        toolkit_library_candidates(config().nvrtc_lib, {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"});
    s.lib = std::make_unique<DynLib>(candidates);
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
    log().debug("NVRTC {}.{} loaded from {}", s.api.major, s.api.minor, s.lib->path());
    return s;
}

NvrtcState& state() {
    static NvrtcState s = load_nvrtc();
    return s;
}

}  // namespace

bool nvrtc_available() { return state().error.empty(); }

const NvrtcApi& nvrtc() {
    auto& s = state();
    if (!s.error.empty()) throw Error(MLAJIT_ERROR_NO_NVRTC, s.error);
    return s.api;
}

}  // namespace mlajit
