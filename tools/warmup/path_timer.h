// Times the two prefill paths of mlajit_mla_prefill on this GPU for one request shape, as the planner
// sees them: the MHA path (up-projection + mask + masked attention; dense when s_k <= topk) and the sparse
// MQA path (absorption + sparse attention + output projection), each forced, on random inputs in the
// packed layouts engines use (q [T, h, 192], latent cache [T_k, 576]). Used by `calibrate`.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mlajit/mlajit.h"
#include "planner/cost_model.h"

namespace mlajit::cli {

class PathTimer {
public:
    // Buffers for the largest shape to be timed; inputs drawn once from `seed`.
    PathTimer(int max_heads, long max_s_q, long max_s_k, int topk, uint64_t seed);
    ~PathTimer();
    PathTimer(const PathTimer&) = delete;
    PathTimer& operator=(const PathTimer&) = delete;

    // Median over `reps` timed calls (after one untimed call that also loads or compiles the kernels).
    double time_path(int heads, long s_q, long s_k, mlajit_path path, int reps);
    PathTimes measure(const AttnShape& s, int reps);

    const std::string& gpu_name() const { return gpu_name_; }
    std::string driver_version() const;

private:
    struct Buffers;
    void prepare_indices(long s_q, long s_k);
    std::unique_ptr<Buffers> b_;
    int max_heads_, topk_;
    long max_s_q_, max_s_k_;
    long idx_s_q_ = -1, idx_s_k_ = -1;  // the shape the uploaded indices are for
    uint64_t seed_;
    std::string gpu_name_;
};

// Top-k rows an indexer could return for one request: query i (bottom-right aligned) gets min(topk,
// prefix) distinct keys spread over its whole causal prefix (one random key per equal slice), the rest -1.
std::vector<int32_t> spread_topk_indices(long s_q, long s_k, int topk, uint64_t seed);

}  // namespace mlajit::cli
