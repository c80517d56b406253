// libmlajit_torch.so: mlajit's PyTorch custom ops in C++ (TORCH_LIBRARY(mlajit)), the same schemas and op
// names as the Python-defined ops of tools/python/mlajit/_torch_ops_python.py, so user code does not change
// with the backend. The CUDA kernels fill the C API's args structs and call libmlajit directly: no Python
// on the call path (a Python-defined op pays ~13 us in torch.library's Python dispatch before it does
// anything, issue 15's host-cost goal is 15 us per call). The Meta kernels are SymInt-aware, so
// torch.compile (fake tensors, dynamic shapes) traces the ops without a graph break.
//
// Built with the regular C++ API (TORCH_LIBRARY), not the stable ABI: stable kernels are boxed-only (every
// call goes through the IValue stack and StableIValue conversions, host time this library exists to
// save), and the stable ABI's coverage of SymInt[] arguments and tuple returns differs between the torch
// versions this must serve. So a build serves the torch it was built against; the Python package checks
// the version recorded below before loading it (mlajit/_torch_lib.py) and keeps the Python ops otherwise.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "mlajit/mlajit.h"

#ifndef MLAJIT_TORCH_VERSION
#error "MLAJIT_TORCH_VERSION (torch.__version__ at build time) must be defined by the build"
#endif

// Read from the file by the Python loader without loading it (a library built for another torch would
// fail to load, or worse, load and misbehave): "mlajit-torch-built-with=<torch.__version__>;".
extern "C" __attribute__((visibility("default"), used)) const char mlajit_torch_built_with[] =
    "mlajit-torch-built-with=" MLAJIT_TORCH_VERSION ";";

namespace {

// ---- handles: one per CUDA device, on the device's primary context (PyTorch's context) ------------------

constexpr int kMaxDevices = 64;
std::array<std::atomic<mlajit_handle>, kMaxDevices> g_handles{};
std::mutex g_handles_m;

[[noreturn]] void fail_status(mlajit_status s, const char* call) {
    TORCH_CHECK(false, call, ": ", mlajit_status_name(s), ": ", mlajit_last_error());
}

inline void check(mlajit_status s, const char* call) {
    if (s != MLAJIT_OK) [[unlikely]]
        fail_status(s, call);
}

mlajit_handle handle_for(int device) {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "mlajit: CUDA device index ", device, " is out of range (0..",
                kMaxDevices - 1, ")");
    if (mlajit_handle h = g_handles[size_t(device)].load(std::memory_order_acquire)) [[likely]]
        return h;
    std::lock_guard<std::mutex> g(g_handles_m);
    if (mlajit_handle h = g_handles[size_t(device)].load(std::memory_order_relaxed)) return h;
    mlajit_handle h = nullptr;
    // A device number retains its primary context: the one PyTorch's CUDA runtime uses.
    check(mlajit_create(device, &h), "mlajit_create");
    g_handles[size_t(device)].store(h, std::memory_order_release);
    return h;  // never destroyed: ops may run until the process exits
}

// ---- tensors -> mlajit_tensor ------------------------------------------------------------------------------

mlajit_dtype dtype_code(const at::Tensor& t, const char* name) {
    switch (t.scalar_type()) {
        case at::kBFloat16: return MLAJIT_BF16;
        case at::kFloat: return MLAJIT_FP32;
        case at::kInt: return MLAJIT_INT32;
        case at::kByte: return MLAJIT_UINT8;
        case at::kUInt32: return MLAJIT_UINT32;
        default: break;
    }
    TORCH_CHECK(false, name, ": unsupported dtype ", t.scalar_type(), " (mlajit takes bf16, fp32, int32, uint8)");
}

