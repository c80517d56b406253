// Two things tools/device/sanitize_soak.sh runs:
//  - "gpu small shapes: ...": every kernel family once at small shapes (cheap enough for compute-sanitizer's
//    memcheck, racecheck, initcheck and synccheck), each call checked against float64;
//  - "gpu soak": for MLAJIT_SOAK_SECONDS (skipped when unset), mixed calls with fresh random shapes and
//    data, a sample of rows of every call checked against float64, and memory sampled after every batch.
//    The soak has three phases, reported apart:
//      warm-up:      every op on every head count and path once at small shapes (every kernel the soak can
//                    use gets loaded), each pair of a fixed pool of 48 (shape, op) pairs once, then random
//                    batches for a quarter of the time (cuBLASLt meets its size classes, glibc's per-thread
//                    arenas reach their working size);
//      recurring:    half the time, pairs drawn from the pool with fresh data (a serving mix repeats its
//                    shapes): every cache already holds what it needs, so growth here is a leak (checked);
//      fresh shapes: the last quarter, new random shapes: bounded caches fill (reported, looser bound).
//    No kernel may load after warm-up (counted).
//    Each sample: host RSS split into anonymous memory (heap, stacks, the driver's host allocations) and
//    file pages (mapped libraries: libcublasLt's kernels paged in as new GEMM shapes pick new kernels),
//    malloc's bytes in use (mallinfo2: what a leak through new/malloc would grow), device memory in use
//    (this process's, or device-wide: below) and the kernel store's loaded-module count. malloc_trim(0)
//    runs before each sample so that free memory glibc keeps in its arenas (the float64 references of large
//    batches, 16 threads' arenas) does not read as growth; the RSS before the trim is kept too.
//    MLAJIT_SOAK_CSV=<file> writes every sample. Device memory is this process's own where NVML lists it (then checked even beside other
//    processes), else device-wide; MLAJIT_SOAK_SHARED_GPU=1 (other processes on the GPU) then reports the
//    device-wide figure without checking it.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "gpu/gpu_fixture.h"
#include "jit/kernel_store.h"
#include "mlajit/mlajit.hpp"
#include "reference/reference.h"

using namespace mlajit;
using namespace mlajit::test;
namespace R = mlajit::ref;

namespace {

// The one call's tolerances: kOneCallLseAtol, kOneCallOutAtolScale (gpu/gpu_fixture.h explains them).

struct Counts {
    int64_t calls = 0, checked_rows = 0, failed_checks = 0;
};

void expect_ok(const R::CheckReport& r, Counts& n) {
    n.checked_rows += r.checked;
    if (!r.ok()) ++n.failed_checks;
    CHECK_MESSAGE(r.ok(), r.summary());
}

struct Shape {
    int64_t heads = 16, topk = 64;
    std::vector<int32_t> cu_q{0}, cu_k{0};
    int64_t tq() const { return cu_q.back(); }
    int64_t tk() const { return cu_k.back(); }
    int64_t batch() const { return int64_t(cu_q.size()) - 1; }
    int64_t max_k() const {
        int64_t m = 0;
        for (size_t i = 1; i < cu_k.size(); ++i) m = std::max<int64_t>(m, cu_k[i] - cu_k[i - 1]);
        return m;
    }
    std::string str() const {
        std::string s = "heads " + std::to_string(heads) + ", topk " + std::to_string(topk) + ", (s_q, s_k):";
        for (size_t i = 1; i < cu_q.size(); ++i)
            s += " (" + std::to_string(cu_q[i] - cu_q[i - 1]) + ", " + std::to_string(cu_k[i] - cu_k[i - 1]) + ")";
        return s;
    }
};

Shape shape(int64_t heads, int64_t topk, std::initializer_list<std::pair<int, int>> reqs) {
    Shape s;
    s.heads = heads;
    s.topk = topk;
    for (auto [q, k] : reqs) {
        s.cu_q.push_back(s.cu_q.back() + q);
        s.cu_k.push_back(s.cu_k.back() + k);
    }
    return s;
}

std::vector<int64_t> rows_to_check(R::Rng& rng, const Shape& s, int64_t per_request) {
    return R::sample_rows(rng, s.cu_q, per_request);
}

void sparse_mqa_call(Gpu* G, R::Rng& rng, const Shape& s, Counts& n) {
    INFO("sparse MQA " << s.str());
    const int64_t h = s.heads, tq = s.tq(), tk = s.tk(), topk = s.topk, B = s.batch();
    auto idx = R::causal_topk_indices(rng, s.cu_q, s.cu_k, topk);
    auto q = rng.normal_bf16(tq * h * 576, 1.0);
    auto kv = rng.normal_bf16(tk * 576, 1.0);
    DeviceBuffer<uint16_t> dq(q), dkv(kv), dout(tq * h * 512);
    DeviceBuffer<int32_t> didx(idx), dcq(s.cu_q), dck(s.cu_k);
    DeviceBuffer<float> dlse(tq * h), dml(tq * h);
    auto a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
    a.q = tensor(dq.get(), MLAJIT_BF16, {tq, h, 576});
    a.kv = tensor(dkv.get(), MLAJIT_BF16, {tk, 576});
    a.indices = tensor(didx.get(), MLAJIT_INT32, {tq, topk});
    a.out = tensor(dout.get(), MLAJIT_BF16, {tq, h, 512});
    a.lse = tensor(dlse.get(), MLAJIT_FP32, {tq, h});
    a.max_logits = tensor(dml.get(), MLAJIT_FP32, {tq, h});
    a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_kv = tensor(dck.get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_q_host = s.cu_q.data();
    a.cu_seqlens_kv_host = s.cu_k.data();
    a.sm_scale = float(1.0 / std::sqrt(192.0));
    MLAJIT_CHECK_OK(mlajit_sparse_mqa_prefill(G->handle, &a, G->stream));
    ++n.calls;
    auto out = dout.download();
    auto lse = dlse.download();
    R::SparseMqaArgs ra = R::packed_sparse_mqa(q.data(), kv.data(), idx.data(), tq, tk, h, topk, a.sm_scale);
    ra.cu_seqlens_q = s.cu_q;
    ra.cu_seqlens_kv = s.cu_k;
    auto rows = rows_to_check(rng, s, 2);
    ra.rows = rows;
    auto want = R::sparse_mqa(ra);
    expect_ok(R::check_out("out", R::View(out.data(), h * 512, 512), want), n);
    expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want), n);
}

