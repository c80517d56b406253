// The Hopper-tier 16 / 32-head specialization of kernels_src/sparse_mqa/sm90_t.cuh (keys as the wgmma M dimension)
// for the standalone harness. build.sh builds it for config tags containing "sm90t" (CFG_H, CFG_N, CFG_S: the config's heads, keys, stages).
constexpr int MJ_BLOCK_H = CFG_H;
constexpr int MJ_BLOCK_N = CFG_N;
constexpr int MJ_STAGES = CFG_S;
constexpr int MJ_D_LATENT = 512;
constexpr int MJ_D_ROPE = 64;
constexpr int MJ_ARCH = 90;
constexpr int MJ_KV_FP8 = CFG_FP8;
#ifndef CFG_PERSIST
#define CFG_PERSIST 0
#endif
constexpr int MJ_PERSIST = CFG_PERSIST;
#define MQA_CAT2(a, b) a##b
#define MQA_CAT(a, b) MQA_CAT2(a, b)
#define mlajit_sparse_mqa_fwd_sm90t MQA_CAT(mqa_kernel_, CFG_TAG)
#include "sm90.cuh"  // kernels_src/sm90.cuh (-I), before the kernel: see its include of "sm90.cuh"
#include "sparse_mqa/sm90_t.cuh"
#undef mlajit_sparse_mqa_fwd_sm90t

#include <cuda_runtime.h>
#include <cstdlib>
#include "persist_blocks.h"

// Host launch as the runtime does it: grid (tokens, ceil(h / CFG_H)) (PERSIST: min(tokens, SMs)), mj_mqa90t_threads, mj_mqa90t_smem_bytes (the FP8 cache's
// scale-folding body, MJ_MQA90T8_FOLD: mj_mqa90t8_smem_bytes).
extern "C" cudaError_t MQA_CAT(mqa_launch_, CFG_TAG)(const SparseMqaFwdParams* p, cudaStream_t stream) {
    const int smem = CFG_FP8 && MJ_MQA90T8_FOLD ? mj_mqa90t8_smem_bytes(CFG_H, CFG_N, CFG_S) : mj_mqa90t::kSmem;  // mj_mqa90t_smem_bytes, plus the raw rings of MJ_MQA90T8_STAGE
    static bool raised = false;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(MQA_CAT(mqa_kernel_, CFG_TAG), cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    dim3 grid(p->s_q, (p->num_heads + CFG_H - 1) / CFG_H);
    if constexpr (mj_mqa90t::kPersist) {  // the persistent grid: at most one block a SM (p->s_q: the call's tokens, see harness.cu)
        static int blocks = 0;
        if (cudaError_t e = persist_blocks(blocks); e != cudaSuccess) return e;
        grid.x = grid.x < (unsigned)blocks ? grid.x : (unsigned)blocks;
    }
    MQA_CAT(mqa_kernel_, CFG_TAG)<<<grid, mj_mqa90t::kThreads, smem, stream>>>(*p);  // mj_mqa90t_threads(), 384 for the folding body
    return cudaGetLastError();
}
