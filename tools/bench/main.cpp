// mlajit-bench: our kernels alone, through the C API, over a grid given by flags. For every cell: fresh
// random inputs (never zeros), one checked launch against the float64 reference on sampled rows (outputs
// poisoned first), then the median of --reps event-timed launches after a warm-up, rotating copies of the
// inputs when one set is smaller than 3x the L2. Writes CSV (shape, ms, TFLOP/s, the FLOP formula).
//
//   mlajit-bench --ops mha,masked,mqa,mask --heads 128,16 --s-q 1024,4096 [--s-k ...] --csv out.csv
//
// Without --s-k every cell has s_k = s_q (pure prefill); with it, the cells are every (s_q, s_k) with
// s_k >= s_q (bottom-right causal: the queries are the last s_q of the s_k keys).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "device_timing.h"
#include "fp8_cache.h"
#include "cuda/driver_api.h"
#include "mlajit/mlajit.h"
#include "mlajit/mlajit.hpp"
#include "reference/reference.h"

namespace R = mlajit::ref;
using mlajit::contiguous_tensor;
using mlajit::driver;
using mlajit::tools::DeviceBuffer;

namespace {

struct Cell {
    std::string op;
    int64_t heads, s_q, s_k, topk;
};

struct Result {
    double ms = 0, flops = 0;
    std::string formula, check;
    int sets = 1;
    bool ok = true;
};

const char* kMhaFormula = "2*h*(192+128)*s_q*(s_k-s_q/2) (2*h*S^2*(192+128)/2 at s_q=s_k; masked counted as dense causal)";
const char* kMqaFormula = "2*s_q*h*topk*(576+512)";

double mha_flops(const Cell& c) { return 2.0 * c.heads * 320.0 * c.s_q * (c.s_k - c.s_q / 2.0); }
double mqa_flops(const Cell& c) { return 2.0 * c.s_q * c.heads * c.topk * (576.0 + 512.0); }

// n device copies of one host tensor.
template <typename T>
std::vector<std::unique_ptr<DeviceBuffer>> copies(const std::vector<T>& h, int n) {
    std::vector<std::unique_ptr<DeviceBuffer>> v;
    for (int i = 0; i < n; ++i) v.push_back(std::make_unique<DeviceBuffer>(h));
    return v;
}
std::vector<std::unique_ptr<DeviceBuffer>> outputs(size_t bytes, int n) {
    std::vector<std::unique_ptr<DeviceBuffer>> v;
    for (int i = 0; i < n; ++i) v.push_back(std::make_unique<DeviceBuffer>(bytes));
    return v;
}

std::string verdict(const std::vector<R::CheckReport>& reps, bool& ok) {
    std::string s;
    ok = true;
    for (auto& r : reps) {
        ok = ok && r.ok();
        if (!s.empty()) s += "; ";
        s += r.summary();
    }
    return s;
}

class Bench {
public:
    Bench(mlajit_handle h, CUstream st, int reps, int check_rows) : h_(h), st_(st), reps_(reps), rows_(check_rows) {}

