#include "ops/tensor_check.h"

#include <climits>
#include <cstring>

#include "common/error.h"

namespace mlajit {

const char* dtype_name(mlajit_dtype d) {
    switch (d) {
        case MLAJIT_BF16: return "bf16";
        case MLAJIT_FP32: return "fp32";
        case MLAJIT_INT32: return "int32";
        case MLAJIT_UINT32: return "uint32";
        case MLAJIT_UINT8: return "uint8";
    }
    return "unknown dtype";
}

static int64_t dtype_bytes(mlajit_dtype d) { return d == MLAJIT_UINT8 ? 1 : d == MLAJIT_BF16 ? 2 : 4; }

std::string shape_str(const mlajit_tensor& t) {
    std::string s = "[";
    for (int i = 0; i < t.ndim && i < 4; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    return s + "]";
}

bool present(const mlajit_tensor& t) { return t.data != nullptr; }

// Sizes the kernels can index and an extent that cannot overflow: every dimension fits in int32 (the kernels
// hold token, head and batch indices in int), and the bytes the tensor spans, 1 + sum (size - 1) * stride
// elements, computed without int64 overflow, stay below 2^48 (more than any GPU's memory): a stride or size
// beyond that is a caller's mistake that would otherwise wrap into a small, wrong address range.
static void check_extent(const mlajit_tensor& t, const char* name, int64_t elem_bytes) {
    constexpr int64_t kMaxBytes = int64_t(1) << 48;
    int64_t span = 1;
    for (int k = 0; k < t.ndim; ++k) {
        if (t.shape[k] > INT32_MAX)
            fail_arg("{}: dimension {} is {}, more than 2^31 - 1, the largest size the kernels index (shape {})", name, k,
                     t.shape[k], shape_str(t));
        if (t.shape[k] == 0) return;  // empty: nothing is read or written
    }
    for (int k = 0; k < t.ndim; ++k) {
        int64_t step = 0;
        if (__builtin_mul_overflow(t.shape[k] - 1, t.stride[k], &step) || __builtin_add_overflow(span, step, &span) ||
            span > kMaxBytes / elem_bytes)
            fail_arg("{}: shape {} with stride {} in dimension {} spans more than 2^48 bytes, more than any GPU's memory: "
                     "check the strides (they count elements, not bytes)",
                     name, shape_str(t), t.stride[k], k);
    }
}

TensorSizes check_tensor(const mlajit_tensor& t, const char* name, mlajit_dtype dtype,
                         std::initializer_list<int64_t> dims, bool align16) {
    if (!t.data) fail_arg("{}: the data pointer is NULL; pass a device buffer of shape {} elements", name, dims.size());
    // Read as the integer a C caller stored: a value outside the enum (any int is legal C) loaded as the C++
    // enum is undefined behaviour (UBSan flagged it under the validation fuzz).
    int32_t raw_dtype;
    static_assert(sizeof raw_dtype == sizeof t.dtype);
    std::memcpy(&raw_dtype, &t.dtype, sizeof raw_dtype);
    if (raw_dtype != int32_t(dtype)) {
        if (raw_dtype < MLAJIT_BF16 || raw_dtype > MLAJIT_UINT8)
            fail_arg("{}: expected dtype {}, got {}, which is no mlajit_dtype", name, dtype_name(dtype), raw_dtype);
        fail_arg("{}: expected dtype {}, got {}", name, dtype_name(dtype), dtype_name(mlajit_dtype(raw_dtype)));
    }
    if (t.ndim != (int)dims.size() || dims.size() > 4)
        fail_arg("{}: expected {} dimensions, got {} (shape {})", name, dims.size(), t.ndim, shape_str(t));
    // The expected shape as text, built only for the error message.
    auto want = [&] {
        std::string w = "[";
        int k = 0;
        for (int64_t d : dims) w += (k++ ? ", " : "") + (d < 0 ? std::string("*") : std::to_string(d));
        return w + "]";
    };
    int i = 0;
    TensorSizes sizes;
    sizes.n = t.ndim;
    for (int64_t d : dims) {
        if (t.shape[i] < 0 || (d >= 0 && t.shape[i] != d))
            fail_arg("{}: expected shape {}, got {} (dimension {} differs)", name, want(), shape_str(t), i);
        if (t.stride[i] < 0) fail_arg("{}: stride {} is negative ({}); only non-negative strides are supported", name, i, t.stride[i]);
        sizes.d[i] = t.shape[i];
        ++i;
    }
    check_extent(t, name, dtype_bytes(dtype));
    if (t.ndim > 0 && t.stride[t.ndim - 1] != 1 && t.shape[t.ndim - 1] > 1)
        fail_arg("{}: the last dimension must be contiguous (stride 1), got stride {}: pass a contiguous copy", name,
                 t.stride[t.ndim - 1]);
    if (align16) {
        const int64_t eb = dtype_bytes(dtype);
        if ((reinterpret_cast<uintptr_t>(t.data) & 15u) != 0)
            fail_arg("{}: the data pointer {} is not 16-byte aligned, which the vector loads need: pass an aligned buffer",
                     name, t.data);
        // stride % 16 first: an empty tensor skips the extent check, and stride * eb could overflow (UBSan
        // found INT64_MAX strides on an empty tensor under the validation fuzz).
        for (int k = 0; k + 1 < t.ndim; ++k)
            if (t.shape[k] > 1 && ((t.stride[k] % 16) * eb) % 16 != 0)
                fail_arg("{}: stride {} is {} elements ({} bytes per element), not a multiple of 16 bytes, which the "
                         "vector loads need", name, k, t.stride[k], eb);
    }
    return sizes;
}

int64_t check_cu_seqlens(const int32_t* host, int64_t batch, int64_t total, const char* name, bool offset_ok) {
    if (!host) fail_arg("{}_host is NULL: pass the host copy of {} (the grid and the shape checks come from it)", name, name);
    if (offset_ok ? host[0] < 0 : host[0] != 0) fail_arg("{}[0] must be {}, got {}", name, offset_ok ? ">= 0" : "0", host[0]);
    int64_t longest = 0;
    for (int64_t r = 0; r < batch; ++r) {
        if (host[r + 1] < host[r])
            fail_arg("{} must be non-decreasing: {}[{}] = {} < {}[{}] = {}", name, name, r + 1, host[r + 1], name, r, host[r]);
        longest = std::max<int64_t>(longest, host[r + 1] - host[r]);
    }
    if (host[batch] != total)
        fail_arg("{}[{}] (the last entry) is {} but the tensors hold {} tokens: they must agree", name, batch, host[batch], total);
    return longest;
}

}  // namespace mlajit
