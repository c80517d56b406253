#include "planner/planner.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace mlajit {

namespace {

// The per-request rule: masked MHA iff strictly faster than sparse MQA when the request runs alone.
Path faster_alone(const RequestPlan& r) { return r.mha_ms < r.mqa_ms ? Path::masked_mha : Path::sparse_mqa; }

// Planners are built per handle (and tests build many); an override is news once per process.
void warn_once(const std::string& msg) {
    static std::mutex mu;
    static std::set<std::string> seen;
    std::lock_guard<std::mutex> lock(mu);
    if (seen.insert(msg).second) log().warn("{}", msg);
}

// check_shape for request i of a batch, on the hot path (every prefill call): the request's name is
// formatted only when a condition fails. The fast test must stay a subset of check_shape's conditions
// (it only decides whether check_shape runs).
void check_request(const AttnShape& s, size_t i) {
    if (s.s_q >= 1 && s.s_k >= s.s_q && s.heads >= 1 && s.heads <= 128 && s.topk >= 1) return;
    check_shape(s, fmt::format("request {}", i));
}

}  // namespace

const char* path_name(Path p) {
    switch (p) {
        case Path::dense_mha: return "dense_mha";
        case Path::masked_mha: return "masked_mha";
        case Path::sparse_mqa: return "sparse_mqa";
    }
    return "?";
}

size_t Plan::steps() const {
    size_t n = 0;
    for (size_t i = 0; i < requests.size(); ++i) n += i == 0 || requests[i].path != requests[i - 1].path;
    return n;
}

double Plan::predicted_ms() const {
    double sum = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
        const Path p = requests[i].path;
        if (i == 0 || p != requests[i - 1].path) sum += step_fixed_ms[size_t(p)];
        sum += requests[i].chosen_var_ms();
    }
    return sum;
}

double Plan::standalone_ms() const {
    double sum = 0;
    for (const auto& r : requests) sum += r.chosen_ms();
    return sum;
}

PlannerOptions planner_options(const Config& c, int heads, int topk, const std::filesystem::path& cache_root,
                               std::string_view gpu_name) {
    PlannerOptions o;
    o.heads = heads;
    o.topk = topk;
    o.force = c.path;
    o.masked_mha_max_seq = c.masked_mha_max_seq;
    o.table = find_calibration(c.plan_table, cache_root, gpu_name);
    if (c.plan_table && o.table) warn_once(fmt::format("MLAJIT_PLAN_TABLE={}: planning with this table", c.plan_table->string()));
    return o;
}

Planner::Planner(PlannerOptions o) : o_(std::move(o)), model_(o_.rates) {
    check_shape({1, 1, o_.heads, o_.topk}, "planner");
    if (o_.table) {
        validate(*o_.table, "(given to the planner)");
        table_.emplace(*o_.table, model_);  // the model guides the table between its cells
        if (table_->topk() != o_.topk)
            warn_once(fmt::format("calibration table for {} was measured at topk {}, the model runs topk {}: planning "
                                  "with the H200 cost model. Run `mlajit-warmup calibrate` with this topk.",
                                  o_.table->gpu_name, table_->topk(), o_.topk));
        else if (int h = table_->heads_used(o_.heads); h != o_.heads)
            warn_once(fmt::format("calibration table for {} has no cells for {} heads: using its {}-head cells. Run "
                                  "`mlajit-warmup calibrate` for {} heads.",
                                  o_.table->gpu_name, o_.heads, h, o_.heads));
    }
    step_fixed_ms_[size_t(Path::dense_mha)] = model_.mha_fixed_ms(false);
    step_fixed_ms_[size_t(Path::masked_mha)] = model_.mha_fixed_ms(true);
    step_fixed_ms_[size_t(Path::sparse_mqa)] = model_.mqa_fixed_ms(o_.heads);
    if (o_.force != PathChoice::auto_) {
        warn_once(fmt::format("MLAJIT_PATH={}: every request takes this path, whatever the planner predicts",
                              path_choice_name(o_.force)));
        if (o_.masked_mha_max_seq)
            warn_once(fmt::format("MLAJIT_MASKED_MHA_MAX_SEQ={} is ignored: MLAJIT_PATH={} forces the path",
                                  *o_.masked_mha_max_seq, path_choice_name(o_.force)));
    } else if (o_.masked_mha_max_seq) {
        warn_once(fmt::format("MLAJIT_MASKED_MHA_MAX_SEQ={}: masked MHA for s_k up to it, sparse MQA above "
                              "(dense MHA still for s_k <= topk {})",
                              *o_.masked_mha_max_seq, o_.topk));
    }
}

