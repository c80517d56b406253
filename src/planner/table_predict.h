// Path times read off a calibration table. Times follow power laws in the sequence lengths (quadratic
// attention, linear projections), so they are interpolated as log(ms), bilinear in (log s_q, log s_k):
// exact for a power law. Grids have no cells below the diagonal (s_k < s_q), so a grid square cut by the
// diagonal has one corner missing; there the three remaining corners are interpolated linearly (the
// triangle holds every valid point of that square when the axes share their values).
// With a guide (the planner's cost model), what is interpolated is each cell's measured / modelled time, and
// the answer is the model's time at the point times that factor. The paths are not power laws: masked MHA
// counts causal pairs (s_q (s_k - s_q/2)) plus a projection linear in s_k, sparse MQA counts the valid
// indices, which saturate at topk; the model carries that shape between the cells, the table the GPU's level.
// Scored on the off-grid shapes of `mlajit-warmup calibrate --evaluate` (docs/PERF.md, session 36): time error
// rms 5.2-5.5 % against 6.8-7.4 % on four calibrations, and on the H100's the faster path on 44 / 44 shapes
// against 43 (2.5 ms lost of 133).
#pragma once
#include <map>
#include <optional>
#include <vector>

#include "planner/calibration.h"
#include "planner/cost_model.h"

namespace mlajit {

class TablePredictor {
public:
    // Without a guide: log(ms) interpolated as it is (the table alone; tests and offline scoring compare the two).
    explicit TablePredictor(const CalibrationTable& t, std::optional<CostModel> guide = std::nullopt);

    // nullopt when the table cannot answer: another topk, or the point lies outside the measured grid of
    // the head count used; the caller then uses the cost model for both paths (never one path from each).
    // With a guide, another head count's cells give their factors to the model at the asked head count.
    std::optional<PathTimes> predict(const AttnShape& s) const;

    // The head count whose cells answer for `heads`: itself if measured, else the nearest in log scale
    // (ties to the larger count).
    int heads_used(int heads) const;
    int topk() const { return topk_; }

private:
    struct Grid {
        std::vector<double> xs, ys;  // log s_q, log s_k values measured (sorted)
        // log(ms) of both paths at (x index i, y index j), or with a guide log(measured / modelled ms),
        // row-major [i * ys.size() + j]; NaN where not measured. Dense: the planner reads four cells per
        // request on every call's host path.
        std::vector<PathTimes> at;
        const PathTimes* cell(size_t i, size_t j) const {
            const PathTimes& c = at[i * ys.size() + j];
            return c.mha_ms == c.mha_ms ? &c : nullptr;
        }
    };
    int topk_ = 0;
    std::optional<CostModel> guide_;
    std::map<int, Grid> grids_;  // by heads
};

}  // namespace mlajit
