/* mlajit: DeepSeek Sparse Attention (DSA) prefill on NVIDIA GPUs, with kernels specialized and compiled at
 * run time (NVRTC), cached on disk, and launched through the CUDA Driver API.
 *
 * Stable C ABI. Every call returns an mlajit_status; on failure mlajit_last_error() (thread-local) says
 * what was wrong and what to do. Nothing is launched when an argument check fails.
 *
 * Tensors are described by mlajit_tensor: a device pointer, a dtype, up to 4 dims and strides in
 * elements (row-major; the last dimension must be contiguous). Semantics: see docs and DESIGN.md. */
#ifndef MLAJIT_MLAJIT_H
#define MLAJIT_MLAJIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define MLAJIT_API __declspec(dllexport)
#else
#define MLAJIT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MLAJIT_VERSION_MAJOR 0
#define MLAJIT_VERSION_MINOR 1

typedef enum mlajit_status {
    MLAJIT_OK = 0,
    MLAJIT_ERROR_INVALID_ARGUMENT = 1, /* a shape, dtype, stride, pointer or value is wrong */
    MLAJIT_ERROR_NO_DRIVER = 2,        /* libcuda.so.1 could not be loaded, or no GPU */
    MLAJIT_ERROR_NO_NVRTC = 3,         /* NVRTC could not be loaded and the kernel is not cached */
    MLAJIT_ERROR_COMPILE = 4,          /* NVRTC rejected a kernel (the message has the log) */
    MLAJIT_ERROR_CACHE_MISS = 5,       /* MLAJIT_OFFLINE=1 and the kernel is not in the cache */
    MLAJIT_ERROR_CUDA = 6,             /* a CUDA driver call failed */
    MLAJIT_ERROR_UNSUPPORTED = 7,      /* valid request this build or GPU does not support */
    MLAJIT_ERROR_CONFIG = 8,           /* an environment variable has a bad value */
    MLAJIT_ERROR_INTERNAL = 9
} mlajit_status;

typedef enum mlajit_dtype { MLAJIT_BF16 = 0, MLAJIT_FP32 = 1, MLAJIT_INT32 = 2, MLAJIT_UINT32 = 3 } mlajit_dtype;

typedef struct mlajit_tensor {
    void* data;         /* device pointer (NULL = absent, for optional tensors) */
    mlajit_dtype dtype;
    int32_t ndim;
    int64_t shape[4];
    int64_t stride[4];  /* in elements */
} mlajit_tensor;

/* The message of the last failed call on this thread ("" if none). Valid until the next call. */
MLAJIT_API const char* mlajit_last_error(void);
MLAJIT_API const char* mlajit_status_name(mlajit_status status);
MLAJIT_API const char* mlajit_version(void);

/* A runtime handle bound to one CUDA context: device < 0 takes the caller's current context (so pointers
 * from PyTorch or any CUDA runtime program work), device >= 0 retains that device's primary context.
 * Handles are thread-safe; creating many is cheap (the kernel cache is shared per context). */
typedef struct mlajit_handle_s* mlajit_handle;
MLAJIT_API mlajit_status mlajit_create(int device, mlajit_handle* out);
MLAJIT_API mlajit_status mlajit_destroy(mlajit_handle handle);
/* The target arch kernels are compiled for, e.g. "sm_90a". */
MLAJIT_API const char* mlajit_handle_arch(mlajit_handle handle);

/* ---------------------------------------------------------------------------------------------------
 * Sparse MQA prefill (FlashMLA sparse-prefill semantics).
 * q [s_q, h, 576] bf16, kv [s_kv, 576] bf16, indices [s_q, topk] int32 (-1 / out of range = skipped)
 * -> out [s_q, h, 512] bf16, lse [s_q, h] fp32 (natural log), max_logits [s_q, h] fp32 (optional).
 * Batched form: pass cu_seqlens_q / cu_seqlens_kv (device int32 [batch+1]) and their host copies;
 * indices are then local to each request. h in 1..128, topk a multiple of 64 in 64..4096. */