void mha_call(Gpu* G, R::Rng& rng, const Shape& s, bool masked, Counts& n) {
    INFO((masked ? "masked" : "dense") << " MHA " << s.str());
    const int64_t h = s.heads, tq = s.tq(), tk = s.tk(), B = s.batch();
    auto q = rng.normal_bf16(tq * h * 192, 1.0);
    auto k = rng.normal_bf16(tk * h * 192, 1.0);
    auto v = rng.normal_bf16(tk * h * 128, 1.0);
    DeviceBuffer<uint16_t> dq(q), dk(k), dv(v), dout(tq * h * 128);
    DeviceBuffer<int32_t> dcq(s.cu_q), dck(s.cu_k);
    DeviceBuffer<float> dlse(tq * h);
    const int64_t words = mlajit_topk_mask_words(s.max_k());
    DeviceBuffer<uint32_t> dmask(masked ? tq * words : 0);
    std::vector<uint32_t> mask;
    if (masked) {  // built on the GPU (the top-k mask family), checked word for word
        auto idx = R::causal_topk_indices(rng, s.cu_q, s.cu_k, s.topk);
        DeviceBuffer<int32_t> didx(idx);
        auto m = MLAJIT_ARGS_INIT(mlajit_topk_mask_args);
        m.indices = tensor(didx.get(), MLAJIT_INT32, {tq, s.topk});
        m.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {B + 1});
        m.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {B + 1});
        m.cu_seqlens_q_host = s.cu_q.data();
        m.cu_seqlens_k_host = s.cu_k.data();
        m.mask = tensor(dmask.get(), MLAJIT_UINT32, {tq, words});
        MLAJIT_CHECK_OK(mlajit_topk_mask_build(G->handle, &m, G->stream));
        ++n.calls;
        mask = R::topk_mask(idx.data(), s.topk, s.topk, s.cu_q, s.cu_k, words);
        const bool same = dmask.download() == mask;
        if (!same) ++n.failed_checks;
        CHECK_MESSAGE(same, "the GPU's top-k mask differs from the reference");
    }
    auto a = MLAJIT_ARGS_INIT(mlajit_mha_args);
    a.q = tensor(dq.get(), MLAJIT_BF16, {tq, h, 192});
    a.k = tensor(dk.get(), MLAJIT_BF16, {tk, h, 192});
    a.v = tensor(dv.get(), MLAJIT_BF16, {tk, h, 128});
    a.out = tensor(dout.get(), MLAJIT_BF16, {tq, h, 128});
    a.lse = tensor(dlse.get(), MLAJIT_FP32, {tq, h});
    a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_q_host = s.cu_q.data();
    a.cu_seqlens_k_host = s.cu_k.data();
    a.sm_scale = float(1.0 / std::sqrt(192.0));
    if (masked) a.mask = tensor(dmask.get(), MLAJIT_UINT32, {tq, words});
    MLAJIT_CHECK_OK(mlajit_mha_prefill(G->handle, &a, G->stream));
    ++n.calls;
    auto out = dout.download();
    auto lse = dlse.download();
    R::MhaArgs ra;
    ra.q = R::View(q.data(), h * 192, 192);
    ra.k_nope = R::View(k.data(), h * 192, 192);
    ra.k_pe = ra.k_nope.shifted(128);
    ra.v = R::View(v.data(), h * 128, 128);
    ra.cu_seqlens_q = s.cu_q;
    ra.cu_seqlens_k = s.cu_k;
    ra.heads = h;
    ra.sm_scale = a.sm_scale;
    if (masked) {
        ra.mask = mask.data();
        ra.mask_stride_words = words;
    }
    auto rows = rows_to_check(rng, s, 2);
    ra.rows = rows;
    auto want = R::mha(ra);
    expect_ok(R::check_out("out", R::View(out.data(), h * 128, 128), want), n);
    expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want), n);
}

