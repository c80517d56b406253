/* mlajit: DeepSeek Sparse Attention (DSA) prefill on NVIDIA GPUs, with kernels specialized and compiled at
 * run time (NVRTC), cached on disk, and launched through the CUDA Driver API.
 *
 * Stable C ABI. Every call returns an mlajit_status; on failure mlajit_last_error() (thread-local) says
 * what was wrong and what to do. Nothing is launched when an argument check fails.
 *
 * Tensors are described by mlajit_tensor: a device pointer, a dtype, up to 4 dims and strides in
 * elements (row-major; the last dimension must be contiguous). The contract (semantics, layouts, cache):
 * docs/DESIGN.md in the repository.
 *
 * ABI growth: every args struct starts with `size_t struct_size`, which the caller sets to sizeof(the
 * struct as its header declares it); MLAJIT_ARGS_INIT does it and zero-fills the rest:
 *     mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
 * New fields are only ever appended, and a zero in a new field keeps the old behaviour. So a program
 * built against an older header keeps working with a newer library (the missing tail reads as zero), and
 * a newer program on an older library works as long as it leaves the fields that library does not know
 * at zero (else MLAJIT_ERROR_UNSUPPORTED names the struct). struct_size 0 or below the first published
 * size is MLAJIT_ERROR_INVALID_ARGUMENT.
 *
 * Index semantics (every op and path): indices are request-local key positions; -1 and any value outside
 * [0, s_k) of the row's request are skipped; a row may be any width from 1 up (engines pad with -1); a
 * key listed more than once in a row is attended once (a top-k selection is a set).
 *
 * Non-finite inputs: mlajit does not inspect values. A NaN or inf reaches the output rows that use it: a
 * query element its own (token, head); a key or value row every (token, head) of its request whose key
 * set holds it; in mla_prefill a kv_c / k_pe row every head of the rows that select it, and a w_kv_b row
 * its whole head. On the MHA paths it may also reach rows of the same request and head that share a
 * kernel tile with it without attending it (a masked-out key's value times probability 0 is still NaN).
 * Rows of other requests and other heads are never affected (tested on every path). sm_scale must be
 * positive and finite (checked). */
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
#define MLAJIT_VERSION_MINOR 2
#define MLAJIT_VERSION_PATCH 0

/* Sets struct_size and zero-fills every other field: `T a = MLAJIT_ARGS_INIT(T);` in C and C++ (written
 * so that -Wextra's missing-field-initializers stays quiet in both). */
#ifdef __cplusplus
#define MLAJIT_ARGS_INIT(type) ([] { type mlajit_args_{}; mlajit_args_.struct_size = sizeof(type); return mlajit_args_; }())
#else
#define MLAJIT_ARGS_INIT(type) {.struct_size = sizeof(type)}
#endif

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

/* MLAJIT_UINT8: raw bytes, used for the FP8 latent cache (see "FP8 latent cache" below). */
typedef enum mlajit_dtype { MLAJIT_BF16 = 0, MLAJIT_FP32 = 1, MLAJIT_INT32 = 2, MLAJIT_UINT32 = 3, MLAJIT_UINT8 = 4 } mlajit_dtype;

/* ---------------------------------------------------------------------------------------------------
 * FP8 latent cache (the layout engines call `fp8_ds_mla`, DeepSeek-V3.2 on Hopper): a uint8 tensor
 * [num_blocks, block_size, 656], one 656-byte row per cached token:
 *   bytes   0..511  kv_c as 512 float8 e4m3 (OCP e4m3fn: bias 7, max 448, no inf)
 *   bytes 512..527  4 float32 scales, one per 128 kv_c values: kv_c[i] = e4m3[i] * scale[i / 128]
 *   bytes 528..655  k_pe as 64 bf16 (not quantized)
 * Rows start 16-byte aligned (strides are multiples of 16 and the base pointer is 16-byte aligned).
 * Wherever a paged latent cache is accepted (mlajit_sparse_mqa_args.kv with block_table,
 * mlajit_mla_prefill_args.kv_cache), this form may be passed instead of bf16 [.., 576]; the dtype and the
 * last dimension say which. What the kernels compute with is the dequantized row rounded to bf16:
 * bf16(float(e4m3) * scale) for kv_c, k_pe as stored. mlajit_quantize_latent_cache writes such a cache.
 * A non-finite scale makes its 128 values non-finite: only outputs that attend that key are affected. */

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
MLAJIT_API const char* mlajit_version(void); /* "MAJOR.MINOR.PATCH" of the library (not of the header) */

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
 * q [s_q, h, 576] bf16, kv [s_kv, 576] bf16, indices [s_q, width] int32 (index semantics above)
 * -> out [s_q, h, 512] bf16, lse [s_q, h] fp32 (natural log), max_logits [s_q, h] fp32 (optional).
 * A row with no valid index: out = 0, lse = -inf, max_logits = -inf.
 * Batched form: pass cu_seqlens_q / cu_seqlens_kv (device int32 [batch+1]) and their host copies;
 * indices are then local to each request; cu_seqlens[0] may be > 0 (a sub-batch, tensors still indexed
 * from token 0). Paged latent cache: with block_table (int32 [batch or 1, max_blocks]) kv is
 * [num_blocks, block_size, 576] and key position p of request r is row p % block_size of page
 * block_table[r][p / block_size]; the paged kv may also be the FP8 cache (uint8 [num_blocks, block_size,
 * 656], see above). h in 1..128. */
