#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "mlajit_abi.h"
#include "ops/kernel_configs.h"
#include "ops/ops.h"
#include "ops/tensor_check.h"

namespace mlajit {

LaunchPlan<SparseMqaFwdParams> plan_sparse_mqa(const Arch& arch, const mlajit_sparse_mqa_args& a) {
    const mlajit_tensor* block_table = &a.block_table;
    LaunchPlan<SparseMqaFwdParams> plan;
    SparseMqaFwdParams& p = plan.params;
    auto q = check_tensor(a.q, "q", MLAJIT_BF16, {-1, -1, kDimQkMqa});
    const int64_t s_q = q[0], heads = q[1];
    if (heads < 1 || heads > 128) fail_arg("q: the number of heads (dimension 1) must be in 1..128, got {}", heads);
    const bool paged = present(*block_table);
    // The FP8 latent cache (mlajit.h "FP8 latent cache"): uint8 [num_pages, block_size, 656], paged only.
    // Read the dtype as the integer a C caller stored (check_tensor does the same).
    int32_t kv_dtype = 0;
    std::memcpy(&kv_dtype, &a.kv.dtype, sizeof kv_dtype);
    const bool fp8 = kv_dtype == MLAJIT_UINT8;
    if (fp8 && !paged)
        fail_arg("kv: the FP8 latent cache (uint8) is accepted only paged, as [num_blocks, block_size, {}] with block_table; got "
                 "shape {} without a block_table: pass the block table (a contiguous FP8 kv is not supported)",
                 mj_mqa_fp8_row_bytes, shape_str(a.kv));
    if (fp8 && a.kv.ndim == 3 && a.kv.shape[2] != mj_mqa_fp8_row_bytes)
        fail_arg("kv: the FP8 latent cache's rows are {} bytes (512 e4m3 codes, 4 fp32 scales, 64 bf16 k_pe), got a last "
                 "dimension of {} (shape {})", mj_mqa_fp8_row_bytes, a.kv.shape[2], shape_str(a.kv));
    // Contiguous: kv [s_kv, 576]. Paged: kv [num_pages, block_size, 576] (or the FP8 rows) and block_table
    // [batch, max_blocks]. check_tensor also wants 16-byte aligned data and strides (FP8: strides in bytes).
    auto kv = fp8     ? check_tensor(a.kv, "kv", MLAJIT_UINT8, {-1, -1, mj_mqa_fp8_row_bytes})
              : paged ? check_tensor(a.kv, "kv", MLAJIT_BF16, {-1, -1, kDimQkMqa})
                      : check_tensor(a.kv, "kv", MLAJIT_BF16, {-1, kDimQkMqa});
    auto idx = check_tensor(a.indices, "indices", MLAJIT_INT32, {s_q, -1}, false);
    const int64_t topk = idx[1];
    if (topk < 1 || topk > mj_mqa_max_width)
        fail_arg("indices: the row width (dimension 1) must be in 1..{}, got {}: rows wider than that are not supported "
                 "(a top-k selection that large would be a dense attention: use the MHA path)",
                 mj_mqa_max_width, topk);
    check_tensor(a.out, "out", MLAJIT_BF16, {s_q, heads, kDimLatent});
    check_tensor(a.lse, "lse", MLAJIT_FP32, {s_q, heads}, false);
    if (a.lse.stride[1] != 1) fail_arg("lse: the head dimension must be contiguous (stride 1), got {}", a.lse.stride[1]);
    if (present(a.max_logits)) {
        check_tensor(a.max_logits, "max_logits", MLAJIT_FP32, {s_q, heads}, false);
        if (a.max_logits.stride[1] != 1)
            fail_arg("max_logits: the head dimension must be contiguous (stride 1), got {}", a.max_logits.stride[1]);
    }
    if (!(a.sm_scale > 0.f) || !std::isfinite(a.sm_scale)) fail_arg("sm_scale must be a positive finite number, got {}", a.sm_scale);
    // Keys of one sequence: the kv rows (contiguous) or the block table's capacity (paged, no cu_seqlens).
    int64_t s_kv = kv[0];
    if (paged) {
        auto bt = check_tensor(*block_table, "block_table", MLAJIT_INT32, {-1, -1}, false);
        if (bt[0] < 1 || bt[1] < 1) fail_arg("block_table: expected [batch, max_blocks] with both >= 1, got {}", shape_str(*block_table));
        if (kv[1] < 1) fail_arg("kv: the block size (dimension 1 of the paged kv) must be >= 1, got {}", kv[1]);
        if (kv[0] > 0x7fffffff || kv[1] > 0x7fffffff || bt[1] * kv[1] > 0x7fffffff)
            fail_arg("kv: num_pages, block_size and max_blocks * block_size must fit in int32, got {}", shape_str(a.kv));
        p.block_table = static_cast<const int*>(block_table->data);
        p.bt_stride_req = block_table->stride[0];
        p.kv_stride_page = a.kv.stride[0];  // elements of kv's dtype: bytes for the FP8 cache
        p.kv_stride_tok = a.kv.stride[1];  // (unused at block size 1: row 0 of every page)
        p.block_size = (int)kv[1];
        p.num_pages = (int)kv[0];
        s_kv = bt[1] * kv[1];
    } else {
        p.kv_stride_tok = a.kv.stride[0];
    }
    if (s_q > 0x7fffffff || s_kv > 0x7fffffff) fail_arg("s_q and s_kv must fit in int32, got {} and {}", s_q, s_kv);

    int64_t first_tok = 0;  // the batched form may cover a sub-batch: tokens cu_q[0] .. s_q - 1
    if (present(a.cu_seqlens_q) || present(a.cu_seqlens_kv)) {
        auto cq = check_tensor(a.cu_seqlens_q, "cu_seqlens_q", MLAJIT_INT32, {-1}, false);
        auto ck = check_tensor(a.cu_seqlens_kv, "cu_seqlens_kv", MLAJIT_INT32, {-1}, false);
        if (cq[0] < 2 || cq[0] != ck[0])
            fail_arg("cu_seqlens_q and cu_seqlens_kv must both have batch+1 >= 2 entries; got {} and {}", cq[0], ck[0]);
        p.batch = (int)(cq[0] - 1);
        check_cu_seqlens(a.cu_seqlens_q_host, p.batch, s_q, "cu_seqlens_q", true);
        if (paged) {
            // Request-local keys; each request's length must fit its block-table row.
            if (block_table->shape[0] < p.batch)
                fail_arg("block_table: {} rows for a batch of {} requests: pass one row per request", block_table->shape[0], p.batch);
            const int64_t longest = check_cu_seqlens(a.cu_seqlens_kv_host, p.batch, a.cu_seqlens_kv_host ? a.cu_seqlens_kv_host[p.batch] : 0,
                                                     "cu_seqlens_kv", true);
            if (longest > s_kv)
                fail_arg("block_table: a request has {} keys but a row holds {} blocks of {} ({} keys): widen the table",
                         longest, block_table->shape[1], kv[1], s_kv);
        } else {
            check_cu_seqlens(a.cu_seqlens_kv_host, p.batch, kv[0], "cu_seqlens_kv", true);
        }
        first_tok = a.cu_seqlens_q_host[0];
        p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data);
        p.cu_seqlens_kv = static_cast<const int*>(a.cu_seqlens_kv.data);
    }
    p.q = a.q.data;
    p.q_stride_tok = a.q.stride[0];
    p.q_stride_head = a.q.stride[1];
    p.kv = a.kv.data;
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
    p.s_kv = (int)s_kv;
    p.num_heads = (int)heads;
    p.topk = (int)topk;
    p.sm_scale = a.sm_scale;
    p.sm_scale_log2 = a.sm_scale * 1.4426950408889634f;
    if (a.causal != 0 && a.causal != 1) fail_arg("causal must be 0 (FlashMLA's index semantics) or 1 (DSA's), got {}", a.causal);
    p.causal = a.causal;

