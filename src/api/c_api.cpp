// The C ABI: catches every exception at the boundary, keeps the message per thread, returns a status.
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "mlajit/mlajit.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"
#include "planner/planner.h"
#include "runtime/handle.h"

struct mlajit_handle_s {
    std::unique_ptr<mlajit::Handle> impl;
};

namespace {

thread_local std::string t_last_error;

template <typename F>
mlajit_status guarded(F&& f) {
    try {
        t_last_error.clear();
        f();
        return MLAJIT_OK;
    } catch (const mlajit::Error& e) {
        t_last_error = e.what();
        mlajit::log().debug("{}: {}", mlajit_status_name(e.status()), e.what());
        return e.status();
    } catch (const std::bad_alloc&) {
        t_last_error = "out of host memory";
        return MLAJIT_ERROR_INTERNAL;
    } catch (const std::exception& e) {
        t_last_error = std::string("internal error: ") + e.what() + " (please report it)";
        return MLAJIT_ERROR_INTERNAL;
    } catch (...) {
        t_last_error = "internal error: unknown exception (please report it)";
        return MLAJIT_ERROR_INTERNAL;
    }
}

mlajit::Handle& impl(mlajit_handle h) {
    if (!h || !h->impl) mlajit::fail_arg("the handle is NULL or destroyed: create one with mlajit_create");
    return *h->impl;
}

template <typename T>
const T& deref(const T* p, const char* what) {
    if (!p) mlajit::fail_arg("{} is NULL", what);
    return *p;
}

}  // namespace

extern "C" {

MLAJIT_API const char* mlajit_last_error(void) { return t_last_error.c_str(); }

MLAJIT_API const char* mlajit_status_name(mlajit_status s) {
    switch (s) {
        case MLAJIT_OK: return "MLAJIT_OK";
        case MLAJIT_ERROR_INVALID_ARGUMENT: return "MLAJIT_ERROR_INVALID_ARGUMENT";
        case MLAJIT_ERROR_NO_DRIVER: return "MLAJIT_ERROR_NO_DRIVER";
        case MLAJIT_ERROR_NO_NVRTC: return "MLAJIT_ERROR_NO_NVRTC";
        case MLAJIT_ERROR_COMPILE: return "MLAJIT_ERROR_COMPILE";
        case MLAJIT_ERROR_CACHE_MISS: return "MLAJIT_ERROR_CACHE_MISS";
        case MLAJIT_ERROR_CUDA: return "MLAJIT_ERROR_CUDA";
        case MLAJIT_ERROR_UNSUPPORTED: return "MLAJIT_ERROR_UNSUPPORTED";
        case MLAJIT_ERROR_CONFIG: return "MLAJIT_ERROR_CONFIG";
        case MLAJIT_ERROR_INTERNAL: return "MLAJIT_ERROR_INTERNAL";
    }
    return "MLAJIT_UNKNOWN_STATUS";
}

MLAJIT_API const char* mlajit_version(void) { return "0.1.0"; }

MLAJIT_API mlajit_status mlajit_create(int device, mlajit_handle* out) {
    return guarded([&] {
        if (!out) mlajit::fail_arg("out is NULL: pass the address of an mlajit_handle");
        *out = nullptr;
        auto h = std::make_unique<mlajit_handle_s>();
        h->impl = std::make_unique<mlajit::Handle>(device);
        *out = h.release();
    });
}

MLAJIT_API mlajit_status mlajit_destroy(mlajit_handle handle) {
    return guarded([&] { delete handle; });
}

MLAJIT_API const char* mlajit_handle_arch(mlajit_handle handle) {
    return handle && handle->impl ? handle->impl->arch_name().c_str() : "";
}

MLAJIT_API mlajit_status mlajit_sparse_mqa_prefill(mlajit_handle handle, const mlajit_sparse_mqa_args* args, void* stream) {
    return guarded([&] { mlajit::sparse_mqa_prefill(impl(handle), deref(args, "args"), static_cast<CUstream>(stream)); });
}

MLAJIT_API mlajit_status mlajit_mha_prefill(mlajit_handle handle, const mlajit_mha_args* args, void* stream) {
    return guarded([&] { mlajit::mha_prefill(impl(handle), deref(args, "args"), static_cast<CUstream>(stream)); });
}

MLAJIT_API int64_t mlajit_topk_mask_words(int64_t max_seqlen_k) { return mlajit::topk_mask_words(max_seqlen_k); }

MLAJIT_API size_t mlajit_topk_mask_bytes(int64_t total_q, int64_t max_seqlen_k) {
    return (size_t)std::max<int64_t>(total_q, 0) * (size_t)mlajit::topk_mask_words(max_seqlen_k) * 4u;
}

MLAJIT_API mlajit_status mlajit_topk_mask_build(mlajit_handle handle, const mlajit_topk_mask_args* args, void* stream) {
    return guarded([&] { mlajit::topk_mask_build(impl(handle), deref(args, "args"), static_cast<CUstream>(stream)); });
}

MLAJIT_API const char* mlajit_path_name(mlajit_path p) {
    switch (p) {
        case MLAJIT_PATH_DENSE_MHA: return "dense_mha";
        case MLAJIT_PATH_MASKED_MHA: return "masked_mha";
        case MLAJIT_PATH_SPARSE_MQA: return "sparse_mqa";
    }
    return "unknown_path";
}

MLAJIT_API mlajit_status mlajit_plan_prefill(const char* gpu_name, int heads, int topk, int n, const int64_t* s_q,
                                             const int64_t* s_k, mlajit_path* paths, double* mha_ms, double* mqa_ms) {
    return guarded([&] {
        if (n < 0) mlajit::fail_arg("n (the number of requests) must be >= 0, got {}", n);
        if (n > 0 && (!s_q || !s_k || !paths)) mlajit::fail_arg("s_q, s_k and paths must be non-NULL arrays of n = {} entries", n);
        const auto& c = mlajit::config();
        mlajit::Planner planner(mlajit::planner_options(c, heads, topk, mlajit::default_cache_root_from(c), gpu_name ? gpu_name : ""));
        std::vector<mlajit::Request> batch((size_t)n);
        for (int i = 0; i < n; ++i) batch[(size_t)i] = {(long)s_q[i], (long)s_k[i]};
        auto plan = planner.plan(batch);
        for (int i = 0; i < n; ++i) {
            const auto& r = plan.requests[(size_t)i];
            paths[i] = (mlajit_path)(int)r.path;
            if (mha_ms) mha_ms[i] = r.mha_ms;
            if (mqa_ms) mqa_ms[i] = r.mqa_ms;
        }
    });
}

MLAJIT_API mlajit_status mlajit_mla_prefill_workspace_size(mlajit_handle handle, const mlajit_mla_prefill_args* args,
                                                           size_t* bytes) {
    return guarded([&] {
        if (!bytes) mlajit::fail_arg("bytes is NULL: pass the address of a size_t");
        *bytes = mlajit::mla_prefill_workspace_size(impl(handle).gpu_name(), deref(args, "args"));
    });
}

MLAJIT_API mlajit_status mlajit_mla_prefill(mlajit_handle handle, const mlajit_mla_prefill_args* args, void* stream) {
    return guarded([&] { mlajit::mla_prefill(impl(handle), deref(args, "args"), static_cast<CUstream>(stream)); });
}

}  // extern "C"
