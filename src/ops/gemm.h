// The one-call prefill's bf16 matrix products (GemmDesc, ops/gemm_desc.h). On the Hopper tier they run
// mlajit's own kernel (kernels_src/gemm/sm90.cuh: compiled by NVRTC and launched like every other kernel, so
// a call pays one cuLaunchKernel and a process never loads cuBLASLt); elsewhere, with MLAJIT_GEMM=cublaslt,
// and for a product the kernel cannot read (TMA needs 16-byte aligned bases and strides), cuBLASLt, loaded
// on first need (ops/gemm_cublaslt.h).
#pragma once
#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "ops/gemm_cublaslt.h"
#include "ops/gemm_desc.h"

namespace mlajit {

class Handle;

class GemmRunner {
public:
    explicit GemmRunner(Handle& h);
    GemmRunner(const GemmRunner&) = delete;
    GemmRunner& operator=(const GemmRunner&) = delete;

    // `what` names the product in errors ("the K/V up-projection"). The caller has made the context current.
    // workspace: cuBLASLt's scratch (the JIT kernel needs none).
    void run(const GemmDesc& g, void* workspace, size_t workspace_bytes, CUstream stream, const char* what);
    // The up-projection with A's rows read straight out of the paged latent cache (the paged-A variant of the
    // Hopper kernel; the caller checked fused_paged_max_heads() and that g is a K = 512 product, B K-major).
    void run_paged(const GemmDesc& g, const GemmPagedA& pa, CUstream stream, const char* what);

    // Whether run() takes the JIT kernel for products it can read (the Hopper tier, MLAJIT_GEMM unset or auto).
    bool jit() const { return jit_; }
    // cuBLASLt's scratch that a call's workspace reserves for run(): none with the JIT kernel (a product it
    // refuses, e.g. an unaligned input, then runs on cuBLASLt without scratch: the workspace query cannot see
    // the pointers, and 32 MiB per call for that rare case is what engines size their buffers by), else
    // kGemmWorkspaceBytes.
    size_t scratch_bytes() const { return jit_ ? 0 : kGemmWorkspaceBytes; }
    // Up to how many heads a paged bf16 cache's up-projection runs run_paged (0: never; the JIT kernel and
    // fused_paged_max_heads): what both the workspace query and the call decide by (mla_paged_fused).
    int64_t fused_paged_max_heads() const;
    // Products run so far by the JIT kernel and by cuBLASLt.
    int64_t jit_runs() const { return jit_runs_.load(std::memory_order_relaxed); }
    int64_t cublaslt_runs() const { return lt_runs_.load(std::memory_order_relaxed); }

    // cuBLASLt's algorithm caches (zeros while it was never needed): see CublasLtGemm.
    using Counts = CublasLtGemm::Counts;
    size_t cached_algos();
    size_t evicted_algos();
    Counts counts();

private:
    void run_jit(const GemmDesc& g, CUstream stream, const char* what, const GemmPagedA* pa = nullptr);
    Handle& h_;
    bool jit_ = false;
    std::atomic<int64_t> jit_runs_{0}, lt_runs_{0};
};

}  // namespace mlajit
