// The C ABI: catches every exception at the boundary, keeps the message per thread, returns a status.
#include <cstring>
#include <memory>

#include "common/error.h"
#include "common/log.h"
#include "mlajit/mlajit.h"
#include "jit/compiler.h"
#include "ops/gemm.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"
#include "ops/variants.h"
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

// The size of each args struct as first published with struct_size (mlajit 0.2). A field appended later
// leaves these alone: a caller built against the 0.2 header sends this many bytes and the rest reads as 0.
template <typename T> constexpr size_t kFirstPublishedSize = 0;
template <> constexpr size_t kFirstPublishedSize<mlajit_sparse_mqa_args> = 760;
template <> constexpr size_t kFirstPublishedSize<mlajit_mha_args> = 832;
template <> constexpr size_t kFirstPublishedSize<mlajit_topk_mask_args> = 344;
template <> constexpr size_t kFirstPublishedSize<mlajit_mla_prefill_args> = 1032;
template <> constexpr size_t kFirstPublishedSize<mlajit_warmup_args> = 56;
template <> constexpr size_t kFirstPublishedSize<mlajit_quantize_latent_cache_args> = 328;  // mlajit 0.2, issue 16
// mlajit_sparse_mqa_args: 760 as published, 776 with workspace / workspace_bytes appended.
static_assert(sizeof(void*) != 8 || (sizeof(mlajit_sparse_mqa_args) == 776 && sizeof(mlajit_mha_args) == 832 &&
                                     sizeof(mlajit_topk_mask_args) == 344 && sizeof(mlajit_mla_prefill_args) == 1032 &&
                                     sizeof(mlajit_warmup_args) == 56 && sizeof(mlajit_quantize_latent_cache_args) == 328),
              "an args struct changed size: fields may only be appended, and kFirstPublishedSize stays as published");

// The caller's struct as this library's version of it: struct_size bytes copied, a missing tail zero
// (an older caller), an unknown tail refused unless it is all zero (a newer caller on an older library).
template <typename T>
T args_from(const T* p, const char* type) {
    if (!p) mlajit::fail_arg("args is NULL: pass the address of a {} (initialize it with MLAJIT_ARGS_INIT({}))", type, type);
    const size_t n = p->struct_size;
    if (n == 0)
        mlajit::fail_arg("{}.struct_size is 0: set it to sizeof({}); `{} a = MLAJIT_ARGS_INIT({});` does it and zero-fills "
                         "the rest", type, type, type, type);
    if (n < kFirstPublishedSize<T>)
        mlajit::fail_arg("{}.struct_size is {}, less than any published size of it (the smallest is {}): set it to "
                         "sizeof({}) with the header you compile against", type, n, kFirstPublishedSize<T>, type);
    T out{};
    if (n > sizeof(T)) {
        const auto* tail = reinterpret_cast<const unsigned char*>(p) + sizeof(T);
        for (size_t i = 0; i < n - sizeof(T); ++i)
            if (tail[i] != 0)
                mlajit::fail(MLAJIT_ERROR_UNSUPPORTED,
                             "{} comes from a newer mlajit header ({} bytes; this library, {}, knows {}) and sets a field "
                             "this library does not have (byte {} is non-zero): upgrade libmlajit, or leave the newer "
                             "fields zero", type, n, mlajit_version(), sizeof(T), sizeof(T) + i);
        std::memcpy(&out, p, sizeof(T));
    } else {
        std::memcpy(&out, p, n);
    }
    out.struct_size = sizeof(T);
    return out;
}

}  // namespace

namespace mlajit {
Handle& handle_of(mlajit_handle h) { return impl(h); }
}  // namespace mlajit

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

#define MLAJIT_STR2(x) #x
#define MLAJIT_STR(x) MLAJIT_STR2(x)
MLAJIT_API const char* mlajit_version(void) {
    return MLAJIT_STR(MLAJIT_VERSION_MAJOR) "." MLAJIT_STR(MLAJIT_VERSION_MINOR) "." MLAJIT_STR(MLAJIT_VERSION_PATCH);
}

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
    return guarded([&] {
        const auto a = args_from(args, "mlajit_sparse_mqa_args");
        mlajit::sparse_mqa_prefill(impl(handle), a, static_cast<CUstream>(stream));
    });
}

