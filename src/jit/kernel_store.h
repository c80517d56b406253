// Where a kernel comes from: process memory, else the disk cache, else NVRTC (once per key across
// processes, under the cache's key lock). Then, per CUDA context, the loaded module and function.
// The hot path (a kernel already loaded in this context) is a compare against the few kernels this thread
// launched last (no lock, no hashing); else one hash-map lookup on a small POD key under a shared lock: no
// string formatting, no hashing of source.
#pragma once
#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "jit/compiler.h"
#include "jit/disk_cache.h"

namespace mlajit {

struct Cubin {
    KernelSpec spec;
    CacheKey key;
    std::vector<char> bytes;
    enum class Origin { disk, compiled } origin = Origin::compiled;
    double compile_ms = 0;  // 0 when loaded from disk
};

struct StoreStats {
    std::atomic<int64_t> compiled{0}, disk_hits{0}, memory_hits{0}, modules_loaded{0};
};

struct LoadedKernel {
    CUfunction fn = nullptr;
    int max_dynamic_smem = 0;  // what the function was opened up to
    bool first_use = false;    // returned by the call that loaded it (the caller may time its first launch)
};

class KernelStore {
public:
    struct Options {
        std::filesystem::path cache_root;
        CacheMode cache_mode = CacheMode::rw;
        bool offline = false;
        std::vector<std::string> nvrtc_flags;
        int lock_timeout_ms = 120000;
    };
    explicit KernelStore(Options opt);
    ~KernelStore();
    KernelStore(const KernelStore&) = delete;
    KernelStore& operator=(const KernelStore&) = delete;

    // The process-wide store, configured from the environment on first use.
    static KernelStore& global();

    // The cubin for a spec (no GPU needed). Thread-safe; one compile per spec per process.
    std::shared_ptr<const Cubin> cubin(const KernelSpec& spec);

    // The function in `ctx`, loaded on first use, its dynamic shared-memory limit raised to `dyn_smem`.
    // Needs the driver; `ctx` must be current on the calling thread for the first load.
    LoadedKernel function(const KernelSpec& spec, CUcontext ctx, int dyn_smem);

    const StoreStats& stats() const { return stats_; }
    DiskCache& disk() { return disk_; }
    const Options& options() const { return opt_; }

private:
    struct CtxKey {
        KernelSpec spec;
        CUcontext ctx;
        bool operator==(const CtxKey&) const = default;
    };
    struct CtxKeyHash {
        size_t operator()(const CtxKey& k) const noexcept { return KernelSpecHash{}(k.spec) ^ (size_t)k.ctx * 0x9e3779b97f4a7c15ull; }
    };
    struct Slot {
        std::mutex m;
        std::shared_ptr<const Cubin> cubin;
    };
    std::shared_ptr<const Cubin> produce(const KernelSpec& spec);
    void remember_launch(const KernelSpec& spec, CUcontext ctx, const LoadedKernel& k) const;
    std::optional<std::vector<char>> find_without_nvrtc(const PreparedKernel& k);

    const uint64_t id_;  // unique per store in the process: the threads' recent-launch caches key on it
    Options opt_;
    DiskCache disk_;
    std::mutex slots_m_;
    std::unordered_map<KernelSpec, std::shared_ptr<Slot>, KernelSpecHash> slots_;
    std::shared_mutex fn_m_;
    std::unordered_map<CtxKey, LoadedKernel, CtxKeyHash> functions_;
    std::vector<std::pair<CUcontext, CUmodule>> modules_;
    StoreStats stats_;
};

}  // namespace mlajit