// The descriptor of a CUDA tensor on `device`; the library checks shapes, strides and dtypes itself.
mlajit_tensor desc(const at::Tensor& t, const char* name, int device, int code = -1) {
    TORCH_CHECK(t.is_cuda(), name, ": mlajit ops take CUDA tensors, got one on ", t.device());
    TORCH_CHECK(t.get_device() == device, name, ": is on cuda:", t.get_device(), " but the first tensor is on cuda:",
                device, ": put all on one device");
    const int64_t n = t.dim();
    TORCH_CHECK(n >= 1 && n <= 4, name, ": mlajit tensors have 1 to 4 dimensions, got shape ", t.sizes());
    mlajit_tensor d{};
    d.data = t.data_ptr();
    d.dtype = code >= 0 ? mlajit_dtype(code) : dtype_code(t, name);
    d.ndim = int32_t(n);
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    for (int64_t i = 0; i < n; ++i) {
        d.shape[i] = sizes[size_t(i)];
        d.stride[i] = strides[size_t(i)];
    }
    return d;
}

// Host cu_seqlens as the C API reads them (int32); one buffer per argument slot and thread, reused.
const int32_t* host_int32(c10::IntArrayRef v, std::vector<int32_t>& buf, const char* name) {
    buf.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        TORCH_CHECK(v[i] >= 0 && v[i] <= INT32_MAX, name, "[", i, "] = ", v[i], " is not a valid int32 offset");
        buf[i] = int32_t(v[i]);
    }
    return buf.data();
}

struct HostLists {
    std::vector<int32_t> q, k;
};
thread_local HostLists t_host;

struct Device {
    int index;
    mlajit_handle handle;
    void* stream;
};

Device device_of(const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda(), name, ": mlajit ops take CUDA tensors, got one on ", t.device());
    const int idx = t.get_device();
    return {idx, handle_for(idx), c10::cuda::getCurrentCUDAStream(c10::DeviceIndex(idx)).stream()};
}

at::TensorOptions cuda_options(at::ScalarType dtype, int device) {
    return at::TensorOptions().dtype(dtype).device(at::Device(at::kCUDA, c10::DeviceIndex(device)));
}

// ---- CUDA kernels ------------------------------------------------------------------------------------------

// The workspace size the last call on this thread needed (per device): a call first tries a workspace of
// that size and asks the library only when it was too small (nothing launches when a check fails). The
// workspace is a caching-allocator tensor freed on return: stream-ordered reuse, and under CUDA graph capture
// the graph's private pool keeps it for the replays.
thread_local std::array<size_t, kMaxDevices> t_workspace_hint{};
// The same for sparse_mqa_prefill's workspace (its key-set pre-pass: 4 bytes per index position), a hint of its own.
thread_local std::array<size_t, kMaxDevices> t_mqa_workspace_hint{};

// Runs call(&a) with a workspace of `hint` bytes; where that fails (or there is no hint yet) asks size(&a, &need) and, when
// the workspace was the problem, grows the hint to whole MiB and calls once more. The query checks the arguments as the
// call does: with no hint its error is reported as size_name's; else a real argument error keeps the call's own message
// (the query clears the thread's). name: the call's C function, for errors.
template <class Args, class Call, class Size>
void call_with_workspace(size_t& hint, int d, Args& a, Call call, Size size, const char* name, const char* size_name) {
    at::Tensor ws;
    auto give = [&](size_t bytes) {
        ws = at::empty({int64_t(bytes)}, cuda_options(at::kByte, d));
        a.workspace = ws.data_ptr();
        a.workspace_bytes = bytes;
    };
    mlajit_status s = MLAJIT_ERROR_INVALID_ARGUMENT;
    if (hint > 0) {
        give(hint);
        s = call(&a);
        if (s == MLAJIT_OK) return;
    }
    const std::string first_error = hint > 0 ? mlajit_last_error() : "";
    size_t need = 0;
    const mlajit_status qs = size(&a, &need);
    if (hint == 0) {
        if (qs != MLAJIT_OK) fail_status(qs, size_name);
    } else if (qs != MLAJIT_OK || need <= hint) {  // not a workspace problem: the call's own error
        TORCH_CHECK(false, name, ": ", mlajit_status_name(s), ": ", first_error);
    }
    hint = std::max<size_t>((need + (size_t(1) << 20) - 1) >> 20, 1) << 20;  // whole MiB (1 where none is needed)
    give(hint);
    check(call(&a), name);
}