    Result run(const Cell& c) {
        if (c.op == "mqa" || c.op == "mqa-nows") return mqa(c, c.op == "mqa");
        if (c.op == "mha" || c.op == "masked" || c.op == "mask") return mha(c);
        throw std::runtime_error("unknown op '" + c.op + "' (mha, masked, mqa, mqa-nows, mask)");
    }

private:
    // with_ws: the op given a workspace (mlajit_sparse_mqa_args.workspace), so its key-set pre-pass runs first (timed with it).
    Result mqa(const Cell& c, bool with_ws) {
        Result res;
        std::vector<int32_t> cu_q{0, (int32_t)c.s_q}, cu_k{0, (int32_t)c.s_k};
        const double scale = 1.0 / std::sqrt(192.0);
        auto idx = R::causal_topk_indices(rng_, cu_q, cu_k, c.topk);
        auto q = rng_.normal_bf16(size_t(c.s_q * c.heads * 576), 1.0);
        auto kv = rng_.normal_bf16(size_t(c.s_k * 576), 1.0);
        const size_t set = q.size() * 2 + kv.size() * 2 + idx.size() * 4;
        const int n = mlajit::tools::rotation_sets(set);
        auto dq = copies(q, n), dkv = copies(kv, n), didx = copies(idx, n);
        auto dout = outputs(size_t(c.s_q * c.heads * 512 * 2), n), dlse = outputs(size_t(c.s_q * c.heads * 4), n);
        std::vector<mlajit_sparse_mqa_args> args(n);
        for (int i = 0; i < n; ++i) {
            auto& a = args[i];
            a = MLAJIT_ARGS_INIT(mlajit_sparse_mqa_args);
            a.q = contiguous_tensor(dq[i]->get(), MLAJIT_BF16, {c.s_q, c.heads, 576});
            a.kv = contiguous_tensor(dkv[i]->get(), MLAJIT_BF16, {c.s_k, 576});
            a.indices = contiguous_tensor(didx[i]->get(), MLAJIT_INT32, {c.s_q, c.topk});
            a.out = contiguous_tensor(dout[i]->get(), MLAJIT_BF16, {c.s_q, c.heads, 512});
            a.lse = contiguous_tensor(dlse[i]->get(), MLAJIT_FP32, {c.s_q, c.heads});
            a.sm_scale = (float)scale;
        }
        std::unique_ptr<DeviceBuffer> ws;  // one workspace for every input set: the calls run in order on one stream
        if (with_ws) {
            size_t bytes = 0;
            mlajit::check(mlajit_sparse_mqa_workspace_size(h_, &args[0], &bytes));
            ws = std::make_unique<DeviceBuffer>(std::max<size_t>(bytes, 16));
            for (auto& a : args) {
                a.workspace = bytes ? ws->get() : nullptr;
                a.workspace_bytes = bytes;
            }
        }
        auto launch = [&](int i) { mlajit::check(mlajit_sparse_mqa_prefill(h_, &args[i % n], st_)); };
        dout[0]->poison();
        dlse[0]->poison();
        launch(0);
        R::SparseMqaArgs ra;
        ra.q = R::View(q.data(), c.heads * 576, 576);
        ra.kv = R::View(kv.data(), 576, 0);
        ra.indices = idx.data();
        ra.s_q = c.s_q;
        ra.s_kv = c.s_k;
        ra.heads = c.heads;
        ra.topk = c.topk;
        ra.sm_scale = scale;
        auto rows = R::sample_rows(rng_, cu_q, rows_);
        ra.rows = rows;
        auto want = R::sparse_mqa(ra);
        auto out = dout[0]->download<uint16_t>(size_t(c.s_q * c.heads * 512));
        auto lse = dlse[0]->download<float>(size_t(c.s_q * c.heads));
        res.check = verdict({R::check_out("out", R::View(out.data(), c.heads * 512, 512), want),
                             R::check_lse("lse", R::View(lse.data(), c.heads, 1), want)},
                            res.ok);
        res.ms = mlajit::tools::median_ms(st_, launch, reps_);
        res.flops = mqa_flops(c);
        res.formula = kMqaFormula;
        res.sets = n;
        return res;
    }

