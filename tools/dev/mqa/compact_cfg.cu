// One specialization of kernels_src/sparse_mqa/compact.cuh (the key-set pre-pass) for the standalone harness, the way the
// runtime would specialize it (constexprs ahead of the #include). build.sh builds one per line of compact_variants.h with
//   -DCFG_CT=threads -DCFG_CW=widest row -DCFG_FP8=0|1
constexpr int MJ_KV_FP8 = CFG_FP8;
constexpr int MJ_COMPACT_THREADS = CFG_CT;
constexpr int MJ_COMPACT_MAXW = CFG_CW;
#define MQA_CAT4(a, b, c, d) a##b##_##c##_##d
#define MQA_CAT(a, b, c, d) MQA_CAT4(a, b, c, d)
#define mlajit_sparse_mqa_compact MQA_CAT(mqa_compact_kernel_, CFG_CT, CFG_CW, CFG_FP8)
#include "sparse_mqa/compact.cuh"
#undef mlajit_sparse_mqa_compact

#include <cuda_runtime.h>

// Host launch: grid.x = the call's tokens (the main kernel's grid.x), CFG_CT threads, mj_mqa_compact_smem_bytes(width).
extern "C" cudaError_t MQA_CAT(mqa_compact_launch_, CFG_CT, CFG_CW, CFG_FP8)(const SparseMqaFwdParams* p, cudaStream_t stream) {
    const int smem = mj_mqa_compact_smem_bytes(p->topk);
    if (p->topk > CFG_CW) return cudaErrorInvalidValue;
    static int raised = 0;
    if (smem > 48 * 1024 && smem > raised) {
        cudaError_t e = cudaFuncSetAttribute(MQA_CAT(mqa_compact_kernel_, CFG_CT, CFG_CW, CFG_FP8), cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e != cudaSuccess) return e;
        raised = smem;
    }
    MQA_CAT(mqa_compact_kernel_, CFG_CT, CFG_CW, CFG_FP8)<<<p->s_q, CFG_CT, smem, stream>>>(*p);
    return cudaGetLastError();
}
