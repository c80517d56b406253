// One specialization of kernels_src/mha/sm90.cuh (the Hopper tier) compiled by nvcc for the harness, with
// a host launcher that encodes the TMA tensor maps the way the library does (src/ops/mha_sm90_maps.h).
// Build with -DWMASK=0|1 -DWPP=0|1 -DWNAME=<unique suffix>. Token counts of q and k come from
// mha90_totals (set by the harness before a launch: MhaFwdParams does not carry them).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
constexpr int MJ_BLOCK_M = 128;
constexpr int MJ_BLOCK_N = 128;
constexpr int MJ_STAGES = 2;
constexpr int MJ_MASKED = WMASK;
constexpr int MJ_PINGPONG = WPP;
constexpr int MJ_D_NOPE = 128;
constexpr int MJ_D_ROPE = 64;
constexpr int MJ_D_V = 128;
constexpr int MJ_ARCH = 90;
#define MJ_CAT2(a, b) a##b
#define MJ_CAT(a, b) MJ_CAT2(a, b)
#define mlajit_mha_fwd_sm90 MJ_CAT(kern_, WNAME)
#include "sm90.cuh"  // first: inside mha/sm90.cuh nvcc would resolve "sm90.cuh" to that file itself
#include "mha/sm90.cuh"  // with -I <older kernels_src> ahead of kernels_src: that version (build.sh's h90old)
#include "ops/mha_sm90_maps.h"

extern long long mha90_totals[2];

extern "C" cudaError_t MJ_CAT(launch_, WNAME)(const MhaFwdParams* p, cudaStream_t st) {
    // + 4096 for the masked kernel's mask stages (mj_mha90::MASK_STAGE_BYTES_TOTAL), as
    // src/ops/kernel_configs.cpp adds.
    const int smem = mj_mha90_smem_bytes(128, 128, 2, 192, 128) + (WMASK ? 4096 : 0);
    static bool init = false;
    static mlajit::TensorMapEncodeTiledFn encode = nullptr;
    if (!init) {
        cudaError_t e = cudaFuncSetAttribute(mlajit_mha_fwd_sm90, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        void* lib = dlopen("libcuda.so.1", RTLD_NOW);
        if (lib) encode = (mlajit::TensorMapEncodeTiledFn)dlsym(lib, "cuTensorMapEncodeTiled");
        if (!encode) {
            fprintf(stderr, "no cuTensorMapEncodeTiled in libcuda.so.1\n");
            return cudaErrorNotSupported;
        }
        init = true;
    }
    MhaFwdSm90Params p90;
    const mlajit::MhaSm90MapError err = mlajit::encode_mha_sm90_maps(encode, *p, mha90_totals[0], mha90_totals[1], p90);
    if (err.map) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed for %s: %d\n", err.map, (int)err.result);
        return cudaErrorInvalidValue;
    }
    dim3 grid((p->max_seqlen_q + 127) / 128, p->num_heads, p->batch);
    mlajit_mha_fwd_sm90<<<grid, mj_mha90_threads(128), smem, st>>>(p90);
    return cudaGetLastError();
}