void mla_call(Gpu* G, R::Rng& rng, const Shape& s, int force, Counts& n, bool paged = false) {
    INFO("mla_prefill force_path " << force << (paged ? ", paged latent cache, " : ", ") << s.str());
    const int64_t h = s.heads, T = s.tq(), Tk = s.tk(), topk = s.topk, B = s.batch();
    auto q = rng.normal_bf16(T * h * 192, 1.0);
    auto kv = rng.normal_bf16(Tk * 576, 1.0);
    auto w = rng.normal_bf16(h * 256 * 512, 1.0 / std::sqrt(512.0));
    auto idx = R::causal_topk_indices(rng, s.cu_q, s.cu_k, topk);
    DeviceBuffer<uint16_t> dq(q), dkv(kv), dw(w), dout(T * h * 128);
    DeviceBuffer<int32_t> didx(idx), dcq(s.cu_q), dck(s.cu_k);
    DeviceBuffer<float> dlse(T * h);
    auto a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
    a.q_nope = strided_tensor(dq.get(), MLAJIT_BF16, {T, h, 128}, {h * 192, 192, 1});
    a.q_pe = strided_tensor(dq.get() + 128, MLAJIT_BF16, {T, h, 64}, {h * 192, 192, 1});
    // Paged: the same latent rows scattered over shuffled pages of 16 (the paged_gather family runs).
    const int64_t page = 16;
    std::vector<int32_t> table;
    std::vector<uint16_t> pages;
    int64_t max_blocks = 1, num_blocks = 0;
    if (paged) {
        for (int64_t r = 0; r < B; ++r) max_blocks = std::max<int64_t>(max_blocks, (s.cu_k[r + 1] - s.cu_k[r] + page - 1) / page);
        num_blocks = B * max_blocks + 3;
        std::vector<int32_t> order(static_cast<size_t>(num_blocks));
        for (int64_t i = 0; i < num_blocks; ++i) order[size_t(i)] = int32_t(i);
        for (int64_t i = num_blocks - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.uniform_int(0, i))]);
        table.assign(size_t(B * max_blocks), -1);
        pages = rng.normal_bf16(num_blocks * page * 576, 1.0);  // unused rows hold noise
        for (int64_t r = 0; r < B; ++r)
            for (int64_t p = 0; p < s.cu_k[r + 1] - s.cu_k[r]; ++p) {
                int32_t& blk = table[size_t(r * max_blocks + p / page)];
                if (blk < 0) blk = order[size_t(r * max_blocks + p / page)];
                std::copy_n(kv.begin() + (s.cu_k[r] + p) * 576, 576, pages.begin() + (int64_t(blk) * page + p % page) * 576);
            }
        for (auto& b : table) b = b < 0 ? 0 : b;
    }
    DeviceBuffer<uint16_t> dpages(pages);
    DeviceBuffer<int32_t> dtable(table);
    if (paged) {
        a.kv_cache = tensor(dpages.get(), MLAJIT_BF16, {num_blocks, page, 576});
        a.block_table = tensor(dtable.get(), MLAJIT_INT32, {B, max_blocks});
    } else {
        a.kv_c = strided_tensor(dkv.get(), MLAJIT_BF16, {Tk, 512}, {576, 1});
        a.k_pe = strided_tensor(dkv.get() + 512, MLAJIT_BF16, {Tk, 64}, {576, 1});
    }
    a.w_kv_b = tensor(dw.get(), MLAJIT_BF16, {h * 256, 512});
    a.indices = tensor(didx.get(), MLAJIT_INT32, {T, topk});
    a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_q_host = s.cu_q.data();
    a.cu_seqlens_k_host = s.cu_k.data();
    a.out = tensor(dout.get(), MLAJIT_BF16, {T, h, 128});
    a.lse = tensor(dlse.get(), MLAJIT_FP32, {T, h});
    a.sm_scale = float(1.0 / std::sqrt(192.0));
    a.force_path = force;
    size_t bytes = 0;
    MLAJIT_CHECK_OK(mlajit_mla_prefill_workspace_size(G->handle, &a, &bytes));
    DeviceBuffer<uint8_t> ws(std::max<size_t>(bytes, 1));
    a.workspace = ws.get();
    a.workspace_bytes = bytes;
    MLAJIT_CHECK_OK(mlajit_mla_prefill(G->handle, &a, G->stream));
    ++n.calls;
    auto out = dout.download();
    auto lse = dlse.download();
    auto rows = rows_to_check(rng, s, 2);
    R::DsaArgs da = R::packed_dsa(q.data(), kv.data(), w.data(), idx.data(), topk, h, s.cu_q, s.cu_k, a.sm_scale);
    da.rows = rows;
    auto want = R::dsa_prefill_reference(da);
    expect_ok(R::check_out("out", R::View(out.data(), h * 128, 128), want, kOneCallOutAtolScale), n);
    expect_ok(R::check_lse("lse", R::View(lse.data(), h, 1), want, kOneCallLseAtol), n);
}

