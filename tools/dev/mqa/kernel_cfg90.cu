// The Hopper-tier specialization of kernels_src/sparse_mqa/sm90.cuh for the standalone harness (the way the
// runtime specializes it: constexprs ahead of the #include). build.sh builds it for config tags ending in
// "sm90"; the entry is renamed per tag like kernel_cfg.cu's.
constexpr int MJ_BLOCK_H = 64;
constexpr int MJ_BLOCK_N = 64;
constexpr int MJ_STAGES = 2;
constexpr int MJ_D_LATENT = 512;
constexpr int MJ_D_ROPE = 64;
constexpr int MJ_ARCH = 90;
constexpr int MJ_KV_FP8 = CFG_FP8;
#ifndef CFG_PERSIST
#define CFG_PERSIST 0
#endif
constexpr int MJ_PERSIST = CFG_PERSIST;  // the persistent grid (sparse_mqa/sm90_persist.cuh), tags "*sm90per*"
#define MQA_CAT2(a, b) a##b
#define MQA_CAT(a, b) MQA_CAT2(a, b)
#define mlajit_sparse_mqa_fwd_sm90 MQA_CAT(mqa_kernel_, CFG_TAG)
#include "sm90.cuh"  // kernels_src/sm90.cuh (-I), before the kernel: see its include of "sm90.cuh"
#include "sparse_mqa/sm90.cuh"
#undef mlajit_sparse_mqa_fwd_sm90

#include <cuda_runtime.h>
#include "persist_blocks.h"

// Host launch as the runtime does it: grid (tokens, ceil(h / 64)), mj_mqa90_threads, mj_mqa90_smem_bytes.
extern "C" cudaError_t MQA_CAT(mqa_launch_, CFG_TAG)(const SparseMqaFwdParams* p, cudaStream_t stream) {
    const int smem = mj_mqa90_smem_bytes();
    static bool raised = false;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(MQA_CAT(mqa_kernel_, CFG_TAG), cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    dim3 grid(p->s_q, (p->num_heads + 63) / 64);
#if MJ_MQA90_PAIR
    grid.y = (grid.y + 1) & ~1u;  // clusters of two head blocks (a lone block gets an idle partner)
#endif
    if constexpr (MJ_PERSIST != 0) {  // min(items, SMs) blocks, items = tokens x head blocks (p->s_q: the call's tokens)
        static int blocks = 0;
        if (cudaError_t e = persist_blocks(blocks); e != cudaSuccess) return e;
        const unsigned items = grid.x * grid.y;
        grid = dim3(items < (unsigned)blocks ? items : (unsigned)blocks, 1);
    }
    MQA_CAT(mqa_kernel_, CFG_TAG)<<<grid, mj_mqa90_threads(), smem, stream>>>(*p);
    return cudaGetLastError();
}
