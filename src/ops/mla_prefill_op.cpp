// GPU side of the one-call prefill: each step of the schedule as projections (cuBLASLt), packing copies,
// and the attention ops, all on the caller's stream. Buffers of a step live in the workspace at the
// offsets of step_layout(); MHA steps see them through "virtual bases" (buffer - first token * row), so
// the attention kernels index the sub-batch by the caller's absolute cu_seqlens entries.
#include <algorithm>

#include "common/error.h"
#include "mlajit/mlajit.hpp"
#include "cuda/driver_api.h"
#include "mlajit_abi.h"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"

namespace mlajit {

namespace {

// `elems` elements of `bytes_per` bytes before/after p (device addresses: plain integer arithmetic).
const void* offset(const void* p, int64_t elems, int64_t bytes_per) {
    return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(elems * bytes_per));
}
void* offset(void* p, int64_t elems, int64_t bytes_per) {
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(elems * bytes_per));
}

// rows x width bytes from src (pitch src_pitch) to dst (pitch dst_pitch), device to device.
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows, CUstream stream,
               const char* what) {
    if (rows == 0) return;
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = reinterpret_cast<CUdeviceptr>(src);
    c.srcPitch = src_pitch;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = reinterpret_cast<CUdeviceptr>(dst);
    c.dstPitch = dst_pitch;
    c.WidthInBytes = width;
    c.Height = rows;
    MLAJIT_CU(cuMemcpy2DAsync(&c, stream), what);
}

// Copies a [tokens, heads, width] bf16 view (strided) into dst rows [tokens, heads, dst_row] at column dst_col.
void copy_heads(void* dst, int64_t dst_row, int64_t dst_col, const mlajit_tensor& src, int64_t t0, int64_t tokens,
                int64_t heads, int64_t width, CUstream stream, const char* what) {
    const void* s0 = offset(src.data, t0 * src.stride[0], 2);
    void* d0 = offset(dst, dst_col, 2);
    if (src.stride[0] == heads * src.stride[1]) {  // token rows evenly spaced: one copy of tokens*heads rows
        copy_rows(d0, size_t(dst_row) * 2, s0, size_t(src.stride[1]) * 2, size_t(width) * 2, size_t(tokens * heads),
                  stream, what);
        return;
    }
    for (int64_t h = 0; h < heads; ++h)
        copy_rows(offset(d0, h * dst_row, 2), size_t(heads * dst_row) * 2, offset(s0, h * src.stride[1], 2),
                  size_t(src.stride[0]) * 2, size_t(width) * 2, size_t(tokens), stream, what);
}

// The latent rows of the step's requests out of the paged cache, into `dst` (bf16 [k1 - k0, 576]; from the
// FP8 cache dequantized on the way: only the step's keys are read, nothing of the rest of the cache).
void gather_pages(Handle& h, const mlajit_mla_prefill_args& a, const MlaShapes& s, const MlaStep& st, void* dst,
                  CUstream stream) {
    PagedGather g;
    g.kv_fp8 = s.kv_fp8;
    g.kv_cache = a.kv_cache;
    g.block_table = a.block_table;
    g.cu_seqlens_k = static_cast<const int32_t*>(a.cu_seqlens_k.data);
    g.r0 = st.r0;
    g.r1 = st.r1;
    g.max_s_k = st.max_s_k;
    g.dst = dst;
    g.dst_stride = kDimQkMqa;
    paged_gather(h, g, stream);
}

