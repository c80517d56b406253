// Choice of prefill path for the requests of one call (DESIGN.md section 5): dense MHA when exact
// (s_k <= topk), else masked MHA or sparse MQA, whichever makes the CALL predicted fastest. Predictions come
// from a calibration table measured on this GPU where it covers the request, else from the cost model.
//
// Batch-level routing. The one call (src/ops/mla_schedule.cpp) runs each run of consecutive requests of one
// path as ONE step: one launch set (gather, up-projection or absorption, mask, attention, output GEMM) over
// all of the run's tokens. So a request's predicted time alone splits into a part the step pays once
// (the cost model's overhead terms: CostModel::mha_fixed_ms / mqa_fixed_ms) and a variable part, its share
// of the batched step (its FLOP and index terms). A plan costs
//     sum over steps of the path's fixed cost + sum over requests of the chosen path's variable cost,
// steps being the maximal runs of consecutive requests of one path, as schedule_mla forms them. That cost
// is a chain over the batch order (each request's term depends only on its own path and its
// predecessor's), so plan() finds its exact minimum by dynamic programming over (request, path): O(n), a
// few operations per request, and never worse than routing each request alone, all masked or all sparse
// (all of them are plans it compares). A request alone (a batch of one) is routed exactly as the
// per-request rule did. Not modelled: a run split by the workspace budget (1 GiB of step buffers; an
// extra step's fixed cost is a few % of that much work) or by a request with no queries (the planner does
// not see those), and a sparse request chunked because it alone exceeds the budget (large: its own work
// dwarfs one step's fixed cost).
//
// Overrides (Config, read once from the environment):
// - MLAJIT_PATH=masked_mha / sparse_mqa: every request takes that path (both are exact for any length).
// - MLAJIT_PATH=dense_mha: every request takes dense MHA; a request with s_k > topk is an error naming it
//   (dense attention there would attend keys outside the top-k selection: a wrong result, not a slow
//   one, so it is never silently downgraded nor silently run).
// - MLAJIT_MASKED_MHA_MAX_SEQ=N: s_k <= topk dense, s_k <= N masked MHA, above sparse MQA (ignored, with
//   a log line, when MLAJIT_PATH forces a path).
// - MLAJIT_PLAN_TABLE: the calibration table file (see find_calibration).
// Each override is logged once per process.
#pragma once
#include <array>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "config/env.h"
#include "planner/calibration.h"
#include "planner/cost_model.h"
#include "planner/table_predict.h"

namespace mlajit {

enum class Path { dense_mha = 0, masked_mha = 1, sparse_mqa = 2 };
const char* path_name(Path p);

struct Request {
    long s_q = 0;  // new tokens
    long s_k = 0;  // all key positions, cached context included
};

struct RequestPlan {
    Path path = Path::sparse_mqa;
    // The request alone in a call (one step): the MHA path is masked when s_k > topk or when masked MHA
    // was forced, else dense.
    double mha_ms = 0;
    double mqa_ms = 0;
    // Its share of a batched step of that path: the above less the step's fixed cost (Plan::step_fixed_ms),
    // at least 0 (a table cell faster than the model's fixed cost).
    double mha_var_ms = 0;
    double mqa_var_ms = 0;
    bool from_table = false;
    double chosen_ms() const { return path == Path::sparse_mqa ? mqa_ms : mha_ms; }
    double chosen_var_ms() const { return path == Path::sparse_mqa ? mqa_var_ms : mha_var_ms; }
};

struct Plan {
    std::vector<RequestPlan> requests;          // one per request, in batch order
    std::array<std::vector<size_t>, 3> groups;  // request indices per Path (index = int(Path)), in batch order
    std::array<double, 3> step_fixed_ms{};      // per Path: what one step of it pays once
    const std::vector<size_t>& group(Path p) const { return groups[size_t(p)]; }
    // The steps the one call runs: maximal runs of consecutive requests of one path.
    size_t steps() const;
    // The call as the one call runs it: each step's fixed cost once + every request's variable cost.
    double predicted_ms() const;
    // Sum of the requests' times alone (what the per-request rule minimised; counts a fixed cost per request).
    double standalone_ms() const;
};

struct PlannerOptions {
    int heads = 0;  // local query heads (128 / TP degree)
    int topk = 0;
    PathChoice force = PathChoice::auto_;      // MLAJIT_PATH
    std::optional<long> masked_mha_max_seq;    // MLAJIT_MASKED_MHA_MAX_SEQ
    KernelRates rates = h200_mlajit_rates();   // mlajit's kernels on the H200; a calibration table beats it
    std::optional<CalibrationTable> table;     // measured on this GPU
    // The latent cache's format: sparse MQA on the FP8 cache (fp8_ds_mla) reads 656 instead of 1152 bytes
    // per gathered key, so its time falls where the gather bounds it (few heads); see kv_format_mqa_factor.
    KvFormat kv_format = KvFormat::bf16;
};

// Options from the configuration; the table is find_calibration(c.plan_table, cache_root, gpu_name).
PlannerOptions planner_options(const Config& c, int heads, int topk, const std::filesystem::path& cache_root,
                               std::string_view gpu_name);

class Planner {
public:
    explicit Planner(PlannerOptions o);

    // Routes the batch: the plan of least predicted_ms() (see the top of this file). Throws
    // Error(INVALID_ARGUMENT) naming a malformed request, and Error(CONFIG) for MLAJIT_PATH=dense_mha on a
    // request with s_k > topk.
    Plan plan(std::span<const Request> batch) const;

    // The rule before batch-level routing: each request on its own time alone (masked MHA iff predicted
    // faster than sparse MQA alone). Kept to compare plans and for tools.
    Plan plan_per_request(std::span<const Request> batch) const;

    // What vLLM does: one path for the whole batch, chosen as if it were one request of the batch's
    // largest s_q and largest s_k. Each request's times are still its own, so the predicted total can be
    // compared with plan()'s.
    Plan plan_by_maxima(std::span<const Request> batch) const;

    // Predicted times of both paths for one request (mha_ms masked when `masked`), alone and as its
    // share of a batched step.
    RequestPlan predict(const Request& r, bool masked) const;
    // The step fixed costs plan() uses, per Path (index int(Path)).
    const std::array<double, 3>& step_fixed_ms() const { return step_fixed_ms_; }

    const PlannerOptions& options() const { return o_; }

private:
    // The path the overrides and the exact-first rule fix for a request; nullopt when the choice between
    // masked MHA and sparse MQA is the planner's.
    std::optional<Path> fixed_route(const Request& r, size_t index) const;
    // Both paths' times of a checked request; the MHA times are those of the MHA kernel `path` would run
    // or would have run (masked for a free choice).
    RequestPlan times(const Request& r, std::optional<Path> path) const;
    RequestPlan predict_alone(const Request& r, bool masked) const;  // predict without the variable parts
    Plan empty_plan(size_t n) const;
    static void group_by_path(Plan& p);

    PlannerOptions o_;
    CostModel model_;
    std::optional<TablePredictor> table_;
    std::array<double, 3> step_fixed_ms_{};  // per Path, from the model
};

}  // namespace mlajit
