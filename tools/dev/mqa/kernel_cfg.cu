// One specialization of kernels_src/sparse_mqa_fwd.cuh for the standalone harness, the way the runtime
// specializes it (constexprs ahead of the #include). Built once per config with
//   -DCFG_H=.. -DCFG_N=.. -DCFG_S=.. -DCFG_TAG=tag [-DMJ_MQA_KSPLIT=1]
// The entry is renamed per config so that several link into one harness binary.
constexpr int MJ_BLOCK_H = CFG_H;
constexpr int MJ_BLOCK_N = CFG_N;
constexpr int MJ_WARPS = 8;
constexpr int MJ_STAGES = CFG_S;
constexpr int MJ_D_LATENT = 512;
constexpr int MJ_D_ROPE = 64;
constexpr int MJ_ARCH = 90;
constexpr int MJ_KV_FP8 = CFG_FP8;
#define MQA_CAT2(a, b) a##b
#define MQA_CAT(a, b) MQA_CAT2(a, b)
#define mlajit_sparse_mqa_fwd MQA_CAT(mqa_kernel_, CFG_TAG)
#include "sparse_mqa/sm80.cuh"
#undef mlajit_sparse_mqa_fwd

#include <cuda_runtime.h>

// Host launch exactly as the runtime does it: grid (s_q, ceil(h / BLOCK_H)), mj_mqa_threads, mj_mqa_smem_bytes.
extern "C" cudaError_t MQA_CAT(mqa_launch_, CFG_TAG)(const SparseMqaFwdParams* p, cudaStream_t stream) {
    const int smem = MJ_KV_FP8 ? mj_mqa_smem_bytes_fp8(MJ_BLOCK_H, MJ_BLOCK_N, MJ_STAGES) : mj_mqa_smem_bytes(MJ_BLOCK_H, MJ_BLOCK_N, MJ_STAGES, 576, 512);
    static bool raised = false;
    if (!raised) {
        cudaError_t e = cudaFuncSetAttribute(MQA_CAT(mqa_kernel_, CFG_TAG), cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        raised = true;
    }
    dim3 grid(p->s_q, (p->num_heads + MJ_BLOCK_H - 1) / MJ_BLOCK_H);
    MQA_CAT(mqa_kernel_, CFG_TAG)<<<grid, mj_mqa_threads(MJ_WARPS), smem, stream>>>(*p);
    return cudaGetLastError();
}
