// `calibrate` (needs a GPU): times both prefill paths of mlajit_mla_prefill over a grid of (heads, s_q,
// s_k), writes the planner's calibration table for this GPU model into the cache (replacing an older one),
// and prints the crossover per head count. `--evaluate` then times shapes between the grid's cells and
// reports how often the planner (with the new table, and with the built-in cost model) picked the faster.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <iostream>
#include <memory>

#include "cli.h"
#include "common/error.h"
#include "cuda/driver_api.h"
#include "path_timer.h"
#include "planner/calibration.h"
#include "planner/planner.h"
#include "planner/table_predict.h"

namespace mlajit::cli {
namespace {

struct Flags {
    std::string cache_dir;
    std::string out_file;
    std::vector<int> heads = {128, 64, 32, 16};
    std::vector<long> s_q = {1024, 2048, 4096, 8192, 16384};
    std::vector<int> ratios = {1, 2, 4};
    long max_s_k = 65536;
    int topk = 2048;
    int reps = 5;
    uint64_t seed = 20261202;
    bool evaluate = false;
};

// Where masked MHA stops winning along s_k = ratio * s_q, read off the table (log-spaced scan with
// log-linear interpolation of the time ratio). 0 = MHA wins over the whole range, -1 = MQA from the start
// (past the dense region), -2 = the table does not cover the line.
double line_crossover(const TablePredictor& p, int heads, int topk, double ratio, long lo, long hi) {
    double prev_x = 0, prev_r = 0;
    bool have_prev = false, any = false;
    for (int i = 0; i <= 96; ++i) {
        const double x = std::exp(std::log(double(lo)) + (std::log(double(hi)) - std::log(double(lo))) * i / 96.0);
        const long s_q = long(x), s_k = long(x * ratio);
        if (s_k <= topk) continue;  // dense MHA there: no choice to make
        auto t = p.predict({s_q, s_k, heads, topk});
        if (!t) continue;
        any = true;
        const double r = std::log(t->mha_ms / t->mqa_ms);
        if (r >= 0) {
            if (!have_prev) return -1;
            return std::exp(std::log(prev_x) + (std::log(x) - std::log(prev_x)) * (-prev_r) / (r - prev_r));
        }
        prev_x = x;
        prev_r = r;
        have_prev = true;
    }
    return any ? 0 : -2;
}

std::string crossover_text(double at, long hi) {
    if (at == 0) return fmt::format("MHA throughout (to s_q {})", hi);
    if (at == -1) return "MQA from the first masked cell";
    if (at == -2) return "not covered";
    return fmt::format("s_q ~ {:.0f}", at);
}

int run(const Flags& f) {
    if (!driver_available()) {
        try {
            driver();
        } catch (const std::exception& e) {
            std::cerr << "calibrate needs a GPU: " << e.what() << "\n";
        }
        return kExitFailed;
    }
    std::vector<CalibrationPoint> grid;
    long max_q = 0, max_k = 0;
    int max_h = 0;
    for (int h : f.heads)
        for (long q : f.s_q)
            for (int r : f.ratios) {
                const long k = q * r;
                if (k > f.max_s_k) continue;
                grid.push_back({h, q, k});
                max_q = std::max(max_q, q);
                max_k = std::max(max_k, k);
                max_h = std::max(max_h, h);
            }
    if (grid.empty()) throw UsageError("the grid is empty: every s_q * ratio exceeds --max-s-k");
    std::cout << fmt::format("calibrating {} cells (heads {}, s_q {}, s_k/s_q {}), {} timed runs each, topk {}\n",
                             grid.size(), fmt::join(f.heads, ","), fmt::join(f.s_q, ","), fmt::join(f.ratios, ","),
                             f.reps, f.topk);
    PathTimer timer(max_h, max_q, max_k, f.topk, f.seed);
    std::vector<std::vector<std::string>> rows;
    auto measure = [&](const AttnShape& s) {
        PathTimes t = timer.measure(s, f.reps);
        rows.push_back({std::to_string(s.heads), std::to_string(s.s_q), std::to_string(s.s_k),
                        s.s_k <= f.topk ? "dense" : "masked", fmt::format("{:.3f}", t.mha_ms), fmt::format("{:.3f}", t.mqa_ms),
                        t.mha_ms < t.mqa_ms ? fmt::format("MHA x{:.2f}", t.mqa_ms / t.mha_ms)
                                            : fmt::format("MQA x{:.2f}", t.mha_ms / t.mqa_ms)});
        std::cout << fmt::format("  h {:>3} s_q {:>6} s_k {:>6}: mha {:>9.3f} ms  mqa {:>9.3f} ms\n", s.heads, s.s_q, s.s_k,
                                 t.mha_ms, t.mqa_ms)
                  << std::flush;
        return t;
    };
    CalibrationTable table = calibrate(timer.gpu_name(), timer.driver_version(), f.topk, grid, measure);
    const auto file = f.out_file.empty() ? calibration_path(cache_root(f.cache_dir), timer.gpu_name())
                                         : std::filesystem::path(f.out_file);
    write_calibration(file, table);
    std::cout << "\n";
    print_table(std::cout, {"HEADS", "S_Q", "S_K", "MHA", "MHA_MS", "MQA_MS", "FASTER"}, rows);
    std::cout << fmt::format("\ntable for '{}' ({}) written to {}\n\ncrossover (masked MHA -> sparse MQA):\n",
                             table.gpu_name, table.driver_version, file.string());
    const TablePredictor pred(table, CostModel(PlannerOptions{}.rates));  // as the planner reads it
    const long lo = *std::min_element(f.s_q.begin(), f.s_q.end()), hi = max_q;
    for (int h : f.heads) {
        std::cout << fmt::format("  heads {:>3}: pure prefill {}; s_k = 4 s_q: {}\n", h,
                                 crossover_text(line_crossover(pred, h, f.topk, 1, lo, hi), hi),
                                 crossover_text(line_crossover(pred, h, f.topk, 4, lo, std::min(hi, f.max_s_k / 4)),
                                                std::min(hi, f.max_s_k / 4)));
    }
    if (!f.evaluate) return kExitOk;

    // Shapes between the grid's cells (geometric midpoints, other ratios): did the planner pick the faster?
    std::cout << "\nevaluation on shapes the table was not measured at:\n";
    int hits_table = 0, hits_model = 0, n = 0;
    double lost_table = 0, lost_model = 0, best_total = 0;
    std::vector<std::vector<std::string>> erows;
    for (int h : f.heads) {
        PlannerOptions with_table;
        with_table.heads = h;
        with_table.topk = f.topk;
        with_table.table = table;
        PlannerOptions model_only = with_table;
        model_only.table.reset();
        const Planner pt(with_table), pm(model_only);
        for (size_t i = 0; i + 1 < f.s_q.size(); ++i) {
            const long q = long(std::sqrt(double(f.s_q[i]) * double(f.s_q[i + 1])));
            for (double r : {1.0, 1.5, 3.0}) {
                const long k = long(q * r);
                if (k <= f.topk || k > f.max_s_k || k > max_k) continue;
                const PathTimes t = timer.measure({q, k, h, f.topk}, f.reps);
                const Request req{q, k};
                const Path want = t.mha_ms < t.mqa_ms ? Path::masked_mha : Path::sparse_mqa;
                const Path by_table = pt.plan({&req, 1}).requests[0].path;
                const Path by_model = pm.plan({&req, 1}).requests[0].path;
                auto cost = [&](Path p) { return p == Path::sparse_mqa ? t.mqa_ms : t.mha_ms; };
                ++n;
                hits_table += by_table == want;
                hits_model += by_model == want;
                best_total += cost(want);
                lost_table += cost(by_table) - cost(want);
                lost_model += cost(by_model) - cost(want);
                erows.push_back({std::to_string(h), std::to_string(q), std::to_string(k), fmt::format("{:.3f}", t.mha_ms),
                                 fmt::format("{:.3f}", t.mqa_ms), path_name(want), path_name(by_table), path_name(by_model)});
            }
        }
    }
    print_table(std::cout, {"HEADS", "S_Q", "S_K", "MHA_MS", "MQA_MS", "FASTER", "PLANNER(TABLE)", "PLANNER(MODEL)"}, erows);
    std::cout << fmt::format(
        "\nplanner with the table: faster path {}/{} shapes, {:.3f} ms lost of {:.3f} ms (oracle)\n"
        "planner with the cost model only: {}/{} shapes, {:.3f} ms lost\n",
        hits_table, n, lost_table, best_total, hits_model, n, lost_model);
    return kExitOk;
}

[[maybe_unused]] const bool registered = register_command({
    "calibrate",
    "time both prefill paths on this GPU and write the planner's calibration table into the cache",
    60,
    [](CLI::App& sub) -> Runner {
        auto f = std::make_shared<Flags>();
        add_cache_dir_flag(sub, f->cache_dir);
        sub.add_option("--out", f->out_file, "write the table here instead of <cache>/calibration/<gpu>.json");
        sub.add_option("--heads", f->heads, "local head counts, comma-separated")->delimiter(',')->check(CLI::Range(1, 128));
        sub.add_option("--s-q", f->s_q, "new-token counts, comma-separated")->delimiter(',')->check(CLI::Range(1L, 1L << 20));
        sub.add_option("--ratios", f->ratios, "s_k / s_q values, comma-separated")->delimiter(',')->check(CLI::Range(1, 64));
        sub.add_option("--max-s-k", f->max_s_k, "skip cells with more keys than this")->check(CLI::Range(1L, 1L << 21));
        sub.add_option("--topk", f->topk, "DSA top-k (the table answers only for it)")->check(CLI::Range(64, 4096));
        sub.add_option("--reps", f->reps, "timed runs per path and cell (the median is kept)")->check(CLI::Range(1, 1000));
        sub.add_option("--seed", f->seed, "seed of the random inputs");
        sub.add_flag("--evaluate", f->evaluate, "also time shapes between the cells and score the planner's choices");
        return [f] {
            if (f->topk % 64 != 0) throw UsageError(fmt::format("--topk {} must be a multiple of 64", f->topk));
            return run(*f);
        };
    },
});

}  // namespace
}  // namespace mlajit::cli
