#include "jit/compiler.h"

#include <chrono>
#include <fstream>

#include "common/error.h"
#include "common/log.h"
#include "config/env.h"
#include "jit/nvrtc_api.h"

namespace mlajit {

PreparedKernel prepare_kernel(const KernelSpec& spec, const KernelFiles& files, const std::vector<std::string>& extra_flags,
                              int nvrtc_major, int nvrtc_minor) {
    PreparedKernel k;
    k.spec = spec;
    k.name = spec_name(spec);
    k.source = render_source(spec);
    k.headers = include_closure(files, family_info(spec.family).template_file);
    // Canonical options: fixed order, nothing machine-specific (no paths), so keys agree across machines.
    k.options = {"--gpu-architecture=" + spec.arch.name(), "-std=c++17", "-default-device", "-lineinfo",
                 "--ptxas-options=-v"};
    k.options.insert(k.options.end(), extra_flags.begin(), extra_flags.end());

    Hasher h;
    h.update_u64(kCacheFormatVersion);
    h.update_field(family_info(spec.family).name);
    h.update_field(spec.arch.name());
    h.update_field(k.source);
    for (auto& [name, text] : k.headers) {
        h.update_field(name);
        h.update_field(*text);
    }
    for (auto& o : k.options) h.update_field(o);
    k.source_key = h.digest();
    k.nvrtc_major = nvrtc_major;
    k.nvrtc_minor = nvrtc_minor;
    if (nvrtc_major >= 0) {
        Hasher h2;
        h2.update_u64(k.source_key.hi);
        h2.update_u64(k.source_key.lo);
        h2.update_u64((uint64_t)nvrtc_major * 1000 + (uint64_t)nvrtc_minor);
        k.key = h2.digest();
    }
    return k;
}

std::string dump_file_name(const PreparedKernel& k, const std::string& ext) {
    return std::string(family_info(k.spec.family).name) + "_" + k.source_key.hex().substr(0, 16) + ext;
}

namespace {

std::string program_log(const NvrtcApi& nv, nvrtcProgram prog) {
    size_t n = 0;
    nv.nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nv.nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
}

void dump(const PreparedKernel& k, const std::string& ext, const std::string& text) {
    const auto& dir = config().dump_dir;
    if (!dir) return;
    std::error_code ec;
    std::filesystem::create_directories(*dir, ec);
    auto path = *dir / dump_file_name(k, ext);
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) log().warn("MLAJIT_DUMP_DIR: could not write {}", path.string());
}

}  // namespace

CompileOutput compile_kernel(const PreparedKernel& k) {
    const NvrtcApi& nv = nvrtc();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<const char*> hdr_text, hdr_name;
    for (auto& [name, text] : k.headers) {
        hdr_name.push_back(name.c_str());
        hdr_text.push_back(text->c_str());
    }
    nvrtcProgram prog = nullptr;
    std::string file = std::string(family_info(k.spec.family).name) + ".cu";
    nvrtcResult r = nv.nvrtcCreateProgram(&prog, k.source.c_str(), file.c_str(), (int)hdr_name.size(), hdr_text.data(),
                                          hdr_name.data());
    if (r != NVRTC_SUCCESS)
        fail(MLAJIT_ERROR_COMPILE, "nvrtcCreateProgram failed for kernel {}: {}", k.name, nv.nvrtcGetErrorString(r));
    struct Guard {
        const NvrtcApi& nv;
        nvrtcProgram& p;
        ~Guard() { nv.nvrtcDestroyProgram(&p); }
    } guard{nv, prog};

    std::vector<const char*> opts;
    for (auto& o : k.options) opts.push_back(o.c_str());
    dump(k, ".cu", k.source);
    r = nv.nvrtcCompileProgram(prog, (int)opts.size(), opts.data());
    CompileOutput out;
    out.log = program_log(nv, prog);
    dump(k, ".log", out.log);
    std::string joined;
    for (auto& o : k.options) joined += (joined.empty() ? "" : " ") + o;
    if (r != NVRTC_SUCCESS)
        fail(MLAJIT_ERROR_COMPILE,
             "NVRTC could not compile kernel {} ({}).\n  options: {}\n  kernel files: {}\n  log (line numbers refer to "
             "the specialized source; MLAJIT_DUMP_DIR writes it out):\n{}",
             k.name, nv.nvrtcGetErrorString(r), joined, kernel_files().origin, out.log);
    size_t n = 0;
    nv.nvrtcGetCUBINSize(prog, &n);
    if (n == 0)
        fail(MLAJIT_ERROR_COMPILE, "NVRTC produced no cubin for kernel {} (options: {}): the arch must be a real "
             "target such as sm_90a, not a virtual compute_XX", k.name, joined);
    out.cubin.resize(n);
    nv.nvrtcGetCUBIN(prog, out.cubin.data());
    if (config().dump_dir) {
        size_t pn = 0;
        if (nv.nvrtcGetPTXSize(prog, &pn) == NVRTC_SUCCESS && pn > 1) {
            std::string ptx(pn, '\0');
            nv.nvrtcGetPTX(prog, ptx.data());
            ptx.pop_back();
            dump(k, ".ptx", ptx);
        }
    }
    out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log().info("compiled {} in {:.0f} ms", k.name, out.compile_ms);
    return out;
}

void require_nvrtc_arch(const Arch& arch) {
    if (!nvrtc_available()) return;
    const NvrtcApi& nv = nvrtc();
    int n = 0;
    if (nv.nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return;
    std::vector<int> archs(size_t(n), 0);
    if (nv.nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return;
    std::string known;
    bool sm_known = false;
    for (int a : archs) {
        sm_known = sm_known || a == arch.sm;
        known += fmt::format("{}sm_{}", known.empty() ? "" : ", ", a);
    }
    // NVRTC lists plain arch numbers only. The suffixes exist from Hopper on: arch-specific 'a' from sm_90,
    // family 'f' from sm_100 (an sm_88a reached the compiler and failed as a COMPILE error in the fuzz).
    const int suffix_from = arch.suffix == 'a' ? 90 : arch.suffix == 'f' ? 100 : 0;
    if (sm_known && arch.sm < suffix_from)
        fail(MLAJIT_ERROR_UNSUPPORTED, "arch {}: the '{}' suffix exists only from sm_{} on; use sm_{} (no suffix)", arch.name(),
             arch.suffix, suffix_from, arch.sm);
    if (sm_known) return;
    fail(MLAJIT_ERROR_UNSUPPORTED, "arch {}: NVRTC {}.{} ({}) compiles for {}; pick one of those, or point MLAJIT_NVRTC_LIB "
         "at an NVRTC that knows this GPU", arch.name(), nv.major, nv.minor, nv.library_path, known);
}

}  // namespace mlajit
