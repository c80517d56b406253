// bf16 matrix products (ops/gemm_desc.h) through cuBLASLt: the projections' GEMM where mlajit's own kernel
// does not run (ops/gemm.h decides). cuBLASLt is column-major; the translation (C^T = B^T . A^T) lives in
// gemm_cublaslt.cpp and nowhere else.
#pragma once
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>

#include "ops/gemm_desc.h"
#include "ops/lru_map.h"

namespace mlajit {

// What the heuristic's choice depends on: the shape (M is the token count for the projections), the leading
// dimensions and batch strides, the transposes, the pointers' common alignment (gemm_alignment), the workspace.
using GemmAlgoKey = std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                               int, size_t>;
GemmAlgoKey gemm_algo_key(const GemmDesc& g, size_t workspace_bytes);

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the three pointers: the
// heuristic is told it (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), so it never picks an algorithm that needs more.
int gemm_alignment(const GemmDesc& g);

// The token-count class of M: the next power of two (M itself when it is one). A new M costs cuBLASLt's
// heuristic ~170 us per GEMM (H200), more than the whole call; within a class the heuristic runs once, for
// the class's top M, and that algorithm serves every M of the class once cublasLtMatmulAlgoCheck accepted
// it for the exact shape (an algorithm it refuses falls back to the exact shape's own heuristic query).
int64_t gemm_m_class(int64_t m);
// gemm_algo_key with M replaced by its class.
GemmAlgoKey gemm_class_key(const GemmDesc& g, size_t workspace_bytes);

// How many exact shapes (and M classes) a CublasLtGemm keeps. An engine sends a new token count nearly every
// call and each count is a new shape for up to 3 GEMMs of a call, so the caches are bounded (least recently
// used out): 4096 shapes (a few MB of cuBLASLt descriptors) hold the recurring lengths of a serving mix and
// a benchmark's sweep of 512 lengths on any path; a miss costs a few descriptors and one algorithm check
// (or, for a new class, one heuristic query), never a wrong algorithm.
inline constexpr size_t kGemmAlgoCacheCapacity = 4096;

// One cuBLASLt handle per mlajit Handle. Per exact shape it keeps what a call needs ready (the matmul
// descriptor, the three layouts and the algorithm: a hit is one lookup and cublasLtMatmul); per M class the
// heuristic's algorithm (both bounded, least recently used out).
class CublasLtGemm {
public:
    CublasLtGemm();
    ~CublasLtGemm();
    CublasLtGemm(const CublasLtGemm&) = delete;
    CublasLtGemm& operator=(const CublasLtGemm&) = delete;

    // `what` names the product in errors ("the K/V up-projection"). The caller has made the context current.
    void run(const GemmDesc& g, void* workspace, size_t workspace_bytes, CUstream stream, const char* what);

    // Exact shapes held now (at most kGemmAlgoCacheCapacity) and how many were dropped so far.
    size_t cached_algos();
    size_t evicted_algos();

    // How shapes were served so far: heuristic queries run (a class's first shape, or an algorithm the
    // check refused), shapes served by their class's algorithm after cublasLtMatmulAlgoCheck, and checks refused.
    struct Counts {
        int64_t heuristic_queries = 0, class_reuses = 0, checks_refused = 0;
    };
    Counts counts();

    // Runs the heuristic for g's class now (no matmul), so that a later call of that class pays only the
    // check. The caller has made the context current.
    // warm_up: its time counts as StartupStep::cublaslt_warm_up (else cublaslt_heuristic).
    void prepare(const GemmDesc& g, size_t workspace_bytes, const char* what, bool warm_up = false);
    // prepare() for the one-call prefill's most common product, DeepSeek-V3.2's K/V up-projection of a short
    // chunk at 128 heads: it pays cuBLASLt's one-time set-up of its first heuristic query (on the thread that
    // creates the handle, before any call needs it) and leaves that class's algorithm ready.
    void warm_up();

private:
    struct Plan;
    struct Algo;
    std::shared_ptr<Plan> plan_for(const GemmDesc& g, size_t workspace_bytes, const char* what);
    std::shared_ptr<Algo> class_algo(const GemmDesc& g, size_t workspace_bytes, const char* what, bool warm_up = false);

    void* lt_ = nullptr;  // cublasLtHandle_t
    std::mutex mu_;
    LruMap<GemmAlgoKey, std::shared_ptr<Plan>> plans_{kGemmAlgoCacheCapacity};
    LruMap<GemmAlgoKey, std::shared_ptr<Algo>> classes_{kGemmAlgoCacheCapacity};
    Counts counts_;
    std::atomic<bool> first_matmul_done_{false};
};

// cuBLASLt's scratch inside the one-call workspace.
inline constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

}  // namespace mlajit