MLAJIT_API mlajit_status mlajit_sparse_mqa_workspace_size(mlajit_handle handle, const mlajit_sparse_mqa_args* args, size_t* bytes) {
    return guarded([&] {
        if (!bytes) mlajit::fail_arg("bytes is NULL: pass the address of a size_t");
        const auto a = args_from(args, "mlajit_sparse_mqa_args");  // planning reads no workspace field
        *bytes = mlajit::sparse_mqa_workspace_bytes(mlajit::plan_sparse_mqa(impl(handle).arch(), a));
    });
}

MLAJIT_API mlajit_status mlajit_mha_prefill(mlajit_handle handle, const mlajit_mha_args* args, void* stream) {
    return guarded([&] {
        const auto a = args_from(args, "mlajit_mha_args");
        mlajit::mha_prefill(impl(handle), a, static_cast<CUstream>(stream));
    });
}

MLAJIT_API int64_t mlajit_topk_mask_words(int64_t max_seqlen_k) { return mlajit::topk_mask_words(max_seqlen_k); }

MLAJIT_API size_t mlajit_topk_mask_bytes(int64_t total_q, int64_t max_seqlen_k) {
    return (size_t)std::max<int64_t>(total_q, 0) * (size_t)mlajit::topk_mask_words(max_seqlen_k) * 4u;
}

MLAJIT_API mlajit_status mlajit_topk_mask_build(mlajit_handle handle, const mlajit_topk_mask_args* args, void* stream) {
    return guarded([&] {
        const auto a = args_from(args, "mlajit_topk_mask_args");
        mlajit::topk_mask_build(impl(handle), a, static_cast<CUstream>(stream));
    });
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
        *bytes = 0;
        const auto a = args_from(args, "mlajit_mla_prefill_args");
        auto& h = impl(handle);
        *bytes = mlajit::mla_prefill_workspace_size(h.gpu_name(), a, h.gemm().fused_paged_max_heads(), h.gemm().scratch_bytes());
    });
}

MLAJIT_API mlajit_status mlajit_mla_prefill(mlajit_handle handle, const mlajit_mla_prefill_args* args, void* stream) {
    return guarded([&] {
        const auto a = args_from(args, "mlajit_mla_prefill_args");
        mlajit::mla_prefill(impl(handle), a, static_cast<CUstream>(stream));
    });
}

MLAJIT_API mlajit_status mlajit_quantize_latent_cache(mlajit_handle handle, const mlajit_quantize_latent_cache_args* args,
                                                      void* stream) {
    return guarded([&] {
        const auto a = args_from(args, "mlajit_quantize_latent_cache_args");
        mlajit::quantize_latent_cache(impl(handle), a, static_cast<CUstream>(stream));
    });
}

MLAJIT_API mlajit_status mlajit_warmup(const mlajit_warmup_args* args) {
    return guarded([&] {
        const auto a = args_from(args, "mlajit_warmup_args");
        if (a.compiled) *a.compiled = 0;
        if (a.cached) *a.cached = 0;
        mlajit::ModelConfig m = mlajit::model_preset("deepseek-v3.2");
        if (a.heads != 0) m.heads = a.heads;
        if (a.topk != 0) m.topk = a.topk;
        if (a.n_tp < 0) mlajit::fail_arg("mlajit_warmup_args.n_tp must be >= 0, got {}", a.n_tp);
        if (a.n_tp > 0 && !a.tp_degrees) mlajit::fail_arg("mlajit_warmup_args.tp_degrees is NULL but n_tp is {}", a.n_tp);
        std::vector<int> tp = a.n_tp > 0 ? std::vector<int>(a.tp_degrees, a.tp_degrees + a.n_tp) : std::vector<int>{1};
        mlajit::Arch arch;
        if (a.arch) {
            arch = mlajit::Arch::parse(a.arch);
            mlajit::require_nvrtc_arch(arch);  // an arch no NVRTC knows: refused before compiling anything
        } else {
            mlajit::Handle h(a.device);  // the GPU's arch (MLAJIT_ARCH applies, as for every handle)
            arch = h.arch();
        }
        auto& store = mlajit::KernelStore::global();
        int compiled = 0, cached = 0;
        for (const auto& spec : mlajit::model_variants(m, tp, {arch})) {
            // "compiled" = NVRTC ran for it in this call (the store's count moved), else it was cached.
            const int64_t before = store.stats().compiled.load();
            store.cubin(spec);
            (store.stats().compiled.load() > before ? compiled : cached)++;
        }
        if (a.compiled) *a.compiled = compiled;
        if (a.cached) *a.cached = cached;
    });
}

}  // extern "C"