typedef struct mlajit_sparse_mqa_args {
    mlajit_tensor q, kv, indices;
    mlajit_tensor out, lse, max_logits;
    mlajit_tensor cu_seqlens_q, cu_seqlens_kv;  /* optional (data NULL = one sequence) */
    const int32_t* cu_seqlens_q_host;           /* required with the batched form */
    const int32_t* cu_seqlens_kv_host;
    float sm_scale;
} mlajit_sparse_mqa_args;
MLAJIT_API mlajit_status mlajit_sparse_mqa_prefill(mlajit_handle handle, const mlajit_sparse_mqa_args* args,
                                                   void* stream);

/* ---------------------------------------------------------------------------------------------------
 * MHA prefill, dense causal or masked (causal AND top-k bitmask), varlen, bottom-right causal alignment
 * (the queries of a request are the last s_q of its s_k keys: chunked prefill over cached context is the
 * same call). q [T_q, h, 192]; keys either k [T_k, h, 192] or k_nope [T_k, h, 128] + k_pe [T_k, 64]
 * (shared by all heads; also accepted as [T_k, 1, 64] or [T_k, h, 64]); v [T_k, h, 128]
 * -> out [T_q, h, 128] bf16, lse [T_q, h] fp32. cu_seqlens_* are device int32 [batch+1]; their host copies
 * are required (shape checks and the grid size come from them). mask: optional uint32 [T_q, words]
 * from mlajit_topk_mask_build. cu_seqlens[0] may be > 0 (here and in mlajit_topk_mask_build): the call
 * then covers the sub-batch of tokens from cu_seqlens[0] on, with tensors still indexed from token 0. */
typedef struct mlajit_mha_args {
    mlajit_tensor q, k, k_nope, k_pe, v;
    mlajit_tensor out, lse;
    mlajit_tensor cu_seqlens_q, cu_seqlens_k;
    const int32_t* cu_seqlens_q_host;
    const int32_t* cu_seqlens_k_host;
    mlajit_tensor mask;  /* optional */
    float sm_scale;
} mlajit_mha_args;
MLAJIT_API mlajit_status mlajit_mha_prefill(mlajit_handle handle, const mlajit_mha_args* args, void* stream);

/* ---------------------------------------------------------------------------------------------------
 * Top-k bitmask: indices [T_q, topk] int32 (request-local key positions) -> mask [T_q, words] uint32,
 * bit j of word w = key 32w+j of the row's request. The kernel writes every word (no memset needed).
 * mlajit_topk_mask_words gives the row length in words for the batch's longest s_k. */
typedef struct mlajit_topk_mask_args {
    mlajit_tensor indices;
    mlajit_tensor cu_seqlens_q, cu_seqlens_k;
    const int32_t* cu_seqlens_q_host;
    const int32_t* cu_seqlens_k_host;
    mlajit_tensor mask;  /* output, uint32 [T_q, >= mlajit_topk_mask_words(max s_k)] */
} mlajit_topk_mask_args;
MLAJIT_API int64_t mlajit_topk_mask_words(int64_t max_seqlen_k);
/* Bytes for the mask of a batch with total_q query tokens and longest request max_seqlen_k. */
MLAJIT_API size_t mlajit_topk_mask_bytes(int64_t total_q, int64_t max_seqlen_k);
MLAJIT_API mlajit_status mlajit_topk_mask_build(mlajit_handle handle, const mlajit_topk_mask_args* args,
                                                void* stream);

/* ---------------------------------------------------------------------------------------------------
 * Planner: per request, the path predicted fastest (dense MHA when s_k <= topk; else masked MHA or sparse
 * MQA). Predictions come from a calibration table for gpu_name (in the cache, or MLAJIT_PLAN_TABLE) when
 * there is one, else from a cost model with constants measured on the H200. MLAJIT_PATH and
 * MLAJIT_MASKED_MHA_MAX_SEQ override. gpu_name may be NULL. Output arrays have n entries; the two time
 * arrays may be NULL. */
