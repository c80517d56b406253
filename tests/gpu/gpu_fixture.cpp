#include "gpu/gpu_fixture.h"

#include <cmath>
#include <cstdlib>

#include "reference/bf16.h"

#include "common/error.h"
#include "config/env.h"
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

mlajit_mla_prefill_args mla_call_args(const MlaCallBuffers& b) {
    REQUIRE((b.w_kv_b && b.indices && b.cu_q && b.cu_k && b.cu_q_host && b.cu_k_host && b.out));
    const int64_t T = b.cu_q_host->back(), B = int64_t(b.cu_q_host->size()) - 1, h = b.heads;
    mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
    a.w_kv_b = tensor(b.w_kv_b->get(), MLAJIT_BF16, {h * 256, 512});
    a.indices = tensor(b.indices->get(), MLAJIT_INT32, {T, b.width});
    a.topk = int32_t(b.topk);
    a.cu_seqlens_q = tensor(b.cu_q->get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_k = tensor(b.cu_k->get(), MLAJIT_INT32, {B + 1});
    a.cu_seqlens_q_host = b.cu_q_host->data();
    a.cu_seqlens_k_host = b.cu_k_host->data();
    a.out = tensor(b.out->get(), MLAJIT_BF16, {T, h, 128});
    if (b.lse) a.lse = tensor(b.lse->get(), MLAJIT_FP32, {T, h});
    a.sm_scale = float(b.sm_scale);
    a.force_path = -1;
    return a;
}

DeviceBuffer<uint8_t> attach_mla_workspace(Gpu* G, mlajit_mla_prefill_args& a) {
    size_t bytes = 0;
    MLAJIT_CHECK_OK(mlajit_mla_prefill_workspace_size(G->handle, &a, &bytes));
    CHECK(bytes > 0);
    DeviceBuffer<uint8_t> ws(bytes);
    a.workspace = ws.get();
    a.workspace_bytes = bytes;
    return ws;
}

ref::AttnResult mla_reference(ref::View q_nope, ref::View q_pe, ref::View kv_c, ref::View k_pe,
                              const std::vector<uint16_t>& w_kv_b, const std::vector<int32_t>& idx, int64_t width,
                              int64_t heads, const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_k,
                              double sm_scale, const std::vector<int64_t>& rows) {
    ref::DsaArgs da;
    da.q_nope = q_nope;
    da.q_pe = q_pe;
    da.kv_c = kv_c;
    da.k_pe = k_pe;
    da.w_kv_b = ref::View(w_kv_b.data(), 512, 0);
    da.indices = idx.data();
    da.topk = width;
    da.heads = heads;
    da.cu_seqlens_q = cu_q;
    da.cu_seqlens_k = cu_k;
    da.sm_scale = sm_scale;
    da.rows = rows;
    return ref::dsa_prefill_reference(da);
}

BadPageTally tally_bad_page(const std::vector<uint16_t>& good, const std::vector<uint16_t>& bad,
                            const std::vector<int32_t>& idx, int64_t width, int64_t heads, int64_t first_query_of_last,
                            int64_t bs) {
    BadPageTally n;
    const int64_t row = heads * 128, T = int64_t(bad.size()) / row;
    REQUIRE(good.size() == bad.size());
    for (int64_t t = 0; t < T; ++t) {
        const bool in_last = t >= first_query_of_last;
        bool attends = false;  // does query t's index row hold a key of the bad page?
        for (int64_t j = 0; in_last && j < width; ++j) {
            const int32_t k = idx[size_t(t * width + j)];
            attends = attends || (k >= bs && k < 2 * bs);
        }
        bool row_nan = false;
        for (int64_t e = 0; e < row; ++e) {
            const uint16_t v = bad[size_t(t * row + e)];
            row_nan = row_nan || std::isnan(ref::bf16_to_float(v));
            if (!in_last) n.changed_elsewhere += v != good[size_t(t * row + e)];
        }
        n.nan_rows += row_nan;
        n.nan_rows_not_attending += row_nan && !attends;
        n.attending += attends;
        CHECK_MESSAGE((row_nan || !attends), "query " << t << " attends the bad page but is finite");
    }
    return n;
}

}  // namespace mlajit::test
