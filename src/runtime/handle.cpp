#include "runtime/handle.h"

#include <optional>

#include "common/error.h"
#include "common/log.h"
#include "config/env.h"
#include "cuda/driver_api.h"
#include "cuda/cublaslt_api.h"
#include "ops/gemm.h"
#include "ops/gemm_cublaslt.h"
#include "runtime/startup_times.h"

namespace mlajit {

Handle::Handle(int device) {
    driver();  // throws the clear no-driver error before anything else
    if (device < 0) {
        MLAJIT_CU(cuCtxGetCurrent(&ctx_), "reading the current CUDA context");
        if (!ctx_)
            fail_arg("mlajit_create(device=-1) needs a current CUDA context on this thread, and there is none: create "
                     "one first (e.g. any CUDA runtime call, or torch.cuda.init()) or pass a device number");
        ScopedContext scope(ctx_);
        MLAJIT_CU(cuCtxGetDevice(&dev_), "reading the device of the current context");
    } else {
        int count = 0;
        MLAJIT_CU(cuDeviceGetCount(&count), "counting GPUs");
        if (device >= count) fail_arg("device {} does not exist: this machine has {} GPU(s) (0..{})", device, count, count - 1);
        MLAJIT_CU(cuDeviceGet(&dev_, device), "opening the device");
        MLAJIT_CU(cuDevicePrimaryCtxRetain(&ctx_, dev_), "retaining the device's primary context");
        primary_ = true;
    }
    int major = 0, minor = 0;
    MLAJIT_CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_), "reading the compute capability");
    MLAJIT_CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_), "reading the compute capability");
    MLAJIT_CU(cuDeviceGetAttribute(&sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_), "reading the SM count");
    MLAJIT_CU(cuDeviceGetAttribute(&max_smem_optin_, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev_),
              "reading the shared-memory limit");
    char name[256] = {};
    MLAJIT_CU(cuDeviceGetName(name, sizeof(name) - 1, dev_), "reading the GPU's name");
    gpu_name_ = name;
    arch_ = config().arch ? Arch::parse(*config().arch) : Arch::for_compute_capability(major, minor);
    if (arch_.sm < 80)
        fail(MLAJIT_ERROR_UNSUPPORTED, "this GPU has compute capability {}.{}: mlajit needs 8.0 or newer (bf16 tensor cores)", major, minor);
    arch_name_ = arch_.name();
    log().debug("handle on device {} (cc {}.{}, {} SMs), kernels for {}", (int)dev_, major, minor, sm_count_, arch_name_);
    gemm_ = std::make_unique<GemmRunner>(*this);
    // Last, so that nothing above can throw with the thread running (the destructor would not run to join it).
    // On the Hopper tier the projections run mlajit's own GEMM: cuBLASLt is not loaded unless a product needs it.
    if (!gemm_->jit()) start_cublaslt();
}

void Handle::start_cublaslt() {
    std::call_once(lt_started_, [this] {
        lt_ready_ = std::async(std::launch::async, [this] {
                        {
                            StartupTimer t(StartupStep::cublaslt_load);
                            (void)cublaslt_available();
                        }
                        if (!cublaslt_available()) (void)cublaslt();  // throws the missing-library error
                        ScopedContext scope(ctx_);
                        {
                            StartupTimer t(StartupStep::cublaslt_create);
                            lt_ = std::make_unique<CublasLtGemm>();
                        }
                        // cuBLASLt's one-time set-up on its first heuristic query, here rather than in a call.
                        try {
                            lt_->warm_up();
                        } catch (const std::exception& e) {  // a call's own query reports a real problem
                            log().debug("cuBLASLt warm-up: {}", e.what());
                        }
                    }).share();
    });
}

Handle::~Handle() {
    if (lt_ready_.valid()) lt_ready_.wait();  // the background set-up uses this handle's context
    if (lt_) {
        try {
            ScopedContext scope(ctx_);
            lt_.reset();
        } catch (...) {  // a destructor must not throw; the context is going away with the process or the handle
        }
    }
    if (primary_) driver().cuDevicePrimaryCtxRelease(dev_);
}

CublasLtGemm& Handle::cublaslt_gemm() {
    if (CublasLtGemm* g = lt_checked_.load(std::memory_order_acquire)) return *g;  // every call after the first
    start_cublaslt();  // no-op where the constructor started it
    if (lt_ready_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        StartupTimer t(StartupStep::cublaslt_wait);
        lt_ready_.wait();
    }
    lt_ready_.get();  // rethrows the set-up's error (e.g. cuBLASLt missing) at every use
    lt_checked_.store(lt_.get(), std::memory_order_release);
    return *lt_;
}

ScopedContext::ScopedContext(CUcontext ctx) {
    CUcontext cur = nullptr;
    MLAJIT_CU(cuCtxGetCurrent(&cur), "reading the current CUDA context");
    if (cur != ctx) {
        MLAJIT_CU(cuCtxPushCurrent(ctx), "making mlajit's context current");
        pushed_ = true;
    }
}

ScopedContext::~ScopedContext() {
    if (pushed_) {
        CUcontext popped = nullptr;
        driver().cuCtxPopCurrent(&popped);
    }
}

void Handle::launch(const KernelSpec& spec, Dim3 grid, int threads, int dyn_smem, void* params, CUstream stream,
                    KernelStore& store) {
    if (dyn_smem > max_smem_optin_)
        fail(MLAJIT_ERROR_UNSUPPORTED, "kernel {} needs {} bytes of shared memory and this GPU allows {} per block: pick a "
             "smaller tile (MLAJIT_MHA_TILE / MLAJIT_MQA_TILE)", spec_name(spec), dyn_smem, max_smem_optin_);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;  // nothing to do (an empty batch)
    ScopedContext scope(ctx_);
    LoadedKernel k = store.function(spec, ctx_, dyn_smem);
    void* args[] = {params};
    std::optional<StartupTimer> first;  // the first launch of a kernel: the driver may load it lazily here
    if (k.first_use) first.emplace(StartupStep::kernel_first_launch);
    CUresult r = driver().cuLaunchKernel(k.fn, grid.x, grid.y, grid.z, (unsigned)threads, 1, 1, (unsigned)dyn_smem, stream,
                                         args, nullptr);
    first.reset();
    if (r != CUDA_SUCCESS)
        cu_check(r, "cuLaunchKernel", fmt::format("launching {} with grid ({},{},{}) x {} threads, {} B shared memory",
                                                  spec_name(spec), grid.x, grid.y, grid.z, threads, dyn_smem).c_str());
}

}  // namespace mlajit
