// dlopen/dlsym with errors that name the library and the symbol. Used for libcuda, libnvrtc, libcublasLt,
// so that nothing links them and the library loads on machines without a GPU or toolkit.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace mlajit {

class DynLib {
public:
    // Tries each candidate in order; empty handle if none loads (see error()).
    explicit DynLib(const std::vector<std::string>& candidates);
    DynLib(const DynLib&) = delete;
    DynLib& operator=(const DynLib&) = delete;
    bool loaded() const { return handle_ != nullptr; }
    const std::string& path() const { return path_; }
    const std::string& error() const { return error_; }
    void* symbol(const char* name) const;  // nullptr if absent
    // The file the loader mapped (path() may be a bare name it searched for); "" if not loaded.
    std::string loaded_file() const;

private:
    void* handle_ = nullptr;
    std::string path_, error_;
};

// Where to look for a CUDA toolkit library: the user's explicit path first, then NVIDIA's PyPI packages
// beside this library (site-packages/nvidia/<cu13|cuda_nvrtc|cublas>/lib, found relative to libmlajit.so's
// own path: a pip-installed mlajit needs no toolkit), then each name on the loader path, then under
// $CUDA_HOME/lib64 and /usr/local/cuda/lib64 (toolkits are often not on the loader path).
std::vector<std::string> toolkit_library_candidates(const std::optional<std::string>& explicit_path,
                                                    std::initializer_list<const char*> names);

// The existing files named `names` in site-packages/nvidia/*/lib of the up to three folders above this
// library's own folder (see toolkit_library_candidates).
std::vector<std::string> wheel_library_candidates(std::initializer_list<const char*> names);
// The same search from a given folder (what the function above does from own_object_directory()).
std::vector<std::string> wheel_library_candidates_near(const std::string& own_dir,
                                                       std::initializer_list<const char*> names);

// The folder of the file this code was loaded from (libmlajit.so, or an executable linking mlajit
// statically), symlinks resolved; nullopt if the loader cannot say.
std::optional<std::string> own_object_directory();

// One sentence on where toolkit_library_candidates looks, for "could not be loaded" errors.
std::string toolkit_library_search_text(const char* env_var);

}  // namespace mlajit