// A small dense step in one launch (st.small): the portable MHA kernel's UP_PROJ variant, one block per
// (head, request), computes its head's k_nope / v rows into the workspace, then attends. q, k_pe and the
// latent rows (or pages, bf16 or FP8) are read in place: no packing copies, no gather, no GEMM launch.
void run_small_mha_step(Handle& h, const mlajit_mla_prefill_args& a, const MlaShapes& s, const MlaStep& st, void* ws,
                        CUstream stream) {
    const MlaStepLayout l = step_layout(s, st);
    const int64_t H = s.heads, kv_row = H * (kDimNope + kDimV);
    const void* kv_base = offset(offset(ws, int64_t(l.kv_up), 1), -st.k0 * kv_row, 2);  // indexed by global key
    MhaFwdParams p{};
    p.q = a.q_nope.data;
    p.q_stride_tok = a.q_nope.stride[0];
    p.q_stride_head = a.q_nope.stride[1];
    p.q_pe = a.q_pe.data;
    p.qp_stride_tok = a.q_pe.stride[0];
    p.qp_stride_head = a.q_pe.stride[1];
    p.k_nope = kv_base;
    p.v = offset(kv_base, kDimNope, 2);
    p.kn_stride_tok = p.v_stride_tok = kv_row;
    p.kn_stride_head = p.v_stride_head = kDimNope + kDimV;
    MhaUpProj& u = p.up;
    u.w = a.w_kv_b.data;
    u.w_stride = a.w_kv_b.stride[0];
    if (s.paged) {  // k_pe comes from the pages too (p.k_pe unused); FP8 pages: strides in bytes
        u.pages = a.kv_cache.data;
        u.page_stride = a.kv_cache.stride[0];
        u.tok_stride = a.kv_cache.stride[1];
        u.block_table = static_cast<const int32_t*>(a.block_table.data) + st.r0 * a.block_table.stride[0];
        u.bt_stride = a.block_table.stride[0];
        u.block_size = int(s.block_size);
        u.num_blocks = int(s.num_blocks);
        u.max_blocks = int(s.max_blocks);
        p.k_pe = kv_base;
    } else {
        u.kv_c = a.kv_c.data;
        u.kv_stride = a.kv_c.stride[0];
        p.k_pe = a.k_pe.data;
        p.kp_stride_tok = a.k_pe.stride[0];
    }
    p.out = a.out.data;
    p.o_stride_tok = a.out.stride[0];
    p.o_stride_head = a.out.stride[1];
    if (s.has_lse) {
        p.lse = static_cast<float*>(a.lse.data);
        p.lse_stride_tok = a.lse.stride[0];
    } else {
        p.lse = static_cast<float*>(offset(ws, int64_t(l.lse) - st.t0 * H * 4, 1));
        p.lse_stride_tok = H;
    }
    p.lse_stride_head = 1;
    p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data) + st.r0;
    p.cu_seqlens_k = static_cast<const int*>(a.cu_seqlens_k.data) + st.r0;
    p.batch = int(st.r1 - st.r0);
    p.num_heads = int(H);
    for (int64_t r = st.r0; r < st.r1; ++r) {
        p.max_seqlen_q = std::max(p.max_seqlen_q, a.cu_seqlens_q_host[r + 1] - a.cu_seqlens_q_host[r]);
        p.max_seqlen_k = std::max(p.max_seqlen_k, a.cu_seqlens_k_host[r + 1] - a.cu_seqlens_k_host[r]);
    }
    p.sm_scale = a.sm_scale;
    p.sm_scale_log2 = a.sm_scale * 1.4426950408889634f;
    const KernelSpec spec = mha_up_spec(h.arch(), s.kv_fp8);
    if (p.max_seqlen_q > spec.p[0])  // schedule_mla's rule: one block per (head, request) writes its K/V rows
        fail(MLAJIT_ERROR_INTERNAL, "a small MHA step has a request of {} queries, more than the kernel's {}", p.max_seqlen_q, spec.p[0]);
    h.launch(spec, Dim3{1, unsigned(H), unsigned(p.batch)}, mha_threads(spec), mha_smem_bytes(spec), &p, stream);
}

