// One specialization of kernels_src/gemm/sm90.cuh compiled by nvcc for the GEMM harness, with a host
// launcher that builds the tensor maps the way the library does (src/ops/gemm_sm90_maps.h).
// Build with -DWBM=64|128 -DWBN=128|256 -DWNM=0|1 -DWKT=<k-steps> -DWNAME=<unique suffix>.
#include <cuda_runtime.h>

#include <cstdio>
constexpr int MJ_BLOCK_M = WBM;
constexpr int MJ_BLOCK_N = WBN;
constexpr int MJ_STAGES = WBM == 128 ? (WBN == 256 ? 3 : 5) : (WBN == 256 ? 4 : 8);
constexpr int MJ_B_NMAJOR = WNM;
constexpr int MJ_K_TILES = WKT;
constexpr int MJ_A_PAGED = 0;
constexpr int MJ_ARCH = 90;
#define MJ_CAT2(a, b) a##b
#define MJ_CAT(a, b) MJ_CAT2(a, b)
#define mlajit_gemm_sm90 MJ_CAT(kern_, WNAME)
#include "sm90.cuh"
#include "gemm/sm90.cuh"
#include "ops/gemm_sm90_maps.h"

extern mlajit::GemmTensorMapEncodeFn gemm90_encode;

extern "C" cudaError_t MJ_CAT(launch_, WNAME)(const mlajit::GemmDesc* g, int sm_count, cudaStream_t st) {
    const int smem = mj_gemm90_smem_bytes(MJ_BLOCK_M, MJ_BLOCK_N, MJ_STAGES);
    static bool init = false;
    if (!init) {
        cudaError_t e = cudaFuncSetAttribute(mlajit_gemm_sm90, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        init = true;
    }
    GemmSm90Params P;
    const mlajit::GemmSm90MapError err = mlajit::encode_gemm_sm90(gemm90_encode, *g, mlajit::GemmSm90Tile{MJ_BLOCK_M, MJ_BLOCK_N, MJ_STAGES}, P);
    if (err.map) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed for %s: %d\n", err.map, (int)err.result);
        return cudaErrorInvalidValue;
    }
    const int grid = P.num_tiles < sm_count ? P.num_tiles : sm_count;
    mlajit_gemm_sm90<<<grid, mj_gemm90_threads(), smem, st>>>(P);
    return cudaGetLastError();
}
