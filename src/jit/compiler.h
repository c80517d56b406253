// Turns a kernel spec into a cubin with NVRTC: specialized source, in-memory kernel headers, canonical
// options, and the content key that names the result in the disk cache.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "jit/disk_cache.h"
#include "jit/kernel_sources.h"
#include "jit/kernel_spec.h"

namespace mlajit {

struct PreparedKernel {
    KernelSpec spec;
    std::string name;     // spec_name(spec)
    std::string source;   // render_source(spec)
    std::vector<std::pair<std::string, const std::string*>> headers;  // include closure of the template
    std::vector<std::string> options;  // canonical NVRTC options + MLAJIT_NVRTC_FLAGS
    CacheKey source_key;  // everything but the NVRTC version (finds entries when NVRTC is absent)
    CacheKey key;         // source_key + NVRTC version: the disk cache key
    int nvrtc_major = 0, nvrtc_minor = 0;
};

// The cache-format version mixed into every key (bump when the layout or ABI of entries changes).
inline constexpr int kCacheFormatVersion = 1;

// Builds everything the key depends on. nvrtc_version < 0 means NVRTC is absent: key stays zero.
PreparedKernel prepare_kernel(const KernelSpec& spec, const KernelFiles& files, const std::vector<std::string>& extra_flags,
                              int nvrtc_major, int nvrtc_minor);

// The file name MLAJIT_DUMP_DIR gives a kernel's `ext` (".cu", ".ptx", ".log"): family and the source key's first 16 hex
// digits, so one specialization's files sit together and a changed source gets new ones.
std::string dump_file_name(const PreparedKernel& k, const std::string& ext);

struct CompileOutput {
    std::vector<char> cubin;
    std::string log;  // NVRTC log (ptxas resource usage included)
    double compile_ms = 0;
};

// Compiles with NVRTC. Throws Error(MLAJIT_ERROR_COMPILE) with the kernel name, the options and the log
// (line numbers refer to the specialized source, which MLAJIT_DUMP_DIR writes out).
CompileOutput compile_kernel(const PreparedKernel& k);

// Throws Error(UNSUPPORTED) when the loaded NVRTC cannot compile for `arch` (it lists the ones it can), so
// that a request for an arch that no NVRTC knows is refused before any compile. No-op without NVRTC.
void require_nvrtc_arch(const Arch& arch);

}  // namespace mlajit
