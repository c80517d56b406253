// Argument checks shared by the ops. Every failure names the argument, what was expected and what was got.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "mlajit/mlajit.h"

namespace mlajit {

const char* dtype_name(mlajit_dtype d);
std::string shape_str(const mlajit_tensor& t);

bool present(const mlajit_tensor& t);

// A checked tensor's sizes, by value: the checks run on every call of every op (host cost), so no heap.
struct TensorSizes {
    int64_t d[4] = {0, 0, 0, 0};
    int n = 0;
    int64_t operator[](size_t i) const { return d[i]; }
    size_t size() const { return size_t(n); }
};
// dims: expected sizes, -1 = any. Checks data non-null, dtype, ndim, sizes, non-negative strides, last
// dimension contiguous, and (for vector loads) 16-byte alignment of the pointer and of every outer stride.
// Returns the tensor's sizes. Nothing is formatted unless a check fails.
TensorSizes check_tensor(const mlajit_tensor& t, const char* name, mlajit_dtype dtype,
                         std::initializer_list<int64_t> dims, bool align16 = true);

// cu_seqlens host copy: starts at 0 (or at any offset >= 0 when `offset_ok`: a sub-batch of a larger one,
// whose kernels index tokens by the absolute entries), non-decreasing, ends at `total` (the tensors' token
// count). Returns the longest request.
int64_t check_cu_seqlens(const int32_t* host, int64_t batch, int64_t total, const char* name, bool offset_ok = false);

}  // namespace mlajit
