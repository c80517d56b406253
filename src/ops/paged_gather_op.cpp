// The paged latent-cache gather (kernels_src/paged_gather): the one-call prefill's MHA runs read their
// keys' latent rows contiguously (for the up-projection GEMM), so on a paged cache they are gathered first;
// from the FP8 cache the same launch dequantizes (only the run's keys: no bf16 copy of the whole cache).
#include "common/error.h"
#include "mlajit_abi.h"
#include "ops/kernel_configs.h"
#include "ops/ops.h"

namespace mlajit {

void paged_gather(Handle& h, const PagedGather& g, CUstream stream) {
    LaunchPlan<PagedGatherParams> plan;
    PagedGatherParams& p = plan.params;
    p.pages = g.kv_cache.data;
    p.page_stride = g.kv_cache.stride[0];
    p.tok_stride = g.kv_cache.stride[1];
    p.block_table = static_cast<const int*>(g.block_table.data) + g.r0 * g.block_table.stride[0];
    p.bt_stride = g.block_table.stride[0];
    p.cu_seqlens_k = g.cu_seqlens_k + g.r0;
    p.dst = g.dst;
    p.dst_stride = g.dst_stride;
    p.batch = int(g.r1 - g.r0);
    p.block_size = int(g.kv_cache.shape[1]);
    p.num_blocks = int(g.kv_cache.shape[0]);
    p.max_blocks = int(g.block_table.shape[1]);
    plan.spec = paged_gather_spec(h.arch(), g.kv_fp8);
    const int rows = gather_rows_per_block(plan.spec);
    if (p.batch <= 0 || g.max_s_k <= 0) return;
    plan.grid = Dim3{unsigned((g.max_s_k + rows - 1) / rows), unsigned(p.batch), 1};
    plan.threads = mj_gather_threads();
    plan.smem = 0;
    launch_plan(h, plan, stream);
}

}  // namespace mlajit
