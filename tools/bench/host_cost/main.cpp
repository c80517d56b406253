// mlajit-host-cost: host time of the one-call prefill (mlajit_mla_prefill), the part an engine pays per
// layer whatever the GPU does. Prints one line per measurement (median ns per call over --iters calls,
// each call timed alone with steady_clock):
//   cpu.*   the host steps on their own, no GPU needed: argument checks, planning, schedule, and the
//           workspace-size query as the C API runs it (what callgrind profiles: `--cpu-only`);
//   api.*   with a GPU: mlajit_mla_prefill_workspace_size and mlajit_mla_prefill through the C API, the
//           launches included (queued, not waited for; a synchronization every 64 calls keeps the queue
//           short, outside the timed calls);
//   first.* with a GPU: a fresh process (this program, --first-call) against a disk cache that a previous
//           process warmed: mlajit_create + the first mlajit_mla_prefill until its launches are queued and
//           until they finish, the CUDA context already current (an engine has one before it calls us).
// Shape: --tokens new tokens in --batch requests of equal size (s_k = s_q: fresh prompts; the dense path,
// --topk 2048 being larger), --heads per rank, packed q [T, h, 192] and latent [T, 576] as engines keep them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>
#include <sys/wait.h>

#include "common/error.h"
#include "cuda/cublaslt_api.h"
#include "cuda/driver_api.h"
#include "jit/kernel_store.h"
#include "device_timing.h"
#include "mlajit/mlajit.hpp"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "ops/mha_sm90_maps.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"
#include "runtime/startup_times.h"