// Device memory in use (cuMemGetInfo, looked up here: the library's driver table does not need it).
int64_t device_used_bytes() {
    using Fn = CUresult (*)(size_t*, size_t*);
    static Fn fn = [] {
        void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        return lib ? reinterpret_cast<Fn>(::dlsym(lib, "cuMemGetInfo_v2")) : nullptr;
    }();
    size_t free_b = 0, total_b = 0;
    if (!fn || fn(&free_b, &total_b) != CUDA_SUCCESS) return -1;
    return int64_t(total_b) - int64_t(free_b);
}

// This process's own device memory, from NVML's per-process accounting (libnvidia-ml ships with the driver),
// so that the leak check holds while other processes share the GPU (the closing call runs the suite beside
// the soak). -1 where NVML is missing or does not list this process (in a container NVML may report the
// host's process ids): the caller then falls back to the device-wide figure.
int64_t process_device_bytes() {
    struct ProcessInfo {  // nvmlProcessInfo_t (v2 layout) of nvmlDeviceGetComputeRunningProcesses_v3
        unsigned pid;
        unsigned long long used;
        unsigned gpu_instance, compute_instance;
    };
    struct Nvml {
        int (*count)(unsigned*) = nullptr;
        int (*handle)(unsigned, void**) = nullptr;
        int (*procs)(void*, unsigned*, ProcessInfo*) = nullptr;
    };
    static const Nvml nvml = [] {
        Nvml n;
        void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (!lib) return n;
        auto init = reinterpret_cast<int (*)()>(::dlsym(lib, "nvmlInit_v2"));
        if (!init || init() != 0) return n;
        n.count = reinterpret_cast<int (*)(unsigned*)>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
        n.handle = reinterpret_cast<int (*)(unsigned, void**)>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
        n.procs = reinterpret_cast<int (*)(void*, unsigned*, ProcessInfo*)>(
            ::dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
        return n;
    }();
    if (!nvml.count || !nvml.handle || !nvml.procs) return -1;
    unsigned devices = 0;
    if (nvml.count(&devices) != 0) return -1;
    const unsigned self = unsigned(::getpid());
    int64_t sum = 0;
    bool found = false;
    for (unsigned d = 0; d < devices; ++d) {
        void* h = nullptr;
        if (nvml.handle(d, &h) != 0) continue;
        std::vector<ProcessInfo> v(64);
        unsigned n = unsigned(v.size());
        if (nvml.procs(h, &n, v.data()) != 0) continue;
        for (unsigned i = 0; i < n && i < v.size(); ++i)
            if (v[i].pid == self && v[i].used != ~0ull) {  // ~0: NVML_VALUE_NOT_AVAILABLE
                sum += int64_t(v[i].used);
                found = true;
            }
    }
    return found ? sum : -1;
}

// One memory sample (bytes unless said).
struct MemSample {
    double t = 0;            // seconds since the soak started
    int64_t batch = 0;       // calls made so far (warm-up coverage calls and random batches)
    int phase = 0;           // 0 warm-up, 1 steady state
    int64_t rss_raw = 0;     // VmRSS before malloc_trim
    int64_t rss = 0, anon = 0, file = 0;  // VmRSS, RssAnon, RssFile after malloc_trim
    int64_t heap = -1;       // malloc's bytes in use (arenas + mmapped chunks), -1 where mallinfo2 is missing
    int64_t dev = -1;        // device bytes in use: this process's (NVML) where it can be read, else device-wide
    int64_t kernels = 0;     // modules loaded by the kernel store
    bool dev_per_process = false;
};

// VmRSS, RssAnon, RssFile of /proc/self/status, in bytes.
void read_status(int64_t& rss, int64_t& anon, int64_t& file) {
    std::ifstream f("/proc/self/status");
    std::string line;
    rss = anon = file = 0;
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        std::string key;
        int64_t kb = 0;
        ls >> key >> kb;
        if (key == "VmRSS:") rss = kb << 10;
        else if (key == "RssAnon:") anon = kb << 10;
        else if (key == "RssFile:") file = kb << 10;
    }
}

