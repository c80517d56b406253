#include "jit/kernel_store.h"

#include <array>

#include "common/error.h"
#include "common/log.h"
#include "config/env.h"
#include "cuda/driver_api.h"
#include "jit/nvrtc_api.h"
#include "runtime/startup_times.h"

namespace mlajit {

namespace {

std::atomic<uint64_t> g_next_store_id{1};

// The kernels this thread launched last, per store and context: a call launches a handful of kernels (the
// sparse path: gather, top-k mask, attention), so a few entries catch the repeats of an engine's layers
// without the shared lock's atomics (contended when several threads, e.g. one per GPU, launch at once) and
// without hashing. Entries stay valid: a loaded function is never unloaded or replaced, and its shared-
// memory limit only grows (an entry with a smaller limit than asked misses and takes the slow path).
struct RecentLaunch {
    uint64_t store = 0;  // 0: empty
    CUcontext ctx = nullptr;
    KernelSpec spec;
    LoadedKernel kernel;
};
constexpr int kRecentLaunches = 4;
thread_local std::array<RecentLaunch, kRecentLaunches> t_recent{};
thread_local int t_recent_next = 0;

}  // namespace

KernelStore::KernelStore(Options opt)
    : id_(g_next_store_id.fetch_add(1, std::memory_order_relaxed)), opt_(std::move(opt)), disk_(opt_.cache_root, opt_.cache_mode) {}

// Modules are not unloaded: the store lives as long as the process, and contexts may already be gone at
// exit (unloading into a destroyed context is an error).
KernelStore::~KernelStore() = default;

KernelStore& KernelStore::global() {
    static KernelStore* store = [] {
        const Config& c = config();
        Options o;
        o.cache_root = default_cache_root_from(c);
        o.cache_mode = c.cache_mode;
        o.offline = c.offline;
        o.nvrtc_flags = c.nvrtc_flags;
        o.lock_timeout_ms = c.lock_timeout_ms;
        log().debug("kernel cache: {} ({})", o.cache_root.string(), cache_mode_name(o.cache_mode));
        return new KernelStore(std::move(o));  // never destroyed: see ~KernelStore
    }();
    return *store;
}

std::shared_ptr<const Cubin> KernelStore::cubin(const KernelSpec& spec) {
    std::shared_ptr<Slot> slot;
    {
        std::lock_guard<std::mutex> g(slots_m_);
        auto& s = slots_[spec];
        if (!s) s = std::make_shared<Slot>();
        slot = s;
    }
    std::lock_guard<std::mutex> g(slot->m);
    if (slot->cubin) {
        ++stats_.memory_hits;
        return slot->cubin;
    }
    slot->cubin = produce(spec);
    return slot->cubin;
}

std::optional<std::vector<char>> KernelStore::find_without_nvrtc(const PreparedKernel& k) {
    // Without NVRTC the full key (which includes NVRTC's version) is unknown: take any entry whose
    // source key matches, preferring the newest NVRTC that built it.
    std::optional<std::vector<char>> best;
    int best_version = -1;
    for (const auto& e : disk_.list()) {
        if (e.arch != k.spec.arch.name() || e.family != family_info(k.spec.family).name) continue;
        if (e.meta.value("source_key", std::string()) != k.source_key.hex()) continue;
        int v = e.meta.value("nvrtc_major", 0) * 1000 + e.meta.value("nvrtc_minor", 0);
        if (v <= best_version) continue;
        if (auto bytes = disk_.load(e.arch, e.family, e.key)) {
            best = std::move(bytes);
            best_version = v;
        }
    }
    return best;
}

std::shared_ptr<const Cubin> KernelStore::produce(const KernelSpec& spec) {
    // A warm disk cache needs NVRTC's version (part of the key), not NVRTC itself: when the version is known
    // without loading the library (nvrtc_version_without_loading), a hit costs no dlopen of a 110 MB
    // compiler. A miss falls through to the path below, which loads NVRTC and checks again.
    if (!nvrtc_loaded() && !disk_.root().empty())
        if (auto v = nvrtc_version_without_loading(disk_.root())) {
            PreparedKernel k = prepare_kernel(spec, kernel_files(), opt_.nvrtc_flags, v->major, v->minor);
            if (auto bytes = disk_.load(spec.arch.name(), family_info(spec.family).name, k.key)) {
                auto cub = std::make_shared<Cubin>();
                cub->spec = spec;
                cub->key = k.key;
                cub->bytes = std::move(*bytes);
                cub->origin = Cubin::Origin::disk;
                ++stats_.disk_hits;
                return cub;
            }
        }
    const bool have_nvrtc = nvrtc_available();
    int major = -1, minor = -1;
    if (have_nvrtc) {
        major = nvrtc().major;
        minor = nvrtc().minor;
        if (disk_.writable()) remember_nvrtc_version(disk_.root());  // lets later processes skip loading it
    }
    PreparedKernel k = prepare_kernel(spec, kernel_files(), opt_.nvrtc_flags, major, minor);
    const std::string arch = spec.arch.name();
    const std::string family = family_info(spec.family).name;
    auto cub = std::make_shared<Cubin>();
    cub->spec = spec;
    cub->key = k.key;

    if (!have_nvrtc) {
        if (auto bytes = find_without_nvrtc(k)) {
            cub->bytes = std::move(*bytes);
            cub->origin = Cubin::Origin::disk;
            ++stats_.disk_hits;
            return cub;
        }
        nvrtc();  // throws the NO_NVRTC error that says what was tried; add the kernel name
    }
    if (auto bytes = disk_.load(arch, family, k.key)) {
        cub->bytes = std::move(*bytes);
        cub->origin = Cubin::Origin::disk;
        ++stats_.disk_hits;
        return cub;
    }
    if (opt_.offline)
        fail(MLAJIT_ERROR_CACHE_MISS, "kernel {} is not in the cache at {} and MLAJIT_OFFLINE=1 forbids compiling it: run "
             "mlajit-warmup for this model and arch (or import a prebuilt cache), or unset MLAJIT_OFFLINE",
             k.name, opt_.cache_root.string());
    // Another process may be compiling the same key: wait for its lock, then look again.
    auto lock = disk_.lock(k.key, std::chrono::milliseconds(opt_.lock_timeout_ms));
    if (lock.held()) {
        if (auto bytes = disk_.load(arch, family, k.key)) {
            cub->bytes = std::move(*bytes);
            cub->origin = Cubin::Origin::disk;
            ++stats_.disk_hits;
            return cub;
        }
    } else if (lock.timed_out()) {
        log().warn("waited {} ms for another process compiling {}; compiling it here too (MLAJIT_LOCK_TIMEOUT_MS)",
                   opt_.lock_timeout_ms, k.name);
    }
    CompileOutput out = compile_kernel(k);
    ++stats_.compiled;
    nlohmann::json meta = {
        {"spec", k.name},
        {"family", family},
        {"arch", arch},
        {"options", k.options},
        {"nvrtc_major", major},
        {"nvrtc_minor", minor},
        {"source_key", k.source_key.hex()},
        {"compile_ms", out.compile_ms},
        {"nvrtc_log", out.log},
        {"cache_format", kCacheFormatVersion},
    };
    if (driver_available()) meta["driver_version"] = driver().driver_version;
    disk_.store(arch, family, k.key, std::span<const char>(out.cubin.data(), out.cubin.size()), meta);
    cub->bytes = std::move(out.cubin);
    cub->origin = Cubin::Origin::compiled;
    cub->compile_ms = out.compile_ms;
    return cub;
}

LoadedKernel KernelStore::function(const KernelSpec& spec, CUcontext ctx, int dyn_smem) {
    for (const RecentLaunch& r : t_recent)
        if (r.store == id_ && r.ctx == ctx && r.kernel.max_dynamic_smem >= dyn_smem && r.spec == spec) return r.kernel;
    CtxKey key{spec, ctx};
    {
        std::shared_lock<std::shared_mutex> g(fn_m_);
        auto it = functions_.find(key);
        if (it != functions_.end() && it->second.max_dynamic_smem >= dyn_smem) {
            remember_launch(spec, ctx, it->second);
            return it->second;
        }
    }
    StartupTimer timer(StartupStep::kernel_load);  // a first use in this context: not the hot path
    auto cub = cubin(spec);
    const DriverApi& d = driver();
    std::unique_lock<std::shared_mutex> g(fn_m_);
    auto it = functions_.find(key);
    const bool loading = it == functions_.end();
    if (loading) {
        CUmodule mod = nullptr;
        const std::string name = spec_name(spec);
        CUresult r = d.cuModuleLoadData(&mod, cub->bytes.data());
        if (r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU)
            fail(MLAJIT_ERROR_UNSUPPORTED, "kernel {} was built for {} and this GPU cannot run it: set MLAJIT_ARCH to "
                 "the GPU's arch (or unset it)", name, spec.arch.name());
        cu_check(r, "cuModuleLoadData", ("loading kernel " + name).c_str());
        CUfunction fn = nullptr;
        cu_check(d.cuModuleGetFunction(&fn, mod, family_info(spec.family).entry), "cuModuleGetFunction",
                 ("finding the entry point of " + name).c_str());
        modules_.emplace_back(ctx, mod);
        ++stats_.modules_loaded;
        it = functions_.emplace(key, LoadedKernel{fn, 0}).first;
    }
    if (it->second.max_dynamic_smem < dyn_smem) {
        cu_check(d.cuFuncSetAttribute(it->second.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn_smem),
                 "cuFuncSetAttribute", fmt::format("allowing {} bytes of shared memory for {}", dyn_smem, spec_name(spec)).c_str());
        it->second.max_dynamic_smem = dyn_smem;
    }
    LoadedKernel k = it->second;
    remember_launch(spec, ctx, k);
    k.first_use = loading;
    return k;
}

void KernelStore::remember_launch(const KernelSpec& spec, CUcontext ctx, const LoadedKernel& k) const {
    RecentLaunch& r = t_recent[size_t(t_recent_next)];
    t_recent_next = (t_recent_next + 1) % kRecentLaunches;
    r.store = id_;
    r.ctx = ctx;
    r.spec = spec;
    r.kernel = k;
    r.kernel.first_use = false;
}

}  // namespace mlajit
