#include "ops/gemm_cublaslt.h"

#include <optional>

#include "common/error.h"
#include "cuda/cublaslt_api.h"
#include "runtime/startup_times.h"

namespace mlajit {

namespace {

// RAII for the four cuBLASLt descriptor kinds.
template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtObject {
    T h = nullptr;
    LtObject() = default;
    LtObject(const LtObject&) = delete;
    LtObject& operator=(const LtObject&) = delete;
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

// The descriptor and layouts of one shape. Row-major C[M,N] = A.B is column-major C^T[N,M] = B^T . A^T:
// cuBLASLt's first operand is our B. A row-major [r, c] matrix with leading dimension ld is a column-major
// [c, r] one.
struct Described {
    Desc desc;
    Layout la, lb, lc;
};

void describe(Described& d, const GemmDesc& g, const char* what) {
    const cublasOperation_t op_first = g.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = g.a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    MLAJIT_LT(cublasLtMatmulDescCreate(&d.desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
    MLAJIT_LT(cublasLtMatmulDescSetAttribute(d.desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)), what);
    MLAJIT_LT(cublasLtMatmulDescSetAttribute(d.desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)), what);
    // First operand: op(.) is [N, K]; stored column-major as [N, K] (B stored [K, N] row-major) or [K, N].
    if (g.b.transposed) make_layout(d.la, g.k, g.n, g.b.ld, g.batch, g.b.batch_stride, what);
    else make_layout(d.la, g.n, g.k, g.b.ld, g.batch, g.b.batch_stride, what);
    // Second operand: op(.) is [K, M].
    if (g.a.transposed) make_layout(d.lb, g.m, g.k, g.a.ld, g.batch, g.a.batch_stride, what);
    else make_layout(d.lb, g.k, g.m, g.a.ld, g.batch, g.a.batch_stride, what);
    make_layout(d.lc, g.n, g.m, g.ldc, g.batch, g.c_batch_stride, what);
}

// cuBLASLt's best algorithm for a described shape (`g` for its pointers' alignment and the message; `m` the
// M it was described with), within `workspace_bytes`; timed as `step` of the startup split.
cublasLtMatmulAlgo_t query_heuristic(void* lt_handle, const Described& d, const GemmDesc& g, int64_t m,
                                     size_t workspace_bytes, StartupStep step, const char* what) {
    Pref pref;
    MLAJIT_LT(cublasLtMatmulPreferenceCreate(&pref.h), what);
    uint64_t ws = workspace_bytes;
    MLAJIT_LT(cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)), what);
    const uint32_t align = uint32_t(gemm_alignment(g));
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        MLAJIT_LT(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, &align, sizeof(align)), what);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    {
        StartupTimer t(step);
        MLAJIT_LT(cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(lt_handle), d.desc.h, d.la.h, d.lb.h, d.lc.h,
                                                 d.lc.h, pref.h, 1, &result, &found),
                  what);
    }
    if (found < 1)
        fail(MLAJIT_ERROR_UNSUPPORTED, "cuBLASLt has no algorithm for {} (M {}, N {}, K {}, batch {}, alignment {} B): "
             "report the shape", what, m, g.n, g.k, g.batch, align);
    return result.algo;
}

}  // namespace

struct CublasLtGemm::Algo {
    cublasLtMatmulAlgo_t algo;
};

// Everything a call of one exact shape needs, built once.
struct CublasLtGemm::Plan {
    Described d;
    cublasLtMatmulAlgo_t algo;
};

GemmAlgoKey gemm_algo_key(const GemmDesc& g, size_t workspace_bytes) {
    return std::make_tuple(g.m, g.n, g.k, g.batch, g.a.ld, g.a.batch_stride, g.b.ld, g.b.batch_stride, g.ldc,
                           g.c_batch_stride, int(g.a.transposed) * 2 + int(g.b.transposed), gemm_alignment(g),
                           workspace_bytes);
}

int gemm_alignment(const GemmDesc& g) {
    const uintptr_t any = reinterpret_cast<uintptr_t>(g.a.data) | reinterpret_cast<uintptr_t>(g.b.data) |
                          reinterpret_cast<uintptr_t>(g.c) | uintptr_t(256);
    return int(any & (~any + 1));  // the lowest set bit
}

int64_t gemm_m_class(int64_t m) {
    if (m > (int64_t(1) << 40)) return m;  // no such token count; keeps the doubling below from overflowing
    int64_t c = 1;
    while (c < m) c <<= 1;
    return c;
}

GemmAlgoKey gemm_class_key(const GemmDesc& g, size_t workspace_bytes) {
    GemmDesc top = g;
    top.m = gemm_m_class(g.m);
    return gemm_algo_key(top, workspace_bytes);
}

CublasLtGemm::CublasLtGemm() {
    cublasLtHandle_t h = nullptr;
    MLAJIT_LT(cublasLtCreate(&h), "creating the cuBLASLt handle");
    lt_ = h;
}

CublasLtGemm::~CublasLtGemm() {
    {
        std::lock_guard lock(mu_);
        plans_ = LruMap<GemmAlgoKey, std::shared_ptr<Plan>>(1);  // descriptors go before the handle
        classes_ = LruMap<GemmAlgoKey, std::shared_ptr<Algo>>(1);
    }
    if (lt_) cublaslt().cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
}