int64_t malloc_in_use_bytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    const struct mallinfo2 m = ::mallinfo2();
    return int64_t(m.uordblks + m.hblkhd);
#else
    return -1;
#endif
}

MemSample take_sample(double t, int64_t batch, int phase) {
    MemSample s;
    s.t = t;
    s.batch = batch;
    s.phase = phase;
    int64_t a = 0, b = 0;
    read_status(s.rss_raw, a, b);
#if defined(__GLIBC__)
    ::malloc_trim(0);  // hand free arena pages back, so that only memory in use (or fragmented) remains
#endif
    read_status(s.rss, s.anon, s.file);
    s.heap = malloc_in_use_bytes();
    s.dev = process_device_bytes();
    s.dev_per_process = s.dev >= 0;
    if (!s.dev_per_process) s.dev = device_used_bytes();
    s.kernels = mlajit::KernelStore::global().stats().modules_loaded.load();
    return s;
}

double mib(int64_t b) { return double(b) / (1024.0 * 1024.0); }

// Growth of one field over the steady state, robust to one odd sample: the median of the last tenth of the
// samples minus the median of the first tenth, and the least-squares slope in MiB per minute.
struct Growth {
    double first_mib = 0, last_mib = 0, min_mib = 0, max_mib = 0, growth_mib = 0, slope_mib_per_min = 0;
};

template <typename Field>
Growth growth(const std::vector<MemSample>& v, Field field) {
    Growth g;
    if (v.empty()) return g;
    const size_t tenth = std::max<size_t>(1, v.size() / 10);
    auto median_of = [&](size_t b, size_t e) {
        std::vector<double> x;
        for (size_t i = b; i < e; ++i) x.push_back(mib(field(v[i])));
        std::nth_element(x.begin(), x.begin() + long(x.size() / 2), x.end());
        return x[x.size() / 2];
    };
    g.first_mib = median_of(0, tenth);
    g.last_mib = median_of(v.size() - tenth, v.size());
    g.growth_mib = g.last_mib - g.first_mib;
    g.min_mib = g.max_mib = mib(field(v[0]));
    double st = 0, sy = 0, stt = 0, sty = 0;
    for (const auto& s : v) {
        const double y = mib(field(s)), t = s.t / 60.0;
        g.min_mib = std::min(g.min_mib, y);
        g.max_mib = std::max(g.max_mib, y);
        st += t;
        sy += y;
        stt += t * t;
        sty += t * y;
    }
    const double n = double(v.size()), den = n * stt - st * st;
    g.slope_mib_per_min = den > 0 ? (n * sty - st * sy) / den : 0;
    return g;
}

std::string describe(const char* what, const Growth& g) {
    std::ostringstream o;
    o.setf(std::ios::fixed);
    o.precision(1);
    o << what << " " << g.first_mib << " -> " << g.last_mib << " MiB (growth " << g.growth_mib << ", range "
      << g.min_mib << ".." << g.max_mib << ", slope " << g.slope_mib_per_min << " MiB/min)";
    return o.str();
}

}  // namespace

TEST_CASE("gpu small shapes: sparse MQA (batched; 16 and 128 heads)") {
    MLAJIT_REQUIRE_GPU();
    R::Rng rng;
    INFO(rng.seed_note());
    Counts n;
    sparse_mqa_call(G, rng, shape(16, 64, {{50, 200}, {30, 90}}), n);
    sparse_mqa_call(G, rng, shape(128, 128, {{8, 300}}), n);
}

TEST_CASE("gpu small shapes: dense MHA, the top-k mask and masked MHA") {
    MLAJIT_REQUIRE_GPU();
    R::Rng rng;
    INFO(rng.seed_note());
    Counts n;
    for (bool masked : {false, true}) {
        mha_call(G, rng, shape(16, 64, {{40, 40}, {20, 90}}), masked, n);
        mha_call(G, rng, shape(128, 64, {{70, 70}}), masked, n);
    }
}

