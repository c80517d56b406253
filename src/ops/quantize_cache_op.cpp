// The FP8 latent-cache writer (mlajit_quantize_latent_cache, kernels_src/quantize_cache): bf16 kv_c / k_pe
// rows into fp8_ds_mla pages at the engine's slot mapping.
#include <climits>
#include <cstring>

#include "common/error.h"
#include "mlajit_abi.h"
#include "ops/kernel_configs.h"
#include "ops/ops.h"
#include "ops/tensor_check.h"

namespace mlajit {

void check_fp8_cache(const mlajit_tensor& t, const char* name) {
    // The dtype first, so a bf16 [.., .., 576] cache passed here is named for what it is.
    int32_t raw = 0;
    static_assert(sizeof raw == sizeof t.dtype);
    std::memcpy(&raw, &t.dtype, sizeof raw);
    if (t.data && raw == MLAJIT_BF16)
        fail_arg("{}: expected the FP8 latent cache (uint8 [num_blocks, block_size, {}]), got a bf16 tensor {}: "
                 "mlajit_quantize_latent_cache writes the fp8_ds_mla form only", name, mj_fp8_row_bytes, shape_str(t));
    if (t.ndim == 3 && t.shape[2] != mj_fp8_row_bytes)
        fail_arg("{}: the FP8 cache's rows are {} bytes (512 e4m3 + 4 fp32 scales + 64 bf16, fp8_ds_mla); the last "
                 "dimension is {} (shape {})", name, mj_fp8_row_bytes, t.shape[2], shape_str(t));
    auto c = check_tensor(t, name, MLAJIT_UINT8, {-1, -1, mj_fp8_row_bytes});
    if (c[0] < 1 || c[1] < 1) fail_arg("{}: expected [num_blocks >= 1, block_size >= 1, 656], got {}", name, shape_str(t));
    if (c[0] * c[1] > INT32_MAX)
        fail_arg("{}: {} pages of {} tokens hold more slots than int32 slot numbers reach: use fewer or smaller pages",
                 name, c[0], c[1]);
}

LaunchPlan<QuantizeCacheParams> plan_quantize_cache(const Arch& arch, const mlajit_quantize_latent_cache_args& a) {
    LaunchPlan<QuantizeCacheParams> plan;
    QuantizeCacheParams& p = plan.params;
    auto kc = check_tensor(a.kv_c, "kv_c", MLAJIT_BF16, {-1, kDimLatent});
    const int64_t T = kc[0];
    check_tensor(a.k_pe, "k_pe", MLAJIT_BF16, {T, kDimRope});
    const auto sm = check_tensor(a.slot_mapping, "slot_mapping", MLAJIT_INT32, {-1}, false);
    if (sm[0] != T)
        fail_arg("slot_mapping: one slot per token: kv_c has {} tokens, slot_mapping {} entries", T, sm[0]);
    check_fp8_cache(a.kv_cache, "kv_cache");
    plan.spec = quantize_cache_spec(arch);
    p.kv_c = a.kv_c.data;
    p.kvc_stride = a.kv_c.stride[0];
    p.k_pe = a.k_pe.data;
    p.kpe_stride = a.k_pe.stride[0];
    p.slot_mapping = static_cast<const int*>(a.slot_mapping.data);
    p.cache = a.kv_cache.data;
    p.page_stride = a.kv_cache.stride[0];
    p.tok_stride = a.kv_cache.stride[1];
    p.tokens = T;
    p.block_size = int(a.kv_cache.shape[1]);
    p.num_blocks = int(a.kv_cache.shape[0]);
    const int per_block = quantize_tokens_per_block(plan.spec);
    plan.grid = Dim3{unsigned((T + per_block - 1) / per_block), 1, 1};
    plan.threads = mj_quant_threads(per_block);
    plan.smem = 0;
    return plan;
}

void quantize_latent_cache(Handle& h, const mlajit_quantize_latent_cache_args& a, CUstream stream) {
    auto plan = plan_quantize_cache(h.arch(), a);
    if (plan.params.tokens == 0) return;  // nothing to write (and a grid of 0 blocks is a launch error)
    launch_plan(h, plan, stream);
}

}  // namespace mlajit
