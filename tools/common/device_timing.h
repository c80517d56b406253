// Device buffers and event timing through the driver table, for the tools that drive the C API
// (mlajit-bench, mlajit-check, mlajit-warmup calibrate). Header-only.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/driver_api.h"

namespace mlajit::tools {

// GPU 0's primary context, made current on this thread (what mlajit_create(-1) then binds), and its name.
struct Gpu0 {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    std::string name;
};
inline Gpu0 open_gpu0() {
    Gpu0 g;
    MLAJIT_CU(cuDeviceGet(&g.dev, 0), "opening GPU 0");
    MLAJIT_CU(cuDevicePrimaryCtxRetain(&g.ctx, g.dev), "retaining GPU 0's primary context");
    MLAJIT_CU(cuCtxSetCurrent(g.ctx), "making GPU 0's context current");
    char name[256] = {};
    MLAJIT_CU(cuDeviceGetName(name, sizeof(name) - 1, g.dev), "reading the GPU's name");
    g.name = name;
    return g;
}

// An owning device allocation. `poison` fills it with one byte value (0xFF: bf16/fp32 NaN patterns) so
// that outputs a kernel never wrote show up in the check.
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t bytes) : bytes_(std::max<size_t>(bytes, 16)) {
        MLAJIT_CU(cuMemAlloc(&p_, bytes_), "allocating a device buffer");
    }
    template <typename T>
    explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
        upload(host);
    }
    ~DeviceBuffer() {
        if (p_) driver().cuMemFree(p_);
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = 0; }

    template <typename T>
    void upload(const std::vector<T>& host) {
        if (!host.empty()) MLAJIT_CU(cuMemcpyHtoD(p_, host.data(), host.size() * sizeof(T)), "uploading");
        // A pageable cuMemcpyHtoD may return before its DMA lands; a non-blocking stream does not wait for it.
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the upload");
    }
    template <typename T>
    std::vector<T> download(size_t n) const {
        std::vector<T> h(n);
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the kernels");
        if (n) MLAJIT_CU(cuMemcpyDtoH(h.data(), p_, n * sizeof(T)), "downloading");
        return h;
    }
    // cuMemsetD8 runs on the legacy stream, which a CU_STREAM_NON_BLOCKING stream does not wait for:
    // without the synchronization the poison can land after the kernel under test has written.
    void poison(unsigned char byte = 0xFF) {
        MLAJIT_CU(cuMemsetD8(p_, byte, bytes_), "poisoning a buffer");
        MLAJIT_CU(cuCtxSynchronize(), "waiting for the poison");
    }
    void* get() const { return reinterpret_cast<void*>(p_); }
    size_t bytes() const { return bytes_; }

private:
    CUdeviceptr p_ = 0;
    size_t bytes_ = 0;
};

// Median ms of `reps` launches of f(i) (i = 0, 1, ... cycles over the caller's input sets), after `warmup`
// untimed launches. Each launch has its own event pair; launches are queued back to back, with one
// synchronization at the end, so host overhead hides behind the GPU work where the kernels are long.
template <typename F>
double median_ms(CUstream st, F&& f, int reps, int warmup = 2) {
    for (int i = 0; i < warmup; ++i) f(i);
    MLAJIT_CU(cuStreamSynchronize(st), "waiting for the warm-up");
    std::vector<CUevent> a(reps), b(reps);
    for (int i = 0; i < reps; ++i) {
        MLAJIT_CU(cuEventCreate(&a[i], 0), "creating an event");
        MLAJIT_CU(cuEventCreate(&b[i], 0), "creating an event");
    }
    for (int i = 0; i < reps; ++i) {
        MLAJIT_CU(cuEventRecord(a[i], st), "recording an event");
        f(i);
        MLAJIT_CU(cuEventRecord(b[i], st), "recording an event");
    }
    MLAJIT_CU(cuEventSynchronize(b[reps - 1]), "waiting for the timed launches");
    std::vector<float> t(reps);
    for (int i = 0; i < reps; ++i) {
        MLAJIT_CU(cuEventElapsedTime(&t[i], a[i], b[i]), "reading an event");
        driver().cuEventDestroy(a[i]);
        driver().cuEventDestroy(b[i]);
    }
    std::sort(t.begin(), t.end());
    return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

// How many copies of an input set to rotate through so that the inputs of consecutive launches do not
// sit in the L2 (50 MB on H200): enough for 3x the L2, at most 8.
inline int rotation_sets(size_t set_bytes, size_t l2_bytes = size_t(50) << 20) {
    const size_t want = 3 * l2_bytes;
    return (int)std::clamp<size_t>((want + set_bytes - 1) / std::max<size_t>(set_bytes, 1), 1, 8);
}

}  // namespace mlajit::tools