RequestPlan Planner::predict(const Request& r, bool masked) const {
    RequestPlan p = predict_alone(r, masked);
    // A table cell times a whole call of this one request: one step, its fixed cost plus the variable
    // part. The table cannot separate the two; the model's overhead terms are the fixed part (the same
    // launches and set-up whatever the data), the rest is the variable part. A cell faster than the fixed
    // part (none on the H200) gives a variable part of 0.
    p.mha_var_ms = std::max(0.0, p.mha_ms - step_fixed_ms_[size_t(masked ? Path::masked_mha : Path::dense_mha)]);
    p.mqa_var_ms = std::max(0.0, p.mqa_ms - step_fixed_ms_[size_t(Path::sparse_mqa)]);
    return p;
}

RequestPlan Planner::predict_alone(const Request& r, bool masked) const {
    const AttnShape s{r.s_q, r.s_k, o_.heads, o_.topk};
    RequestPlan p;
    // A table entry describes MHA as run by the rule (masked above topk); a forced masked run on a short
    // request is not in it, so the model answers that one.
    const bool table_fits = masked == (r.s_k > o_.topk);
    if (table_ && table_fits) {
        if (auto t = table_->predict(s)) {
            p.mha_ms = t->mha_ms;
            // The table times the whole MQA path on the bf16 cache; the sparse attention dominates it, so
            // on the FP8 cache the whole path is scaled (absorption included: a slight overestimate).
            p.mqa_ms = t->mqa_ms * kv_format_mqa_factor(o_.kv_format, o_.heads);
            p.from_table = true;
            return p;
        }
    }
    p.mha_ms = model_.mha(s, masked).total();
    const MqaTimes mqa = model_.mqa(s);
    p.mqa_ms = mqa.absorb_ms + mqa.attn_ms * kv_format_mqa_factor(o_.kv_format, o_.heads);
    return p;
}

std::optional<Path> Planner::fixed_route(const Request& r, size_t index) const {
    switch (o_.force) {
        case PathChoice::dense_mha:
            if (r.s_k > o_.topk)
                fail(MLAJIT_ERROR_CONFIG,
                     "MLAJIT_PATH=dense_mha cannot run request {} (s_q {}, s_k {}): s_k exceeds topk {}, so dense "
                     "attention would attend keys outside the top-k selection and give a wrong result. Unset "
                     "MLAJIT_PATH (auto) or set it to masked_mha, which is exact at any length.",
                     index, r.s_q, r.s_k, o_.topk);
            return Path::dense_mha;
        case PathChoice::masked_mha: return Path::masked_mha;
        case PathChoice::sparse_mqa: return Path::sparse_mqa;
        case PathChoice::auto_: break;
    }
    if (r.s_k <= o_.topk) return Path::dense_mha;
    if (o_.masked_mha_max_seq) return r.s_k <= *o_.masked_mha_max_seq ? Path::masked_mha : Path::sparse_mqa;
    return std::nullopt;
}

RequestPlan Planner::times(const Request& r, std::optional<Path> path) const {
    // The MHA time shown is that of the MHA kernel the path would run, or would have run.
    const bool masked = !path || *path == Path::masked_mha || (*path == Path::sparse_mqa && r.s_k > o_.topk);
    RequestPlan rp = predict(r, masked);
    if (path) rp.path = *path;
    return rp;
}

Plan Planner::empty_plan(size_t n) const {
    Plan p;
    p.requests.resize(n);
    p.step_fixed_ms = step_fixed_ms_;
    return p;
}

void Planner::group_by_path(Plan& p) {
    for (auto& g : p.groups) g.clear();
    for (size_t i = 0; i < p.requests.size(); ++i) p.groups[size_t(p.requests[i].path)].push_back(i);
}