void run_mha_step(Handle& h, const mlajit_mla_prefill_args& a, const MlaShapes& s, const MlaStep& st, void* ws,
                  CUstream stream) {
    if (st.small) return run_small_mha_step(h, a, s, st, ws, stream);
    const MlaStepLayout l = step_layout(s, st);
    const int64_t H = s.heads, kv_row = H * (kDimNope + kDimV);
    const int64_t tq_end = st.t1, tk_end = st.k1;  // tensors seen by the kernels end at the run's last token
    // K/V up-projection of the run's keys: [tk, 512] . W_kv_b^T -> [tk, h * 256] (per head k_nope ; v).
    void* kv_up = offset(ws, int64_t(l.kv_up), 1);
    // The run's latent rows [kv_c ; k_pe]: the caller's, or gathered out of the pages into the workspace.
    const void* kv_c = offset(a.kv_c.data, st.k0 * a.kv_c.stride[0], 2);
    int64_t kv_c_ld = a.kv_c.stride[0];
    mlajit_tensor k_pe = strided_tensor(a.k_pe.data, MLAJIT_BF16, {tk_end, kDimRope}, {a.k_pe.stride[0], 1});
    GemmPagedA pa;  // the fused form: the up-projection reads the pages, k_pe rows land in l.kpe
    if (s.paged && s.paged_fused) {
        pa.pages = a.kv_cache.data;
        pa.page_stride = a.kv_cache.stride[0];
        pa.tok_stride = a.kv_cache.stride[1];
        pa.block_table = static_cast<const int32_t*>(a.block_table.data) + st.r0 * a.block_table.stride[0];
        pa.bt_stride = a.block_table.stride[0];
        pa.cu_seqlens_k = static_cast<const int32_t*>(a.cu_seqlens_k.data) + st.r0;
        pa.nreq = int(st.r1 - st.r0);
        pa.block_size = int(s.block_size);
        pa.num_blocks = int(s.num_blocks);
        pa.max_blocks = int(s.max_blocks);
        pa.kpe_out = offset(ws, int64_t(l.kpe), 1);
        k_pe = strided_tensor(offset(pa.kpe_out, -st.k0 * kDimRope, 2), MLAJIT_BF16, {tk_end, kDimRope}, {kDimRope, 1});
    } else if (s.paged) {
        void* rows = offset(ws, int64_t(l.kv_gather), 1);
        gather_pages(h, a, s, st, rows, stream);
        kv_c = rows;
        kv_c_ld = kDimQkMqa;
        k_pe = strided_tensor(offset(rows, kDimLatent - st.k0 * kDimQkMqa, 2), MLAJIT_BF16, {tk_end, kDimRope}, {kDimQkMqa, 1});
    }
    GemmDesc g;
    g.m = st.k1 - st.k0;
    g.n = kv_row;
    g.k = kDimLatent;
    g.a = {kv_c, kv_c_ld, 0, false};
    g.b = {a.w_kv_b.data, a.w_kv_b.stride[0], 0, true};
    g.c = kv_up;
    g.ldc = kv_row;
    if (s.paged && s.paged_fused) h.gemm().run_paged(g, pa, stream, "the K/V up-projection (paged kv_c . W_kv_b^T)");
    else h.gemm().run(g, ws, s.gemm_scratch, stream, "the K/V up-projection (kv_c . W_kv_b^T)");
    const void* kv_base = offset(kv_up, -st.k0 * kv_row, 2);

    mlajit_mha_args m = MLAJIT_ARGS_INIT(mlajit_mha_args);
    if (s.q_packed) {
        m.q = strided_tensor(a.q_nope.data, MLAJIT_BF16, {tq_end, H, kDimQkMha}, {a.q_nope.stride[0], a.q_nope.stride[1], 1});
    } else {
        void* qp = offset(ws, int64_t(l.q_pack), 1);
        const int64_t tq = st.t1 - st.t0;
        copy_heads(qp, kDimQkMha, 0, a.q_nope, st.t0, tq, H, kDimNope, stream, "packing q_nope for MHA");
        copy_heads(qp, kDimQkMha, kDimNope, a.q_pe, st.t0, tq, H, kDimRope, stream, "packing q_pe for MHA");
        m.q = strided_tensor(offset(qp, -st.t0 * H * kDimQkMha, 2), MLAJIT_BF16, {tq_end, H, kDimQkMha},
                          {H * kDimQkMha, kDimQkMha, 1});
    }
    m.k_nope = strided_tensor(kv_base, MLAJIT_BF16, {tk_end, H, kDimNope}, {kv_row, kDimNope + kDimV, 1});
    m.v = strided_tensor(offset(kv_base, kDimNope, 2), MLAJIT_BF16, {tk_end, H, kDimV}, {kv_row, kDimNope + kDimV, 1});
    m.k_pe = k_pe;
    m.out = strided_tensor(a.out.data, MLAJIT_BF16, {tq_end, H, kDimV}, {a.out.stride[0], a.out.stride[1], 1});
    if (s.has_lse) m.lse = strided_tensor(a.lse.data, MLAJIT_FP32, {tq_end, H}, {a.lse.stride[0], 1});
    else m.lse = strided_tensor(offset(ws, int64_t(l.lse) - st.t0 * H * 4, 1), MLAJIT_FP32, {tq_end, H}, {H, 1});
    const int64_t n = st.r1 - st.r0 + 1;
    m.cu_seqlens_q = strided_tensor(offset(a.cu_seqlens_q.data, st.r0, 4), MLAJIT_INT32, {n}, {1});
    m.cu_seqlens_k = strided_tensor(offset(a.cu_seqlens_k.data, st.r0, 4), MLAJIT_INT32, {n}, {1});
    m.cu_seqlens_q_host = a.cu_seqlens_q_host + st.r0;
    m.cu_seqlens_k_host = a.cu_seqlens_k_host + st.r0;
    m.sm_scale = a.sm_scale;
    if (st.path == Path::masked_mha) {
        const int64_t words = topk_mask_words(st.max_s_k);
        m.mask = strided_tensor(offset(ws, int64_t(l.mask) - st.t0 * words * 4, 1), MLAJIT_UINT32, {tq_end, words}, {words, 1});
        mlajit_topk_mask_args k = MLAJIT_ARGS_INIT(mlajit_topk_mask_args);
        k.indices = strided_tensor(a.indices.data, MLAJIT_INT32, {tq_end, s.width}, {a.indices.stride[0], 1});
        k.cu_seqlens_q = m.cu_seqlens_q;
        k.cu_seqlens_k = m.cu_seqlens_k;
        k.cu_seqlens_q_host = m.cu_seqlens_q_host;
        k.cu_seqlens_k_host = m.cu_seqlens_k_host;
        k.mask = m.mask;
        topk_mask_build(h, k, stream);
    }
    mha_prefill(h, m, stream);
}

