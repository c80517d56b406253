// The CUDA Driver API, loaded with dlopen("libcuda.so.1") on first use behind one typed table. cuda.h is
// used for types and prototypes only; its versioning macros (cuMemAlloc -> cuMemAlloc_v2) apply to the
// field names and to the symbol looked up, so the table always gets the current ABI entry points.
#pragma once
#include <cuda.h>

#include <string>

namespace mlajit {

#define MLAJIT_DRIVER_FUNCS(X)                                                                       \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet)             \
    X(cuDeviceGetCount) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDevicePrimaryCtxRetain)      \
    X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxPushCurrent)          \
    X(cuCtxPopCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)  \
    X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel)            \
    X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyHtoDAsync)                 \
    X(cuMemcpyDtoHAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemcpyDtoDAsync) X(cuStreamCreate)    \
    X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) \
    X(cuEventElapsedTime) X(cuEventDestroy) X(cuPointerGetAttribute) X(cuCtxGetId) X(cuMemcpy2DAsync)

struct DriverApi {
#define MLAJIT_DECLARE_FIELD(fn) decltype(&::fn) fn = nullptr;
    MLAJIT_DRIVER_FUNCS(MLAJIT_DECLARE_FIELD)
#undef MLAJIT_DECLARE_FIELD
    // Optional: only the Hopper tier needs it (TMA tensor maps, CUDA 12+ drivers). Null when the driver
    // lacks it; the ops then run the portable tier.
    decltype(&::cuTensorMapEncodeTiled) cuTensorMapEncodeTiled = nullptr;
    std::string library_path;
    int driver_version = 0;
};

// True if libcuda loaded and cuInit succeeded (at least one GPU usable). Never throws.
bool driver_available();
// The loaded table; throws Error(MLAJIT_ERROR_NO_DRIVER) that says why (no libcuda, no GPU, cuInit error).
const DriverApi& driver();

// Throws Error(MLAJIT_ERROR_CUDA) naming the call, the CUDA error and what was being done.
void cu_check(CUresult r, const char* call, const char* doing);
#define MLAJIT_CU(call, doing) ::mlajit::cu_check(::mlajit::driver().call, #call, doing)

}  // namespace mlajit
