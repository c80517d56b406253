#include "runtime/startup_times.h"

#include <atomic>

namespace mlajit {

namespace {
constexpr int kSteps = int(StartupStep::count_);
std::atomic<int64_t> g_ns[kSteps];
std::atomic<int64_t> g_count[kSteps];
}  // namespace

void startup_add(StartupStep step, std::chrono::steady_clock::duration d) {
    const int i = int(step);
    g_ns[i].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(), std::memory_order_relaxed);
    g_count[i].fetch_add(1, std::memory_order_relaxed);
}

double startup_ms(StartupStep step) { return double(g_ns[int(step)].load(std::memory_order_relaxed)) / 1e6; }

int64_t startup_count(StartupStep step) { return g_count[int(step)].load(std::memory_order_relaxed); }

const char* startup_step_name(StartupStep step) {
    switch (step) {
        case StartupStep::driver_load: return "driver_load";
        case StartupStep::nvrtc_load: return "nvrtc_load";
        case StartupStep::cublaslt_load: return "cublaslt_load";
        case StartupStep::cublaslt_create: return "cublaslt_create";
        case StartupStep::cublaslt_wait: return "cublaslt_wait";
        case StartupStep::kernel_load: return "kernel_load";
        case StartupStep::kernel_first_launch: return "kernel_first_launch";
        case StartupStep::cublaslt_heuristic: return "cublaslt_heuristic";
        case StartupStep::cublaslt_first_matmul: return "cublaslt_first_matmul";
        case StartupStep::cublaslt_warm_up: return "cublaslt_warm_up";
        case StartupStep::planner_build: return "planner_build";
        case StartupStep::count_: break;
    }
    return "?";
}

}  // namespace mlajit