Plan Planner::plan_per_request(std::span<const Request> batch) const {
    Plan p = empty_plan(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
        check_request({batch[i].s_q, batch[i].s_k, o_.heads, o_.topk}, i);
        const std::optional<Path> fixed = fixed_route(batch[i], i);
        p.requests[i] = times(batch[i], fixed);
        if (!fixed) p.requests[i].path = faster_alone(p.requests[i]);
    }
    group_by_path(p);
    return p;
}

Plan Planner::plan(std::span<const Request> batch) const {
    const size_t n = batch.size();
    Plan p = empty_plan(n);
    bool any_free = false;
    // Paths each request may take: bit int(Path).
    std::vector<uint8_t> allowed(n);
    for (size_t i = 0; i < n; ++i) {
        check_request({batch[i].s_q, batch[i].s_k, o_.heads, o_.topk}, i);
        const std::optional<Path> fixed = fixed_route(batch[i], i);
        p.requests[i] = times(batch[i], fixed);
        allowed[i] = fixed ? uint8_t(1u << int(*fixed)) : uint8_t((1u << int(Path::masked_mha)) | (1u << int(Path::sparse_mqa)));
        any_free |= !fixed;
    }
    if (n == 1 && any_free) {
        // Alone, the fixed costs are paid either way: the per-request rule, exact also at ties.
        p.requests[0].path = faster_alone(p.requests[0]);
    } else if (any_free) {
        // best[s]: least cost of requests 0..i with request i on path s (a new step starts whenever the path
        // changes); from[i][s]: request i-1's path on that plan.
        constexpr double kNone = std::numeric_limits<double>::infinity();
        const auto& fixed_ms = step_fixed_ms_;
        auto var = [&](size_t i, int s) {
            return s == int(Path::sparse_mqa) ? p.requests[i].mqa_var_ms : p.requests[i].mha_var_ms;
        };
        // Sparse first, and a tie never moves off it: a batch of one is masked iff strictly faster alone,
        // as the per-request rule has it; on the chain a tie keeps the current run (fewer steps).
        constexpr int kOrder[3] = {int(Path::sparse_mqa), int(Path::masked_mha), int(Path::dense_mha)};
        std::vector<std::array<int8_t, 3>> from(n);
        std::array<double, 3> best{kNone, kNone, kNone};
        for (size_t i = 0; i < n; ++i) {
            std::array<double, 3> next{kNone, kNone, kNone};
            for (int s : kOrder) {
                if (!(allowed[i] >> s & 1)) continue;
                double c = kNone;
                int8_t prev = -1;
                if (i == 0) {
                    c = fixed_ms[size_t(s)];
                } else {
                    c = best[size_t(s)];  // extends the run of request i-1
                    prev = int8_t(s);
                    for (int t : kOrder)
                        if (t != s && best[size_t(t)] + fixed_ms[size_t(s)] < c) {
                            c = best[size_t(t)] + fixed_ms[size_t(s)];
                            prev = int8_t(t);
                        }
                }
                next[size_t(s)] = c + var(i, s);
                from[i][size_t(s)] = prev;
            }
            best = next;
        }
        int s = -1;
        for (int t : kOrder)
            if (best[size_t(t)] < kNone && (s < 0 || best[size_t(t)] < best[size_t(s)])) s = t;
        for (size_t i = n; i-- > 0;) {
            p.requests[i].path = Path(s);
            s = from[i][size_t(s)];
        }
    }
    group_by_path(p);
    return p;
}

Plan Planner::plan_by_maxima(std::span<const Request> batch) const {
    // A forced path is batch-wide already (and a bad forced dense is best named by its real request).
    if (o_.force != PathChoice::auto_ || batch.empty()) return plan(batch);
    Request worst{0, 0};
    for (size_t i = 0; i < batch.size(); ++i) {
        check_request({batch[i].s_q, batch[i].s_k, o_.heads, o_.topk}, i);
        worst.s_q = std::max(worst.s_q, batch[i].s_q);
        worst.s_k = std::max(worst.s_k, batch[i].s_k);
    }
    const std::optional<Path> fixed = fixed_route(worst, 0);
    const RequestPlan w = times(worst, fixed);
    const Path path = fixed ? *fixed : faster_alone(w);
    Plan p = empty_plan(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) p.requests[i] = times(batch[i], path);
    group_by_path(p);
    return p;
}

}  // namespace mlajit