void run_mqa_step(Handle& h, const mlajit_mla_prefill_args& a, const MlaShapes& s, const MlaStep& st, void* ws,
                  CUstream stream) {
    const MlaStepLayout l = step_layout(s, st);
    const int64_t H = s.heads, c = st.t1 - st.t0, sk = st.k1 - st.k0;
    const int64_t w_ld = a.w_kv_b.stride[0], w_head = (kDimNope + kDimV) * w_ld;
    // Query absorption per head: [c, 128] . W_UK_h [128, 512] -> columns 0..511 of q [c, h, 576].
    void* q = offset(ws, int64_t(l.q_mqa), 1);
    GemmDesc g;
    g.m = c;
    g.n = kDimLatent;
    g.k = kDimNope;
    g.batch = int(H);
    g.a = {offset(a.q_nope.data, st.t0 * a.q_nope.stride[0], 2), a.q_nope.stride[0], a.q_nope.stride[1], false};
    g.b = {a.w_kv_b.data, w_ld, w_head, false};
    g.c = q;
    g.ldc = H * kDimQkMqa;
    g.c_batch_stride = kDimQkMqa;
    h.gemm().run(g, ws, s.gemm_scratch, stream, "the query absorption (q_nope . W_UK)");
    copy_heads(q, kDimQkMqa, kDimLatent, a.q_pe, st.t0, c, H, kDimRope, stream, "packing q_pe for sparse MQA");

    void* latent = offset(ws, int64_t(l.latent), 1);
    void* lse_scratch = offset(ws, int64_t(l.lse), 1);
    mlajit_sparse_mqa_args m = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
    m.causal = 1;  // DSA: an index past the query's own position is skipped, exactly as masked MHA does
    m.sm_scale = a.sm_scale;
    void* kp = offset(ws, int64_t(l.kv_pack), 1);
    auto pack_split_rows = [&](int64_t rows) {  // [kv_c ; k_pe] of keys [k0, k0 + rows) into kv_pack
        copy_rows(kp, kDimQkMqa * 2, offset(a.kv_c.data, st.k0 * a.kv_c.stride[0], 2), size_t(a.kv_c.stride[0]) * 2,
                  kDimLatent * 2, size_t(rows), stream, "packing kv_c for sparse MQA");
        copy_rows(offset(kp, kDimLatent, 2), kDimQkMqa * 2, offset(a.k_pe.data, st.k0 * a.k_pe.stride[0], 2),
                  size_t(a.k_pe.stride[0]) * 2, kDimRope * 2, size_t(rows), stream, "packing k_pe for sparse MQA");
    };
    if (st.chunk) {
        // Part of one request's queries, in the single-sequence form: the keys end at the chunk's last
        // query (its causal end), so bottom-right alignment puts each query at its position in the request.
        const int64_t s_kv = sk - (a.cu_seqlens_q_host[st.r0 + 1] - st.t1);
        if (s.kv_packed) {
            m.kv = strided_tensor(offset(a.kv_c.data, st.k0 * a.kv_c.stride[0], 2), MLAJIT_BF16, {s_kv, kDimQkMqa},
                                  {a.kv_c.stride[0], 1});
        } else {
            if (st.first_chunk && s.paged) gather_pages(h, a, s, st, kp, stream);  // FP8: dequantized
            else if (st.first_chunk) pack_split_rows(sk);
            m.kv = strided_tensor(kp, MLAJIT_BF16, {s_kv, kDimQkMqa}, {kDimQkMqa, 1});
        }
        m.q = strided_tensor(q, MLAJIT_BF16, {c, H, kDimQkMqa}, {H * kDimQkMqa, kDimQkMqa, 1});
        m.indices = strided_tensor(offset(a.indices.data, st.t0 * a.indices.stride[0], 4), MLAJIT_INT32, {c, s.width},
                                   {a.indices.stride[0], 1});
        m.out = strided_tensor(latent, MLAJIT_BF16, {c, H, kDimLatent}, {H * kDimLatent, kDimLatent, 1});
        if (s.has_lse) m.lse = strided_tensor(offset(a.lse.data, st.t0 * a.lse.stride[0], 4), MLAJIT_FP32, {c, H}, {a.lse.stride[0], 1});
        else m.lse = strided_tensor(lse_scratch, MLAJIT_FP32, {c, H}, {H, 1});
    } else {
        // Whole requests [r0, r1) in one launch: the batched form on the caller's own cu_seqlens (from
        // entry r0; tokens and keys keep their global numbers, so step buffers are seen through "virtual
        // bases", buffer - first token * row).
        const int64_t n = st.r1 - st.r0 + 1;
        m.cu_seqlens_q = strided_tensor(offset(a.cu_seqlens_q.data, st.r0, 4), MLAJIT_INT32, {n}, {1});
        m.cu_seqlens_kv = strided_tensor(offset(a.cu_seqlens_k.data, st.r0, 4), MLAJIT_INT32, {n}, {1});
        m.cu_seqlens_q_host = a.cu_seqlens_q_host + st.r0;
        m.cu_seqlens_kv_host = a.cu_seqlens_k_host + st.r0;
        if (s.paged && s.kv_fp8) {  // dequantized rows of the step's keys (see step_layout: faster than direct)
            gather_pages(h, a, s, st, kp, stream);
            m.kv = strided_tensor(offset(kp, -st.k0 * kDimQkMqa, 2), MLAJIT_BF16, {st.k1, kDimQkMqa}, {kDimQkMqa, 1});
        } else if (s.paged) {  // the bf16 pages as they are: no gather copy
            m.kv = a.kv_cache;
            m.block_table = strided_tensor(offset(a.block_table.data, st.r0 * a.block_table.stride[0], 4), MLAJIT_INT32,
                                           {st.r1 - st.r0, s.max_blocks}, {a.block_table.stride[0], 1});
        } else if (s.kv_packed) {
            m.kv = strided_tensor(a.kv_c.data, MLAJIT_BF16, {st.k1, kDimQkMqa}, {a.kv_c.stride[0], 1});
        } else {
            pack_split_rows(sk);
            m.kv = strided_tensor(offset(kp, -st.k0 * kDimQkMqa, 2), MLAJIT_BF16, {st.k1, kDimQkMqa}, {kDimQkMqa, 1});
        }
        m.q = strided_tensor(offset(q, -st.t0 * H * kDimQkMqa, 2), MLAJIT_BF16, {st.t1, H, kDimQkMqa},
                             {H * kDimQkMqa, kDimQkMqa, 1});
        m.indices = strided_tensor(a.indices.data, MLAJIT_INT32, {st.t1, s.width}, {a.indices.stride[0], 1});
        m.out = strided_tensor(offset(latent, -st.t0 * H * kDimLatent, 2), MLAJIT_BF16, {st.t1, H, kDimLatent},
                               {H * kDimLatent, kDimLatent, 1});
        if (s.has_lse) m.lse = strided_tensor(a.lse.data, MLAJIT_FP32, {st.t1, H}, {a.lse.stride[0], 1});
        else m.lse = strided_tensor(offset(lse_scratch, -st.t0 * H, 4), MLAJIT_FP32, {st.t1, H}, {H, 1});
    }
    m.workspace = offset(ws, int64_t(l.kept), 1);  // the key-set pre-pass's list
    m.workspace_bytes = l.kept_bytes;
    sparse_mqa_prefill(h, m, stream);

    // Output projection per head: latent [c, 512] . W_UV_h^T [512, 128] -> out [c, h, 128].
    GemmDesc o;
    o.m = c;
    o.n = kDimV;
    o.k = kDimLatent;
    o.batch = int(H);
    o.a = {latent, H * kDimLatent, kDimLatent, false};
    o.b = {offset(a.w_kv_b.data, kDimNope * w_ld, 2), w_ld, w_head, true};
    o.c = offset(a.out.data, st.t0 * a.out.stride[0], 2);
    o.ldc = a.out.stride[0];
    o.c_batch_stride = a.out.stride[1];
    h.gemm().run(o, ws, s.gemm_scratch, stream, "the output projection (latent . W_UV^T)");
}

}  // namespace

