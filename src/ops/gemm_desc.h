// One bf16 matrix product as the ops describe it, in row-major terms (the layout of every tensor in mlajit):
// C_b[M, N] = op(A_b) . op(B_b) for b in [0, batch), fp32 accumulation, bf16 out. Header-only: the GEMM
// harness (tools/dev/gemm) builds the Hopper kernel's tensor maps from it the way the library does.
#pragma once
#include <cstdint>

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

}  // namespace mlajit
