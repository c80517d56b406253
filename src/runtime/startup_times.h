// Where a process's first call spends its time (issue 15's 30 ms goal): each one-time step adds its
// duration here, and mlajit-host-cost --first-call --split prints them. Process-wide, lock-free, cheap
// enough to leave on (a clock read per one-time step, never per call on the hot path).
#pragma once
#include <chrono>
#include <cstdint>

namespace mlajit {

enum class StartupStep {
    driver_load,      // dlopen libcuda + symbols + cuInit
    nvrtc_load,       // dlopen libnvrtc + symbols (0 when every kernel came from the warm disk cache)
    cublaslt_load,    // dlopen libcublasLt + symbols (on cuBLASLt's set-up thread: started by mlajit_create where
                      // cuBLASLt runs the projections, else by the first product that needs it; never on the
                      // Hopper tier's own GEMM)
    cublaslt_create,  // cublasLtCreate (same thread)
    cublaslt_wait,    // how long a call waited for that thread (the part of the two above on the call's path)
    kernel_load,      // a kernel's first use in a context: disk cache read (or compile) + cuModuleLoadData
    kernel_first_launch,  // the first cuLaunchKernel of each loaded kernel (the driver's lazy loading lands here)
    cublaslt_heuristic,   // cublasLtMatmulAlgoGetHeuristic queries (a new GEMM class, or a refused check)
    cublaslt_first_matmul,  // the first cublasLtMatmul of each cuBLASLt handle (its kernels' lazy loading)
    cublaslt_warm_up, // the heuristic query a handle's set-up thread makes after cublasLtCreate (GemmRunner::warm_up)
    planner_build,    // a planner built: configuration, calibration table read and indexed
    count_
};

void startup_add(StartupStep step, std::chrono::steady_clock::duration d);
double startup_ms(StartupStep step);   // total so far
int64_t startup_count(StartupStep step);  // how many times it was added
const char* startup_step_name(StartupStep step);

// Adds the scope's duration to `step` when it ends (also when it ends by an exception).
class StartupTimer {
public:
    explicit StartupTimer(StartupStep step) : step_(step), t0_(std::chrono::steady_clock::now()) {}
    ~StartupTimer() { startup_add(step_, std::chrono::steady_clock::now() - t0_); }
    StartupTimer(const StartupTimer&) = delete;
    StartupTimer& operator=(const StartupTimer&) = delete;

private:
    StartupStep step_;
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace mlajit
