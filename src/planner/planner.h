// Per-request choice of prefill path (DESIGN.md section 5): dense MHA when exact (s_k <= topk), else
// masked MHA iff its predicted time beats sparse MQA's. Predictions come from a calibration table measured
// on this GPU where it covers the request, else from the cost model.
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
    double mha_ms = 0;  // predicted MHA path: masked when s_k > topk or when masked MHA was forced, else dense
    double mqa_ms = 0;  // predicted sparse MQA path
    bool from_table = false;
    double chosen_ms() const { return path == Path::sparse_mqa ? mqa_ms : mha_ms; }
};

struct Plan {
    std::vector<RequestPlan> requests;          // one per request, in batch order
    std::array<std::vector<size_t>, 3> groups;  // request indices per Path (index = int(Path)), in batch order
    const std::vector<size_t>& group(Path p) const { return groups[size_t(p)]; }
    double predicted_ms() const;                // sum of the chosen paths' predictions
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

    // Routes each request on its own. Throws Error(INVALID_ARGUMENT) naming a malformed request, and
    // Error(CONFIG) for MLAJIT_PATH=dense_mha on a request with s_k > topk.
    Plan plan(std::span<const Request> batch) const;

    // What vLLM does: one path for the whole batch, chosen as if it were one request of the batch's
    // largest s_q and largest s_k. Each request's times are still its own, so the predicted total can be
    // compared with plan()'s.
    Plan plan_by_maxima(std::span<const Request> batch) const;

    // Predicted times of both paths for one request (mha_ms masked when `masked`).
    RequestPlan predict(const Request& r, bool masked) const;

    const PlannerOptions& options() const { return o_; }

private:
    // The path for a request the overrides and the rule would give, before times are attached.
    Path route(const Request& r, size_t index) const;
    void add(Plan& p, const Request& r, Path path) const;

    PlannerOptions o_;
    CostModel model_;
    std::optional<TablePredictor> table_;
};

}  // namespace mlajit
