#include "ops/gemm.h"

#include "common/error.h"
#include "cuda/cublaslt_api.h"

namespace mlajit {

struct GemmRunner::Algo {
    cublasLtMatmulAlgo_t algo;
};

namespace {

// RAII for the four cuBLASLt descriptor kinds.
template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtObject {
    T h = nullptr;
    ~LtObject() {
        if (h) Destroy(h);
    }
};

cublasStatus_t destroy_desc(cublasLtMatmulDesc_t d) { return cublaslt().cublasLtMatmulDescDestroy(d); }
cublasStatus_t destroy_layout(cublasLtMatrixLayout_t l) { return cublaslt().cublasLtMatrixLayoutDestroy(l); }
cublasStatus_t destroy_pref(cublasLtMatmulPreference_t p) { return cublaslt().cublasLtMatmulPreferenceDestroy(p); }
using Desc = LtObject<cublasLtMatmulDesc_t, destroy_desc>;
using Layout = LtObject<cublasLtMatrixLayout_t, destroy_layout>;
using Pref = LtObject<cublasLtMatmulPreference_t, destroy_pref>;

// A column-major layout of `rows` x `cols` with leading dimension ld, strided over `batch`.
void make_layout(Layout& l, int64_t rows, int64_t cols, int64_t ld, int batch, int64_t batch_stride, const char* what) {
    MLAJIT_LT(cublasLtMatrixLayoutCreate(&l.h, CUDA_R_16BF, (uint64_t)rows, (uint64_t)cols, ld), what);
    if (batch > 1) {
        int32_t count = batch;
        MLAJIT_LT(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), what);
        MLAJIT_LT(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                   sizeof(batch_stride)),
                  what);
    }
}

}  // namespace

GemmAlgoKey gemm_algo_key(const GemmDesc& g, size_t workspace_bytes) {
    return std::make_tuple(g.m, g.n, g.k, g.batch, g.a.ld, g.a.batch_stride, g.b.ld, g.b.batch_stride, g.ldc,
                           g.c_batch_stride, int(g.a.transposed) * 2 + int(g.b.transposed),
                           int((reinterpret_cast<uintptr_t>(g.a.data) | reinterpret_cast<uintptr_t>(g.b.data) |
                                reinterpret_cast<uintptr_t>(g.c)) % 16 == 0),
                           workspace_bytes);
}

GemmRunner::GemmRunner() {
    cublasLtHandle_t h = nullptr;
    MLAJIT_LT(cublasLtCreate(&h), "creating the cuBLASLt handle");
    lt_ = h;
}

GemmRunner::~GemmRunner() {
    if (lt_) cublaslt().cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

size_t GemmRunner::cached_algos() {
    std::lock_guard lock(mu_);
    return algos_.size();
}

size_t GemmRunner::evicted_algos() {
    std::lock_guard lock(mu_);
    return algos_.evictions();
}

void GemmRunner::run(const GemmDesc& g, void* workspace, size_t workspace_bytes, CUstream stream, const char* what) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;
    // Row-major C[M,N] = A.B is column-major C^T[N,M] = B^T . A^T: cuBLASLt's first operand is our B.
    // A row-major [r, c] matrix with leading dimension ld is a column-major [c, r] one.
    const cublasOperation_t op_first = g.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = g.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    Desc desc;
    MLAJIT_LT(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    MLAJIT_LT(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)), what);
    MLAJIT_LT(cublasLtMatmulDescSetAttribute(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)), what);
    Layout la, lb, lc;
    // First operand: op(.) is [N, K]; stored column-major as [N, K] (B stored [K, N] row-major) or [K, N].
    if (g.b.transposed) make_layout(la, g.k, g.n, g.b.ld, g.batch, g.b.batch_stride, what);
    else make_layout(la, g.n, g.k, g.b.ld, g.batch, g.b.batch_stride, what);
    // Second operand: op(.) is [K, M].
    if (g.a.transposed) make_layout(lb, g.m, g.k, g.a.ld, g.batch, g.a.batch_stride, what);
    else make_layout(lb, g.k, g.m, g.a.ld, g.batch, g.a.batch_stride, what);
    make_layout(lc, g.n, g.m, g.ldc, g.batch, g.c_batch_stride, what);

    // Keyed on the exact shape: a heuristic result for another M may not be valid (or good) for this one.
    const GemmAlgoKey key = gemm_algo_key(g, workspace_bytes);
    std::shared_ptr<Algo> algo;
    {
        std::lock_guard lock(mu_);
        if (auto hit = algos_.find(key)) algo = std::move(*hit);
    }
    auto* lt = static_cast<cublasLtHandle_t>(lt_);
    if (!algo) {
        Pref pref;
        MLAJIT_LT(cublasLtMatmulPreferenceCreate(&pref.h), what);
        uint64_t ws = workspace_bytes;
        MLAJIT_LT(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
                  what);
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        MLAJIT_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc.h, la.h, lb.h, lc.h, lc.h, pref.h, 1, &result, &found), what);
        if (found < 1)
            fail(MLAJIT_ERROR_UNSUPPORTED, "cuBLASLt has no algorithm for {} (M {}, N {}, K {}, batch {}): report the shape",
                 what, g.m, g.n, g.k, g.batch);
        algo = std::make_shared<Algo>(Algo{result.algo});
        std::lock_guard lock(mu_);
        algos_.put(key, algo);
    }
    const float alpha = 1.f, beta = 0.f;
    MLAJIT_LT(cublasLtMatmul(lt, desc.h, &alpha, g.b.data, la.h, g.a.data, lb.h, &beta, g.c, lc.h, g.c, lc.h, &algo->algo,
                             workspace, workspace_bytes, reinterpret_cast<cudaStream_t>(stream)),
              what);
}

}  // namespace mlajit