    // mha: dense causal (s_k <= topk or not: it is the kernel's speed); masked: mask build + masked MHA;
    // mask: the mask build alone (checked word for word).
    Result mha(const Cell& c) {
        Result res;
        const bool masked = c.op != "mha", mask_only = c.op == "mask";
        std::vector<int32_t> cu_q{0, (int32_t)c.s_q}, cu_k{0, (int32_t)c.s_k};
        const double scale = 1.0 / std::sqrt(192.0);
        std::vector<int32_t> idx;
        if (masked) idx = R::causal_topk_indices(rng_, cu_q, cu_k, c.topk);
        std::vector<uint16_t> q, kn, kp, v;
        if (!mask_only) {
            q = rng_.normal_bf16(size_t(c.s_q * c.heads * 192), 1.0);
            kn = rng_.normal_bf16(size_t(c.s_k * c.heads * 128), 1.0);
            kp = rng_.normal_bf16(size_t(c.s_k * 64), 1.0);
            v = rng_.normal_bf16(size_t(c.s_k * c.heads * 128), 1.0);
        }
        const int64_t words = mlajit_topk_mask_words(c.s_k);
        const size_t set = (q.size() + kn.size() + kp.size() + v.size()) * 2 + idx.size() * 4 +
                           (masked ? size_t(c.s_q * words * 4) : 0);
        const int n = mlajit::tools::rotation_sets(set);
        DeviceBuffer dcq(cu_q), dck(cu_k);
        auto dq = copies(q, n), dkn = copies(kn, n), dkp = copies(kp, n), dv = copies(v, n), didx = copies(idx, n);
        auto dmask = outputs(masked ? size_t(c.s_q * words * 4) : 0, n);
        auto dout = outputs(mask_only ? 0 : size_t(c.s_q * c.heads * 128 * 2), n);
        auto dlse = outputs(mask_only ? 0 : size_t(c.s_q * c.heads * 4), n);
        std::vector<mlajit_mha_args> args(n);
        std::vector<mlajit_topk_mask_args> margs(n);
        for (int i = 0; i < n; ++i) {
            auto& m = margs[i];
            m = MLAJIT_ARGS_INIT(mlajit_topk_mask_args);
            m.indices = contiguous_tensor(didx[i]->get(), MLAJIT_INT32, {c.s_q, c.topk});
            m.cu_seqlens_q = contiguous_tensor(dcq.get(), MLAJIT_INT32, {2});
            m.cu_seqlens_k = contiguous_tensor(dck.get(), MLAJIT_INT32, {2});
            m.cu_seqlens_q_host = cu_q.data();
            m.cu_seqlens_k_host = cu_k.data();
            m.mask = contiguous_tensor(dmask[i]->get(), MLAJIT_UINT32, {c.s_q, words});
            auto& a = args[i];
            a = MLAJIT_ARGS_INIT(mlajit_mha_args);
            a.q = contiguous_tensor(dq[i]->get(), MLAJIT_BF16, {c.s_q, c.heads, 192});
            a.k_nope = contiguous_tensor(dkn[i]->get(), MLAJIT_BF16, {c.s_k, c.heads, 128});
            a.k_pe = contiguous_tensor(dkp[i]->get(), MLAJIT_BF16, {c.s_k, 64});
            a.v = contiguous_tensor(dv[i]->get(), MLAJIT_BF16, {c.s_k, c.heads, 128});
            a.out = contiguous_tensor(dout[i]->get(), MLAJIT_BF16, {c.s_q, c.heads, 128});
            a.lse = contiguous_tensor(dlse[i]->get(), MLAJIT_FP32, {c.s_q, c.heads});
            a.cu_seqlens_q = m.cu_seqlens_q;
            a.cu_seqlens_k = m.cu_seqlens_k;
            a.cu_seqlens_q_host = cu_q.data();
            a.cu_seqlens_k_host = cu_k.data();
            if (masked) a.mask = m.mask;
            a.sm_scale = (float)scale;
        }
        auto launch = [&](int i) {
            if (masked) mlajit::check(mlajit_topk_mask_build(h_, &margs[i % n], st_));
            if (!mask_only) mlajit::check(mlajit_mha_prefill(h_, &args[i % n], st_));
        };
        if (masked) dmask[0]->poison(0xA5);
        if (!mask_only) {
            dout[0]->poison();
            dlse[0]->poison();
        }
        launch(0);
        std::vector<uint32_t> want_mask;
        if (masked) want_mask = R::topk_mask(idx.data(), c.topk, c.topk, cu_q, cu_k, words);
        if (mask_only) {
            auto got = dmask[0]->download<uint32_t>(size_t(c.s_q * words));
            int64_t bad = 0;
            for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want_mask[i];
            res.ok = bad == 0;
            res.check = fmt::format("mask: {} of {} words differ {}", bad, got.size(), res.ok ? "ok" : "FAIL");
            res.formula = "-";
        } else {
            R::MhaArgs ra;
            ra.q = R::View(q.data(), c.heads * 192, 192);
            ra.k_nope = R::View(kn.data(), c.heads * 128, 128);
            ra.k_pe = R::View(kp.data(), 64, 0);
            ra.v = R::View(v.data(), c.heads * 128, 128);
            ra.cu_seqlens_q = cu_q;
            ra.cu_seqlens_k = cu_k;
            ra.heads = c.heads;
            ra.sm_scale = scale;
            if (masked) {
                ra.mask = want_mask.data();
                ra.mask_stride_words = words;
            }
            auto rows = R::sample_rows(rng_, cu_q, rows_);
            ra.rows = rows;
            auto want = R::mha(ra);
            auto out = dout[0]->download<uint16_t>(size_t(c.s_q * c.heads * 128));
            auto lse = dlse[0]->download<float>(size_t(c.s_q * c.heads));
            res.check = verdict({R::check_out("out", R::View(out.data(), c.heads * 128, 128), want),
                                 R::check_lse("lse", R::View(lse.data(), c.heads, 1), want)},
                                res.ok);
            res.flops = mha_flops(c);
            res.formula = kMhaFormula;
        }
        res.ms = mlajit::tools::median_ms(st_, launch, reps_);
        res.sets = n;
        if (mask_only && res.ms > 0) {  // a bandwidth job: what it moved per second (indices read + mask written)
            const double bytes = double(idx.size()) * 4 + double(c.s_q) * double(words) * 4;
            res.check += fmt::format("; {:.0f} GB/s ({:.1f} MiB indices + {:.1f} MiB mask)", bytes / (res.ms * 1e6),
                                     double(idx.size()) * 4 / 1048576.0, double(c.s_q) * double(words) * 4 / 1048576.0);
        }
        return res;
    }

