// NVRTC, loaded with dlopen on first use behind one typed table (like the driver), so that a machine with
// a prebuilt cache and no NVRTC still runs; a cache miss there is a clear error naming the kernel.
#pragma once
#include <nvrtc.h>

#include <string>

namespace mlajit {

#define MLAJIT_NVRTC_FUNCS(X)                                                                    \
    X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram)           \
    X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetCUBINSize)  \
    X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetNumSupportedArchs)              \
    X(nvrtcGetSupportedArchs)

struct NvrtcApi {
#define MLAJIT_DECLARE_FIELD(fn) decltype(&::fn) fn = nullptr;
    MLAJIT_NVRTC_FUNCS(MLAJIT_DECLARE_FIELD)
#undef MLAJIT_DECLARE_FIELD
    std::string library_path;
    int major = 0, minor = 0;
};

bool nvrtc_available();
// Throws Error(MLAJIT_ERROR_NO_NVRTC) saying which libraries were tried and how to point at one.
const NvrtcApi& nvrtc();

}  // namespace mlajit
