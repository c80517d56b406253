// A runtime handle: one CUDA context (the caller's current one, or a device's primary context), the
// device's properties the ops need, and kernel launch on a caller's stream.
#pragma once
#include <cuda.h>

#include <atomic>
#include <future>
#include <memory>
#include <mutex>

#include "jit/kernel_spec.h"
#include "jit/kernel_store.h"

struct mlajit_handle_s;  // the C API's handle (include/mlajit/mlajit.h)

namespace mlajit {

class GemmRunner;
class CublasLtGemm;

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};

class Handle {
public:
    // device < 0: the calling thread's current context (error if none); else the device's primary context.
    explicit Handle(int device);
    ~Handle();
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;

    const Arch& arch() const { return arch_; }
    const std::string& arch_name() const { return arch_name_; }
    int sm_count() const { return sm_count_; }
    int max_smem_per_block() const { return max_smem_optin_; }
    CUcontext context() const { return ctx_; }
    const std::string& gpu_name() const { return gpu_name_; }  // as the driver reports it: "NVIDIA H200"

    // The one-call prefill's projections (ops/gemm.h): mlajit's own GEMM kernel on the Hopper tier, cuBLASLt
    // elsewhere or for what that kernel cannot read.
    GemmRunner& gemm() { return *gemm_; }
    // cuBLASLt for those products. Loading it (a 540 MB library) and cublasLtCreate take tens of milliseconds
    // (plus ~100 for its first heuristic query), so where the projections need it (gemm().jit() false) the
    // constructor starts them on a background thread and the first use joins it; on the Hopper tier nothing
    // is loaded until a product needs it (then the caller waits for the set-up). A machine without cuBLASLt
    // still runs the attention ops; cuBLASLt's first use throws Error(UNSUPPORTED), the same message every time.
    CublasLtGemm& cublaslt_gemm();
    // cuBLASLt's runner if its set-up has finished successfully, else null (never waits, never starts it).
    CublasLtGemm* cublaslt_gemm_if_ready() { return lt_checked_.load(std::memory_order_acquire); }

    // Launches spec's kernel with one by-value parameter struct. Makes the handle's context current for
    // the call if it is not, and restores the caller's afterwards.
    void launch(const KernelSpec& spec, Dim3 grid, int threads, int dyn_smem, void* params, CUstream stream,
                KernelStore& store = KernelStore::global());

private:
    CUcontext ctx_ = nullptr;
    CUdevice dev_ = 0;
    bool primary_ = false;
    Arch arch_;
    std::string arch_name_;
    int sm_count_ = 0;
    int max_smem_optin_ = 0;
    std::string gpu_name_;
    void start_cublaslt();  // starts cuBLASLt's set-up thread (once)
    std::unique_ptr<GemmRunner> gemm_;
    std::unique_ptr<CublasLtGemm> lt_;  // written by the set-up thread, read after lt_ready_
    std::once_flag lt_started_;
    std::shared_future<void> lt_ready_;  // that thread's end; holds its exception if it failed
    std::atomic<CublasLtGemm*> lt_checked_{nullptr};  // lt_ once that thread succeeded (the hot path's test)
};

// The Handle behind a C API handle (tools and tests measure its parts; throws on NULL).
Handle& handle_of(::mlajit_handle_s* h);

// Pushes ctx for a scope if it is not the current one.
class ScopedContext {
public:
    explicit ScopedContext(CUcontext ctx);
    ~ScopedContext();

private:
    bool pushed_ = false;
};

}  // namespace mlajit