TEST_CASE("gpu small shapes: mla_prefill on each path, paged, and the shape initcheck flagged in issue 14") {
    MLAJIT_REQUIRE_GPU();
    R::Rng rng;
    INFO(rng.seed_note());
    Counts n;
    for (int force : {int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)})
        mla_call(G, rng, shape(16, 64, {{60, 200}, {20, 20}}), force, n);
    mla_call(G, rng, shape(16, 64, {{40, 40}, {20, 60}}), int(MLAJIT_PATH_DENSE_MHA), n);
    mla_call(G, rng, shape(16, 256, {{100, 900}}), -1, n);
    for (int force : {int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)})  // the paged_gather family
        mla_call(G, rng, shape(16, 64, {{50, 170}, {30, 30}}), force, n, /*paged=*/true);
}

namespace {

// The random batch of the soak: 1 to 4 requests, with cached context up to twice the new tokens.
Shape random_shape(R::Rng& rng) {
    Shape s;
    const int64_t heads_choice[] = {16, 20, 32, 64, 128};
    s.heads = heads_choice[rng.uniform_int(0, 4)];
    const int64_t topk_choice[] = {64, 128, 256, 2048};
    s.topk = topk_choice[rng.uniform_int(0, 3)];
    const int64_t reqs = rng.uniform_int(1, 4);
    // Sizes scaled so that one batch's keys stay under ~300k (token, head) rows: the host's random fill
    // and reference, not the GPU, bound the pace, and the soak should see many batches.
    const int64_t max_q = std::max<int64_t>(8, 300000 / (s.heads * reqs * 3));
    for (int64_t r = 0; r < reqs; ++r) {
        const int32_t sq = int32_t(rng.uniform_int(r == 0 ? 1 : 0, max_q));
        const int32_t sk = sq + int32_t(rng.uniform_int(0, 2 * max_q));  // prefills with cached context
        s.cu_q.push_back(s.cu_q.back() + sq);
        s.cu_k.push_back(s.cu_k.back() + sk);
    }
    return s;
}

// Op 0..5: sparse MQA, dense MHA, masked MHA, the one call (planned), the paged one call (planned, or
// forced to sparse MQA).
constexpr int kSoakOps = 6;
void soak_call(Gpu* G, R::Rng& rng, const Shape& s, int op, Counts& n) {
    switch (op) {
        case 0: sparse_mqa_call(G, rng, s, n); break;
        case 1: mha_call(G, rng, s, false, n); break;
        case 2: mha_call(G, rng, s, true, n); break;
        case 3: mla_call(G, rng, s, -1, n); break;
        case 4: mla_call(G, rng, s, -1, n, true); break;
        default: mla_call(G, rng, s, int(MLAJIT_PATH_SPARSE_MQA), n, true); break;
    }
}

void random_call(Gpu* G, R::Rng& rng, const Shape& s, Counts& n) {
    soak_call(G, rng, s, int(rng.uniform_int(0, kSoakOps - 1)), n);
}

// A serving mix repeats its shapes; the recurring phase draws (shape, op) pairs from a fixed pool, with
// fresh data every call. Once each pair has run, every cache the library keeps (kernels, GEMM algorithms,
// schedules) holds what the phase needs, so growth there can only be a leak. Fresh shapes, by contrast,
// add entries to bounded caches (the GEMM algorithm LRU: 4096 shapes) until they fill.
struct SoakPair {
    Shape shape;
    int op = 0;
};
std::vector<SoakPair> recurring_pool(R::Rng& rng, int size) {
    std::vector<SoakPair> pool;
    for (int i = 0; i < size; ++i) pool.push_back({random_shape(rng), int(rng.uniform_int(0, kSoakOps - 1))});
    return pool;
}

// Every op on every head count the soak draws, each path of the one call, paged and not: after this every
// kernel the soak can use is loaded. The attention kernels depend on the head count and the path, not the
// lengths; the one call's GEMMs on the Hopper tier also on the lengths: 64- or 128-row tiles by M (tokens or
// keys), 128- or 256-column tiles by how many tiles M and N make (kernels_src/gemm/sm90.cuh,
// gemm_sm90_tile); and a dense step of requests of <= 64 keys is one launch of its own kernel (the MHA
// kernel's UP_PROJ variant). So the one call also runs each head count at M <= 64 (20 tokens over 40 keys), at M just
// over 64 with few tiles (100 over 100) and at many tiles (700 over 1,400): with 16..128 heads those reach
// every tile of every product the soak's shapes can pick (missed once, 2026-12-04: a GEMM loaded after warm-up).
void coverage_calls(Gpu* G, R::Rng& rng, Counts& n, const std::function<void()>& after_each) {
    for (int64_t h : {16, 20, 32, 64, 128}) {
        const Shape s = shape(h, 128, {{40, 100}, {20, 20}});  // s_k <= topk: dense MHA is exact too
        sparse_mqa_call(G, rng, s, n), after_each();
        mha_call(G, rng, s, false, n), after_each();
        mha_call(G, rng, s, true, n), after_each();
        for (int force : {int(MLAJIT_PATH_DENSE_MHA), int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)})
            mla_call(G, rng, s, force, n), after_each();
        for (int force : {int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)})
            mla_call(G, rng, s, force, n, /*paged=*/true), after_each();
        // A dense step of small requests runs in one launch, its own kernel (MLAJIT_SMALL_STEP_KEYS).
        mla_call(G, rng, shape(h, 128, {{20, 40}}), int(MLAJIT_PATH_DENSE_MHA), n), after_each();
        // Paged too: the up-projection that gathers its rows out of the pages (GEMM A_PAGED, <= 16 heads) has the same
        // tiles by M (missed until 2026-12-06: a kernel loaded in the fresh-shape phase, or in warm-up).
        for (const Shape& g : {shape(h, 128, {{20, 40}}), shape(h, 128, {{100, 100}}), shape(h, 128, {{700, 1400}})})
            for (int force : {int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)})
                for (bool paged : {false, true}) mla_call(G, rng, g, force, n, paged), after_each();
    }
}

}  // namespace

