#include "common/error.h"
#include "mlajit_abi.h"
#include "common/log.h"
#include "cuda/driver_api.h"
#include "ops/kernel_configs.h"
#include "ops/mha_sm90_maps.h"
#include "ops/ops.h"
#include "ops/tensor_check.h"

namespace mlajit {

LaunchPlan<MhaFwdParams> plan_mha(const Arch& arch, const mlajit_mha_args& a) {
    LaunchPlan<MhaFwdParams> plan;
    MhaFwdParams& p = plan.params;
    auto q = check_tensor(a.q, "q", MLAJIT_BF16, {-1, -1, kDimQkMha});
    const int64_t total_q = q[0], heads = q[1];
    if (heads < 1 || heads > 1024) fail_arg("q: the number of heads (dimension 1) must be in 1..1024, got {}", heads);
    auto cq = check_tensor(a.cu_seqlens_q, "cu_seqlens_q", MLAJIT_INT32, {-1}, false);
    auto ck = check_tensor(a.cu_seqlens_k, "cu_seqlens_k", MLAJIT_INT32, {-1}, false);
    if (cq[0] < 2 || cq[0] != ck[0])
        fail_arg("cu_seqlens_q and cu_seqlens_k must both have batch+1 >= 2 entries; got {} and {}", cq[0], ck[0]);
    const int64_t batch = cq[0] - 1;
    // One grid z block per request: CUDA allows 65535 (the validation fuzz found larger batches accepted).
    if (batch > 65535) fail_arg("batch has {} requests; at most 65535 per call: split the batch", batch);
    const int64_t max_q = check_cu_seqlens(a.cu_seqlens_q_host, batch, total_q, "cu_seqlens_q", true);

    int64_t total_k = 0;
    if (present(a.k)) {
        if (present(a.k_nope) || present(a.k_pe))
            fail_arg("pass keys either as k [T_k, h, 192] or as k_nope + k_pe, not both");
        auto k = check_tensor(a.k, "k", MLAJIT_BF16, {-1, heads, kDimQkMha});
        total_k = k[0];
        p.k_nope = a.k.data;
        p.kn_stride_tok = a.k.stride[0];
        p.kn_stride_head = a.k.stride[1];
        p.k_pe = static_cast<const char*>(a.k.data) + 2 * kDimNope;
        p.kp_stride_tok = a.k.stride[0];
        p.kp_stride_head = a.k.stride[1];
    } else {
        if (!present(a.k_nope) || !present(a.k_pe))
            fail_arg("keys missing: pass k [T_k, h, 192], or k_nope [T_k, h, 128] together with k_pe [T_k, 64]");
        auto kn = check_tensor(a.k_nope, "k_nope", MLAJIT_BF16, {-1, heads, kDimNope});
        total_k = kn[0];
        p.k_nope = a.k_nope.data;
        p.kn_stride_tok = a.k_nope.stride[0];
        p.kn_stride_head = a.k_nope.stride[1];
        p.k_pe = a.k_pe.data;
        if (a.k_pe.ndim == 2) {
            check_tensor(a.k_pe, "k_pe", MLAJIT_BF16, {total_k, kDimRope});
            p.kp_stride_tok = a.k_pe.stride[0];
            p.kp_stride_head = 0;  // one rope key shared by every head
        } else {
            auto kp = check_tensor(a.k_pe, "k_pe", MLAJIT_BF16, {total_k, -1, kDimRope});
            if (kp[1] != 1 && kp[1] != heads)
                fail_arg("k_pe: expected [T_k, 64], [T_k, 1, 64] or [T_k, {}, 64], got {}", heads, shape_str(a.k_pe));
            p.kp_stride_tok = a.k_pe.stride[0];
            p.kp_stride_head = kp[1] == 1 ? 0 : a.k_pe.stride[1];
        }
    }
    check_tensor(a.v, "v", MLAJIT_BF16, {total_k, heads, kDimV});
    check_tensor(a.out, "out", MLAJIT_BF16, {total_q, heads, kDimV});
    check_tensor(a.lse, "lse", MLAJIT_FP32, {total_q, heads}, false);
    if (a.lse.stride[1] != 1) fail_arg("lse: the head dimension must be contiguous (stride 1), got {}", a.lse.stride[1]);
    const int64_t max_k = check_cu_seqlens(a.cu_seqlens_k_host, batch, total_k, "cu_seqlens_k", true);
    if (!(a.sm_scale > 0.f) || !std::isfinite(a.sm_scale)) fail_arg("sm_scale must be a positive finite number, got {}", a.sm_scale);

    const bool masked = present(a.mask);
    if (masked) {
        auto m = check_tensor(a.mask, "mask", MLAJIT_UINT32, {total_q, -1}, false);
        const int64_t min_words = topk_mask_min_words(max_k);
        if (m[1] < min_words)
            fail_arg("mask: rows need at least {} words for the longest request (s_k = {}), got {}", min_words, max_k, m[1]);
        p.mask = static_cast<const unsigned*>(a.mask.data);
        p.mask_stride_row = a.mask.stride[0];
    }
    p.q = a.q.data;
    p.q_stride_tok = a.q.stride[0];
    p.q_stride_head = a.q.stride[1];
    p.v = a.v.data;
    p.v_stride_tok = a.v.stride[0];
    p.v_stride_head = a.v.stride[1];
    p.out = a.out.data;
    p.o_stride_tok = a.out.stride[0];
    p.o_stride_head = a.out.stride[1];
    p.lse = static_cast<float*>(a.lse.data);
    p.lse_stride_tok = a.lse.stride[0];
    p.lse_stride_head = a.lse.stride[1];
    p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data);
    p.cu_seqlens_k = static_cast<const int*>(a.cu_seqlens_k.data);
    p.batch = (int)batch;
    p.num_heads = (int)heads;
    p.max_seqlen_q = (int)max_q;
    p.max_seqlen_k = (int)max_k;
    p.sm_scale = a.sm_scale;
    p.sm_scale_log2 = a.sm_scale * 1.4426950408889634f;

