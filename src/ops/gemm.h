// bf16 matrix products through cuBLASLt, described in row-major terms (the layout of every tensor in
// mlajit): C_b[M, N] = op(A_b) . op(B_b) for b in [0, batch), fp32 accumulation, bf16 out. cuBLASLt is
// column-major; the translation (C^T = B^T . A^T) lives in gemm.cpp and nowhere else.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <tuple>

#include "ops/lru_map.h"

namespace mlajit {

struct GemmOperand {
    const void* data = nullptr;
    int64_t ld = 0;            // elements between rows of the stored matrix
    int64_t batch_stride = 0;  // elements between the matrices of consecutive batch entries
    bool transposed = false;   // the stored matrix is op(X)^T: [K, M] for A, [N, K] for B
};

struct GemmDesc {
    int64_t m = 0, n = 0, k = 0;
    int batch = 1;
    GemmOperand a, b;  // A is [M, K] (stored [K, M] if transposed), B is [K, N] (stored [N, K] if transposed)
    void* c = nullptr;  // [M, N] bf16
    int64_t ldc = 0, c_batch_stride = 0;
};

// What the heuristic's choice depends on: the shape (M is the token count for the projections), the leading
// dimensions and batch strides, the transposes, whether every pointer is 16-byte aligned, the workspace.
using GemmAlgoKey = std::tuple<int64_t, int64_t, int64_t, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                               int, size_t>;
GemmAlgoKey gemm_algo_key(const GemmDesc& g, size_t workspace_bytes);

// How many heuristic results a GemmRunner keeps. An engine sends a new token count nearly every call and
// each count is a new shape for up to 3 GEMMs of a call, so the cache is bounded (least recently used out):
// 4096 shapes (~1 MB) hold the recurring lengths of a serving mix and a benchmark's sweep of 512 lengths on
// any path; a miss costs one heuristic query (tens of microseconds), never a wrong algorithm.
inline constexpr size_t kGemmAlgoCacheCapacity = 4096;

// One cuBLASLt handle per mlajit Handle, with the heuristic's algorithm cached per shape (bounded).
class GemmRunner {
public:
    GemmRunner();
    ~GemmRunner();
    GemmRunner(const GemmRunner&) = delete;
    GemmRunner& operator=(const GemmRunner&) = delete;

    // `what` names the product in errors ("the K/V up-projection"). The caller has made the context current.
    void run(const GemmDesc& g, void* workspace, size_t workspace_bytes, CUstream stream, const char* what);

    // Heuristic results held now (at most kGemmAlgoCacheCapacity) and how many were dropped so far.
    size_t cached_algos();
    size_t evicted_algos();

private:
    void* lt_ = nullptr;  // cublasLtHandle_t
    std::mutex mu_;
    struct Algo;
    LruMap<GemmAlgoKey, std::shared_ptr<Algo>> algos_{kGemmAlgoCacheCapacity};
};

// cuBLASLt's scratch inside the one-call workspace.
inline constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

}  // namespace mlajit