TEST_CASE("gpu soak: mixed batches with fresh random shapes and data (MLAJIT_SOAK_SECONDS)") {
    const char* env = std::getenv("MLAJIT_SOAK_SECONDS");
    if (!env || std::atoi(env) <= 0) {
        MESSAGE("skipped: set MLAJIT_SOAK_SECONDS to run the soak");
        return;
    }
    MLAJIT_REQUIRE_GPU();
    const double seconds = std::atof(env);
    const bool shared_gpu = std::getenv("MLAJIT_SOAK_SHARED_GPU") && std::string(std::getenv("MLAJIT_SOAK_SHARED_GPU")) == "1";
    R::Rng rng;
    INFO(rng.seed_note());
    Counts n;
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    std::vector<MemSample> samples;
    int64_t batches = 0;
    int phase = 0;
    auto sample = [&] { samples.push_back(take_sample(elapsed(), ++batches, phase)); };
    const MemSample start = take_sample(0, 0, 0);

    coverage_calls(G, rng, n, sample);
    const int64_t coverage_batches = batches;
    const MemSample covered = samples.back();
    const std::vector<SoakPair> pool = recurring_pool(rng, 48);
    for (const auto& p : pool) {  // each recurring pair once, so that the recurring phase meets no new shape
        soak_call(G, rng, p.shape, p.op, n);
        sample();
    }
    // Random batches for a quarter of the time (at least 20) still count as warm-up.
    const double warm_until = std::max(elapsed(), seconds / 4);
    int64_t random_warm = 0;
    while (elapsed() < warm_until || random_warm < 20) {
        random_call(G, rng, random_shape(rng), n);
        ++random_warm;
        sample();
    }
    const MemSample warm = samples.back();
    // Steady state, half the time: recurring pairs (the leak check); the last quarter: fresh shapes.
    phase = 1;
    const size_t steady_begin = samples.size();
    const double recurring_until = std::max(elapsed(), seconds * 3 / 4);
    while (elapsed() < recurring_until) {
        const auto& p = pool[size_t(rng.uniform_int(0, int64_t(pool.size()) - 1))];
        soak_call(G, rng, p.shape, p.op, n);
        sample();
    }
    const size_t fresh_begin = samples.size();
    const MemSample recurring_end = samples.back();
    phase = 2;
    while (elapsed() < seconds) {
        random_call(G, rng, random_shape(rng), n);
        sample();
    }
    const std::vector<MemSample> steady(samples.begin() + long(steady_begin), samples.begin() + long(fresh_begin));
    // Device growth is checked where it is this process's own (NVML), or device-wide on a GPU of its own.
    const bool dev_per_process = std::all_of(samples.begin() + long(steady_begin), samples.end(),
                                             [](const MemSample& s) { return s.dev_per_process; });
    const bool dev_checked = dev_per_process || !shared_gpu;
    const char* dev_label = dev_per_process ? "device (this process, NVML)"
                            : shared_gpu    ? "device (device-wide, shared GPU: not checked)"
                                            : "device (device-wide)";
    const std::vector<MemSample> fresh(samples.begin() + long(fresh_begin), samples.end());
    const MemSample end = samples.back();

    if (const char* csv = std::getenv("MLAJIT_SOAK_CSV")) {
        std::ofstream f(csv);
        f << "t_s,batch,phase,rss_raw_mib,rss_mib,anon_mib,file_mib,heap_mib,dev_mib,kernels\n";
        for (const auto& s : samples)
            f << s.t << ',' << s.batch << ',' << s.phase << ',' << mib(s.rss_raw) << ',' << mib(s.rss) << ','
              << mib(s.anon) << ',' << mib(s.file) << ',' << mib(s.heap) << ',' << mib(s.dev) << ',' << s.kernels << '\n';
    }
    auto line = [](const char* what, const MemSample& s) {
        std::ostringstream o;
        o.setf(std::ios::fixed);
        o.precision(1);
        o << what << ": RSS " << mib(s.rss) << " MiB (" << mib(s.rss_raw) << " before malloc_trim; anon " << mib(s.anon)
          << ", file " << mib(s.file) << "), malloc in use " << mib(s.heap) << " MiB, device " << mib(s.dev) << " MiB, "
          << s.kernels << " kernel modules";
        return o.str();
    };
    const int64_t steady_kernel_loads = end.kernels - warm.kernels;
    MESSAGE("FIGURE soak: " << elapsed() << " s, " << batches << " batches (" << coverage_batches << " coverage, "
                            << pool.size() << " recurring pairs once, " << random_warm << " random warm-up, "
                            << steady.size() << " recurring steady state, " << fresh.size() << " fresh shapes), "
                            << n.calls << " calls, " << n.checked_rows << " elements checked against float64, "
                            << n.failed_checks << " failed checks");
    MESSAGE("FIGURE soak memory " << line("at start", start));
    MESSAGE("FIGURE soak memory " << line("after the coverage calls", covered));
    MESSAGE("FIGURE soak memory " << line("after warm-up", warm));
    MESSAGE("FIGURE soak memory " << line("after the recurring phase", recurring_end));
    MESSAGE("FIGURE soak memory " << line("at end", end));
    struct PhaseGrowth {
        Growth rss, raw, anon, file, heap, dev;
    };
    auto phase_growth = [](const std::vector<MemSample>& v) {
        return PhaseGrowth{growth(v, [](const MemSample& s) { return s.rss; }),
                           growth(v, [](const MemSample& s) { return s.rss_raw; }),
                           growth(v, [](const MemSample& s) { return s.anon; }),
                           growth(v, [](const MemSample& s) { return s.file; }),
                           growth(v, [](const MemSample& s) { return s.heap; }),
                           growth(v, [](const MemSample& s) { return s.dev; })};
    };
    auto report = [&](const char* what, const std::vector<MemSample>& v, const PhaseGrowth& g) {
        const double span = v.empty() ? 0.0 : v.back().t - v.front().t;
        MESSAGE("FIGURE soak " << what << " (" << v.size() << " batches over " << span << " s): "
                               << describe("RSS", g.rss) << "; " << describe("RSS before trim", g.raw) << "; "
                               << describe("anon", g.anon) << "; " << describe("file", g.file) << "; "
                               << describe("malloc in use", g.heap) << "; "
                               << describe(dev_label, g.dev));
    };
    const PhaseGrowth g_steady = phase_growth(steady), g_fresh = phase_growth(fresh);
    report("recurring steady state", steady, g_steady);
    report("fresh shapes", fresh, g_fresh);
    MESSAGE("FIGURE soak kernel modules loaded after warm-up: " << steady_kernel_loads);
    CHECK(n.failed_checks == 0);
    CHECK_MESSAGE(recurring_end.kernels == warm.kernels, "a kernel loaded in the recurring phase: its pairs ran in warm-up");
    CHECK_MESSAGE(steady_kernel_loads == 0, "a kernel loaded after warm-up: the coverage calls missed it");
    // Nothing may grow while shapes recur. Slack: 16 MiB for malloc (the order of one batch's bookkeeping),
    // 32 MiB for anonymous RSS (fragmentation the trim cannot return), 64 MiB for the driver's device pools.
    // Fresh shapes fill bounded caches (ours: the GEMM algorithm LRU, ~1 MB when full; cuBLASLt's own), so
    // their phase gets twice the slack; its slope is reported.
    if (steady.size() >= 20) {
        if (g_steady.heap.first_mib > 0) CHECK(g_steady.heap.growth_mib <= 16.0);
        CHECK(g_steady.anon.growth_mib <= 32.0);
        if (dev_checked) CHECK(g_steady.dev.growth_mib <= 64.0);
    } else {
        MESSAGE("soak too short for a recurring steady state (" << steady.size() << " batches): growth not checked");
    }
    if (fresh.size() >= 20) {
        if (g_fresh.heap.first_mib > 0) CHECK(g_fresh.heap.growth_mib <= 32.0);
        CHECK(g_fresh.anon.growth_mib <= 64.0);
        if (dev_checked) CHECK(g_fresh.dev.growth_mib <= 128.0);
    } else {
        MESSAGE("soak too short for a fresh-shape phase (" << fresh.size() << " batches): growth not checked");
    }
}