size_t CublasLtGemm::cached_algos() {
    std::lock_guard lock(mu_);
    return plans_.size();
}

size_t CublasLtGemm::evicted_algos() {
    std::lock_guard lock(mu_);
    return plans_.evictions();
}

CublasLtGemm::Counts CublasLtGemm::counts() {
    std::lock_guard lock(mu_);
    return counts_;
}

// The heuristic's algorithm for g's class, run for the class's top M (so the choice does not depend on
// which M of the class came first).
std::shared_ptr<CublasLtGemm::Algo> CublasLtGemm::class_algo(const GemmDesc& g, size_t workspace_bytes, const char* what,
                                                         bool warm_up) {
    GemmDesc top = g;
    top.m = gemm_m_class(g.m);
    const GemmAlgoKey key = gemm_algo_key(top, workspace_bytes);  // = gemm_class_key(g, workspace_bytes)
    {
        std::lock_guard lock(mu_);
        if (auto hit = classes_.find(key)) return std::move(*hit);
    }
    Described d;
    describe(d, top, what);
    const cublasLtMatmulAlgo_t found = query_heuristic(lt_, d, g, top.m, workspace_bytes,
                                                       warm_up ? StartupStep::cublaslt_warm_up : StartupStep::cublaslt_heuristic, what);
    auto algo = std::make_shared<Algo>(Algo{found});
    std::lock_guard lock(mu_);
    ++counts_.heuristic_queries;
    classes_.put(key, algo);
    return algo;
}

void CublasLtGemm::prepare(const GemmDesc& g, size_t workspace_bytes, const char* what, bool warm_up) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;
    (void)class_algo(g, workspace_bytes, what, warm_up);
}

void CublasLtGemm::warm_up() {
    // No memory is touched (a heuristic query reads shapes only): stand-in 256-byte aligned addresses.
    GemmDesc g;
    g.m = 16;
    g.n = 128 * 256;
    g.k = 512;
    g.a = {reinterpret_cast<const void*>(uintptr_t(1) << 20), 576, 0, false};
    g.b = {reinterpret_cast<const void*>(uintptr_t(2) << 20), 512, 0, true};
    g.c = reinterpret_cast<void*>(uintptr_t(3) << 20);
    g.ldc = g.n;
    prepare(g, kGemmWorkspaceBytes, "cuBLASLt's warm-up query", true);
}

std::shared_ptr<CublasLtGemm::Plan> CublasLtGemm::plan_for(const GemmDesc& g, size_t workspace_bytes, const char* what) {
    const GemmAlgoKey key = gemm_algo_key(g, workspace_bytes);
    {
        std::lock_guard lock(mu_);
        if (auto hit = plans_.find(key)) return std::move(*hit);
    }
    auto plan = std::make_shared<Plan>();
    describe(plan->d, g, what);
    auto* lt = static_cast<cublasLtHandle_t>(lt_);
    // The class's algorithm, if cuBLASLt accepts it for this exact shape (and workspace) ...
    std::shared_ptr<Algo> algo;
    try {
        algo = class_algo(g, workspace_bytes, what);
    } catch (const Error&) {  // no algorithm for the class's top M: the exact shape's own query decides below
    }
    bool reused = false;
    if (algo) {
        cublasLtMatmulHeuristicResult_t check{};
        const cublasStatus_t st = cublaslt().cublasLtMatmulAlgoCheck(lt, plan->d.desc.h, plan->d.la.h, plan->d.lb.h,
                                                                     plan->d.lc.h, plan->d.lc.h, &algo->algo, &check);
        reused = st == CUBLAS_STATUS_SUCCESS && check.state == CUBLAS_STATUS_SUCCESS &&
                 check.workspaceSize <= workspace_bytes;
    }
    if (reused) {
        plan->algo = algo->algo;
    } else {
        // ... else the heuristic for the exact shape (what every new M cost before the classes).
        plan->algo = query_heuristic(lt_, plan->d, g, g.m, workspace_bytes, StartupStep::cublaslt_heuristic, what);
    }
    std::lock_guard lock(mu_);
    if (reused) ++counts_.class_reuses;
    else {
        if (algo) ++counts_.checks_refused;  // a class without an algorithm is not a refused check
        ++counts_.heuristic_queries;
    }
    plans_.put(key, plan);
    return plan;
}

void CublasLtGemm::run(const GemmDesc& g, void* workspace, size_t workspace_bytes, CUstream stream, const char* what) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;
    // Keyed on the exact shape: the descriptors hold M, and the algorithm was checked for this M.
    const std::shared_ptr<Plan> plan = plan_for(g, workspace_bytes, what);
    const float alpha = 1.f, beta = 0.f;
    std::optional<StartupTimer> first;  // the handle's first matmul: cuBLASLt's kernels load lazily here
    if (!first_matmul_done_.load(std::memory_order_relaxed)) first.emplace(StartupStep::cublaslt_first_matmul);
    MLAJIT_LT(cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_), plan->d.desc.h, &alpha, g.b.data, plan->d.la.h, g.a.data,
                             plan->d.lb.h, &beta, g.c, plan->d.lc.h, g.c, plan->d.lc.h, &plan->algo, workspace,
                             workspace_bytes, reinterpret_cast<cudaStream_t>(stream)),
              what);
    if (first) first_matmul_done_.store(true, std::memory_order_relaxed);
}

}  // namespace mlajit
