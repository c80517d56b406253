#include "cuda/dynlib.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace mlajit {

DynLib::DynLib(const std::vector<std::string>& candidates) {
    for (const auto& c : candidates) {
        // RTLD_LOCAL keeps their symbols out of the global namespace of the host process.
        handle_ = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle_) {
            path_ = c;
            return;
        }
        const char* e = dlerror();
        if (!error_.empty()) error_ += "; ";
        error_ += e ? e : c + ": unknown dlopen error";
    }
}

void* DynLib::symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

std::string DynLib::loaded_file() const {
    link_map* lm = nullptr;
    if (!handle_ || dlinfo(handle_, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name) return "";
    char resolved[PATH_MAX];
    return realpath(lm->l_name, resolved) ? std::string(resolved) : std::string(lm->l_name);
}

namespace {

namespace fs = std::filesystem;

// Any function of this object: dladdr on it names the file the code was loaded from.
void own_address_anchor() {}

// NVIDIA's PyPI packages (nvidia-cuda-nvrtc, nvidia-cublas) put their libraries in
// site-packages/nvidia/<sub>/lib: cu13/ for CUDA 13 (all libraries in one folder), cuda_nvrtc/ and cublas/
// for the CUDA 12 packages (-cu12), cu12/ reserved for a consolidated CUDA 12 layout.
constexpr const char* kNvidiaWheelSubdirs[] = {"cu13", "cuda_nvrtc", "cublas", "cu12"};
// How far above the folder holding this code site-packages may be: mlajit's wheel puts libmlajit.so in
// site-packages/mlajit/lib/ and mlajit-warmup in site-packages/mlajit/bin/ (two levels); one and three
// cover other layouts (a flat package, a vendored copy one folder deeper).
constexpr int kSitePackagesLevels = 3;

}  // namespace

std::optional<std::string> own_object_directory() {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&own_address_anchor), &info) || !info.dli_fname || !*info.dli_fname)
        return std::nullopt;
    char resolved[PATH_MAX];
    if (!realpath(info.dli_fname, resolved)) return std::nullopt;
    return fs::path(resolved).parent_path().string();
}

std::vector<std::string> wheel_library_candidates(std::initializer_list<const char*> names) {
    const auto own = own_object_directory();
    return own ? wheel_library_candidates_near(*own, names) : std::vector<std::string>{};
}

std::vector<std::string> wheel_library_candidates_near(const std::string& own_dir,
                                                       std::initializer_list<const char*> names) {
    std::vector<std::string> c;
    std::error_code ec;
    fs::path dir = own_dir;
    for (int level = 1; level <= kSitePackagesLevels && dir.has_parent_path() && dir != dir.root_path(); ++level) {
        dir = dir.parent_path();
        for (const char* sub : kNvidiaWheelSubdirs)
            for (const char* n : names) {
                fs::path p = dir / "nvidia" / sub / "lib" / n;
                // Only files that exist: dlopen's "not found" for dozens of guesses would bury the real error.
                if (fs::is_regular_file(p, ec)) c.push_back(p.string());
            }
    }
    return c;
}

std::vector<std::string> toolkit_library_candidates(const std::optional<std::string>& explicit_path,
                                                    std::initializer_list<const char*> names) {
    std::vector<std::string> c;
    if (explicit_path) c.push_back(*explicit_path);
    // The pip packages next to mlajit's own wheel come before the loader path: they are the versions the
    // wheel declares as dependencies (and where nothing else is installed, the only ones there).
    for (auto& p : wheel_library_candidates(names)) c.push_back(std::move(p));
    for (const char* n : names) c.push_back(n);
    std::vector<std::string> homes;
    // CUDA_HOME is the toolkit's own convention, read here rather than in config/env (not an mlajit setting).
    if (const char* h = std::getenv("CUDA_HOME")) homes.push_back(h);
    homes.push_back("/usr/local/cuda");
    for (const auto& h : homes)
        for (const char* n : names) c.push_back(h + "/lib64/" + n);
    return c;
}

std::string toolkit_library_search_text(const char* env_var) {
    return fmt::format(
        "looked at ${} (unset or not loadable), site-packages/nvidia/{{cu13,cuda_nvrtc,cublas}}/lib near "
        "libmlajit.so (NVIDIA's PyPI packages), the loader path, $CUDA_HOME/lib64 and /usr/local/cuda/lib64",
        env_var);
}

}  // namespace mlajit
