// One specialization of kernels_src/topk_mask/sm80.cuh for tools/dev/mask/bench.cu.
// -DWRPB=<rows per block> -DWNAME=<name>
#include <cuda_runtime.h>
constexpr int MJ_ROWS_PER_BLOCK = WRPB;
constexpr int MJ_ARCH = 90;
#define MJ_CAT2(a, b) a##b
#define MJ_CAT(a, b) MJ_CAT2(a, b)
#define mlajit_topk_mask MJ_CAT(kern_, WNAME)
#include "topk_mask/sm80.cuh"

extern "C" cudaError_t MJ_CAT(launch_, WNAME)(const TopkMaskParams* p, cudaStream_t st) {
    dim3 grid((p->max_seqlen_q + WRPB - 1) / WRPB, p->batch);
    mlajit_topk_mask<<<grid, mj_mask_threads(), 0, st>>>(*p);
    return cudaGetLastError();
}
