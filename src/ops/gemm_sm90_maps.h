// The Hopper-tier GEMM's launch description (kernels_src/gemm/sm90.cuh): which products it serves, its tile
// width, and its three TMA tensor maps, built from a GemmDesc. Header-only and free of mlajit's runtime, so
// that the kernel harness (tools/dev/gemm) builds them exactly the way the library does.
#pragma once
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gemm/gemm_abi.h"
#include "ops/gemm_desc.h"

namespace mlajit {

using GemmTensorMapEncodeFn = decltype(&::cuTensorMapEncodeTiled);

// K is a JIT constant in 64-wide k-steps (gemm_sm90_k_tiles); past this the kernel is not specialized.
inline constexpr int64_t kGemmSm90MaxK = 64 * 64;

inline int gemm_sm90_k_tiles(int64_t k) { return int((k + 63) / 64); }

// Why the Hopper kernel cannot run g (null when it can): TMA reads and writes need 16-byte aligned bases and
// strides that are multiples of 16 bytes (8 bf16), and the kernel reads A K-major.
inline const char* gemm_sm90_refusal(const GemmDesc& g) {
    auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
    auto stride_ok = [](int64_t s) { return s > 0 && s % 8 == 0 && s < (int64_t(1) << 38); };
    if (g.k <= 0) return "K is 0 (TMA has no empty box)";
    if (g.a.transposed) return "A is stored transposed ([K, M]); the kernel reads A K-major";
    if (g.k > kGemmSm90MaxK) return "K is larger than 4096 (the kernel's K is a JIT constant up to 64 k-steps)";
    if (g.m >= (int64_t(1) << 31) || g.n >= (int64_t(1) << 31)) return "M or N does not fit TMA's 32-bit coordinates";
    if (!aligned(g.a.data) || !aligned(g.b.data) || !aligned(g.c)) return "a base address is not 16-byte aligned";
    if (!stride_ok(g.a.ld) || !stride_ok(g.b.ld) || !stride_ok(g.ldc)) return "a leading dimension is not a multiple of 8 elements";
    if (g.batch > 1 && (!stride_ok(g.a.batch_stride) || !stride_ok(g.b.batch_stride) || !stride_ok(g.c_batch_stride)))
        return "a batch stride is not a positive multiple of 8 elements";
    return nullptr;
}

// The tile: 64 rows when M <= 64 (a 128-row tile would do twice the padded tensor-core work), else 128;
// 256 columns (the fastest per tile) unless fewer than half the SMs would get a tile, then 128 (twice the
// tiles). N <= 128 (the output projection) always takes 128. Measured on the H200 (tools/dev/gemm harness,
// 2026-12-03): M=16 N=32768: 64x256 9.0 us, 64x128 10.7; M=16 N=4096: 64x128 4.9 us; M=8192 N=32768:
// 128x256 0.411 ms, 128x128 0.436.
struct GemmSm90Tile {
    int block_m, block_n, stages;
};
inline int gemm_sm90_stages(int block_m, int block_n) {
    return block_m == 128 ? (block_n == 256 ? 3 : 5) : (block_n == 256 ? 4 : 8);  // the kernel's SUPPORTED CONFIGS
}
inline GemmSm90Tile gemm_sm90_tile(const GemmDesc& g, int sm_count) {
    GemmSm90Tile t;
    t.block_m = g.m <= 64 ? 64 : 128;
    const int64_t tiles256 = (g.m + t.block_m - 1) / t.block_m * ((g.n + 255) / 256) * g.batch;
    t.block_n = g.n <= 128 || 2 * tiles256 < sm_count ? 128 : 256;
    t.stages = gemm_sm90_stages(t.block_m, t.block_n);
    return t;
}

struct GemmSm90MapError {
    const char* map = nullptr;  // "A", "B" or "C" when an encode failed, null on success
    CUresult result = CUDA_SUCCESS;
};

// Fills P (maps, tile counts, raster) for tile t (gemm_sm90_tile). g must pass gemm_sm90_refusal.
inline GemmSm90MapError encode_gemm_sm90(GemmTensorMapEncodeFn encode, const GemmDesc& g, const GemmSm90Tile& t, GemmSm90Params& P) {
    const int block_n = t.block_n;
    std::memset(&P, 0, sizeof P);
    // A 3-D bf16 map over `inner` x `rows` x batch with 128-byte swizzle; the two outer dimensions in stride
    // order ({rows, batch} unless the batch stride is the smaller one). A batch of 1 never steps its stride:
    // any legal value stands in.
    auto one = [&](MjTensorMap& m, const void* base, int64_t inner, int64_t rows, int64_t ld, int64_t bstride, unsigned box_rows,
                   int& batch_inner) -> CUresult {
        const int64_t bs = g.batch > 1 ? bstride : ld * std::max<int64_t>(rows, 1);
        batch_inner = g.batch > 1 && bs < ld ? 1 : 0;
        const cuuint64_t r = (cuuint64_t)std::max<int64_t>(rows, 1), b = (cuuint64_t)g.batch;
        const cuuint64_t dims[3] = {(cuuint64_t)inner, batch_inner ? b : r, batch_inner ? r : b};
        const cuuint64_t strides[2] = {(cuuint64_t)(batch_inner ? bs : ld) * 2, (cuuint64_t)(batch_inner ? ld : bs) * 2};
        const cuuint32_t box[3] = {64, batch_inner ? 1u : box_rows, batch_inner ? box_rows : 1u};
        const cuuint32_t estr[3] = {1, 1, 1};
        return encode(reinterpret_cast<CUtensorMap*>(&m), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides,
                      box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    CUresult r;
    if ((r = one(P.tm_a, g.a.data, g.k, g.m, g.a.ld, g.a.batch_stride, (unsigned)t.block_m, P.a_batch_inner)) != CUDA_SUCCESS) return {"A", r};
    if (g.b.transposed) r = one(P.tm_b, g.b.data, g.k, g.n, g.b.ld, g.b.batch_stride, (unsigned)block_n, P.b_batch_inner);  // [N, K]
    else r = one(P.tm_b, g.b.data, g.n, g.k, g.b.ld, g.b.batch_stride, 64, P.b_batch_inner);  // [K, N]: 64 x 64 boxes
    if (r != CUDA_SUCCESS) return {"B", r};
    if ((r = one(P.tm_c, g.c, g.n, g.m, g.ldc, g.c_batch_stride, 64, P.c_batch_inner)) != CUDA_SUCCESS) return {"C", r};
    P.tiles_m = int((g.m + t.block_m - 1) / t.block_m);
    P.tiles_n = int((g.n + block_n - 1) / block_n);
    P.num_tiles = P.tiles_m * P.tiles_n * g.batch;
    P.group_m = 16;  // 16 row tiles walk the N tiles together
    return {};
}

// Why the paged-A variant cannot read pa (null when it can): cp.async copies 16-byte chunks, so the pages'
// base and strides must keep rows 16-byte aligned; B and C as gemm_sm90_refusal says.
inline const char* gemm_sm90_paged_refusal(const GemmDesc& g, const GemmPagedA& pa) {
    if ((reinterpret_cast<uintptr_t>(pa.pages) & 15u) != 0) return "the pages' base address is not 16-byte aligned";
    if (pa.page_stride % 8 != 0 || pa.tok_stride % 8 != 0 || pa.tok_stride < 576)
        return "the pages' strides are not multiples of 8 elements (or a row is narrower than 576)";
    if (pa.nreq < 1 || pa.block_size < 1 || pa.cu_seqlens_k == nullptr || pa.block_table == nullptr) return "no requests or pages";
    if (g.m >= (int64_t(1) << 31)) return "M does not fit in 32 bits";
    GemmDesc d = g;
    d.a = {pa.pages, pa.tok_stride, 0, false};
    return gemm_sm90_refusal(d);
}

// The paged-A fields of P (after encode_gemm_sm90 on g with a = the pages).
inline void set_gemm_sm90_paged(const GemmDesc& g, const GemmPagedA& pa, GemmSm90Params& P) {
    P.a_pages = pa.pages;
    P.a_page_stride = pa.page_stride;
    P.a_tok_stride = pa.tok_stride;
    P.a_block_table = pa.block_table;
    P.a_bt_stride = pa.bt_stride;
    P.a_cu_seqlens = pa.cu_seqlens_k;
    P.a_nreq = pa.nreq;
    P.a_block_size = pa.block_size;
    P.a_num_blocks = pa.num_blocks;
    P.a_max_blocks = pa.max_blocks;
    P.m = int(g.m);
    P.kpe_out = pa.kpe_out;
}

}  // namespace mlajit
