// mlajit-check: one checked DSA prefill through the library on this machine's GPU. Runs every path that
// is valid for the shape (dense MHA when s_k <= topk, masked MHA, sparse MQA), checks a sample of rows of
// each against the float64 reference, and prints each path's time. `--has-gpu` only says whether a GPU
// is usable (exit 0) or not (exit 1), for scripts.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "cuda/driver_api.h"
#include "device_timing.h"
#include "mlajit/mlajit.h"
#include "mlajit/mlajit.hpp"
#include "reference/reference.h"

namespace R = mlajit::ref;
using mlajit::driver;

namespace {

using Dev = mlajit::tools::DeviceBuffer;

mlajit_tensor tensor(void* d, mlajit_dtype dt, std::initializer_list<int64_t> shape) {
    return mlajit::contiguous_tensor(d, dt, shape);
}

void ok(mlajit_status s, const char* what) {
    if (s != MLAJIT_OK) throw std::runtime_error(fmt::format("{}: {}: {}", what, mlajit_status_name(s), mlajit_last_error()));
}

// Median of 10 timed calls after one untimed call (which loads or compiles the kernels).
template <typename F>
double time_ms(CUstream st, F&& f) {
    return mlajit::tools::median_ms(st, [&](int) { f(); }, 10, 1);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mlajit-check: one checked DSA prefill on this GPU (every valid path against float64)"};
    bool has_gpu = false;
    int64_t heads = 16, s_q = 4096, s_k = 4096, topk = 2048;
    app.add_flag("--has-gpu", has_gpu, "only report whether a GPU is usable (exit 0) or not (exit 1)");
    app.add_option("--heads", heads, "local heads (128 / TP)")->check(CLI::Range(1, 128));
    app.add_option("--s-q", s_q, "new tokens")->check(CLI::Range(1, 1 << 20));
    app.add_option("--s-k", s_k, "keys incl. cached context (>= s-q)")->check(CLI::Range(1, 1 << 20));
    app.add_option("--topk", topk, "DSA top-k")->check(CLI::Range(64, 4096));
    std::string batch_spec;
    app.add_option("--batch", batch_spec,
                   "a mixed batch instead of one request: s_q:s_k pairs, comma-separated (e.g. 300:300,700:3000); "
                   "runs the one-call prefill only");
    CLI11_PARSE(app, argc, argv);
    if (has_gpu) return mlajit::driver_available() ? 0 : 1;
    try {
        std::vector<int32_t> cu_q{0}, cu_k{0};
        if (batch_spec.empty()) batch_spec = fmt::format("{}:{}", s_q, s_k);
        for (size_t at = 0; at < batch_spec.size();) {
            const size_t end = std::min(batch_spec.find(',', at), batch_spec.size());
            const std::string item = batch_spec.substr(at, end - at);
            long q = -1, k = -1;
            if (std::sscanf(item.c_str(), "%ld:%ld", &q, &k) != 2 || q < 0 || k < q || k > (1 << 22))
                throw std::runtime_error(fmt::format("--batch: '{}' is not s_q:s_k with 0 <= s_q <= s_k", item));
            cu_q.push_back(cu_q.back() + int32_t(q));
            cu_k.push_back(cu_k.back() + int32_t(k));
            at = end + 1;
        }
        const int64_t B = int64_t(cu_q.size()) - 1;
        const bool single = B == 1;
        s_q = cu_q.back();  // total tokens: one request's lengths when single
        s_k = cu_k.back();
        bool all_short = true;
        for (int64_t r = 0; r < B; ++r) all_short = all_short && cu_k[size_t(r) + 1] - cu_k[size_t(r)] <= topk;
        const std::string name = mlajit::tools::open_gpu0().name;
        mlajit_handle h = nullptr;
        ok(mlajit_create(-1, &h), "mlajit_create");
        CUstream st = nullptr;
        fmt::print("mlajit-check on {} ({}): heads {}, {} (s_q:s_k), topk {}\n", name, mlajit_handle_arch(h), heads,
                   batch_spec, topk);

        R::Rng rng;
        const double scale = 1.0 / std::sqrt(192.0);
        auto idx = R::causal_topk_indices(rng, cu_q, cu_k, topk);
        auto rows = R::sample_rows(rng, cu_q, 6);
        struct Row {
            std::string path;
            double ms;
            std::string check;
        };
        std::vector<Row> table;
        Dev didx(idx), dcq(cu_q), dck(cu_k);

        if (single) {  // sparse MQA over the latent rows
            auto q = rng.normal_bf16(s_q * heads * 576, 1.0), kv = rng.normal_bf16(s_k * 576, 1.0);
            Dev dq(q), dkv(kv), dout(s_q * heads * 512 * 2), dlse(s_q * heads * 4), dml(s_q * heads * 4);
            mlajit_sparse_mqa_args a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
            a.q = tensor(dq.get(), MLAJIT_BF16, {s_q, heads, 576});
            a.kv = tensor(dkv.get(), MLAJIT_BF16, {s_k, 576});
            a.indices = tensor(didx.get(), MLAJIT_INT32, {s_q, topk});
            a.out = tensor(dout.get(), MLAJIT_BF16, {s_q, heads, 512});
            a.lse = tensor(dlse.get(), MLAJIT_FP32, {s_q, heads});
            a.max_logits = tensor(dml.get(), MLAJIT_FP32, {s_q, heads});
            a.sm_scale = (float)scale;
            double ms = time_ms(st, [&] { ok(mlajit_sparse_mqa_prefill(h, &a, st), "sparse MQA"); });
            R::SparseMqaArgs ra = R::packed_sparse_mqa(q.data(), kv.data(), idx.data(), s_q, s_k, heads, topk, (float)scale);
            ra.rows = rows;
            auto out = dout.download<uint16_t>(s_q * heads * 512);
            auto rep = R::check_out("out", R::View(out.data(), heads * 512, 512), R::sparse_mqa(ra));
            table.push_back({"sparse_mqa", ms, rep.summary()});
        }
        if (single) {  // masked MHA (and dense when exact) over decompressed K/V
            auto q = rng.normal_bf16(s_q * heads * 192, 1.0), kn = rng.normal_bf16(s_k * heads * 128, 1.0),
                 kp = rng.normal_bf16(s_k * 64, 1.0), v = rng.normal_bf16(s_k * heads * 128, 1.0);
            const int64_t words = mlajit_topk_mask_words(s_k);
            Dev dq(q), dkn(kn), dkp(kp), dv(v), dout(s_q * heads * 128 * 2), dlse(s_q * heads * 4), dmask(s_q * words * 4);
            mlajit_topk_mask_args m = MLAJIT_ARGS_INIT(mlajit_topk_mask_args);
            m.indices = tensor(didx.get(), MLAJIT_INT32, {s_q, topk});
            m.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {2});
            m.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {2});
            m.cu_seqlens_q_host = cu_q.data();
            m.cu_seqlens_k_host = cu_k.data();
            m.mask = tensor(dmask.get(), MLAJIT_UINT32, {s_q, words});
            mlajit_mha_args a = MLAJIT_ARGS_INIT(mlajit_mha_args);
            a.q = tensor(dq.get(), MLAJIT_BF16, {s_q, heads, 192});
            a.k_nope = tensor(dkn.get(), MLAJIT_BF16, {s_k, heads, 128});
            a.k_pe = tensor(dkp.get(), MLAJIT_BF16, {s_k, 64});
            a.v = tensor(dv.get(), MLAJIT_BF16, {s_k, heads, 128});
            a.out = tensor(dout.get(), MLAJIT_BF16, {s_q, heads, 128});
            a.lse = tensor(dlse.get(), MLAJIT_FP32, {s_q, heads});
            a.cu_seqlens_q = m.cu_seqlens_q;
            a.cu_seqlens_k = m.cu_seqlens_k;
            a.cu_seqlens_q_host = cu_q.data();
            a.cu_seqlens_k_host = cu_k.data();
            a.sm_scale = (float)scale;
            R::MhaArgs ra;
            ra.q = R::View(q.data(), heads * 192, 192);
            ra.k_nope = R::View(kn.data(), heads * 128, 128);
            ra.k_pe = R::View(kp.data(), 64, 0);
            ra.v = R::View(v.data(), heads * 128, 128);
            ra.cu_seqlens_q = cu_q;
            ra.cu_seqlens_k = cu_k;
            ra.heads = heads;
            ra.sm_scale = (float)scale;
            ra.rows = rows;
            if (s_k <= topk) {
                double ms = time_ms(st, [&] { ok(mlajit_mha_prefill(h, &a, st), "dense MHA"); });
                auto out = dout.download<uint16_t>(s_q * heads * 128);
                table.push_back({"dense_mha", ms, R::check_out("out", R::View(out.data(), heads * 128, 128), R::mha(ra)).summary()});
            }
            a.mask = m.mask;
            double ms = time_ms(st, [&] {
                ok(mlajit_topk_mask_build(h, &m, st), "top-k mask");
                ok(mlajit_mha_prefill(h, &a, st), "masked MHA");
            });
            auto mask = R::topk_mask(idx.data(), topk, topk, cu_q, cu_k, words);
            ra.mask = mask.data();
            ra.mask_stride_words = words;
            auto out = dout.download<uint16_t>(s_q * heads * 128);
            table.push_back({"masked_mha (+mask build)", ms, R::check_out("out", R::View(out.data(), heads * 128, 128), R::mha(ra)).summary()});
        }
        {  // the one-call prefill (projections included), planned and with each path forced
            auto q = rng.normal_bf16(s_q * heads * 192, 1.0), kv = rng.normal_bf16(s_k * 576, 1.0),
                 w = rng.normal_bf16(heads * 256 * 512, 1.0 / std::sqrt(512.0));
            Dev dq(q), dkv(kv), dw(w), dout(s_q * heads * 128 * 2), dlse(s_q * heads * 4);
            mlajit_mla_prefill_args a = MLAJIT_ARGS_INIT(mlajit_mla_prefill_args);
            a.q_nope = mlajit::strided_tensor(dq.get(), MLAJIT_BF16, {s_q, heads, 128}, {heads * 192, 192, 1});
            a.q_pe = mlajit::strided_tensor(static_cast<char*>(dq.get()) + 256, MLAJIT_BF16, {s_q, heads, 64}, {heads * 192, 192, 1});
            a.kv_c = mlajit::strided_tensor(dkv.get(), MLAJIT_BF16, {s_k, 512}, {576, 1});
            a.k_pe = mlajit::strided_tensor(static_cast<char*>(dkv.get()) + 1024, MLAJIT_BF16, {s_k, 64}, {576, 1});
            a.w_kv_b = tensor(dw.get(), MLAJIT_BF16, {heads * 256, 512});
            a.indices = tensor(didx.get(), MLAJIT_INT32, {s_q, topk});
            a.cu_seqlens_q = tensor(dcq.get(), MLAJIT_INT32, {B + 1});
            a.cu_seqlens_k = tensor(dck.get(), MLAJIT_INT32, {B + 1});
            a.cu_seqlens_q_host = cu_q.data();
            a.cu_seqlens_k_host = cu_k.data();
            a.out = tensor(dout.get(), MLAJIT_BF16, {s_q, heads, 128});
            a.lse = tensor(dlse.get(), MLAJIT_FP32, {s_q, heads});
            a.sm_scale = (float)scale;
            R::DsaArgs ra = R::packed_dsa(q.data(), kv.data(), w.data(), idx.data(), topk, heads, cu_q, cu_k, scale);
            ra.rows = rows;
            const auto want = R::dsa_prefill_reference(ra);
            std::vector<int> forces = {-1, MLAJIT_PATH_MASKED_MHA, MLAJIT_PATH_SPARSE_MQA};
            if (all_short) forces.push_back(MLAJIT_PATH_DENSE_MHA);
            for (int force : forces) {
                a.force_path = force;
                size_t bytes = 0;
                ok(mlajit_mla_prefill_workspace_size(h, &a, &bytes), "mla_prefill workspace size");
                Dev ws(bytes);
                a.workspace = ws.get();
                a.workspace_bytes = bytes;
                std::vector<mlajit_path> taken(size_t(B), MLAJIT_PATH_DENSE_MHA);
                a.paths_out = taken.data();
                dout.poison();
                ok(mlajit_mla_prefill(h, &a, st), "mla_prefill");
                auto out = dout.download<uint16_t>(s_q * heads * 128);
                auto rep = R::check_out("out", R::View(out.data(), heads * 128, 128), want);
                double ms = time_ms(st, [&] { ok(mlajit_mla_prefill(h, &a, st), "mla_prefill"); });
                std::string names;
                for (int64_t r = 0; r < B; ++r)
                    if (cu_q[size_t(r) + 1] > cu_q[size_t(r)])
                        names += std::string(names.empty() ? "" : ",") + mlajit_path_name(taken[size_t(r)]);
                table.push_back({fmt::format("mla_prefill {} {}", force < 0 ? "planned:" : "forced:", names), ms, rep.summary()});
            }
        }
        mlajit_path choice = MLAJIT_PATH_DENSE_MHA;
        double mha_pred = 0, mqa_pred = 0;
        if (single) ok(mlajit_plan_prefill(name.c_str(), (int)heads, (int)topk, 1, &s_q, &s_k, &choice, &mha_pred, &mqa_pred), "planner");
        std::string fastest;
        double best = 1e30;
        for (auto& r : table)
            if (r.path.starts_with("mla_prefill forced") && r.ms < best) best = r.ms, fastest = r.path;
        if (single) fmt::print("planner: {} (predicted MHA path {:.3f} ms, sparse MQA path {:.3f} ms, projections included); "
                   "fastest forced one-call path: {}\n", mlajit_path_name(choice), mha_pred, mqa_pred, fastest);
        fmt::print("{:<32} {:>9}  {}\n", "path", "ms", "check vs float64 (sampled rows)");
        for (auto& r : table) fmt::print("{:<32} {:>9.3f}  {}\n", r.path, r.ms, r.check);
        mlajit_destroy(h);
        bool all_ok = true;
        for (auto& r : table) all_ok = all_ok && r.check.find("FAIL") == std::string::npos;
        return all_ok ? 0 : 3;
    } catch (const std::exception& e) {
        fmt::print(stderr, "mlajit-check: {}\n", e.what());
        return 2;
    }
}
