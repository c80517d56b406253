#include "planner/planner.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <string>

#include "common/error.h"
#include "common/log.h"

namespace mlajit {

namespace {

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

double Plan::predicted_ms() const {
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
        table_.emplace(*o_.table);
        if (table_->topk() != o_.topk)
            warn_once(fmt::format("calibration table for {} was measured at topk {}, the model runs topk {}: planning "
                                  "with the H200 cost model. Run `mlajit-warmup calibrate` with this topk.",
                                  o_.table->gpu_name, table_->topk(), o_.topk));
        else if (int h = table_->heads_used(o_.heads); h != o_.heads)
            warn_once(fmt::format("calibration table for {} has no cells for {} heads: using its {}-head cells. Run "
                                  "`mlajit-warmup calibrate` for {} heads.",
                                  o_.table->gpu_name, o_.heads, h, o_.heads));
    }
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

Path Planner::route(const Request& r, size_t index) const {
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
    const RequestPlan t = predict(r, true);
    return t.mha_ms < t.mqa_ms ? Path::masked_mha : Path::sparse_mqa;
}

void Planner::add(Plan& p, const Request& r, Path path) const {
    // The MHA time shown is that of the MHA kernel the path would run, or would have run.
    const bool masked = path == Path::masked_mha || (path == Path::sparse_mqa && r.s_k > o_.topk);
    RequestPlan rp = predict(r, masked);
    rp.path = path;
    p.groups[size_t(path)].push_back(p.requests.size());
    p.requests.push_back(rp);
}

Plan Planner::plan(std::span<const Request> batch) const {
    Plan p;
    p.requests.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
        check_request({batch[i].s_q, batch[i].s_k, o_.heads, o_.topk}, i);
        add(p, batch[i], route(batch[i], i));
    }
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
    const Path path = route(worst, 0);
    Plan p;
    p.requests.reserve(batch.size());
    for (const auto& r : batch) add(p, r, path);
    return p;
}

}  // namespace mlajit