typedef enum mlajit_path { MLAJIT_PATH_DENSE_MHA = 0, MLAJIT_PATH_MASKED_MHA = 1, MLAJIT_PATH_SPARSE_MQA = 2 } mlajit_path;
MLAJIT_API const char* mlajit_path_name(mlajit_path path);
MLAJIT_API mlajit_status mlajit_plan_prefill(const char* gpu_name, int heads, int topk, int n, const int64_t* s_q,
                                             const int64_t* s_k, mlajit_path* paths, double* mha_ms, double* mqa_ms);

/* ---------------------------------------------------------------------------------------------------
 * One-call MLA prefill (DSA). Plans every request (as mlajit_plan_prefill, with this GPU's calibration
 * table when the cache has one), runs each group of requests on its path and writes out [T_q, h, 128]:
 * - dense / masked MHA: k_nope, v = kv_c . W_kv_b^T (cuBLASLt), top-k mask from indices (masked only),
 *   causal MHA over [q_nope ; q_pe] and [k_nope ; k_pe];
 * - sparse MQA: q = [q_nope . W_UK ; q_pe] (576), kv = [kv_c ; k_pe], sparse attention over indices,
 *   out = latent . W_UV^T.
 * Inputs (bf16 unless said): q_nope [T_q, h, 128], q_pe [T_q, h, 64], kv_c [T_k, 512], k_pe [T_k, 64],
 * w_kv_b [h * 256, 512] (DeepSeek's kv_b_proj.weight: per head 128 rows of W_UK then 128 rows of W_UV),
 * indices int32 [T_q, topk] (request-local key positions, -1 = none), cu_seqlens_q / cu_seqlens_k (device
 * int32 [batch + 1], bottom-right causal alignment as in mlajit_mha_prefill) with their host copies.
 * Packed layouts cost no copy: q_nope/q_pe as views of one [T_q, h, 192] tensor, kv_c/k_pe as views of one
 * [T_k, 576] tensor. lse [T_q, h] fp32 is optional. The workspace (device memory, 256-byte aligned) must
 * hold mlajit_mla_prefill_workspace_size() bytes for the same arguments; it is scratch, reused per call.
 * force_path: -1 = the planner decides (MLAJIT_PATH still applies), else an mlajit_path for every request
 * (dense MHA only where exact: s_k <= topk for every request, else INVALID_ARGUMENT).
 * paths_out: optional host array of batch entries, receives the path each request took. */
typedef struct mlajit_mla_prefill_args {
    mlajit_tensor q_nope, q_pe, kv_c, k_pe, w_kv_b, indices;
    mlajit_tensor cu_seqlens_q, cu_seqlens_k;
    const int32_t* cu_seqlens_q_host;
    const int32_t* cu_seqlens_k_host;
    mlajit_tensor out, lse; /* lse optional */
    float sm_scale;
    void* workspace;
    size_t workspace_bytes;
    int force_path;
    mlajit_path* paths_out;
} mlajit_mla_prefill_args;
/* Bytes of workspace mlajit_mla_prefill needs for these arguments (shapes and host cu_seqlens are read;
 * device pointers and the workspace may be NULL). */
MLAJIT_API mlajit_status mlajit_mla_prefill_workspace_size(mlajit_handle handle, const mlajit_mla_prefill_args* args,
                                                           size_t* bytes);
MLAJIT_API mlajit_status mlajit_mla_prefill(mlajit_handle handle, const mlajit_mla_prefill_args* args, void* stream);

/* ---------------------------------------------------------------------------------------------------
 * Cache and warmup. Compiles (or loads from the disk cache) the kernels one op would launch, without
 * launching; works with no GPU when the handle is NULL and arch is given ("sm_90a"). */
typedef enum mlajit_kernel_family {
    MLAJIT_FAMILY_MHA_FWD = 0,
    MLAJIT_FAMILY_SPARSE_MQA_FWD = 1,
    MLAJIT_FAMILY_TOPK_MASK = 2
} mlajit_kernel_family;

#ifdef __cplusplus
}
#endif
#endif /* MLAJIT_MLAJIT_H */