at::Tensor mla_prefill_cuda(const at::Tensor& q_nope, const at::Tensor& q_pe, const std::optional<at::Tensor>& kv_c,
                            const std::optional<at::Tensor>& k_pe, const at::Tensor& w_kv_b, const at::Tensor& indices,
                            const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, c10::IntArrayRef cu_seqlens_q_host,
                            c10::IntArrayRef cu_seqlens_k_host, double sm_scale, int64_t topk, int64_t force_path,
                            const std::optional<at::Tensor>& kv_cache, const std::optional<at::Tensor>& block_table) {
    const Device dev = device_of(q_nope, "q_nope");
    const int d = dev.index;
    TORCH_CHECK(q_nope.dim() == 3, "q_nope: expected [T, heads, 128], got shape ", q_nope.sizes());
    at::Tensor out = at::empty({q_nope.size(0), q_nope.size(1), 128}, cuda_options(at::kBFloat16, d));
    mlajit_mla_prefill_args a{};
    a.struct_size = sizeof a;
    a.q_nope = desc(q_nope, "q_nope", d);
    a.q_pe = desc(q_pe, "q_pe", d);
    if (kv_c) a.kv_c = desc(*kv_c, "kv_c", d);
    if (k_pe) a.k_pe = desc(*k_pe, "k_pe", d);
    if (kv_cache) a.kv_cache = desc(*kv_cache, "kv_cache", d);
    if (block_table) a.block_table = desc(*block_table, "block_table", d);
    a.w_kv_b = desc(w_kv_b, "w_kv_b", d);
    a.indices = desc(indices, "indices", d);
    a.cu_seqlens_q = desc(cu_seqlens_q, "cu_seqlens_q", d);
    a.cu_seqlens_k = desc(cu_seqlens_k, "cu_seqlens_k", d);
    a.cu_seqlens_q_host = host_int32(cu_seqlens_q_host, t_host.q, "cu_seqlens_q_host");
    a.cu_seqlens_k_host = host_int32(cu_seqlens_k_host, t_host.k, "cu_seqlens_k_host");
    a.out = desc(out, "out", d);
    a.sm_scale = float(sm_scale);
    a.topk = int32_t(topk);
    a.force_path = int(force_path);
    call_with_workspace(
        t_workspace_hint[size_t(d)], d, a, [&](mlajit_mla_prefill_args* p) { return mlajit_mla_prefill(dev.handle, p, dev.stream); },
        [&](mlajit_mla_prefill_args* p, size_t* n) { return mlajit_mla_prefill_workspace_size(dev.handle, p, n); },
        "mlajit_mla_prefill", "mlajit_mla_prefill_workspace_size");
    return out;
}