typedef struct mlajit_sparse_mqa_args {
    size_t struct_size;
    mlajit_tensor q, kv, indices;
    mlajit_tensor out, lse, max_logits;
    mlajit_tensor cu_seqlens_q, cu_seqlens_kv;  /* optional (data NULL = one sequence) */
    const int32_t* cu_seqlens_q_host;           /* required with the batched form */
    const int32_t* cu_seqlens_kv_host;
    float sm_scale;
    mlajit_tensor block_table; /* optional: paged kv (see above) */
    /* 0: FlashMLA's semantics (any index in [0, s_kv) is attended). 1: DSA's causal semantics, as the
     * one-call prefill uses: query i of a request (bottom-right aligned: key position s_kv - s_q + i) also
     * skips indices past its own position, exactly as masked MHA does. */
    int32_t causal;
    /* Optional device scratch (appended after 0.2): with at least mlajit_sparse_mqa_workspace_size() bytes (16-byte aligned),
     * a first kernel turns each query's index row into its compacted key set once, and the attention kernel reads
     * that list instead of building the set in every block of the token: the same results bit for bit, faster
     * (H100, s_q = s_kv = 8192, topk 2048, paged: 4.23 -> 3.32 ms at 16 heads, 9.38 -> 8.64 at 128). NULL (and 0
     * bytes): no pre-pass. A workspace smaller than the size is an error; it is only read and written on `stream`. */
    void* workspace;
    size_t workspace_bytes;
} mlajit_sparse_mqa_args;
MLAJIT_API mlajit_status mlajit_sparse_mqa_prefill(mlajit_handle handle, const mlajit_sparse_mqa_args* args,
                                                   void* stream);
/* The workspace bytes mlajit_sparse_mqa_prefill's key-set pre-pass needs for these arguments (the workspace fields
 * themselves are ignored): 4 * (tokens * width + tokens) plus alignment, tokens = the call's query tokens. 0 where the
 * pre-pass does not apply (no query token, or a latent cache spanning 64 GiB or more: the list holds 16-byte offsets
 * in 32 bits); the op then ignores a workspace. Checks the arguments as the op does. */
MLAJIT_API mlajit_status mlajit_sparse_mqa_workspace_size(mlajit_handle handle, const mlajit_sparse_mqa_args* args,
                                                          size_t* bytes);

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
    size_t struct_size;
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
 * Top-k bitmask: indices [T_q, width] int32 (request-local key positions) -> mask [T_q, words] uint32,
 * bit j of word w = key 32w+j of the row's request. The kernel writes every word (no memset needed).
 * mlajit_topk_mask_words gives the row length in words for the batch's longest s_k: ceil(s_k / 32) padded
 * to a multiple of 4 (16-byte rows: the Hopper MHA kernel reads a masked tile's words by TMA and runs the
 * portable tier for a mask with any other row stride; ceil(s_k / 32) words is the minimum accepted). */
typedef struct mlajit_topk_mask_args {
    size_t struct_size;
    mlajit_tensor indices;
    mlajit_tensor cu_seqlens_q, cu_seqlens_k;
    const int32_t* cu_seqlens_q_host;
    const int32_t* cu_seqlens_k_host;
    mlajit_tensor mask;  /* output, uint32 [T_q, >= ceil(max s_k / 32)]; mlajit_topk_mask_words(max s_k) recommended */
} mlajit_topk_mask_args;
MLAJIT_API int64_t mlajit_topk_mask_words(int64_t max_seqlen_k);
/* Bytes for the mask of a batch with total_q query tokens and longest request max_seqlen_k. */
MLAJIT_API size_t mlajit_topk_mask_bytes(int64_t total_q, int64_t max_seqlen_k);
MLAJIT_API mlajit_status mlajit_topk_mask_build(mlajit_handle handle, const mlajit_topk_mask_args* args,
                                                void* stream);

