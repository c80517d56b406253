// mlajit-bench --kv fp8 (see fp8_cache.h). One shape per head count: `batch` requests of s_q new tokens
// over s_k keys each (cached context included), DSA indices spread over each causal prefix (one per equal
// slice, as the planner's calibration draws them), pages shuffled. Rows, per path (planned, masked MHA,
// sparse MQA):
//   call_bf16   the one call on the bf16 paged cache [num_blocks, 64, 576]
//   call_fp8    the one call on the FP8 cache [num_blocks, 64, 656] (no bf16 copy of the context)
//   call_contig the one call on a contiguous bf16 [T_k, 576] copy of the rows (no pages at all)
//   engine      upconvert every cached token of the batch (the FP8 gather over the whole context) into a
//               bf16 [T_k, 576] workspace, then the one call on that contiguous bf16 cache
// plus the upconvert pass alone with its bytes/s, the writer, and the device-to-device copy ceiling.
// Checks: call_fp8 against engine on the same path (both compute with the same dequantized values;
// rel L2 <= 1e-2), and the FP8-vs-bf16 difference of the planned call as a figure.
#include "fp8_cache.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <string>

#include "device_timing.h"
#include "mlajit/mlajit.hpp"
#include "ops/ops.h"
#include "reference/bf16.h"
#include "runtime/handle.h"

namespace mlajit::tools {

namespace {

namespace R = mlajit::ref;

double rel_l2(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
    double e = 0, n = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double x = R::bf16_to_double(a[i]), y = R::bf16_to_double(b[i]);
        if (!std::isfinite(x) || !std::isfinite(y)) return INFINITY;
        e += (x - y) * (x - y);
        n += y * y;
    }
    return std::sqrt(e / std::max(n, 1e-300));
}

}  // namespace

