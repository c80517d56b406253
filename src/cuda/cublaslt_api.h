// cuBLASLt from the CUDA toolkit, loaded with dlopen on first use behind one typed table (like the driver
// and NVRTC): the library links nothing of CUDA, and only the one-call prefill's projections need it.
#pragma once
#include <cublasLt.h>

#include <string>

namespace mlajit {

#define MLAJIT_CUBLASLT_FUNCS(X)                                                                        \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusName)                 \
    X(cublasLtGetStatusString) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                 \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)      \
    X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                               \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                          \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulAlgoCheck) X(cublasLtMatmul)

struct CublasLtApi {
#define MLAJIT_DECLARE_FIELD(fn) decltype(&::fn) fn = nullptr;
    MLAJIT_CUBLASLT_FUNCS(MLAJIT_DECLARE_FIELD)
#undef MLAJIT_DECLARE_FIELD
    std::string library_path;
    size_t version = 0;
};

bool cublaslt_available();
// Throws Error(MLAJIT_ERROR_UNSUPPORTED) saying which libraries were tried and how to point at one.
const CublasLtApi& cublaslt();

// Throws Error(MLAJIT_ERROR_CUDA) naming the call, cuBLASLt's status and what was being done.
void cublaslt_check(cublasStatus_t s, const char* call, const char* doing);
#define MLAJIT_LT(call, doing) ::mlajit::cublaslt_check(::mlajit::cublaslt().call, #call, doing)

}  // namespace mlajit
