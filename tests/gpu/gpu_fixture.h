// GPU test support: one primary context and mlajit handle for the test binary, device buffers through the
// driver table, and tensor descriptors. With no GPU, gpu() is null and tests skip with a message.
#pragma once
#include <doctest/doctest.h>

#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "cuda/driver_api.h"
#include "mlajit/mlajit.h"
#include "reference/reference.h"
#include "support/scoped_env.h"

namespace mlajit::test {

struct Gpu {
    CUcontext ctx = nullptr;
    mlajit_handle handle = nullptr;
    CUstream stream = nullptr;
    std::string arch;
};

// Null when no GPU/driver (the message says why, once).
Gpu* gpu();

#define MLAJIT_REQUIRE_GPU()                                                         \
    auto* G = ::mlajit::test::gpu();                                                 \
    if (!G) {                                                                        \
        MESSAGE("skipped: no GPU/driver on this machine (" << ::mlajit::test::no_gpu_reason() << ")"); \
        return;                                                                      \
    }
std::string no_gpu_reason();

// Device buffer of T, filled with a poison byte pattern on creation so unwritten outputs show.
template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n, unsigned char poison = 0xFF) : n_(n) {
        MLAJIT_CU(cuMemAlloc(&ptr_, std::max<size_t>(n, 1) * sizeof(T)), "allocating a test buffer");
        MLAJIT_CU(cuMemsetD8(ptr_, poison, std::max<size_t>(n, 1) * sizeof(T)), "poisoning a test buffer");
        // cuMemsetD8 runs on the legacy stream, which the tests' non-blocking stream does not wait for: the
        // poison must have landed before a kernel under test writes.
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the poison");
    }
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
    ~DeviceBuffer() {
        if (ptr_) driver().cuMemFree(ptr_);
    }
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(n_, o.n_);
        return *this;
    }
    void upload(const std::vector<T>& host) {
        REQUIRE(host.size() == n_);
        if (n_) MLAJIT_CU(cuMemcpyHtoD(ptr_, host.data(), n_ * sizeof(T)), "uploading test data");
        // From pageable memory cuMemcpyHtoD may return once the bytes are staged, before the DMA lands, and
        // the tests' non-blocking stream does not wait for it: a kernel could read the old contents (the
        // 2026-12-04 soak: one block of a top-k mask built from the poison's -1 indices, 4 rows empty).
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the upload");
    }
    std::vector<T> download() const {
        std::vector<T> h(n_);
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the kernels under test");
        if (n_) MLAJIT_CU(cuMemcpyDtoH(h.data(), ptr_, n_ * sizeof(T)), "downloading a result");
        return h;
    }
    void poison(unsigned char byte = 0xFF) {
        MLAJIT_CU(cuMemsetD8(ptr_, byte, std::max<size_t>(n_, 1) * sizeof(T)), "poisoning a test buffer");
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the poison");
    }
    T* get() const { return reinterpret_cast<T*>(ptr_); }
    size_t size() const { return n_; }

private:
    CUdeviceptr ptr_ = 0;
    size_t n_ = 0;
};

// A contiguous tensor descriptor over a device pointer.
mlajit_tensor tensor(void* data, mlajit_dtype dt, std::initializer_list<int64_t> shape);

// Runs an mlajit call and fails the test with the library's message if it did not succeed.
#define MLAJIT_CHECK_OK(call)                                                       \
    do {                                                                           \
        mlajit_status _s = (call);                                                 \
        REQUIRE_MESSAGE(_s == MLAJIT_OK, mlajit_status_name(_s) << ": " << mlajit_last_error()); \
    } while (0)

// ---- the one-call prefill (mlajit_mla_prefill), shared by test_mla_prefill_gpu and test_fp8_cache_gpu -----

// lse of the one-call prefill: unlike the attention ops, whose inputs are given in bf16, each path rounds
// an intermediate to bf16 (MHA: the up-projected k_nope; MQA: the absorbed queries), so every logit moves
// by up to sm_scale * 2^-9 * sum_i |q_i k_i| over the 128 nope dims: ~0.011 for these unit-variance
// inputs (1/sqrt(192) * 2^-9 * 128 * E|q||k| = 0.072 * 0.00195 * 81). lse moves by at most the largest
// logit error; measured on the H200: 0.0041 at most. A wrong scale, a missed request or a row shifted by
// a token moves lse by O(1).
constexpr double kOneCallLseAtol = 1.5e-2;
// out of the one call: the same extra rounding (K/V or the absorbed q and the latent, to bf16) comes on top
// of the kernel's own, so elements near zero (cancellation, bounded by the rms floor) get twice the floor,
// as two roundings' errors add. Seen on the H200: 1 element of 108,544 at 1.17x the single floor (masked
// path, 16 heads, topk 256), rel L2 2.4e-3 (the aggregate bound 1e-2 stays).
constexpr double kOneCallOutAtolScale = 2.0;

// What every one-call test passes the same way. The q and latent descriptors (q_nope, q_pe and kv_c,
// k_pe or kv_cache, block_table) are what the tests vary: the caller sets those on the result.
struct MlaCallBuffers {
    int64_t heads = 0;
    const DeviceBuffer<uint16_t>* w_kv_b = nullptr;  // [heads * 256, 512]
    const DeviceBuffer<int32_t>* indices = nullptr;  // [T, width]
    int64_t width = 0, topk = 0;                     // index row width; the model's top-k
    const DeviceBuffer<int32_t>*cu_q = nullptr, *cu_k = nullptr;  // device cu_seqlens [B + 1]
    const std::vector<int32_t>*cu_q_host = nullptr, *cu_k_host = nullptr;
    const DeviceBuffer<uint16_t>* out = nullptr;  // [T, heads, 128]
    const DeviceBuffer<float>* lse = nullptr;     // [T, heads], or null (lse is optional)
    double sm_scale = 0;
};
mlajit_mla_prefill_args mla_call_args(const MlaCallBuffers& b);

// Sizes the workspace for a's arguments as they are now (force_path included), allocates it and
// attaches it to a. Keep the buffer alive for the call.
DeviceBuffer<uint8_t> attach_mla_workspace(Gpu* G, mlajit_mla_prefill_args& a);

// The float64 DSA reference on the sampled rows, over views of the host inputs (w_kv_b [h * 256, 512],
// idx [T, width] request-local).
ref::AttnResult mla_reference(ref::View q_nope, ref::View q_pe, ref::View kv_c, ref::View k_pe,
                              const std::vector<uint16_t>& w_kv_b, const std::vector<int32_t>& idx, int64_t width,
                              int64_t heads, const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k,
                              double sm_scale, const std::vector<int64_t>& rows);

// The outputs [T, heads, 128] of one call before (`good`) and after (`bad`) the last request's second page
// (its keys bs .. 2 bs - 1) was made an out-of-range block-table entry, over the index rows idx [T, width].
// Checks (doctest) that every query of the last request attending a key of that page is NaN, and tallies.
struct BadPageTally {
    int64_t attending = 0;               // queries whose index row holds a key of the bad page
    int64_t nan_rows = 0;                // queries with a NaN output element
    int64_t nan_rows_not_attending = 0;  // of those, queries that do not attend the page (they share a tile)
    int64_t changed_elsewhere = 0;       // output elements of the other requests that changed
};
BadPageTally tally_bad_page(const std::vector<uint16_t>& good, const std::vector<uint16_t>& bad,
                            const std::vector<int32_t>& idx, int64_t width, int64_t heads, int64_t first_query_of_last,
                            int64_t bs);

}  // namespace mlajit::test
