#include "common/error.h"
#include "mlajit_abi.h"
#include "ops/kernel_configs.h"
#include "ops/ops.h"
#include "ops/tensor_check.h"

namespace mlajit {

// The row length the library allocates and recommends: ceil(s_k / 32) words rounded up to a multiple of 4, so
// that every row starts 16-byte aligned, which the Hopper MHA kernel needs to read a tile's mask words with
// TMA (a mask of any other row stride runs the portable tier). Inputs are checked against the minimum,
// ceil(s_k / 32), not against this.
int64_t topk_mask_words(int64_t max_seqlen_k) { return ((std::max<int64_t>(max_seqlen_k, 0) + 127) / 128) * 4; }
int64_t topk_mask_min_words(int64_t max_seqlen_k) { return (std::max<int64_t>(max_seqlen_k, 0) + 31) / 32; }

LaunchPlan<TopkMaskParams> plan_topk_mask(const Arch& arch, const mlajit_topk_mask_args& a) {
    LaunchPlan<TopkMaskParams> plan;
    TopkMaskParams& p = plan.params;
    auto idx = check_tensor(a.indices, "indices", MLAJIT_INT32, {-1, -1}, false);
    const int64_t total_q = idx[0], topk = idx[1];
    auto cq = check_tensor(a.cu_seqlens_q, "cu_seqlens_q", MLAJIT_INT32, {-1}, false);
    auto ck = check_tensor(a.cu_seqlens_k, "cu_seqlens_k", MLAJIT_INT32, {-1}, false);
    if (cq[0] < 2 || cq[0] != ck[0])
        fail_arg("cu_seqlens_q and cu_seqlens_k must both have batch+1 >= 2 entries; got {} and {}", cq[0], ck[0]);
    const int64_t batch = cq[0] - 1;
    // One grid y block per request: CUDA allows 65535 (the validation fuzz found larger batches accepted).
    if (batch > 65535) fail_arg("batch has {} requests; at most 65535 per call: split the batch", batch);
    const int64_t max_q = check_cu_seqlens(a.cu_seqlens_q_host, batch, total_q, "cu_seqlens_q", true);
    if (!a.cu_seqlens_k_host) fail_arg("cu_seqlens_k_host is NULL: pass the host copy of cu_seqlens_k");
    const int64_t max_k = check_cu_seqlens(a.cu_seqlens_k_host, batch, a.cu_seqlens_k_host[batch], "cu_seqlens_k", true);
    auto m = check_tensor(a.mask, "mask", MLAJIT_UINT32, {total_q, -1}, false);
    const int64_t words = topk_mask_min_words(max_k);
    if (m[1] < words)
        fail_arg("mask: rows need at least {} words for the longest request (s_k = {}), got {} (shape {}): size it with "
                 "mlajit_topk_mask_words", words, max_k, m[1], shape_str(a.mask));
    if (topk < 1 || topk > 65536) fail_arg("indices: topk (dimension 1) must be in 1..65536, got {}", topk);

    KernelSpec spec = topk_mask_spec(arch);
    p.indices = static_cast<const int*>(a.indices.data);
    p.idx_stride_tok = a.indices.stride[0];
    p.mask = static_cast<unsigned*>(a.mask.data);
    p.mask_stride_row = a.mask.stride[0];
    p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data);
    p.cu_seqlens_k = static_cast<const int*>(a.cu_seqlens_k.data);
    p.batch = (int)batch;
    p.topk = (int)topk;
    p.max_seqlen_q = (int)max_q;
    const int rows = mask_rows_per_block(spec);
    plan.grid = Dim3{(unsigned)((max_q + rows - 1) / rows), (unsigned)batch, 1};
    plan.threads = mj_mask_threads();
    plan.smem = 0;
    plan.spec = spec;
    return plan;
}

void topk_mask_build(Handle& h, const mlajit_topk_mask_args& a, CUstream stream) {
    auto plan = plan_topk_mask(h.arch(), a);
    launch_plan(h, plan, stream);
}

}  // namespace mlajit