bool run_fp8_cache_bench(const Fp8BenchOptions& o, mlajit_handle h, CUstream st, const std::string& gpu, std::FILE* csv) {
    bool all_ok = true;
    Handle internal(-1);  // for the upconvert pass (the library's gather, which the C API does not expose)
    auto row = [&](int64_t heads, const std::string& what, const std::string& path, double ms, double bytes,
                   const std::string& check) {
        const double gbs = bytes > 0 && ms > 0 ? bytes / ms / 1e6 : 0.0;
        fmt::print(csv, "\"{}\",{},{},{},{},{},{},{},{:.4f},{:.0f},\"{}\"\n", gpu, what, path, heads, o.batch, o.s_q, o.s_k,
                   o.topk, ms, gbs, check);
        std::fflush(csv);
        fmt::print(stderr, "{:<10} {:<11} h={:<3} B={} s_q={} s_k={} {:9.3f} ms {}{}\n", what, path, heads, o.batch, o.s_q,
                   o.s_k, ms, gbs > 0 ? fmt::format("{:7.0f} GB/s ", gbs) : "", check);
    };
    fmt::print(csv, "gpu,what,path,heads,batch,s_q,s_k,topk,ms,gb_per_s,check\n");

    // The copy ceiling in this run: a 1 GiB device-to-device copy (bytes read + written).
    {
        const size_t bytes = size_t(1) << 30;
        DeviceBuffer a(bytes), b(bytes);
        const double ms = median_ms(st, [&](int) {
            MLAJIT_CU(cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(b.get()), reinterpret_cast<CUdeviceptr>(a.get()), bytes, st),
                      "the copy ceiling");
        }, o.reps);
        row(0, "copy", "-", ms, 2.0 * double(bytes), "1 GiB device-to-device");
    }

    R::Rng rng;
    const int64_t B = o.batch, bs = o.block_size;
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (int64_t r = 0; r < B; ++r) {
        cu_q.push_back(int32_t(cu_q.back() + o.s_q));
        cu_k.push_back(int32_t(cu_k.back() + o.s_k));
    }
    const int64_t T = cu_q.back(), Tk = cu_k.back();
    const int64_t pages_per_req = (o.s_k + bs - 1) / bs, num_blocks = B * pages_per_req + 7;
    // Latent rows [T_k, 576], their pages (shuffled), slots for the writer, the table.
    auto rows576 = rng.normal_bf16(size_t(Tk * 576), 1.0);
    std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[size_t(rng.uniform_int(0, int64_t(i)))]);
    std::vector<int32_t> table(static_cast<size_t>(B * pages_per_req)), slots(static_cast<size_t>(Tk));
    std::vector<uint16_t> pages_bf16(size_t(num_blocks * bs * 576), 0);
    for (int64_t r = 0; r < B; ++r)
        for (int64_t pos = 0; pos < o.s_k; ++pos) {
            const int32_t page = perm[size_t(r * pages_per_req + pos / bs)];
            table[size_t(r * pages_per_req + pos / bs)] = page;
            const int64_t key = cu_k[size_t(r)] + pos, slot = int64_t(page) * bs + pos % bs;
            slots[size_t(key)] = int32_t(slot);
            std::copy_n(rows576.begin() + key * 576, 576, pages_bf16.begin() + slot * 576);
        }
    // Indices: one per equal slice of each causal prefix (distinct, causal), -1 past a short prefix.
    std::vector<int32_t> idx(size_t(T * o.topk), -1);
    for (int64_t r = 0; r < B; ++r)
        for (int64_t i = 0; i < o.s_q; ++i) {
            const int64_t prefix = o.s_k - o.s_q + i + 1, t = cu_q[size_t(r)] + i;
            for (int64_t j = 0; j < std::min(prefix, o.topk); ++j)
                idx[size_t(t * o.topk + j)] = prefix <= o.topk ? int32_t(j)
                                                               : int32_t((j * prefix + rng.uniform_int(0, prefix - 1)) / o.topk);
        }
    DeviceBuffer dpages(pages_bf16), drows(rows576), dtable(table), dslots(slots), didx(idx), dcq(cu_q), dck(cu_k);
    DeviceBuffer dfp8(size_t(num_blocks * bs * 656));
    DeviceBuffer dup(size_t(Tk * 576 * 2));  // the engine's bf16 workspace of the whole context

    // The writer (also what fills the FP8 cache for the rows below).
    mlajit_quantize_latent_cache_args qa = MLAJIT_ARGS_INIT(mlajit_quantize_latent_cache_args);
    qa.kv_c = strided_tensor(drows.get(), MLAJIT_BF16, {Tk, 512}, {576, 1});
    qa.k_pe = strided_tensor(static_cast<char*>(drows.get()) + 1024, MLAJIT_BF16, {Tk, 64}, {576, 1});
    qa.slot_mapping = contiguous_tensor(dslots.get(), MLAJIT_INT32, {Tk});
    qa.kv_cache = contiguous_tensor(dfp8.get(), MLAJIT_UINT8, {num_blocks, bs, 656});
    {
        const double ms = median_ms(st, [&](int) { check(mlajit_quantize_latent_cache(h, &qa, st)); }, o.reps);
        row(0, "quantize", "-", ms, double(Tk) * (1152 + 656 + 4), fmt::format("{} tokens", Tk));
    }
    // The upconvert pass: every cached token of the batch, FP8 pages -> bf16 [T_k, 576].
    PagedGather g;
    g.kv_cache = qa.kv_cache;
    g.block_table = contiguous_tensor(dtable.get(), MLAJIT_INT32, {B, pages_per_req});
    g.cu_seqlens_k = static_cast<const int32_t*>(dck.get());
    g.r0 = 0;
    g.r1 = B;
    g.max_s_k = o.s_k;
    g.kv_fp8 = true;
    g.dst = dup.get();
    g.dst_stride = 576;
    auto upconvert = [&] {
        ScopedContext scope(internal.context());
        paged_gather(internal, g, st);
    };
    {
        const double ms = median_ms(st, [&](int) { upconvert(); }, o.reps);
        row(0, "upconvert", "-", ms, double(Tk) * (656 + 1152), fmt::format("{} tokens, 656 B in + 1152 B out each", Tk));
    }

    for (int64_t H : o.heads) {
        auto q_nope = rng.normal_bf16(size_t(T * H * 128), 1.0), q_pe = rng.normal_bf16(size_t(T * H * 64), 1.0);
        auto w = rng.normal_bf16(size_t(H * 256 * 512), 1.0 / std::sqrt(512.0));
        DeviceBuffer dqn(q_nope), dqp(q_pe), dw(w), dout(size_t(T * H * 128 * 2)), dout2(size_t(T * H * 128 * 2));
        mlajit_mla_prefill_args base = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
        base.q_nope = contiguous_tensor(dqn.get(), MLAJIT_BF16, {T, H, 128});
        base.q_pe = contiguous_tensor(dqp.get(), MLAJIT_BF16, {T, H, 64});
        base.w_kv_b = contiguous_tensor(dw.get(), MLAJIT_BF16, {H * 256, 512});
        base.indices = contiguous_tensor(didx.get(), MLAJIT_INT32, {T, o.topk});
        base.topk = int32_t(o.topk);
        base.cu_seqlens_q = contiguous_tensor(dcq.get(), MLAJIT_INT32, {B + 1});
        base.cu_seqlens_k = contiguous_tensor(dck.get(), MLAJIT_INT32, {B + 1});
        base.cu_seqlens_q_host = cu_q.data();
        base.cu_seqlens_k_host = cu_k.data();
        base.out = contiguous_tensor(dout.get(), MLAJIT_BF16, {T, H, 128});
        base.sm_scale = float(1.0 / std::sqrt(192.0));
        auto bf16 = base, fp8 = base, eng = base;
        bf16.kv_cache = contiguous_tensor(dpages.get(), MLAJIT_BF16, {num_blocks, bs, 576});
        bf16.block_table = g.block_table;
        fp8.kv_cache = qa.kv_cache;
        fp8.block_table = g.block_table;
        eng.kv_c = strided_tensor(dup.get(), MLAJIT_BF16, {Tk, 512}, {576, 1});
        eng.k_pe = strided_tensor(static_cast<char*>(dup.get()) + 1024, MLAJIT_BF16, {Tk, 64}, {576, 1});
        eng.out = contiguous_tensor(dout2.get(), MLAJIT_BF16, {T, H, 128});
        std::vector<uint16_t> planned_bf16, planned_fp8;
        for (int force : {-1, int(MLAJIT_PATH_MASKED_MHA), int(MLAJIT_PATH_SPARSE_MQA)}) {
            const std::string path = force < 0 ? "planned" : mlajit_path_name(mlajit_path(force));
            std::vector<mlajit_path> paths(static_cast<size_t>(B));
            std::unique_ptr<DeviceBuffer> ws;
            auto prepare = [&](mlajit_mla_prefill_args& a) {
                a.force_path = force;
                size_t bytes = 0;
                check(mlajit_mla_prefill_workspace_size(h, &a, &bytes));
                if (!ws || ws->bytes() < bytes) ws = std::make_unique<DeviceBuffer>(bytes);
                a.workspace = ws->get();
                a.workspace_bytes = bytes;
                a.paths_out = paths.data();
            };
            double ms_fp8 = NAN, ms_eng = NAN;
            std::vector<uint16_t> out_fp8, out_eng;
            for (auto* a : {&bf16, &fp8, &eng}) {
                const std::string what = a == &bf16 ? "call_bf16" : a == &fp8 ? "call_fp8" : "engine";
                try {
                    prepare(*a);
                    double ms;
                    if (a == &eng) {
                        upconvert();
                        check(mlajit_mla_prefill(h, a, st));
                        // The one call alone on the contiguous bf16 rows (what call_bf16 on the pages is measured against).
                        const double ms_contig = median_ms(st, [&](int) { check(mlajit_mla_prefill(h, a, st)); }, o.reps);
                        row(H, "call_contig", path, ms_contig, 0, "the one call on contiguous bf16 [T_k, 576] rows");
                        ms = median_ms(st, [&](int) {
                            upconvert();
                            check(mlajit_mla_prefill(h, a, st));
                        }, o.reps);
                    } else {
                        ms = median_ms(st, [&](int) { check(mlajit_mla_prefill(h, a, st)); }, o.reps);
                    }
                    auto out = static_cast<DeviceBuffer*>(a == &eng ? &dout2 : &dout)->download<uint16_t>(size_t(T * H * 128));
                    std::string routed = mlajit_path_name(paths[0]);
                    for (auto p : paths) if (p != paths[0]) routed = "mixed";
                    if (a == &bf16 && force < 0) planned_bf16 = out;
                    if (a == &fp8) { ms_fp8 = ms; out_fp8 = out; if (force < 0) planned_fp8 = out; }
                    if (a == &eng) { ms_eng = ms; out_eng = out; }
                    std::string check_txt = "ran " + routed;
                    if (a == &eng && !out_fp8.empty()) {
                        const double d = rel_l2(out_fp8, out_eng);
                        const bool ok = d <= 1e-2;
                        all_ok = all_ok && ok;
                        check_txt += fmt::format("; call_fp8 vs engine rel L2 {:.2e} {}; call_fp8 {:.2f}x faster", d,
                                                 ok ? "ok" : "FAIL", ms_eng / ms_fp8);
                    }
                    row(H, what, path, ms, 0, check_txt);
                } catch (const std::exception& e) {
                    row(H, what, path, NAN, 0, std::string("ERROR ") + e.what());
                    if (a != &fp8 || force == int(MLAJIT_PATH_MASKED_MHA)) all_ok = false;  // FP8 sparse: fp8-kernels' branch
                }
            }
        }
        if (!planned_bf16.empty() && !planned_fp8.empty())
            row(H, "fp8_vs_bf16", "planned", 0, 0, fmt::format("FIGURE out rel L2 {:.3e} (the FP8 cache's own error)",
                                                               rel_l2(planned_fp8, planned_bf16)));
    }
    return all_ok;
}

}  // namespace mlajit::tools
