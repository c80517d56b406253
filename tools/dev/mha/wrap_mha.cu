// One specialization of kernels_src/mha_fwd.cuh compiled by nvcc for the harness, the way the runtime
// specializes it for NVRTC (constexprs prepended), plus a host launcher with the runtime's launch shape.
// Build with -DWBM=.. -DWBN=.. -DWW=.. [-DWST=2|3] -DWMASK=0|1 -DWNAME=<unique suffix>.
#include <cuda_runtime.h>
constexpr int MJ_BLOCK_M = WBM;
constexpr int MJ_BLOCK_N = WBN;
constexpr int MJ_WARPS = WW;
#ifndef WST
#define WST 2
#endif
constexpr int MJ_STAGES = WST;
constexpr int MJ_MASKED = WMASK;
constexpr int MJ_D_NOPE = 128;
constexpr int MJ_D_ROPE = 64;
constexpr int MJ_D_V = 128;
constexpr int MJ_UP_PROJ = 0;
constexpr int MJ_ARCH = 90;
#define MJ_CAT2(a, b) a##b
#define MJ_CAT(a, b) MJ_CAT2(a, b)
#define mlajit_mha_fwd MJ_CAT(kern_, WNAME)
#include "mha/sm80.cuh"

extern "C" cudaError_t MJ_CAT(launch_, WNAME)(const MhaFwdParams* p, cudaStream_t st) {
    const int smem = mj_mha_smem_bytes(WBM, WBN, WST, 192, 128);
    static bool init = false;
    if (!init) {
        cudaError_t e = cudaFuncSetAttribute(mlajit_mha_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        init = true;
    }
    dim3 grid((p->max_seqlen_q + WBM - 1) / WBM, p->num_heads, p->batch);
    mlajit_mha_fwd<<<grid, mj_mha_threads(WW), smem, st>>>(*p);
    return cudaGetLastError();
}
