// Thin C++ layer over the C API (include/mlajit/mlajit.h): an owning handle, status -> exception, and
// tensor descriptors. Header-only and inline, so it adds nothing to the library's ABI.
#pragma once
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "mlajit/mlajit.h"

namespace mlajit {

// Thrown for any non-OK status, with the library's message (what was wrong and what to do).
class ApiError : public std::runtime_error {
public:
    ApiError(mlajit_status s, const std::string& what)
        : std::runtime_error(std::string(mlajit_status_name(s)) + ": " + what), status_(s) {}
    mlajit_status status() const { return status_; }

private:
    mlajit_status status_;
};

inline void check(mlajit_status s) {
    if (s != MLAJIT_OK) throw ApiError(s, mlajit_last_error());
}

// Descriptor of a contiguous row-major tensor (strides derived from the shape).
inline mlajit_tensor contiguous_tensor(void* data, mlajit_dtype dtype, std::initializer_list<int64_t> shape) {
    if (shape.size() > 4) throw std::invalid_argument("mlajit_tensor holds at most 4 dimensions");
    mlajit_tensor t{};
    t.data = data;
    t.dtype = dtype;
    t.ndim = (int32_t)shape.size();
    int i = 0;
    for (int64_t d : shape) t.shape[i++] = d;
    int64_t stride = 1;
    for (int k = t.ndim - 1; k >= 0; --k) {
        t.stride[k] = stride;
        stride *= t.shape[k];
    }
    return t;
}

// Descriptor of a strided view (strides in elements, the last one 1): e.g. q_nope as the first 128 columns
// of a packed [T, h, 192] tensor is strided_tensor(q, MLAJIT_BF16, {T, h, 128}, {h * 192, 192, 1}).
inline mlajit_tensor strided_tensor(const void* data, mlajit_dtype dtype, std::initializer_list<int64_t> shape,
                                    std::initializer_list<int64_t> stride) {
    if (stride.size() != shape.size()) throw std::invalid_argument("strided_tensor: one stride per dimension");
    mlajit_tensor t = contiguous_tensor(const_cast<void*>(data), dtype, shape);
    int i = 0;
    for (int64_t s : stride) t.stride[i++] = s;
    return t;
}

// Owns an mlajit_handle. device < 0: the caller's current CUDA context; else that device's primary one.
class Runtime {
public:
    explicit Runtime(int device = -1) { check(mlajit_create(device, &h_)); }
    ~Runtime() { mlajit_destroy(h_); }
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;
    mlajit_handle get() const { return h_; }
    std::string arch() const { return mlajit_handle_arch(h_); }
    void sparse_mqa_prefill(const mlajit_sparse_mqa_args& a, void* stream) const { check(mlajit_sparse_mqa_prefill(h_, &a, stream)); }
    // The optional workspace of sparse_mqa_prefill's key-set pre-pass (a.workspace); 0 where it does not apply.
    size_t sparse_mqa_workspace_size(const mlajit_sparse_mqa_args& a) const {
        size_t bytes = 0;
        check(mlajit_sparse_mqa_workspace_size(h_, &a, &bytes));
        return bytes;
    }
    void mha_prefill(const mlajit_mha_args& a, void* stream) const { check(mlajit_mha_prefill(h_, &a, stream)); }
    void topk_mask_build(const mlajit_topk_mask_args& a, void* stream) const { check(mlajit_topk_mask_build(h_, &a, stream)); }
    size_t mla_prefill_workspace_size(const mlajit_mla_prefill_args& a) const {
        size_t bytes = 0;
        check(mlajit_mla_prefill_workspace_size(h_, &a, &bytes));
        return bytes;
    }
    void mla_prefill(const mlajit_mla_prefill_args& a, void* stream) const { check(mlajit_mla_prefill(h_, &a, stream)); }
    // bf16 kv_c [T, 512] / k_pe [T, 64] into the FP8 latent cache (uint8 [num_blocks, block_size, 656]) at
    // slot_mapping (int32 [T]); see mlajit.h.
    void quantize_latent_cache(const mlajit_quantize_latent_cache_args& a, void* stream) const {
        check(mlajit_quantize_latent_cache(h_, &a, stream));
    }

private:
    mlajit_handle h_ = nullptr;
};

}  // namespace mlajit
