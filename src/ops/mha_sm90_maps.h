// The TMA tensor maps of the Hopper-tier MHA kernel (kernels_src/mha/sm90.cuh: four, five when masked),
// encoded from the portable tier's MhaFwdParams. Header-only and free of mlajit's runtime so that the kernel
// harness (tools/dev/mha) builds the maps exactly the way the library does.
#pragma once
#include <cuda.h>

#include <cstring>

#include "mlajit_abi.h"

namespace mlajit {

using TensorMapEncodeTiledFn = decltype(&::cuTensorMapEncodeTiled);

struct MhaSm90MapError {
    const char* map = nullptr;  // which tensor failed ("q", "k_nope", "k_pe", "v", "mask"), null on success
    CUresult result = CUDA_SUCCESS;
};

// Whether the Hopper kernel can read a mask through TMA: a 16-byte aligned base and a row stride of a
// multiple of 4 words (16 bytes). Library-built masks (mlajit_topk_mask_words) always are; the op runs the
// portable tier for any other mask.
inline bool mha_sm90_mask_ok(const MhaFwdParams& p) {
    return !p.mask || (reinterpret_cast<unsigned long long>(p.mask) % 16 == 0 && p.mask_stride_row % 4 == 0 && p.mask_stride_row > 0);
}

// Every map is 3-D {dim, head, token} over bf16 with 64 x 1 x 128 boxes (64 columns = one 128-byte
// swizzle row; 128 rows = one query half-tile pair or one key tile) and zero fill past the tensor.
// total_q / total_k: token counts of q and of the keys (the outermost extents).
inline MhaSm90MapError encode_mha_sm90_maps(TensorMapEncodeTiledFn encode, const MhaFwdParams& p, long long total_q,
                                            long long total_k, MhaFwdSm90Params& out) {
    std::memset(&out, 0, sizeof out);
    out.p = p;
    out.kp_shared = p.kp_stride_head == 0 ? 1 : 0;
    auto one = [&](MjTensorMap& m, const void* base, unsigned long long width, unsigned long long heads, long long stride_head,
                   long long stride_tok, unsigned long long tokens) -> CUresult {
        // A head extent of 1 (a shared k_pe) never steps its stride; any legal value (a multiple of 16
        // bytes) stands in for the 0 the caller's layout has there.
        const cuuint64_t dims[3] = {width, heads, tokens > 0 ? (cuuint64_t)tokens : 1};
        const cuuint64_t strides[2] = {heads == 1 ? (cuuint64_t)128 : (cuuint64_t)stride_head * 2, (cuuint64_t)stride_tok * 2};
        const cuuint32_t box[3] = {64, 1, 128};
        const cuuint32_t estr[3] = {1, 1, 1};
        return encode(reinterpret_cast<CUtensorMap*>(&m), CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides,
                      box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    };
    const unsigned long long h = (unsigned long long)p.num_heads;
    CUresult r;
    if ((r = one(out.tm_q, p.q, 192, h, p.q_stride_head, p.q_stride_tok, total_q)) != CUDA_SUCCESS) return {"q", r};
    if ((r = one(out.tm_k_nope, p.k_nope, 128, h, p.kn_stride_head, p.kn_stride_tok, total_k)) != CUDA_SUCCESS) return {"k_nope", r};
    if ((r = one(out.tm_k_pe, p.k_pe, 64, out.kp_shared ? 1 : h, p.kp_stride_head, p.kp_stride_tok, total_k)) != CUDA_SUCCESS)
        return {"k_pe", r};
    if ((r = one(out.tm_v, p.v, 128, h, p.v_stride_head, p.v_stride_tok, total_k)) != CUDA_SUCCESS) return {"v", r};
    if (p.mask) {
        // The masked kernel's mask words: {word, row} over uint32, one 4-word x 128-row box per key tile
        // (16-byte rows, no swizzle), zero fill past the tensor. Width: the words any request can use.
        // Needs a 16-byte aligned base and a row stride of a multiple of 4 words (mha_sm90_mask_ok).
        const cuuint64_t dims[2] = {(cuuint64_t)((p.max_seqlen_k + 31) / 32 > 0 ? (p.max_seqlen_k + 31) / 32 : 1),
                                    total_q > 0 ? (cuuint64_t)total_q : 1};
        const cuuint64_t strides[1] = {(cuuint64_t)p.mask_stride_row * 4};
        const cuuint32_t box[2] = {4, 128};
        const cuuint32_t estr[2] = {1, 1};
        r = encode(reinterpret_cast<CUtensorMap*>(&out.tm_mask), CU_TENSOR_MAP_DATA_TYPE_UINT32, 2, const_cast<unsigned*>(p.mask), dims,
                   strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) return {"mask", r};
    }
    return {};
}

}  // namespace mlajit
