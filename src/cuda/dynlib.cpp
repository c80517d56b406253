#include "cuda/dynlib.h"

#include <dlfcn.h>

#include <cstdlib>

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

std::vector<std::string> toolkit_library_candidates(const std::optional<std::string>& explicit_path,
                                                    std::initializer_list<const char*> names) {
    std::vector<std::string> c;
    if (explicit_path) c.push_back(*explicit_path);
    for (const char* n : names) c.push_back(n);
    std::vector<std::string> homes;
    // CUDA_HOME is the toolkit's own convention, read here rather than in config/env (not an mlajit setting).
    if (const char* h = std::getenv("CUDA_HOME")) homes.push_back(h);
    homes.push_back("/usr/local/cuda");
    for (const auto& h : homes)
        for (const char* n : names) c.push_back(h + "/lib64/" + n);
    return c;
}

}  // namespace mlajit
