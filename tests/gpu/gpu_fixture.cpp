#include "gpu/gpu_fixture.h"

#include "common/error.h"
#include "mlajit/mlajit.hpp"

namespace mlajit::test {

namespace {
std::string g_reason;
}

std::string no_gpu_reason() { return g_reason; }

Gpu* gpu() {
    static Gpu* g = []() -> Gpu* {
        try {
            if (!driver_available()) {
                driver();  // throws with the reason
            }
            auto* x = new Gpu;
            CUdevice dev = 0;
            MLAJIT_CU(cuDeviceGet(&dev, 0), "opening GPU 0");
            MLAJIT_CU(cuDevicePrimaryCtxRetain(&x->ctx, dev), "retaining the primary context");
            MLAJIT_CU(cuCtxSetCurrent(x->ctx), "making the primary context current");
            MLAJIT_CU(cuStreamCreate(&x->stream, CU_STREAM_NON_BLOCKING), "creating a stream");
            if (mlajit_create(-1, &x->handle) != MLAJIT_OK) throw std::runtime_error(mlajit_last_error());
            x->arch = mlajit_handle_arch(x->handle);
            return x;
        } catch (const std::exception& e) {
            g_reason = e.what();
            return nullptr;
        }
    }();
    if (g) driver().cuCtxSetCurrent(g->ctx);  // doctest may run cases on the main thread only, but be safe
    return g;
}

mlajit_tensor tensor(void* data, mlajit_dtype dt, std::initializer_list<int64_t> shape) {
    return contiguous_tensor(data, dt, shape);
}

}  // namespace mlajit::test