std::tuple<at::Tensor, at::Tensor> sparse_mqa_prefill_cuda(
    const at::Tensor& q, const at::Tensor& kv, const at::Tensor& indices, double sm_scale,
    const std::optional<at::Tensor>& cu_seqlens_q, const std::optional<at::Tensor>& cu_seqlens_kv,
    at::OptionalIntArrayRef cu_seqlens_q_host, at::OptionalIntArrayRef cu_seqlens_kv_host,
    const std::optional<at::Tensor>& block_table, int64_t causal) {
    const Device dev = device_of(q, "q");
    const int d = dev.index;
    TORCH_CHECK(q.dim() == 3, "q: expected [s_q, heads, 576], got shape ", q.sizes());
    at::Tensor out = at::empty({q.size(0), q.size(1), 512}, cuda_options(at::kBFloat16, d));
    at::Tensor lse = at::empty({q.size(0), q.size(1)}, cuda_options(at::kFloat, d));
    mlajit_sparse_mqa_args a{};
    a.struct_size = sizeof a;
    a.q = desc(q, "q", d);
    a.kv = desc(kv, "kv", d);
    a.indices = desc(indices, "indices", d);
    a.out = desc(out, "out", d);
    a.lse = desc(lse, "lse", d);
    const int given = int(cu_seqlens_q.has_value()) + int(cu_seqlens_kv.has_value()) +
                      int(cu_seqlens_q_host.has_value()) + int(cu_seqlens_kv_host.has_value());
    TORCH_CHECK(given == 0 || given == 4, "sparse_mqa_prefill: the batched form needs cu_seqlens_q, cu_seqlens_kv and "
                "both host lists; pass all four or none");
    if (given == 4) {
        a.cu_seqlens_q = desc(*cu_seqlens_q, "cu_seqlens_q", d);
        a.cu_seqlens_kv = desc(*cu_seqlens_kv, "cu_seqlens_kv", d);
        a.cu_seqlens_q_host = host_int32(*cu_seqlens_q_host, t_host.q, "cu_seqlens_q_host");
        a.cu_seqlens_kv_host = host_int32(*cu_seqlens_kv_host, t_host.k, "cu_seqlens_kv_host");
    }
    if (block_table) a.block_table = desc(*block_table, "block_table", d);
    a.causal = int32_t(causal);
    a.sm_scale = float(sm_scale);
    // The key-set pre-pass's workspace (same results, faster), as mla_prefill's above.
    call_with_workspace(
        t_mqa_workspace_hint[size_t(d)], d, a,
        [&](mlajit_sparse_mqa_args* p) { return mlajit_sparse_mqa_prefill(dev.handle, p, dev.stream); },
        [&](mlajit_sparse_mqa_args* p, size_t* n) { return mlajit_sparse_mqa_workspace_size(dev.handle, p, n); },
        "mlajit_sparse_mqa_prefill", "mlajit_sparse_mqa_prefill");
    return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> mha_prefill_cuda(const at::Tensor& q, const at::Tensor& k_nope,
                                                    const std::optional<at::Tensor>& k_pe, const at::Tensor& v,
                                                    const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                                    c10::IntArrayRef cu_seqlens_q_host, c10::IntArrayRef cu_seqlens_k_host,
                                                    double sm_scale, const std::optional<at::Tensor>& mask) {
    const Device dev = device_of(q, "q");
    const int d = dev.index;
    TORCH_CHECK(q.dim() == 3, "q: expected [T, heads, 192], got shape ", q.sizes());
    at::Tensor out = at::empty({q.size(0), q.size(1), 128}, cuda_options(at::kBFloat16, d));
    at::Tensor lse = at::empty({q.size(0), q.size(1)}, cuda_options(at::kFloat, d));
    mlajit_mha_args a{};
    a.struct_size = sizeof a;
    a.q = desc(q, "q", d);
    if (k_pe) {
        a.k_nope = desc(k_nope, "k_nope", d);
        a.k_pe = desc(*k_pe, "k_pe", d);
    } else {
        a.k = desc(k_nope, "k", d);  // packed k [T_k, heads, 192]
    }
    a.v = desc(v, "v", d);
    a.out = desc(out, "out", d);
    a.lse = desc(lse, "lse", d);
    a.cu_seqlens_q = desc(cu_seqlens_q, "cu_seqlens_q", d);
    a.cu_seqlens_k = desc(cu_seqlens_k, "cu_seqlens_k", d);
    a.cu_seqlens_q_host = host_int32(cu_seqlens_q_host, t_host.q, "cu_seqlens_q_host");
    a.cu_seqlens_k_host = host_int32(cu_seqlens_k_host, t_host.k, "cu_seqlens_k_host");
    if (mask) a.mask = desc(*mask, "mask", d, MLAJIT_UINT32);
    a.sm_scale = float(sm_scale);
    check(mlajit_mha_prefill(dev.handle, &a, dev.stream), "mlajit_mha_prefill");
    return {out, lse};
}

int64_t max_seqlen(c10::IntArrayRef cu) {
    int64_t m = 0;
    for (size_t i = 0; i + 1 < cu.size(); ++i) m = std::max(m, cu[i + 1] - cu[i]);
    return m;
}

at::Tensor topk_mask_build_cuda(const at::Tensor& indices, const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k,
                                c10::IntArrayRef cu_seqlens_q_host, c10::IntArrayRef cu_seqlens_k_host) {
    const Device dev = device_of(indices, "indices");
    const int d = dev.index;
    TORCH_CHECK(indices.dim() >= 1, "indices: expected [T_q, topk], got shape ", indices.sizes());
    at::Tensor mask = at::empty({indices.size(0), mlajit_topk_mask_words(max_seqlen(cu_seqlens_k_host))},
                                cuda_options(at::kInt, d));
    mlajit_topk_mask_args a{};
    a.struct_size = sizeof a;
    a.indices = desc(indices, "indices", d);
    a.cu_seqlens_q = desc(cu_seqlens_q, "cu_seqlens_q", d);
    a.cu_seqlens_k = desc(cu_seqlens_k, "cu_seqlens_k", d);
    a.cu_seqlens_q_host = host_int32(cu_seqlens_q_host, t_host.q, "cu_seqlens_q_host");
    a.cu_seqlens_k_host = host_int32(cu_seqlens_k_host, t_host.k, "cu_seqlens_k_host");
    a.mask = desc(mask, "mask", d, MLAJIT_UINT32);
    check(mlajit_topk_mask_build(dev.handle, &a, dev.stream), "mlajit_topk_mask_build");
    return mask;
}

void quantize_latent_cache_cuda(const at::Tensor& kv_c, const at::Tensor& k_pe, const at::Tensor& slot_mapping,
                                const at::Tensor& kv_cache) {
    const Device dev = device_of(kv_c, "kv_c");
    const int d = dev.index;
    mlajit_quantize_latent_cache_args a{};
    a.struct_size = sizeof a;
    a.kv_c = desc(kv_c, "kv_c", d);
    a.k_pe = desc(k_pe, "k_pe", d);
    a.slot_mapping = desc(slot_mapping, "slot_mapping", d);
    a.kv_cache = desc(kv_cache, "kv_cache", d);
    check(mlajit_quantize_latent_cache(dev.handle, &a, dev.stream), "mlajit_quantize_latent_cache");
}

// ---- Meta kernels (fake tensors for torch.compile): shapes from shapes, SymInt-aware --------------------------

at::Tensor mla_prefill_meta(const at::Tensor& q_nope, const at::Tensor&, const std::optional<at::Tensor>&,
                            const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, c10::SymIntArrayRef, c10::SymIntArrayRef, double, int64_t, int64_t,
                            const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {
    return at::empty_symint({q_nope.sym_size(0), q_nope.sym_size(1), 128}, q_nope.options());
}

std::tuple<at::Tensor, at::Tensor> sparse_mqa_prefill_meta(const at::Tensor& q, const at::Tensor&, const at::Tensor&, double,
                                                           const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                                                           at::OptionalSymIntArrayRef, at::OptionalSymIntArrayRef,
                                                           const std::optional<at::Tensor>&, int64_t) {
    return {at::empty_symint({q.sym_size(0), q.sym_size(1), 512}, q.options()),
            at::empty_symint({q.sym_size(0), q.sym_size(1)}, q.options().dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor> mha_prefill_meta(const at::Tensor& q, const at::Tensor&, const std::optional<at::Tensor>&,
                                                    const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                    c10::SymIntArrayRef, c10::SymIntArrayRef, double,
                                                    const std::optional<at::Tensor>&) {
    return {at::empty_symint({q.sym_size(0), q.sym_size(1), 128}, q.options()),
            at::empty_symint({q.sym_size(0), q.sym_size(1)}, q.options().dtype(at::kFloat))};
}

at::Tensor topk_mask_build_meta(const at::Tensor& indices, const at::Tensor&, const at::Tensor&, c10::SymIntArrayRef,
                                c10::SymIntArrayRef cu_seqlens_k_host) {
    c10::SymInt max_k = 0;
    for (size_t i = 0; i + 1 < cu_seqlens_k_host.size(); ++i)
        max_k = max_k.max(cu_seqlens_k_host[i + 1] - cu_seqlens_k_host[i]);
    // mlajit_topk_mask_words: ceil(max_k / 32) words padded to a multiple of 4 (16-byte rows, read by TMA);
    // the tests check this against the library.
    c10::SymInt words = (max_k + 127) / 128 * 4;
    return at::empty_symint({indices.sym_size(0), words}, indices.options().dtype(at::kInt));
}

void quantize_latent_cache_meta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {}

}  // namespace

// The schemas: the same strings as the Python backend's (mlajit/_torch_ops_python.py); the tests compare them.
TORCH_LIBRARY(mlajit, m) {
    m.def("mla_prefill(Tensor q_nope, Tensor q_pe, Tensor? kv_c, Tensor? k_pe, Tensor w_kv_b, Tensor indices, "
          "Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt[] cu_seqlens_q_host, SymInt[] cu_seqlens_k_host, "
          "float sm_scale, int topk=0, int force_path=-1, Tensor? kv_cache=None, Tensor? block_table=None) -> Tensor");
    m.def("sparse_mqa_prefill(Tensor q, Tensor kv, Tensor indices, float sm_scale, Tensor? cu_seqlens_q=None, "
          "Tensor? cu_seqlens_kv=None, SymInt[]? cu_seqlens_q_host=None, SymInt[]? cu_seqlens_kv_host=None, "
          "Tensor? block_table=None, int causal=0) -> (Tensor, Tensor)");
    m.def("mha_prefill(Tensor q, Tensor k_nope, Tensor? k_pe, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
          "SymInt[] cu_seqlens_q_host, SymInt[] cu_seqlens_k_host, float sm_scale, Tensor? mask=None) "
          "-> (Tensor, Tensor)");
    m.def("topk_mask_build(Tensor indices, Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt[] cu_seqlens_q_host, "
          "SymInt[] cu_seqlens_k_host) -> Tensor");
    m.def("quantize_latent_cache(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) kv_cache) -> ()");
}

TORCH_LIBRARY_IMPL(mlajit, CUDA, m) {
    m.impl("mla_prefill", TORCH_FN(mla_prefill_cuda));
    m.impl("sparse_mqa_prefill", TORCH_FN(sparse_mqa_prefill_cuda));
    m.impl("mha_prefill", TORCH_FN(mha_prefill_cuda));
    m.impl("topk_mask_build", TORCH_FN(topk_mask_build_cuda));
    m.impl("quantize_latent_cache", TORCH_FN(quantize_latent_cache_cuda));
}

TORCH_LIBRARY_IMPL(mlajit, Meta, m) {
    m.impl("mla_prefill", TORCH_FN(mla_prefill_meta));
    m.impl("sparse_mqa_prefill", TORCH_FN(sparse_mqa_prefill_meta));
    m.impl("mha_prefill", TORCH_FN(mha_prefill_meta));
    m.impl("topk_mask_build", TORCH_FN(topk_mask_build_meta));
    m.impl("quantize_latent_cache", TORCH_FN(quantize_latent_cache_meta));
}

// The ops' handle of a CUDA device (created on first use), for the Python package's own functions to share
// (one handle, one cuBLASLt set-up per device). Called through ctypes.
extern "C" __attribute__((visibility("default"))) void* mlajit_torch_handle(int device) {
    try {
        return handle_for(device);
    } catch (const std::exception&) {
        return nullptr;
    }
}
