#include "cuda/cublaslt_api.h"

#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "config/env.h"
#include "cuda/dynlib.h"

namespace mlajit {

namespace {

#define MLAJIT_STR2(x) #x
#define MLAJIT_STR(x) MLAJIT_STR2(x)

struct CublasLtState {
    std::unique_ptr<DynLib> lib;
    CublasLtApi api;
    std::string error;
};

CublasLtState load_cublaslt() {
    CublasLtState s;
    // The versioned names (SONAMEs) first: dlopen of a bare SONAME returns a copy the process already holds
    // (torch links libcublasLt.so.13 from the nvidia-cublas wheel and loads it at import), while
    // "libcublasLt.so" finds the toolkit's file through the loader path and maps a second 540 MB copy: 92-150
    // ms on the 2-core dev machine (reliab-eco's dlopen experiment, docs/RELIABILITY.md), in the first call.
    const auto candidates =
        toolkit_library_candidates(config().cublaslt_lib, {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    s.lib = std::make_unique<DynLib>(candidates);
    if (!s.lib->loaded()) {
        s.error = fmt::format(
            "cuBLASLt (libcublasLt.so) is missing; mlajit_mla_prefill needs it for the projections. Install it: "
            "`pip install nvidia-cublas` (CUDA 13; nvidia-cublas-cu12 for a CUDA 12 driver) or the CUDA "
            "toolkit's cuBLAS; or set MLAJIT_CUBLASLT_LIB to its path. The attention ops (mlajit_mha_prefill, "
            "mlajit_sparse_mqa_prefill) do not need it. mlajit {}; dlopen said: {}",
            toolkit_library_search_text("MLAJIT_CUBLASLT_LIB"), s.lib->error());
        return s;
    }
    std::string missing;
#define MLAJIT_LOAD_FIELD(fn)                                                                         \
    s.api.fn = reinterpret_cast<decltype(s.api.fn)>(s.lib->symbol(MLAJIT_STR(fn)));                   \
    if (!s.api.fn) missing += std::string(missing.empty() ? "" : ", ") + MLAJIT_STR(fn);
    MLAJIT_CUBLASLT_FUNCS(MLAJIT_LOAD_FIELD)
#undef MLAJIT_LOAD_FIELD
    if (!missing.empty()) {
        s.error = fmt::format("cuBLASLt at {} lacks {}: mlajit needs cuBLASLt from CUDA 12.0 or newer", s.lib->path(),
                              missing);
        return s;
    }
    s.api.library_path = s.lib->path();
    s.api.version = s.api.cublasLtGetVersion();
    log().debug("cuBLASLt {} loaded from {}", s.api.version, s.lib->path());
    return s;
}

CublasLtState& state() {
    static CublasLtState s = load_cublaslt();
    return s;
}

}  // namespace

bool cublaslt_available() { return state().error.empty(); }

const CublasLtApi& cublaslt() {
    auto& s = state();
    if (!s.error.empty()) throw Error(MLAJIT_ERROR_UNSUPPORTED, s.error);
    return s.api;
}

void cublaslt_check(cublasStatus_t st, const char* call, const char* doing) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    const auto& api = cublaslt();
    throw Error(MLAJIT_ERROR_CUDA, fmt::format("{} failed with {} ({}) while {}", call, api.cublasLtGetStatusName(st),
                                               api.cublasLtGetStatusString(st), doing));
}

}  // namespace mlajit