    mlajit_handle h_;
    CUstream st_;
    int reps_, rows_;
    R::Rng rng_;
};

std::string csv_quote(const std::string& s) {
    std::string r = "\"";
    for (char ch : s) r += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return r + "\"";
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"mlajit-bench: mlajit's kernels alone through the C API, checked against float64, then timed"};
    std::vector<std::string> ops{"mha", "masked", "mqa", "mask"};
    std::vector<int64_t> heads{128, 16}, s_qs{1024, 4096}, s_ks;
    int64_t topk = 2048;
    int reps = 10, rows = 4;
    std::string csv_path;
    app.add_option("--ops", ops, "mha (dense causal), masked (mask build + masked MHA), mqa (sparse, with a workspace: the key-set "
                                 "pre-pass included), mqa-nows (sparse without one), mask (build alone)")
        ->delimiter(',');
    app.add_option("--heads", heads, "local heads (128 / TP)")->delimiter(',')->check(CLI::Range(1, 128));
    app.add_option("--s-q", s_qs, "new tokens per cell")->delimiter(',')->check(CLI::Range(1, 1 << 20));
    app.add_option("--s-k", s_ks, "keys per cell (>= s_q; default: s_k = s_q)")->delimiter(',')->check(CLI::Range(1, 1 << 20));
    app.add_option("--topk", topk, "DSA top-k")->check(CLI::Range(64, 4096));
    app.add_option("--reps", reps, "timed launches per cell (median; at least 10)")->check(CLI::Range(10, 10000));
    app.add_option("--check-rows", rows, "random rows checked per cell besides the first and last")->check(CLI::Range(0, 1024));
    app.add_option("--csv", csv_path, "write the CSV here (default: stdout)");
    std::string kv = "bf16";
    int64_t batch = 8;
    app.add_option("--kv", kv, "fp8: the FP8 latent cache's benchmark instead (fp8_cache.h): the one call on the bf16 "
                               "and FP8 paged caches and the engine's way, per path, one shape per head count: "
                               "--batch requests of the first --s-q new tokens over the first --s-k keys")
        ->check(CLI::IsMember({"bf16", "fp8"}));
    app.add_option("--batch", batch, "requests per shape (--kv fp8)")->check(CLI::Range(1, 1024));
    CLI11_PARSE(app, argc, argv);
    try {
        if (!mlajit::driver_available()) {
            fmt::print(stderr, "mlajit-bench: no GPU/driver on this machine\n");
            return 2;
        }
        const std::string name = mlajit::tools::open_gpu0().name;
        mlajit::Runtime rt(-1);
        CUstream st = nullptr;
        MLAJIT_CU(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "creating a stream");
        std::FILE* f = csv_path.empty() ? stdout : std::fopen(csv_path.c_str(), "w");
        if (!f) throw std::runtime_error("cannot write " + csv_path);
        if (kv == "fp8") {  // its own rows and columns (tools/bench/fp8_cache.cpp)
            mlajit::tools::Fp8BenchOptions o;
            o.heads = heads;
            o.batch = batch;
            o.s_q = s_qs.at(0);
            o.s_k = s_ks.empty() ? o.s_q : s_ks.at(0);
            o.topk = topk;
            o.reps = reps;
            const bool ok = mlajit::tools::run_fp8_cache_bench(o, rt.get(), st, name, f);
            if (f != stdout) std::fclose(f);
            return ok ? 0 : 3;
        }
        fmt::print(f, "gpu,arch,op,heads,tp,s_q,s_k,topk,ms,tflops,formula,input_sets,check\n");
        std::fflush(f);
        Bench bench(rt.get(), st, reps, rows);
        bool all_ok = true;
        for (const auto& op : ops)
            for (int64_t h : heads)
                for (int64_t sq : s_qs)
                    for (int64_t sk : s_ks.empty() ? std::vector<int64_t>{sq} : s_ks) {
                        if (sk < sq) continue;
                        Cell c{op, h, sq, sk, topk};
                        Result r;
                        try {
                            r = bench.run(c);
                        } catch (const std::exception& e) {
                            r.ok = false;
                            r.check = std::string("ERROR ") + e.what();
                        }
                        all_ok = all_ok && r.ok;
                        const double tf = r.flops > 0 && r.ms > 0 ? r.flops / r.ms / 1e9 : 0.0;
                        fmt::print(f, "{},{},{},{},{},{},{},{},{:.4f},{:.1f},{},{},{}\n", csv_quote(name), rt.arch(), op, h,
                                   128 / h, sq, sk, topk, r.ms, tf, csv_quote(r.formula), r.sets, csv_quote(r.check));
                        std::fflush(f);
                        fmt::print(stderr, "{:<7} h={:<3} s_q={:<6} s_k={:<6} {:9.3f} ms {:7.1f} TFLOP/s  {}\n", op, h, sq, sk,
                                   r.ms, tf, r.ok ? "ok" : "FAIL: " + r.check.substr(0, 300));
                    }
        if (f != stdout) std::fclose(f);
        driver().cuStreamDestroy(st);
        return all_ok ? 0 : 3;
    } catch (const std::exception& e) {
        fmt::print(stderr, "mlajit-bench: {}\n", e.what());
        return 2;
    }
}
