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

// A's rows of an up-projection gathered out of the paged latent cache by the Hopper kernel (MJ_A_PAGED):
// row i of A (0..M-1) is key cu_seqlens_k[0] + i of requests 0..nreq-1 (cu_seqlens_k: device, absolute
// entries, this pointer's entry 0 = the step's first request); A = elements 0..K-1 of that page row. The
// GemmDesc's `a` is ignored.
struct GemmPagedA {
    const void* pages = nullptr;          // bf16 [num_blocks, block_size, >= 576]
    int64_t page_stride = 0, tok_stride = 0;  // elements
    const int32_t* block_table = nullptr;  // [nreq, max_blocks], row 0 = the step's first request
    int64_t bt_stride = 0;
    const int32_t* cu_seqlens_k = nullptr;
    int nreq = 0, block_size = 0, num_blocks = 0, max_blocks = 0;
    void* kpe_out = nullptr;  // bf16 [M, 64] contiguous: elements 512..575 of the rows, or null
};

}  // namespace mlajit
