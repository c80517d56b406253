#include "cuda/dynlib.h"

#include <dlfcn.h>

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

}  // namespace mlajit
