#include "jit/kernel_sources.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "config/env.h"

namespace mlajit {

KernelFiles read_kernel_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    KernelFiles k;
    k.origin = dir;
    std::error_code ec;
    // Files are named by their path under the folder ("mha/sm90.cuh"), as the embedded set is.
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        auto ext = it->path().extension().string();
        if (!it->is_regular_file() || (ext != ".cuh" && ext != ".h" && ext != ".cu")) continue;
        std::ifstream in(it->path(), std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        k.files[fs::relative(it->path(), dir).generic_string()] = ss.str();
    }
    if (ec || k.files.empty())
        fail(MLAJIT_ERROR_CONFIG, "MLAJIT_KERNELS_DIR='{}' has no readable kernel files (*.cuh, *.h){}: point it at "
             "the repository's kernels_src folder or unset it to use the embedded kernels", dir,
             ec ? ": " + ec.message() : std::string());
    return k;
}

const KernelFiles& kernel_files() {
    static const KernelFiles set = [] {
        if (config().kernels_dir) return read_kernel_dir(config().kernels_dir->string());
        KernelFiles k;
        k.origin = "embedded";
        for (const auto& f : embedded_kernel_files()) k.files[f.name] = f.contents;
        return k;
    }();
    return set;
}

namespace {
std::vector<std::string> quoted_includes(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        auto p = line.find_first_not_of(" \t");
        if (p == std::string::npos || line[p] != '#') continue;
        auto inc = line.find("include", p);
        if (inc == std::string::npos) continue;
        auto q1 = line.find('"', inc);
        if (q1 == std::string::npos) continue;
        auto q2 = line.find('"', q1 + 1);
        if (q2 == std::string::npos) continue;
        out.push_back(line.substr(q1 + 1, q2 - q1 - 1));
    }
    return out;
}
}  // namespace

std::vector<std::pair<std::string, const std::string*>> include_closure(const KernelFiles& set, const std::string& name) {
    std::set<std::string> seen;
    std::vector<std::string> todo{name};
    std::map<std::string, std::string> from;
    while (!todo.empty()) {
        auto n = todo.back();
        todo.pop_back();
        if (!seen.insert(n).second) continue;
        auto it = set.files.find(n);
        if (it == set.files.end()) {
            if (from.count(n))
                fail(MLAJIT_ERROR_INTERNAL, "kernel file '{}' includes \"{}\", which is not among the kernel files ({})",
                     from[n], n, set.origin);
            fail(MLAJIT_ERROR_INTERNAL, "kernel template '{}' not found among the kernel files ({})", n, set.origin);
        }
        for (auto& inc : quoted_includes(it->second)) {
            from.emplace(inc, n);
            todo.push_back(inc);
        }
    }
    std::vector<std::pair<std::string, const std::string*>> out;
    for (auto& n : seen) out.emplace_back(n, &set.files.at(n));
    return out;
}

}  // namespace mlajit
