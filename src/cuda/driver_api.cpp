#include "cuda/driver_api.h"

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

struct DriverState {
    std::unique_ptr<DynLib> lib;
    DriverApi api;
    std::string error;  // why the driver is unusable; empty when usable
};

DriverState load_driver() {
    DriverState s;
    std::vector<std::string> candidates;
    if (config().cuda_lib) candidates.push_back(*config().cuda_lib);
    candidates.push_back("libcuda.so.1");
    candidates.push_back("libcuda.so");
    s.lib = std::make_unique<DynLib>(candidates);
    if (!s.lib->loaded()) {
        s.error = fmt::format(
            "no CUDA driver found (dlopen: {}). Kernels can still be compiled and cached (mlajit-warmup --arch "
            "sm_90a), but running them needs an NVIDIA GPU with its driver installed (libcuda.so.1).",
            s.lib->error());
        return s;
    }
    std::string missing;
#define MLAJIT_LOAD_FIELD(fn)                                                                         \
    s.api.fn = reinterpret_cast<decltype(s.api.fn)>(s.lib->symbol(MLAJIT_STR(fn)));                   \
    if (!s.api.fn) missing += std::string(missing.empty() ? "" : ", ") + MLAJIT_STR(fn);
    MLAJIT_DRIVER_FUNCS(MLAJIT_LOAD_FIELD)
#undef MLAJIT_LOAD_FIELD
    if (!missing.empty()) {
        s.error = fmt::format("the CUDA driver at {} lacks {}: update the NVIDIA driver (mlajit needs CUDA 12 or newer)",
                              s.lib->path(), missing);
        return s;
    }
    s.api.cuTensorMapEncodeTiled =
        reinterpret_cast<decltype(s.api.cuTensorMapEncodeTiled)>(s.lib->symbol("cuTensorMapEncodeTiled"));
    s.api.library_path = s.lib->path();
    CUresult r = s.api.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        s.api.cuGetErrorName(r, &name);
        s.error = fmt::format("cuInit failed with {} ({}): no usable GPU. Check nvidia-smi and CUDA_VISIBLE_DEVICES.",
                              name ? name : "?", (int)r);
        return s;
    }
    s.api.cuDriverGetVersion(&s.api.driver_version);
    log().debug("CUDA driver {} loaded from {}", s.api.driver_version, s.lib->path());
    return s;
}

DriverState& state() {
    static DriverState s = [] {
        StartupTimer t(StartupStep::driver_load);
        return load_driver();
    }();
    return s;
}

}  // namespace

bool driver_available() {
    try {
        return state().error.empty();
    } catch (...) {
        return false;
    }
}

const DriverApi& driver() {
    auto& s = state();
    if (!s.error.empty()) throw Error(MLAJIT_ERROR_NO_DRIVER, s.error);
    return s.api;
}

void cu_check(CUresult r, const char* call, const char* doing) {
    if (r == CUDA_SUCCESS) return;
    const char* name = nullptr;
    const char* text = nullptr;
    driver().cuGetErrorName(r, &name);
    driver().cuGetErrorString(r, &text);
    fail(MLAJIT_ERROR_CUDA, "{} failed with {} ({}) while {}", call, name ? name : "?", text ? text : "?", doing);
}

}  // namespace mlajit