MlaShapes mla_call_shapes(Handle& h, const mlajit_mla_prefill_args& a) {
    MlaShapes s = check_mla_args(a, true);
    set_gemm_choices(s, h.gemm().fused_paged_max_heads(), h.gemm().scratch_bytes());  // as c_api.cpp's size query
    return s;
}

void mla_prefill(Handle& h, const mlajit_mla_prefill_args& a, CUstream stream) {
    MlaShapes s = mla_call_shapes(h, a);
    enable_small_steps(s, h.arch(), a);
    const auto paths = plan_mla_paths(h.gpu_name(), s, a.cu_seqlens_q_host, a.cu_seqlens_k_host, a.force_path);
    const MlaSchedule sch = schedule_mla(s, a.cu_seqlens_q_host, a.cu_seqlens_k_host, paths);
    if (a.workspace_bytes < sch.workspace_bytes)
        fail_arg("workspace: this call needs {} bytes and got {}: size it with mlajit_mla_prefill_workspace_size",
                 sch.workspace_bytes, a.workspace_bytes);
    if (a.paths_out)
        for (size_t r = 0; r < paths.size(); ++r) a.paths_out[r] = mlajit_path(int(paths[r]));
    if (sch.steps.empty()) return;
    ScopedContext scope(h.context());
    for (const MlaStep& st : sch.steps) {
        if (st.path == Path::sparse_mqa) run_mqa_step(h, a, s, st, a.workspace, stream);
        else run_mha_step(h, a, s, st, a.workspace, stream);
    }
}

}  // namespace mlajit