    KernelSpec spec = sparse_mqa_spec(arch, mqa_tile_for(arch, (int)heads, fp8), fp8);
    plan.grid = Dim3{(unsigned)(s_q - first_tok), (unsigned)((heads + spec.p[0] - 1) / spec.p[0]), 1};
    plan.threads = mqa_threads(spec);
    plan.smem = mqa_smem_bytes(spec);
    plan.spec = spec;
    return plan;
}

namespace {
// Does the planned call's kv family read the FP8 cache? (KV_FP8: p[6] of the portable family, p[5] of the Hopper ones.)
bool plan_kv_fp8(const KernelSpec& s) { return s.family == Family::sparse_mqa_fwd ? s.p[6] != 0 : s.p[5] != 0; }

// The pre-pass's list in the workspace: kept_rows uint32 [tokens, topk], then kept_count int32 [tokens].
struct KeptLayout {
    size_t count_off = 0, bytes = 0;
};
KeptLayout kept_layout(int64_t tokens, int64_t topk) {
    KeptLayout l;
    l.count_off = (size_t(tokens) * size_t(topk) * 4 + 255) / 256 * 256;
    l.bytes = l.count_off + (size_t(tokens) * 4 + 255) / 256 * 256;
    return l;
}

// Bytes from kv's base to the end of its last row: the list stores kv row offsets / 16 in 32 bits.
int64_t kv_span_bytes(const SparseMqaFwdParams& p, bool fp8) {
    if (p.block_table) return int64_t(p.num_pages) * p.kv_stride_page * (fp8 ? 1 : 2);
    return int64_t(p.s_kv) * p.kv_stride_tok * 2;
}
}  // namespace

