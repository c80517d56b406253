// The kernel templates: embedded in the library at build time (tools/cmake/embed_kernels.cmake), or read
// from MLAJIT_KERNELS_DIR for kernel development without a rebuild. A template's cache key covers its own
// text and every kernel file it includes, so an edited file gets new keys and nothing else does.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace mlajit {

struct EmbeddedFile {
    const char* name;
    std::string contents;
};
const std::vector<EmbeddedFile>& embedded_kernel_files();  // generated

struct KernelFiles {
    std::map<std::string, std::string> files;  // file name -> contents
    std::string origin;                        // "embedded" or the folder
};
// The set in use by this process (read once).
const KernelFiles& kernel_files();
// Reads a folder of kernel files (*.cuh, *.h); throws Error naming the folder if unreadable or empty.
KernelFiles read_kernel_dir(const std::string& dir);

// `name` and every file it includes with #include "...", transitively, sorted by name. Throws if a
// quoted include names a file that is not in the set (the message names both files).
std::vector<std::pair<std::string, const std::string*>> include_closure(const KernelFiles& set, const std::string& name);

}  // namespace mlajit
