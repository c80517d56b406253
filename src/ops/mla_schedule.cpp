// Host side of the one-call prefill: argument checks, the per-request paths, and the launch schedule.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "common/error.h"
#include "config/env.h"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "ops/mla_prefill.h"
#include "ops/ops.h"
#include "ops/tensor_check.h"
#include "mlajit_abi.h"
#include "runtime/startup_times.h"

namespace mlajit {

namespace {

// For the size query: a stand-in pointer so the shape checks run on tensors whose data is still NULL.
mlajit_tensor shape_only(mlajit_tensor t) {
    if (!t.data) t.data = reinterpret_cast<void*>(uintptr_t(1) << 20);
    return t;
}

bool same_strides(const mlajit_tensor& a, const mlajit_tensor& b, int ndim) {
    for (int d = 0; d < ndim; ++d)
        if (a.stride[d] != b.stride[d]) return false;
    return true;
}

size_t align256(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

MlaShapes check_mla_args(const mlajit_mla_prefill_args& in, bool need_data) {
    mlajit_mla_prefill_args a = in;
    const bool paged = present(in.kv_cache) || present(in.block_table) || (!need_data && in.kv_cache.ndim == 3);
    if (!need_data) {
        for (mlajit_tensor* t : {&a.q_nope, &a.q_pe, &a.w_kv_b, &a.indices, &a.cu_seqlens_q, &a.cu_seqlens_k, &a.out})
            *t = shape_only(*t);
        if (paged) {
            a.kv_cache = shape_only(a.kv_cache);
            a.block_table = shape_only(a.block_table);
        } else {
            a.kv_c = shape_only(a.kv_c);
            a.k_pe = shape_only(a.k_pe);
        }
    }
    MlaShapes s;
    auto qn = check_tensor(a.q_nope, "q_nope", MLAJIT_BF16, {-1, -1, kDimNope});
    s.total_q = qn[0];
    s.heads = qn[1];
    if (s.heads < 1 || s.heads > 128)
        fail_arg("q_nope: the number of heads (dimension 1) must be in 1..128 (local heads per rank), got {}", s.heads);
    check_tensor(a.q_pe, "q_pe", MLAJIT_BF16, {s.total_q, s.heads, kDimRope});
    auto cq = check_tensor(a.cu_seqlens_q, "cu_seqlens_q", MLAJIT_INT32, {-1}, false);
    auto ck = check_tensor(a.cu_seqlens_k, "cu_seqlens_k", MLAJIT_INT32, {-1}, false);
    if (cq[0] < 2 || cq[0] != ck[0])
        fail_arg("cu_seqlens_q and cu_seqlens_k must both have batch+1 >= 2 entries; got {} and {}", cq[0], ck[0]);
    s.batch = cq[0] - 1;
    if (paged) {
        if (present(a.kv_c) || present(a.k_pe))
            fail_arg("pass the latent cache either as kv_c + k_pe or as the paged kv_cache + block_table, not both");
        // The dtype says the form: bf16 [.., .., 576] pages, or the FP8 cache uint8 [.., .., 656].
        int32_t kv_dtype = 0;
        std::memcpy(&kv_dtype, &a.kv_cache.dtype, sizeof kv_dtype);
        s.kv_fp8 = kv_dtype == MLAJIT_UINT8;
        if (s.kv_fp8) check_fp8_cache(a.kv_cache, "kv_cache");
        else if (kv_dtype == MLAJIT_BF16 && a.kv_cache.ndim == 3 && a.kv_cache.shape[2] == mj_fp8_row_bytes)
            fail_arg("kv_cache: a last dimension of 656 is the FP8 cache (fp8_ds_mla), which is bytes: pass it as "
                     "MLAJIT_UINT8 [num_blocks, block_size, 656]; bf16 pages are [num_blocks, block_size, 576] (shape {})",
                     shape_str(a.kv_cache));
        auto kc = s.kv_fp8 ? check_tensor(a.kv_cache, "kv_cache", MLAJIT_UINT8, {-1, -1, mj_fp8_row_bytes})
                           : check_tensor(a.kv_cache, "kv_cache", MLAJIT_BF16, {-1, -1, kDimQkMqa});
        s.paged = true;
        s.num_blocks = kc[0];
        s.block_size = kc[1];
        if (s.num_blocks < 1 || s.block_size < 1)
            fail_arg("kv_cache: expected [num_blocks >= 1, block_size >= 1, 576], got {}", shape_str(a.kv_cache));
        if (s.num_blocks > 0x7fffffff || s.block_size > 0x7fffffff)
            fail_arg("kv_cache: num_blocks and block_size must fit in int32, got {}", shape_str(a.kv_cache));
        auto bt = check_tensor(a.block_table, "block_table", MLAJIT_INT32, {s.batch, -1}, false);
        s.max_blocks = bt[1];
        if (!a.cu_seqlens_k_host) fail_arg("cu_seqlens_k_host is NULL: pass the host copy of cu_seqlens_k");
        s.total_k = a.cu_seqlens_k_host[s.batch];
    } else {
        auto kc = check_tensor(a.kv_c, "kv_c", MLAJIT_BF16, {-1, kDimLatent});
        s.total_k = kc[0];
        check_tensor(a.k_pe, "k_pe", MLAJIT_BF16, {s.total_k, kDimRope});
    }
    check_tensor(a.w_kv_b, "w_kv_b", MLAJIT_BF16, {s.heads * (kDimNope + kDimV), kDimLatent});
    auto idx = check_tensor(a.indices, "indices", MLAJIT_INT32, {s.total_q, -1}, false);
    s.width = idx[1];
    if (s.width < 1 || s.width > 65536)
        fail_arg("indices: the width (dimension 1) must be in 1..65536, got {}", s.width);
    if (a.topk < 0) fail_arg("topk must be the model's top-k (2048 for DeepSeek-V3.2), or 0 for the indices width; got {}", a.topk);
    s.topk = a.topk > 0 ? a.topk : s.width;
    check_tensor(a.out, "out", MLAJIT_BF16, {s.total_q, s.heads, kDimV});
    s.has_lse = present(a.lse);
    if (s.has_lse) {
        check_tensor(a.lse, "lse", MLAJIT_FP32, {s.total_q, s.heads}, false);
        if (a.lse.stride[1] != 1) fail_arg("lse: the head dimension must be contiguous (stride 1), got {}", a.lse.stride[1]);
    }
    check_cu_seqlens(a.cu_seqlens_q_host, s.batch, s.total_q, "cu_seqlens_q");
    const int64_t max_k = check_cu_seqlens(a.cu_seqlens_k_host, s.batch, s.total_k, "cu_seqlens_k");
    if (s.paged && max_k > s.max_blocks * s.block_size)
        fail_arg("block_table: {} pages of {} tokens per request cover {} key positions, but the longest request has s_k "
                 "= {}: give block_table at least {} columns", s.max_blocks, s.block_size, s.max_blocks * s.block_size,
                 max_k, (max_k + s.block_size - 1) / s.block_size);
    for (int64_t r = 0; r < s.batch; ++r) {
        const int64_t sq = a.cu_seqlens_q_host[r + 1] - a.cu_seqlens_q_host[r];
        const int64_t sk = a.cu_seqlens_k_host[r + 1] - a.cu_seqlens_k_host[r];
        if (sk < sq)
            fail_arg("request {}: s_k = {} is less than s_q = {}; the queries are the last s_q of the request's s_k keys, "
                     "so cu_seqlens_k must count the new tokens too",
                     r, sk, sq);
    }
    if (!(a.sm_scale > 0.f) || !std::isfinite(a.sm_scale))
        fail_arg("sm_scale must be a positive finite number, got {}", a.sm_scale);
    if (a.force_path < -1 || a.force_path > 2)
        fail_arg("force_path must be -1 (plan) or an mlajit_path (0 dense_mha, 1 masked_mha, 2 sparse_mqa), got {}",
                 a.force_path);
    if (need_data) {
        if (!a.workspace && a.workspace_bytes > 0) fail_arg("workspace is NULL but workspace_bytes is {}", a.workspace_bytes);
        if (reinterpret_cast<uintptr_t>(a.workspace) % 256 != 0)
            fail_arg("workspace must be 256-byte aligned (any cudaMalloc / torch allocation is), got {}", a.workspace);
    }
    // The projections read W_kv_b head by head with a row stride; a row stride must keep 16-byte alignment.
    s.q_packed = in.q_nope.data && static_cast<const char*>(in.q_pe.data) == static_cast<const char*>(in.q_nope.data) + 2 * kDimNope &&
                 same_strides(in.q_nope, in.q_pe, 3) && in.q_nope.stride[1] >= kDimQkMha;
    s.kv_packed = !s.paged && in.kv_c.data && static_cast<const char*>(in.k_pe.data) == static_cast<const char*>(in.kv_c.data) + 2 * kDimLatent &&
                  same_strides(in.kv_c, in.k_pe, 2) && in.kv_c.stride[0] >= kDimQkMqa;
    return s;
}

MlaStepLayout step_layout(const MlaShapes& s, const MlaStep& st) {
    MlaStepLayout l;
    size_t at = workspace_base(s);
    auto take = [&](size_t bytes) {
        const size_t off = at;
        at = align256(at + bytes);
        return off;
    };
    const size_t tq = size_t(st.t1 - st.t0), tk = size_t(st.k1 - st.k0), h = size_t(s.heads);
    if (st.path == Path::sparse_mqa) {
        // Split kv_c / k_pe are packed into one [keys, 576] buffer; a bf16 paged cache is read in place by
        // the batched form and gathered only for the chunks of a request too large for one step. The FP8
        // cache is always gathered (dequantized) into it: sparse MQA reading the FP8 pages directly measured
        // 1.33-1.6x slower than on bf16 rows (docs/PERF.md), while the gather costs one pass over the step's
        // keys (656 bytes in, 1152 out); handed the pages instead, the one call took 8.72 against 5.38 ms for
        // the engine's way (H100, 16 heads, 8 x 1,024 new over 32k cached; session 25). First in the layout: the first chunk of a request packs
        // it and the later chunks (fewer queries in the last one) read it, so its offset must not depend on
        // the chunk's query count.
        if (!s.kv_packed && !(s.paged && !s.kv_fp8 && !st.chunk)) l.kv_pack = take(tk * kDimQkMqa * 2);
        l.q_mqa = take(tq * h * kDimQkMqa * 2);
        l.latent = take(tq * h * kDimLatent * 2);
        l.kept_bytes = sparse_mqa_kept_bytes(int64_t(tq), s.width);  // each token's key set, compacted once (pre-pass)
        l.kept = take(l.kept_bytes);
    } else if (st.small) {  // the MHA kernel writes the K/V rows itself and reads q / the latent rows in place
        l.kv_up = take(tk * h * (kDimNope + kDimV) * 2);
    } else {
        l.kv_up = take(tk * h * (kDimNope + kDimV) * 2);
        // A paged bf16 cache on the Hopper GEMM: the up-projection reads the pages itself and leaves the
        // run's k_pe rows [tk, 64] for MHA; otherwise the run's full rows are gathered first.
        if (s.paged && s.paged_fused) l.kpe = take(tk * kDimRope * 2);
        else if (s.paged) l.kv_gather = take(tk * kDimQkMqa * 2);
        if (!s.q_packed) l.q_pack = take(tq * h * kDimQkMha * 2);
        if (st.path == Path::masked_mha) l.mask = take(tq * size_t(topk_mask_words(st.max_s_k)) * 4);
    }
    if (!s.has_lse) l.lse = take(tq * h * 4);
    l.end = at;
    return l;
}

MlaSchedule schedule_mla(const MlaShapes& s, const int32_t* cu_q, const int32_t* cu_k, std::span<const Path> paths,
                         const MlaLimits& limits) {
    MlaSchedule sch;
    sch.paths.assign(paths.begin(), paths.end());
    sch.workspace_bytes = workspace_base(s);
    auto request = [&](int64_t r, Path p) {
        return MlaStep{p, r, r + 1, cu_q[r], cu_q[r + 1], cu_k[r], cu_k[r + 1], cu_k[r + 1] - cu_k[r], true};
    };
    auto add = [&](MlaStep st) {
        st.small = st.path == Path::dense_mha && s.small_max_keys > 0 && st.r1 - st.r0 <= 65535;  // grid z: requests
        for (int64_t r = st.r0; r < st.r1 && st.small; ++r)
            st.small = cu_q[r + 1] - cu_q[r] <= s.small_max_q && cu_k[r + 1] - cu_k[r] <= s.small_max_keys;
        sch.steps.push_back(st);
        // Sized as if no step were small (the workspace query cannot see the pointers' alignment, which
        // decides it): a small step's buffers are a prefix-subset of the same step's without it.
        MlaStep sized = st;
        sized.small = false;
        sch.workspace_bytes = std::max(sch.workspace_bytes, step_layout(s, sized).end);
    };
    // Sparse MQA: a chunk's absorbed queries + latent outputs (+ scratch lse) + its key-set list must fit the chunk budget.
    const size_t per_query = size_t(s.heads) * (kDimQkMqa * 2 + kDimLatent * 2 + (s.has_lse ? 0 : 4)) + size_t(s.width + 1) * 4;
    const int64_t chunk = std::max<int64_t>(64, int64_t(limits.mqa_chunk_bytes / per_query) / 64 * 64);

    std::optional<MlaStep> run;  // the run of consecutive requests of one path being grown
    auto flush = [&] {
        if (run) add(*run);
        run.reset();
    };
    for (int64_t r = 0; r < s.batch; ++r) {
        const Path p = paths[size_t(r)];
        if (cu_q[r + 1] == cu_q[r]) {  // no queries: nothing to compute (it ends a run)
            flush();
            continue;
        }
        MlaStep one = request(r, p);
        if (p == Path::sparse_mqa && cu_q[r + 1] - cu_q[r] > chunk) {  // too large alone: chunks of its queries
            flush();
            for (int64_t t = cu_q[r]; t < cu_q[r + 1]; t += chunk) {
                MlaStep st = one;
                st.t0 = t;
                st.t1 = std::min<int64_t>(t + chunk, cu_q[r + 1]);
                st.first_chunk = t == cu_q[r];
                st.chunk = true;
                add(st);
            }
            continue;
        }
        if (run && run->path == p && run->r1 == r) {
            MlaStep grown = *run;
            grown.r1 = r + 1;
            grown.t1 = one.t1;
            grown.k1 = one.k1;
            grown.max_s_k = std::max(grown.max_s_k, one.max_s_k);
            const size_t budget = p == Path::sparse_mqa ? limits.mqa_chunk_bytes : limits.mha_run_bytes;
            if (step_layout(s, grown).end - workspace_base(s) <= budget) {
                run = grown;
                continue;
            }
        }
        flush();
        run = one;
    }
    flush();
    return sch;
}

namespace {

// One planner per (GPU, heads, topk), built on first use: building reads the calibration table from disk
// and indexes it, which is host time a prefill call should not pay. Planners are immutable once built.
const Planner& cached_planner(const std::string& gpu_name, int heads, int topk, KvFormat kv_format) {
    static std::mutex mu;
    static std::map<std::tuple<std::string, int, int, int>, std::unique_ptr<Planner>> cache;
    std::lock_guard lock(mu);
    auto& p = cache[std::make_tuple(gpu_name, heads, topk, int(kv_format))];
    if (!p) {
        StartupTimer t(StartupStep::planner_build);
        PlannerOptions o = planner_options(config(), heads, topk, default_cache_root_from(config()), gpu_name);
        o.kv_format = kv_format;
        p = std::make_unique<Planner>(std::move(o));
    }
    return *p;
}

}  // namespace

std::vector<Path> plan_mla_paths(const std::string& gpu_name, const MlaShapes& s, const int32_t* cu_q,
                                 const int32_t* cu_k, int force_path) {
    std::vector<Path> paths(size_t(s.batch), Path::dense_mha);
    std::vector<Request> reqs;
    std::vector<size_t> index;  // batch position of each planned request (those with queries)
    for (int64_t r = 0; r < s.batch; ++r) {
        const long sq = cu_q[r + 1] - cu_q[r], sk = cu_k[r + 1] - cu_k[r];
        if (sq == 0) continue;
        if (force_path == MLAJIT_PATH_DENSE_MHA && sk > s.topk)
            fail_arg("force_path = dense_mha cannot run request {} (s_q {}, s_k {}): s_k exceeds topk {}, so dense "
                     "attention would attend keys outside the top-k selection. Force masked_mha (exact at any length) "
                     "or let the planner decide (-1).",
                     r, sq, sk, s.topk);
        reqs.push_back({sq, sk});
        index.push_back(size_t(r));
    }
    if (reqs.empty()) return paths;
    if (force_path >= 0) {  // the caller's choice for this call (not MLAJIT_PATH: the planner would log that)
        for (size_t i : index) paths[i] = Path(force_path);
        return paths;
    }
    const Plan plan = cached_planner(gpu_name, int(s.heads), int(s.topk), s.kv_fp8 ? KvFormat::fp8 : KvFormat::bf16).plan(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) paths[index[i]] = plan.requests[i].path;
    return paths;
}

void enable_small_steps(MlaShapes& s, const Arch& arch, const mlajit_mla_prefill_args& a) {
    s.small_max_q = s.small_max_keys = 0;
    if (config().small_step_keys <= 0) return;
    // The kernel copies 16-byte chunks of every row it reads (q, k_pe, latent rows, W_kv_b): strides in
    // elements of 2 bytes (bf16) or 1 (the FP8 cache's bytes).
    auto aligned = [](const mlajit_tensor& t, int strided_dims, int64_t elems_per_16 = 8) {
        bool ok = reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
        for (int d = 0; d < strided_dims; ++d) ok = ok && t.stride[d] % elems_per_16 == 0;
        return ok;
    };
    bool ok = aligned(a.q_nope, 2) && aligned(a.q_pe, 2) && aligned(a.w_kv_b, 1);
    ok = ok && (s.paged ? aligned(a.kv_cache, 2, s.kv_fp8 ? 16 : 8) : aligned(a.kv_c, 1) && aligned(a.k_pe, 1));
    if (!ok) return;
    s.small_max_q = mha_up_spec(arch, s.kv_fp8).p[0];
    s.small_max_keys = config().small_step_keys;
}

bool mla_paged_fused(const MlaShapes& s, int64_t fused_max_heads) { return s.paged && !s.kv_fp8 && s.heads <= fused_max_heads; }

void set_gemm_choices(MlaShapes& s, int64_t fused_max_heads, size_t gemm_scratch) {
    s.paged_fused = mla_paged_fused(s, fused_max_heads);
    s.gemm_scratch = gemm_scratch;
}

size_t mla_prefill_workspace_size(const std::string& gpu_name, const mlajit_mla_prefill_args& a, int64_t fused_max_heads,
                                  size_t gemm_scratch) {
    MlaShapes s = check_mla_args(a, false);
    set_gemm_choices(s, fused_max_heads, gemm_scratch);
    const auto paths = plan_mla_paths(gpu_name, s, a.cu_seqlens_q_host, a.cu_seqlens_k_host, a.force_path);
    return schedule_mla(s, a.cu_seqlens_q_host, a.cu_seqlens_k_host, paths).workspace_bytes;
}

}  // namespace mlajit