    KernelSpec spec = mha_spec_for(arch, masked);
    plan.grid = Dim3{(unsigned)((max_q + spec.p[0] - 1) / spec.p[0]), (unsigned)heads, (unsigned)batch};
    plan.threads = mha_threads(spec);
    plan.smem = mha_smem_bytes(spec);
    plan.spec = spec;
    return plan;
}

void mha_prefill(Handle& h, const mlajit_mha_args& a, CUstream stream) {
    auto plan = plan_mha(h.arch(), a);
    if (plan.spec.family != Family::mha_fwd_sm90) return launch_plan(h, plan, stream);
    // Hopper tier: the same parameters plus TMA tensor maps, which need the driver's encoder (CUDA 12+).
    // A driver without it, or tensors with no tokens at all (nothing for a tensor map to describe), run
    // the portable tier instead.
    const auto encode = driver().cuTensorMapEncodeTiled;
    const long long total_q = a.q.shape[0], total_k = present(a.k) ? a.k.shape[0] : a.k_nope.shape[0];
    const bool mask_ok = mha_sm90_mask_ok(plan.params);
    if (!encode || total_q == 0 || total_k == 0 || !mask_ok) {
        if (!encode) log().debug("the CUDA driver has no cuTensorMapEncodeTiled: MHA runs the portable tier");
        if (!mask_ok)
            log().debug("mask row stride {} words is not a multiple of 4 (or the mask is not 16-byte aligned): masked MHA runs the "
                        "portable tier; size mask rows with mlajit_topk_mask_words for the Hopper kernel",
                        plan.params.mask_stride_row);
        plan.spec = mha_spec(h.arch(), mha_tile_for(h.arch()), plan.params.mask != nullptr);
        plan.grid.x = (unsigned)((plan.params.max_seqlen_q + plan.spec.p[0] - 1) / plan.spec.p[0]);
        plan.threads = mha_threads(plan.spec);
        plan.smem = mha_smem_bytes(plan.spec);
        return launch_plan(h, plan, stream);
    }
    MhaFwdSm90Params p90;
    const MhaSm90MapError e = encode_mha_sm90_maps(encode, plan.params, total_q, total_k, p90);
    if (e.map) cu_check(e.result, "cuTensorMapEncodeTiled", fmt::format("encoding the TMA tensor map of {} for the Hopper MHA kernel "
                                                                         "(set MLAJIT_TIER=portable to run without TMA)", e.map).c_str());
    h.launch(plan.spec, plan.grid, plan.threads, plan.smem, &p90, stream);
}

}  // namespace mlajit