size_t sparse_mqa_kept_bytes(int64_t tokens, int64_t width) { return kept_layout(tokens, width).bytes; }

size_t sparse_mqa_workspace_bytes(const LaunchPlan<SparseMqaFwdParams>& main) {
    if (main.grid.x == 0 || kv_span_bytes(main.params, plan_kv_fp8(main.spec)) >= (int64_t(1) << 36)) return 0;
    return kept_layout(main.grid.x, main.params.topk).bytes;
}

std::optional<LaunchPlan<SparseMqaFwdParams>> plan_sparse_mqa_prepass(const Arch& arch, const mlajit_sparse_mqa_args& a,
                                                                      LaunchPlan<SparseMqaFwdParams>& main, int sm_count) {
    if (a.workspace == nullptr) {
        if (a.workspace_bytes != 0)
            fail_arg("workspace is NULL but workspace_bytes is {}: pass the workspace's device pointer, or 0 bytes to run "
                     "without the key-set pre-pass", a.workspace_bytes);
        return std::nullopt;
    }
    const size_t need = sparse_mqa_workspace_bytes(main);
    if (need == 0) return std::nullopt;  // the pre-pass does not apply: the op runs as without a workspace
    if (a.workspace_bytes < need)
        fail_arg("workspace: this call's key-set pre-pass needs {} bytes and got {}: size it with "
                 "mlajit_sparse_mqa_workspace_size, or pass NULL to run without it", need, a.workspace_bytes);
    if (reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
        fail_arg("workspace must be 16-byte aligned, got address {}", a.workspace);
    const KeptLayout l = kept_layout(main.grid.x, main.params.topk);
    main.params.kept_rows = static_cast<unsigned*>(a.workspace);
    main.params.kept_count = reinterpret_cast<int*>(static_cast<unsigned char*>(a.workspace) + l.count_off);
    main.params.kept_stride = main.params.topk;
    LaunchPlan<SparseMqaFwdParams> pre;
    pre.spec = sparse_mqa_compact_spec(arch, main.params.topk, plan_kv_fp8(main.spec));
    pre.grid = Dim3{main.grid.x, 1, 1};
    pre.threads = pre.spec.p[0];
    pre.smem = mj_mqa_compact_smem_bytes(main.params.topk);
    pre.params = main.params;
    // With the list (unless MLAJIT_MQA_PERSIST=0), the 16-head keys-as-M kernel (bf16) runs as a persistent grid: at most one
    // block a SM, each taking tokens b, b + grid, ... (sparse_mqa/sm90_t_persist.cuh; the same results bit for bit). With
    // MLAJIT_MQA_PERSIST64=1 the 64-head kernel too, its items a token's head blocks (sparse_mqa/sm90_persist.cuh).
    if (auto ps = sm_count > 0 ? sparse_mqa_persistent_spec(main.spec) : std::nullopt) {
        const bool items = ps->family == Family::sparse_mqa_fwd_sm90;  // tokens x head blocks, one grid row
        if (items || main.grid.y == 1) {
            const unsigned work = main.grid.x * (items ? main.grid.y : 1u);
            main.spec = *ps;
            main.smem = mqa_smem_bytes(*ps);
            main.grid.x = std::min(work, (unsigned)sm_count);
            main.grid.y = 1;
        }
    }
    return pre;
}

void sparse_mqa_prefill(Handle& h, const mlajit_sparse_mqa_args& a, CUstream stream) {
    auto plan = plan_sparse_mqa(h.arch(), a);
    auto pre = plan_sparse_mqa_prepass(h.arch(), a, plan, h.sm_count());
    if (plan.grid.x == 0) return;  // no query token in this call
    if (pre) launch_plan(h, *pre, stream);
    launch_plan(h, plan, stream);
}

}  // namespace mlajit
