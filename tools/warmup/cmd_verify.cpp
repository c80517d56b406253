// `verify`: re-checks every entry's checksum and, where a GPU of the entry's arch is present, that the
// driver accepts the cubin and finds its entry point (a checksum only proves the bytes are the ones stored).
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "cli.h"
#include "common/error.h"
#include "cuda/driver_api.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string cache_dir;
    bool remove_bad = false;
    bool no_load = false;
};

// Loads cubins into the primary context of a device of their arch.
class ModuleLoader {
public:
    ModuleLoader() {
        if (!driver_available()) return;
        const DriverApi& d = driver();
        int count = 0;
        if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS) return;
        for (int i = 0; i < count; ++i) {
            CUdevice dev = 0;
            int major = 0, minor = 0;
            if (d.cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
                d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
                d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
                continue;
            device_of_.emplace(Arch::for_compute_capability(major, minor).name(), dev);
        }
    }
    ~ModuleLoader() {
        for (auto& [dev, ctx] : contexts_) driver().cuDevicePrimaryCtxRelease(dev);
    }
    ModuleLoader(const ModuleLoader&) = delete;
    ModuleLoader& operator=(const ModuleLoader&) = delete;

    bool can_load(const std::string& arch) const { return device_of_.count(arch) > 0; }
    std::string archs() const {
        std::string s;
        for (auto& [a, d] : device_of_) s += (s.empty() ? "" : ", ") + a;
        return s;
    }

    // Empty when the driver loads the module and finds `entry`; else what went wrong.
    std::string check(const std::string& arch, const std::vector<char>& cubin, const char* entry) {
        const DriverApi& d = driver();
        CUdevice dev = device_of_.at(arch);
        auto it = contexts_.find(dev);
        if (it == contexts_.end()) {
            CUcontext ctx = nullptr;
            if (CUresult r = d.cuDevicePrimaryCtxRetain(&ctx, dev); r != CUDA_SUCCESS)
                return "cuDevicePrimaryCtxRetain failed: " + error_name(r);
            it = contexts_.emplace(dev, ctx).first;
        }
        if (CUresult r = d.cuCtxPushCurrent(it->second); r != CUDA_SUCCESS) return "cuCtxPushCurrent failed: " + error_name(r);
        std::string problem;
        CUmodule mod = nullptr;
        if (CUresult r = d.cuModuleLoadData(&mod, cubin.data()); r != CUDA_SUCCESS) {
            problem = "the driver rejects the cubin: cuModuleLoadData failed with " + error_name(r);
        } else {
            CUfunction fn = nullptr;
            if (entry && d.cuModuleGetFunction(&fn, mod, entry) != CUDA_SUCCESS)
                problem = fmt::format("the cubin has no entry point {}", entry);
            d.cuModuleUnload(mod);
        }
        CUcontext popped = nullptr;
        d.cuCtxPopCurrent(&popped);
        return problem;
    }

private:
    static std::string error_name(CUresult r) {
        const char* n = nullptr;
        driver().cuGetErrorName(r, &n);
        return n ? n : fmt::format("error {}", int(r));
    }
    std::map<std::string, CUdevice> device_of_;
    std::map<CUdevice, CUcontext> contexts_;
};

const char* entry_point(const std::string& family) {
    try {
        return family_info(family_from_name(family)).entry;
    } catch (const Error&) {
        return nullptr;  // a family this build does not know: load the module, skip the symbol
    }
}

int run(const Flags& f) {
    DiskCache disk(cache_root(f.cache_dir), maintenance_mode());
    if (f.remove_bad) require_writable(disk, "verify --remove-bad");
    CacheVerifyReport report = disk.verify(f.remove_bad);
    size_t loaded = 0, not_loadable = 0;
    std::optional<ModuleLoader> loader;
    if (!f.no_load) loader.emplace();

    if (loader) {
        std::set<std::string> already_bad;
        for (const auto& b : report.bad) already_bad.insert(b.entry.dir.string());
        for (auto& e : disk.list()) {
            if (already_bad.count(e.dir.string())) continue;
            if (!loader->can_load(e.arch)) {
                ++not_loadable;
                continue;
            }
            // Read the file itself: DiskCache::load would count as a use and reorder prune's LRU.
            std::ifstream in(e.dir / "kernel.cubin", std::ios::binary);
            std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            std::string problem = loader->check(e.arch, bytes, entry_point(e.family));
            if (problem.empty()) {
                ++loaded;
                continue;
            }
            --report.ok;
            if (f.remove_bad && disk.remove(e.arch, e.family, e.key)) ++report.removed;
            report.bad.push_back({std::move(e), std::move(problem)});
        }
    }

    for (const auto& b : report.bad)
        std::cout << fmt::format("BAD {}/{}/{}: {}{}\n", b.entry.arch, b.entry.family, b.entry.key.hex(), b.problem,
                                 f.remove_bad ? " (removed)" : "");
    std::cout << fmt::format("{} ok, {} bad, {} removed, in {}\n", report.ok, report.bad.size(), report.removed,
                             disk.version_dir().string());
    if (loaded)
        std::cout << fmt::format("{} entr{} loaded into a GPU by the driver\n", loaded, loaded == 1 ? "y" : "ies");
    if (not_loadable)
        std::cout << fmt::format("{} entr{} checked by checksum only: {}\n", not_loadable,
                                 not_loadable == 1 ? "y" : "ies",
                                 loader->archs().empty() ? "no GPU on this machine"
                                                         : "no GPU of their arch here (GPUs: " + loader->archs() + ")");
    if (report.bad.size() > report.removed) {
        std::cerr << "verify: bad entries remain; the library treats them as misses and recompiles, or run "
                     "'mlajit-warmup verify --remove-bad' to delete them now\n";
        return kExitFailed;
    }
    return kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "verify",
    "check every entry's checksum, and on a GPU that the driver loads it",
    30,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_flag("--remove-bad", f->remove_bad, "delete the bad entries (the next use recompiles them)");
        sub.add_flag("--no-load", f->no_load, "checksums only, even where a GPU could load the cubins");
        return [f] { return run(*f); };
    },
});

}  // namespace
}  // namespace mlajit::cli