namespace {

using Clock = std::chrono::steady_clock;
using mlajit::strided_tensor;

struct Options {
    int tokens = 16, batch = 1, heads = 128, topk = 2048, iters = 2000;
    bool cpu_only = false, first_call = false, split = false, no_first_call = false;
    std::string self;
};

struct Inputs {  // device pointers (null in --cpu-only: the checks then run on shapes alone)
    void *q = nullptr, *latent = nullptr, *w = nullptr, *idx = nullptr, *cu = nullptr, *out = nullptr;
};

struct Call {
    std::vector<int32_t> cu_host;
    mlajit_mla_prefill_args a{};
};

Call make_call(const Options& o, const Inputs& in) {
    Call c;
    const int T = o.tokens, H = o.heads, per = o.tokens / o.batch;
    for (int r = 0; r <= o.batch; ++r) c.cu_host.push_back(r * per);
    mlajit_mla_prefill_args& a = c.a;
    a.struct_size = sizeof a;
    a.q_nope = strided_tensor(in.q, MLAJIT_BF16, {T, H, 128}, {H * 192, 192, 1});
    a.q_pe = strided_tensor(in.q ? static_cast<char*>(in.q) + 256 : nullptr, MLAJIT_BF16, {T, H, 64}, {H * 192, 192, 1});
    a.kv_c = strided_tensor(in.latent, MLAJIT_BF16, {T, 512}, {576, 1});
    a.k_pe = strided_tensor(in.latent ? static_cast<char*>(in.latent) + 1024 : nullptr, MLAJIT_BF16, {T, 64}, {576, 1});
    a.w_kv_b = mlajit::contiguous_tensor(in.w, MLAJIT_BF16, {H * 256, 512});
    a.indices = mlajit::contiguous_tensor(in.idx, MLAJIT_INT32, {T, o.topk});
    a.topk = o.topk;
    a.cu_seqlens_q = mlajit::contiguous_tensor(in.cu, MLAJIT_INT32, {o.batch + 1});
    a.cu_seqlens_k = a.cu_seqlens_q;
    a.cu_seqlens_q_host = c.cu_host.data();
    a.cu_seqlens_k_host = c.cu_host.data();
    a.out = mlajit::contiguous_tensor(in.out, MLAJIT_BF16, {T, H, 128});
    a.sm_scale = 0.0721688f;
    a.force_path = -1;
    return c;
}

// Median ns of f() over `iters` calls, each timed alone; `between` runs untimed every 64 calls.
template <typename F, typename G>
double median_ns(int iters, F&& f, G&& between) {
    for (int i = 0; i < 16; ++i) f();  // warm: caches, planners, loaded kernels
    between();
    std::vector<double> t(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
        const auto t0 = Clock::now();
        f();
        t[size_t(i)] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
        if (i % 64 == 63) between();
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
template <typename F>
double median_ns(int iters, F&& f) {
    return median_ns(iters, f, [] {});
}

void print(const char* name, double ns, const Options& o) {
    std::printf("%-34s %10.2f us   (T=%d, batch %d, heads %d, topk %d)\n", name, ns / 1000.0, o.tokens, o.batch,
                o.heads, o.topk);
}

void cpu_steps(const Options& o) {
    Call c = make_call(o, Inputs{});
    const std::string gpu = "NVIDIA H200";
    print("cpu.check_args", median_ns(o.iters, [&] { (void)mlajit::check_mla_args(c.a, false); }), o);
    const auto s = mlajit::check_mla_args(c.a, false);
    print("cpu.plan_paths", median_ns(o.iters, [&] {
              (void)mlajit::plan_mla_paths(gpu, s, c.cu_host.data(), c.cu_host.data(), -1);
          }), o);
    const auto paths = mlajit::plan_mla_paths(gpu, s, c.cu_host.data(), c.cu_host.data(), -1);
    print("cpu.schedule", median_ns(o.iters, [&] { (void)mlajit::schedule_mla(s, c.cu_host.data(), c.cu_host.data(), paths); }), o);
    print("cpu.workspace_size (all above)", median_ns(o.iters, [&] { (void)mlajit::mla_prefill_workspace_size(gpu, c.a); }), o);
    std::printf("cpu.path                           %s\n", mlajit_path_name(mlajit_path(int(paths[0]))));
}

struct GpuSetup {
    mlajit::tools::DeviceBuffer q, latent, w, idx, cu, out;
    explicit GpuSetup(const Options& o)
        : q(size_t(o.tokens) * o.heads * 192 * 2), latent(size_t(o.tokens) * 576 * 2), w(size_t(o.heads) * 256 * 512 * 2),
          idx(size_t(o.tokens) * o.topk * 4), cu(size_t(o.batch + 1) * 4), out(size_t(o.tokens) * o.heads * 128 * 2) {
        q.poison(0);
        latent.poison(0);
        w.poison(0);
        idx.poison(0xFF);  // -1: no index (the dense path ignores them)
        std::vector<int32_t> cu_host;
        for (int r = 0; r <= o.batch; ++r) cu_host.push_back(r * (o.tokens / o.batch));
        cu.upload(cu_host);
    }
    Inputs inputs() const { return {q.get(), latent.get(), w.get(), idx.get(), cu.get(), out.get()}; }
};

void check(mlajit_status s, const char* what) {
    if (s != MLAJIT_OK) {
        std::fprintf(stderr, "%s: %s: %s\n", what, mlajit_status_name(s), mlajit_last_error());
        std::exit(1);
    }
}

// Runs in a fresh process: create + first call, timed; prints "first.* <ms>". The CUDA driver and the
// context come before the clock starts (an engine has both before it calls us); with --split they are
// timed too, on lines of their own, and the first call's inside is broken down from the library's
// one-time step timers (runtime/startup_times.h):
//   driver_ms          dlopen libcuda + cuInit                    (before the clock)
//   context_ms         primary context retain + make current      (before the clock)
//   create_ms          mlajit_create (it starts cuBLASLt's set-up on a background thread)
//   workspace_query_ms the planner built (configuration, calibration table) + the query
//   call_queued_ms     mlajit_mla_prefill until its launches are queued, made of:
//     cublaslt_wait_ms   the part of cuBLASLt's set-up the call waited for (its load and create are timed
//                        on the background thread: cublaslt_load_ms, cublaslt_create_ms)
//     nvrtc_load_ms      dlopen of NVRTC (0 when every kernel's key was known without it)
//     kernel_load_ms     kernels' first use in the context: disk cache read + cuModuleLoadData
//     launches_rest_ms   the rest: launches, cuBLASLt heuristics, argument checks, schedule
//   wait_ms            until the GPU finished the call
int first_call(const Options& o) {
    using mlajit::StartupStep;
    auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    const auto t_start = Clock::now();
    (void)mlajit::driver();
    const auto t_driver = Clock::now();
    mlajit::tools::open_gpu0();
    const auto t_ctx = Clock::now();
    GpuSetup g(o);
    Call c = make_call(o, g.inputs());
    const auto t0 = Clock::now();
    mlajit_handle h;
    check(mlajit_create(-1, &h), "mlajit_create");
    const auto t_create = Clock::now();
    size_t ws_bytes = 0;
    check(mlajit_mla_prefill_workspace_size(h, &c.a, &ws_bytes), "workspace size");
    const auto t_ws = Clock::now();
    mlajit::tools::DeviceBuffer ws(ws_bytes);
    c.a.workspace = ws.get();
    c.a.workspace_bytes = ws.bytes();
    const auto t_alloc = Clock::now();
    const double nvrtc_before = mlajit::startup_ms(StartupStep::nvrtc_load);
    const double kernels_before = mlajit::startup_ms(StartupStep::kernel_load);
    const double first_launch_before = mlajit::startup_ms(StartupStep::kernel_first_launch);
    const double heuristic_before = mlajit::startup_ms(StartupStep::cublaslt_heuristic);
    check(mlajit_mla_prefill(h, &c.a, nullptr), "mlajit_mla_prefill");
    const auto t1 = Clock::now();
    MLAJIT_CU(cuCtxSynchronize(), "waiting for the first call");
    const auto t2 = Clock::now();
    // The workspace allocation is the caller's (an engine allocates it once): not counted.
    const double alloc = ms(t_ws, t_alloc);
    std::printf("first.queued_ms %.3f\nfirst.done_ms %.3f\n", ms(t0, t1) - alloc, ms(t0, t2) - alloc);
    if (o.split) {
        const double call = ms(t_alloc, t1);
        const double lt_wait = mlajit::startup_ms(StartupStep::cublaslt_wait);
        const double nvrtc = mlajit::startup_ms(StartupStep::nvrtc_load) - nvrtc_before;
        const double kernels = mlajit::startup_ms(StartupStep::kernel_load) - kernels_before;
        std::printf("first.driver_ms %.3f   (before the clock: dlopen libcuda + cuInit)\n", ms(t_start, t_driver));
        std::printf("first.context_ms %.3f   (before the clock: primary context)\n", ms(t_driver, t_ctx));
        std::printf("first.create_ms %.3f\nfirst.workspace_query_ms %.3f\nfirst.call_queued_ms %.3f\n", ms(t0, t_create),
                    ms(t_create, t_ws), call);
        std::printf("first.  cublaslt_wait_ms %.3f   (background: load %.3f ms, create %.3f ms, warm-up query %.3f ms)\n",
                    lt_wait, mlajit::startup_ms(StartupStep::cublaslt_load), mlajit::startup_ms(StartupStep::cublaslt_create),
                    mlajit::startup_ms(StartupStep::cublaslt_warm_up));
        std::printf("first.  nvrtc_load_ms %.3f   (0: not loaded, the warm cache's keys were known without it)\n", nvrtc);
        std::printf("first.  kernel_load_ms %.3f   (%lld kernels: disk read + cuModuleLoadData)\n", kernels,
                    (long long)mlajit::startup_count(StartupStep::kernel_load));
        const double first_launch = mlajit::startup_ms(StartupStep::kernel_first_launch) - first_launch_before;
        const double heuristic = mlajit::startup_ms(StartupStep::cublaslt_heuristic) - heuristic_before;
        const double first_matmul = mlajit::startup_ms(StartupStep::cublaslt_first_matmul);
        std::printf("first.  kernel_first_launch_ms %.3f   (%lld first cuLaunchKernel: the driver's lazy load)\n",
                    first_launch, (long long)mlajit::startup_count(StartupStep::kernel_first_launch));
        std::printf("first.  cublaslt_heuristic_ms %.3f   (%lld queries in the call; %.3f ms in the workspace query "
                    "before)\n", heuristic, (long long)mlajit::startup_count(StartupStep::cublaslt_heuristic), heuristic_before);
        std::printf("first.  cublaslt_first_matmul_ms %.3f\n", first_matmul);
        std::printf("first.  launches_rest_ms %.3f\nfirst.wait_ms %.3f\n",
                    call - lt_wait - nvrtc - kernels - first_launch - heuristic - first_matmul, ms(t1, t2));
        std::printf("first.planner_build_ms %.3f   (in the workspace query)\n", mlajit::startup_ms(StartupStep::planner_build));
    }
    const auto& st = mlajit::KernelStore::global().stats();
    std::printf("first.kernels disk_hits %lld compiled %lld modules_loaded %lld\n", (long long)st.disk_hits.load(),
                (long long)st.compiled.load(), (long long)st.modules_loaded.load());
    mlajit_destroy(h);
    return 0;
}

// Runs this program with --first-call in a fresh process; returns {queued ms, done ms} ({-1, -1} on
// failure) and, with split, the parts' lines in `parts`.
std::pair<double, double> run_child(const Options& o, bool split = false, std::string* parts = nullptr,
                                    const std::string& env = "") {
    std::string cmd = env + (env.empty() ? "" : " ") + o.self + " --first-call --tokens " + std::to_string(o.tokens) + " --batch " + std::to_string(o.batch) +
                      " --heads " + std::to_string(o.heads) + " --topk " + std::to_string(o.topk) + (split ? " --split" : "");
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return {-1, -1};
    char line[256];
    double queued = -1, done = -1;
    while (fgets(line, sizeof line, p)) {
        if (std::sscanf(line, "first.queued_ms %lf", &queued) == 1 || std::sscanf(line, "first.done_ms %lf", &done) == 1) continue;
        if (parts) *parts += line;
    }
    if (pclose(p) != 0) return {-1, -1};
    return {queued, done};
}

void fresh_lengths(const Options& o, mlajit::Runtime& rt);

// mlajit_mla_prefill's parts on the GPU machine, each timed alone the way the call runs it (the dense path's
// one step: the K/V up-projection, then MHA): what the whole call's microseconds are made of.
void api_split(const Options& o, mlajit_handle handle, const Call& c) {
    using namespace mlajit;
    Handle& h = handle_of(handle);
    const mlajit_mla_prefill_args& a = c.a;
    const int32_t* cu = c.cu_host.data();
    auto sync = [] { MLAJIT_CU(cuCtxSynchronize(), "sync"); };
    print("split.check_args", median_ns(o.iters, [&] { (void)check_mla_args(a, true); }), o);
    // The shapes as the call takes them: its step layouts sit where the workspace the query sized has room (the
    // GEMM's scratch is left out on the Hopper tier; check_mla_args alone assumes cuBLASLt's 32 MiB).
    const MlaShapes s = mla_call_shapes(h, a);
    print("split.plan_paths", median_ns(o.iters, [&] { (void)plan_mla_paths(h.gpu_name(), s, cu, cu, -1); }), o);
    const auto paths = plan_mla_paths(h.gpu_name(), s, cu, cu, -1);
    print("split.schedule", median_ns(o.iters, [&] { (void)schedule_mla(s, cu, cu, paths); }), o);
    const MlaSchedule sch = schedule_mla(s, cu, cu, paths);
    if (sch.steps.size() != 1 || sch.steps[0].path != Path::dense_mha) {
        std::printf("split: the call is not one dense step (%zu steps): parts not timed\n", sch.steps.size());
        return;
    }
    const MlaStep& st = sch.steps[0];
    MlaShapes small = s;
    enable_small_steps(small, h.arch(), a);
    if (schedule_mla(small, cu, cu, paths).steps[0].small)
        std::printf("split: the call itself runs this step in one launch (MLAJIT_SMALL_STEP_KEYS); below, the parts of the "
                    "two-launch form (up-projection GEMM + MHA) it replaces\n");
    if (sch.workspace_bytes > a.workspace_bytes) {  // the parts below write the step's buffers themselves
        std::printf("split: the step needs %zu workspace bytes, the call has %zu: parts not timed\n", sch.workspace_bytes,
                    size_t(a.workspace_bytes));
        return;
    }
    const MlaStepLayout l = step_layout(s, st);
    char* ws = static_cast<char*>(a.workspace);
    const int64_t H = s.heads, kv_row = H * 256, T = s.total_q;
    ScopedContext scope(h.context());
    print("split.cuCtxGetCurrent", median_ns(o.iters, [&] {
              CUcontext cur = nullptr;
              MLAJIT_CU(cuCtxGetCurrent(&cur), "ctx");
          }), o);
    GemmDesc g;
    g.m = T;
    g.n = kv_row;
    g.k = 512;
    g.a = {a.kv_c.data, a.kv_c.stride[0], 0, false};
    g.b = {a.w_kv_b.data, a.w_kv_b.stride[0], 0, true};
    g.c = ws + l.kv_up;
    g.ldc = kv_row;
    print("split.gemm (up-projection, queued)",
          median_ns(o.iters, [&] { h.gemm().run(g, ws, s.gemm_scratch, nullptr, "up-projection"); }, sync), o);
    mlajit_mha_args m = MLAJIT_ARGS_INIT(mlajit_mha_args);
    m.q = strided_tensor(a.q_nope.data, MLAJIT_BF16, {T, H, 192}, {a.q_nope.stride[0], a.q_nope.stride[1], 1});
    m.k_nope = strided_tensor(ws + l.kv_up, MLAJIT_BF16, {T, H, 128}, {kv_row, 256, 1});
    m.v = strided_tensor(ws + l.kv_up + 256, MLAJIT_BF16, {T, H, 128}, {kv_row, 256, 1});
    m.k_pe = a.k_pe;
    m.out = a.out;
    m.lse = strided_tensor(ws + l.lse, MLAJIT_FP32, {T, H}, {H, 1});
    m.cu_seqlens_q = a.cu_seqlens_q;
    m.cu_seqlens_k = a.cu_seqlens_k;
    m.cu_seqlens_q_host = cu;
    m.cu_seqlens_k_host = cu;
    m.sm_scale = a.sm_scale;
    print("split.plan_mha (checks, params)", median_ns(o.iters, [&] { (void)plan_mha(h.arch(), m); }), o);
    auto plan = plan_mha(h.arch(), m);
    const auto encode = driver().cuTensorMapEncodeTiled;
    if (plan.spec.family == Family::mha_fwd_sm90 && encode) {
        MhaFwdSm90Params p90;
        print("split.tma_maps (4 cuTensorMapEncodeTiled)",
              median_ns(o.iters, [&] { (void)encode_mha_sm90_maps(encode, plan.params, T, T, p90); }), o);
        (void)encode_mha_sm90_maps(encode, plan.params, T, T, p90);
        print("split.launch (lookup + cuLaunchKernel)",
              median_ns(o.iters, [&] { h.launch(plan.spec, plan.grid, plan.threads, plan.smem, &p90, nullptr); }, sync), o);
        // The launch's own parts: the context scope, the kernel lookup, and the driver's cuLaunchKernel alone
        // (the same function, grid and parameter block), to say what the library adds to the driver.
        print("split.  context scope (cuCtxGetCurrent)", median_ns(o.iters, [&] { ScopedContext sc(h.context()); }), o);
        auto& store = KernelStore::global();
        print("split.  kernel lookup (KernelStore::function)",
              median_ns(o.iters, [&] { (void)store.function(plan.spec, h.context(), plan.smem); }), o);
        const LoadedKernel lk = store.function(plan.spec, h.context(), plan.smem);
        void* kargs[] = {&p90};
        print("split.  cuLaunchKernel alone", median_ns(o.iters, [&] {
                  MLAJIT_CU(cuLaunchKernel(lk.fn, plan.grid.x, plan.grid.y, plan.grid.z, (unsigned)plan.threads, 1, 1,
                                           (unsigned)plan.smem, nullptr, kargs, nullptr), "launch");
              }, sync), o);
        std::printf("split.  (parameter block %zu bytes, grid %u x %u x %u, %d threads, %d B shared memory)\n", sizeof p90,
                    plan.grid.x, plan.grid.y, plan.grid.z, plan.threads, plan.smem);
    } else {
        print("split.launch (lookup + cuLaunchKernel)",
              median_ns(o.iters, [&] { launch_plan(h, plan, nullptr); }, sync), o);
    }
    print("split.mha_prefill (the three above)", median_ns(o.iters, [&] { mha_prefill(h, m, nullptr); }, sync), o);
    print("split.mla_prefill (internal, no C API)", median_ns(o.iters, [&] { mla_prefill(h, a, nullptr); }, sync), o);
}

void gpu_calls(const Options& o) {
    mlajit::tools::open_gpu0();
    GpuSetup g(o);
    Call c = make_call(o, g.inputs());
    mlajit::Runtime rt;
    const size_t ws_bytes = rt.mla_prefill_workspace_size(c.a);
    mlajit::tools::DeviceBuffer ws(ws_bytes);
    c.a.workspace = ws.get();
    c.a.workspace_bytes = ws.bytes();
    size_t bytes = 0;
    print("api.workspace_size", median_ns(o.iters, [&] { check(mlajit_mla_prefill_workspace_size(rt.get(), &c.a, &bytes), "ws"); }), o);
    auto sync = [] { MLAJIT_CU(cuCtxSynchronize(), "sync"); };
    print("api.mla_prefill (launches queued)",
          median_ns(o.iters, [&] { check(mlajit_mla_prefill(rt.get(), &c.a, nullptr), "mla_prefill"); }, sync), o);
    api_split(o, rt.get(), c);
    fresh_lengths(o, rt);
    auto& gemm = mlajit::handle_of(rt.get()).gemm();
    const auto n = gemm.counts();
    std::printf("gemm: %lld heuristic queries, %lld shapes served by their M class's algorithm (checked), %lld checks "
                "refused; %zu shapes held\n", (long long)n.heuristic_queries, (long long)n.class_reuses,
                (long long)n.checks_refused, gemm.cached_algos());
}

// An engine rarely sends the same token count twice (prompt and chunk lengths vary), so time the call with
// a new length every call: T = --tokens + i, one request, the workspace query included as an engine calls
// it. What a fixed shape hides shows here: per-shape caches that miss (e.g. a cuBLASLt heuristic query for
// each new GEMM shape).
void fresh_lengths(const Options& o, mlajit::Runtime& rt) {
    const int n = std::min(o.iters, 512);
    Options big = o;
    big.tokens = o.tokens + n;
    big.batch = 1;
    GpuSetup g(big);
    // Per call its own device cu_seqlens {0, T} (16-byte aligned slots), matching its host copy.
    std::vector<int32_t> cu_all(size_t(n) * 4, 0);
    std::vector<Call> calls;
    calls.reserve(size_t(n));
    mlajit::tools::DeviceBuffer cu(cu_all.size() * 4);
    for (int i = 0; i < n; ++i) {
        Options oi = o;
        oi.tokens = o.tokens + i;
        oi.batch = 1;
        cu_all[size_t(i) * 4 + 1] = oi.tokens;
        Inputs in = g.inputs();
        in.cu = static_cast<char*>(cu.get()) + size_t(i) * 16;
        calls.push_back(make_call(oi, in));
    }
    cu.upload(cu_all);
    size_t ws_bytes = 0;
    for (auto& c : calls) ws_bytes = std::max(ws_bytes, rt.mla_prefill_workspace_size(c.a));
    mlajit::tools::DeviceBuffer ws(ws_bytes);
    for (auto& c : calls) {
        c.a.workspace = ws.get();
        c.a.workspace_bytes = ws.bytes();
    }
    // Each length once, timed alone (no warm-up call: the first sight of each shape is the point); then the
    // same lengths again, when every per-shape cache hits.
    auto time_all = [&](const char* name, const char* note) {
        std::vector<double> t(static_cast<size_t>(n));
        size_t bytes = 0;
        for (int i = 0; i < n; ++i) {
            auto& a = calls[size_t(i)].a;
            const auto t0 = Clock::now();
            check(mlajit_mla_prefill_workspace_size(rt.get(), &a, &bytes), "ws");
            check(mlajit_mla_prefill(rt.get(), &a, nullptr), "mla_prefill");
            t[size_t(i)] = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
            if (i % 16 == 15) MLAJIT_CU(cuCtxSynchronize(), "sync");
        }
        MLAJIT_CU(cuCtxSynchronize(), "sync");
        std::sort(t.begin(), t.end());
        std::printf("%-34s %10.2f us   (%s; p90 %.2f us)\n", name, t[t.size() / 2] / 1000.0, note, t[t.size() * 9 / 10] / 1000.0);
    };
    const std::string range = "T=" + std::to_string(o.tokens) + ".." + std::to_string(o.tokens + n - 1) + ", a new length every call";
    time_all("api.ws_query+mla_prefill, new T", range.c_str());
    time_all("api.ws_query+mla_prefill, seen T", "the same lengths again");
}

}  // namespace

int main(int argc, char** argv) try {
    Options o;
    o.self = argv[0];
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&] {
            if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
            return std::atoi(argv[++i]);
        };
        if (a == "--tokens") o.tokens = next();
        else if (a == "--batch") o.batch = next();
        else if (a == "--heads") o.heads = next();
        else if (a == "--topk") o.topk = next();
        else if (a == "--iters") o.iters = next();
        else if (a == "--cpu-only") o.cpu_only = true;
        else if (a == "--first-call") o.first_call = true;
        else if (a == "--split") o.split = true;
        else if (a == "--no-first-call") o.no_first_call = true;
        else throw std::runtime_error("unknown flag " + a + " (--tokens --batch --heads --topk --iters --cpu-only --no-first-call; --first-call [--split] is internal)");
    }
    if (o.batch < 1 || o.tokens < o.batch || o.tokens % o.batch) throw std::runtime_error("--tokens must be a multiple of --batch");
    if (o.first_call) return first_call(o);
    cpu_steps(o);
    if (o.cpu_only) return 0;
    try {
        mlajit::tools::open_gpu0();
    } catch (const std::exception& e) {
        std::printf("no GPU (%s): skipped the api.* and first.* measurements\n", e.what());
        return 0;
    }
    gpu_calls(o);
    if (o.no_first_call) return 0;  // --no-first-call: the per-call rows only (no fresh processes, no cold compile)
    // Fresh processes on one fresh cache: the first compiles and writes it, the next ones are measured.
    char dir[] = "/tmp/mlajit-host-cost.XXXXXX";
    if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp failed");
    setenv("MLAJIT_CACHE_DIR", dir, 1);
    std::string cold_parts;
    const auto cold = run_child(o, false, &cold_parts);
    std::vector<std::pair<double, double>> warm;
    for (int i = 0; i < 3; ++i) warm.push_back(run_child(o));
    std::sort(warm.begin(), warm.end(), [](auto& x, auto& y) { return x.second < y.second; });
    std::printf("%-34s %10.2f ms   (cold cache, compiles included: %.1f ms)\n", "first.call_warm_cache (queued)",
                warm[0].first, cold.second);
    std::printf("%-34s %10.2f ms   (best of 3 processes; median %.2f)\n", "first.call_warm_cache (done)", warm[0].second,
                warm[1].second);
    std::printf("cold process: %s", cold_parts.c_str());
    // The same first call with its parts timed apart, in two more fresh processes (the best one printed).
    std::string best_parts;
    double best = 1e30;
    for (int i = 0; i < 2; ++i) {
        std::string parts;
        const auto r = run_child(o, true, &parts);
        if (r.second >= 0 && r.second < best) best = r.second, best_parts = parts;
    }
    std::printf("first call split into parts (warm cache, done %.2f ms):\n%s", best, best_parts.c_str());
    std::string rm = std::string("rm -rf ") + dir;
    (void)std::system(rm.c_str());
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "mlajit-host-cost: %s\n", e.what());
    return 1;
}
