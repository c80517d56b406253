// GPU test support: one primary context and mlajit handle for the test binary, device buffers through the
// driver table, and tensor descriptors. With no GPU, gpu() is null and tests skip with a message.
#pragma once
#include <doctest/doctest.h>

#include <cstring>
#include <initializer_list>
#include <vector>

#include "cuda/driver_api.h"
#include "mlajit/mlajit.h"

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

}  // namespace mlajit::test
