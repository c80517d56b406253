// NVRTC, loaded with dlopen on first use behind one typed table (like the driver), so that a machine with
// a prebuilt cache and no NVRTC still runs; a cache miss there is a clear error naming the kernel.
#pragma once
#include <nvrtc.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "jit/nvrtc_version_memo.h"

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
    std::string build_id;  // the loaded file's GNU build id ("" if it has none): see nvrtc_version_memo.h
    int major = 0, minor = 0;
};

// Loads NVRTC on first call (then cheap).
bool nvrtc_available();
// Whether NVRTC was loaded in this process already (does not load it).
bool nvrtc_loaded();
// The libraries load tries, in order (MLAJIT_NVRTC_LIB, NVIDIA's wheels, the loader path, the toolkit).
std::vector<std::string> nvrtc_candidates();
// NVRTC's version as loading it would report, without loading it: the file dlopen would map, its build id,
// and the build id's version recorded under `cache_root` by an earlier load. nullopt when any step cannot
// tell exactly. Once per process and root (the answer cannot change while this process runs, except by
// the memo gaining the entry, which a later process then uses).
std::optional<NvrtcVersion> nvrtc_version_without_loading(const std::filesystem::path& cache_root);
// After a load: records the loaded file's build id and version under `cache_root` if it is not there.
void remember_nvrtc_version(const std::filesystem::path& cache_root);
// Throws Error(MLAJIT_ERROR_NO_NVRTC) saying which libraries were tried and how to point at one.
const NvrtcApi& nvrtc();

}  // namespace mlajit
