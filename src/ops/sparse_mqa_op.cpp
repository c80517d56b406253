#include "common/error.h"
#include "mlajit_abi.h"
#include "ops/kernel_configs.h"
#include "ops/ops.h"
#include "ops/tensor_check.h"

namespace mlajit {

LaunchPlan<SparseMqaFwdParams> plan_sparse_mqa(const Arch& arch, const mlajit_sparse_mqa_args& a) {
    LaunchPlan<SparseMqaFwdParams> plan;
    SparseMqaFwdParams& p = plan.params;
    auto q = check_tensor(a.q, "q", MLAJIT_BF16, {-1, -1, kDimQkMqa});
    const int64_t s_q = q[0], heads = q[1];
    if (heads < 1 || heads > 128) fail_arg("q: the number of heads (dimension 1) must be in 1..128, got {}", heads);
    auto kv = check_tensor(a.kv, "kv", MLAJIT_BF16, {-1, kDimQkMqa});
    auto idx = check_tensor(a.indices, "indices", MLAJIT_INT32, {s_q, -1}, false);
    const int64_t topk = idx[1];
    if (topk < 64 || topk > 4096 || topk % 64 != 0)
        fail_arg("indices: topk (dimension 1) must be a multiple of 64 in 64..4096, got {}: pad with -1", topk);
    check_tensor(a.out, "out", MLAJIT_BF16, {s_q, heads, kDimLatent});
    check_tensor(a.lse, "lse", MLAJIT_FP32, {s_q, heads}, false);
    if (a.lse.stride[1] != 1) fail_arg("lse: the head dimension must be contiguous (stride 1), got {}", a.lse.stride[1]);
    if (present(a.max_logits)) {
        check_tensor(a.max_logits, "max_logits", MLAJIT_FP32, {s_q, heads}, false);
        if (a.max_logits.stride[1] != 1)
            fail_arg("max_logits: the head dimension must be contiguous (stride 1), got {}", a.max_logits.stride[1]);
    }
    if (!(a.sm_scale > 0.f) || !std::isfinite(a.sm_scale)) fail_arg("sm_scale must be a positive finite number, got {}", a.sm_scale);
    if (s_q > 0x7fffffff || kv[0] > 0x7fffffff) fail_arg("s_q and s_kv must fit in int32, got {} and {}", s_q, kv[0]);

    if (present(a.cu_seqlens_q) || present(a.cu_seqlens_kv)) {
        auto cq = check_tensor(a.cu_seqlens_q, "cu_seqlens_q", MLAJIT_INT32, {-1}, false);
        auto ck = check_tensor(a.cu_seqlens_kv, "cu_seqlens_kv", MLAJIT_INT32, {-1}, false);
        if (cq[0] < 2 || cq[0] != ck[0])
            fail_arg("cu_seqlens_q and cu_seqlens_kv must both have batch+1 >= 2 entries; got {} and {}", cq[0], ck[0]);
        p.batch = (int)(cq[0] - 1);
        check_cu_seqlens(a.cu_seqlens_q_host, p.batch, s_q, "cu_seqlens_q");
        check_cu_seqlens(a.cu_seqlens_kv_host, p.batch, kv[0], "cu_seqlens_kv");
        p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data);
        p.cu_seqlens_kv = static_cast<const int*>(a.cu_seqlens_kv.data);
    }
    p.q = a.q.data;
    p.q_stride_tok = a.q.stride[0];
    p.q_stride_head = a.q.stride[1];
    p.kv = a.kv.data;
    p.kv_stride_tok = a.kv.stride[0];
    p.indices = static_cast<const int*>(a.indices.data);
    p.idx_stride_tok = a.indices.stride[0];
    p.out = a.out.data;
    p.o_stride_tok = a.out.stride[0];
    p.o_stride_head = a.out.stride[1];
    p.lse = static_cast<float*>(a.lse.data);
    p.lse_stride_tok = a.lse.stride[0];
    p.max_logits = static_cast<float*>(a.max_logits.data);
    p.ml_stride_tok = present(a.max_logits) ? a.max_logits.stride[0] : 0;
    p.s_q = (int)s_q;
    p.s_kv = (int)kv[0];
    p.num_heads = (int)heads;
    p.topk = (int)topk;
    p.sm_scale = a.sm_scale;
    p.sm_scale_log2 = a.sm_scale * 1.4426950408889634f;

    KernelSpec spec = sparse_mqa_spec(arch, mqa_tile_for(arch, (int)heads));
    plan.grid = Dim3{(unsigned)s_q, (unsigned)((heads + spec.p[0] - 1) / spec.p[0]), 1};
    plan.threads = mqa_threads(spec);
    plan.smem = mqa_smem_bytes(spec);
    plan.spec = spec;
    return plan;
}

void sparse_mqa_prefill(Handle& h, const mlajit_sparse_mqa_args& a, CUstream stream) {
    auto plan = plan_sparse_mqa(h.arch(), a);
    launch_plan(h, plan, stream);
}

}  // namespace mlajit