/* ---------------------------------------------------------------------------------------------------
 * Planner: per request, a path (dense MHA when s_k <= topk, the MODEL's top-k, > 0; else masked MHA or
 * sparse MQA, chosen for the whole batch: the one call runs each run of consecutive requests of one path
 * as one batched step, so the plan of least predicted call time is taken, not each request's fastest
 * alone). Predictions come from a calibration table for gpu_name (in the cache, or MLAJIT_PLAN_TABLE) when
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
 * indices int32 [T_q, width] (request-local key positions; index semantics above), cu_seqlens_q / cu_seqlens_k (device
 * int32 [batch + 1], bottom-right causal alignment as in mlajit_mha_prefill) with their host copies.
 * Packed layouts cost no copy: q_nope/q_pe as views of one [T_q, h, 192] tensor, kv_c/k_pe as views of one
 * [T_k, 576] tensor. lse [T_q, h] fp32 is optional. The workspace (device memory, 256-byte aligned) must
 * hold mlajit_mla_prefill_workspace_size() bytes for the same arguments; it is scratch, reused per call.
 * force_path: -1 = the planner decides (MLAJIT_PATH still applies), else an mlajit_path for every request
 * (dense MHA only where exact: s_k <= topk for every request, else INVALID_ARGUMENT).
 * topk: the MODEL's top-k (2048 for DeepSeek-V3.2), not the width of indices (an engine may pad rows past
 * it); 0 = the width. Dense MHA is used only where exact: s_k <= topk for the request.
 * Paged latent cache (instead of kv_c / k_pe): kv_cache bf16 [num_blocks, block_size, 576] and
 * block_table int32 [batch, max_blocks] (key position p of request r is row p % block_size of page
 * block_table[r][p / block_size]); total_k is then cu_seqlens_k_host[batch]. kv_cache may be the FP8
 * cache (uint8 [num_blocks, block_size, 656], see above): each step dequantizes only its own requests'
 * keys, once, into the workspace (docs/DESIGN.md section 7 says why; never the whole cache).
 * paths_out: optional host array of batch entries, receives the path each request took. */
typedef struct mlajit_mla_prefill_args {
    size_t struct_size;
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
    int32_t topk;                           /* the model's top-k; 0 = indices width */
    mlajit_tensor kv_cache, block_table;    /* optional paged latent cache (instead of kv_c, k_pe) */
} mlajit_mla_prefill_args;
/* Bytes of workspace mlajit_mla_prefill needs for these arguments (shapes and host cu_seqlens are read;
 * device pointers and the workspace may be NULL). Depends on the handle too: it includes cuBLASLt's 32 MiB
 * scratch only where cuBLASLt runs the projections (not on the Hopper tier with MLAJIT_GEMM=auto). */
MLAJIT_API mlajit_status mlajit_mla_prefill_workspace_size(mlajit_handle handle, const mlajit_mla_prefill_args* args,
                                                           size_t* bytes);
MLAJIT_API mlajit_status mlajit_mla_prefill(mlajit_handle handle, const mlajit_mla_prefill_args* args, void* stream);

/* ---------------------------------------------------------------------------------------------------
 * FP8 latent cache writer: quantizes bf16 rows kv_c [T, 512] and k_pe [T, 64] into kv_cache (uint8
 * [num_blocks, block_size, 656], the layout above) at slot_mapping (device int32 [T]: slot s is row
 * s % block_size of page s / block_size, as engines' slot mappings are; a negative slot skips the token).
 * Per 128 kv_c values: scale = amax / 448 (amax 0 -> scale 1), e4m3 = round-to-nearest-even(x / scale),
 * saturating at +-448; k_pe is copied. The other rows of the cache are left as they are. A slot past the
 * cache is INVALID_ARGUMENT where the host can see it (it cannot see device memory: a device-side slot out
 * of range is skipped). */
typedef struct mlajit_quantize_latent_cache_args {
    size_t struct_size;
    mlajit_tensor kv_c, k_pe, slot_mapping;
    mlajit_tensor kv_cache; /* output */
} mlajit_quantize_latent_cache_args;
MLAJIT_API mlajit_status mlajit_quantize_latent_cache(mlajit_handle handle, const mlajit_quantize_latent_cache_args* args,
                                                      void* stream);

/* ---------------------------------------------------------------------------------------------------
 * Cache warmup: compiles into the disk cache (or finds there) every kernel a model's prefill can launch,
 * for the given TP degrees, without launching anything. With arch set ("sm_90a", "sm_80") it needs no GPU
 * or driver (NVRTC only); arch NULL = the GPU of `device` (or the current context's, device < 0).
 * The cache root and mode are the environment's (MLAJIT_CACHE_DIR, MLAJIT_CACHE, ...), as for every call.
 * heads: the model's attention heads (128 for DeepSeek-V3.2); 0 = 128. tp_degrees: n_tp entries, each
 * dividing heads (NULL / 0 = {1}). topk: the model's top-k (0 = 2048). Outputs (optional): how many
 * kernels were compiled now and how many were already in the cache. */
typedef struct mlajit_warmup_args {
    size_t struct_size;
    const char* arch;
    int device;
    int heads;
    const int* tp_degrees;
    int n_tp;
    int topk;
    int* compiled;
    int* cached;
} mlajit_warmup_args;
MLAJIT_API mlajit_status mlajit_warmup(const mlajit_warmup_args* args);

#ifdef __cplusplus
}
#endif
#endif /* MLAJIT_MLAJIT_H */
