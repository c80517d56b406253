// Every kernel variant a model configuration can launch: what warmup precompiles, computed by the same
// functions the ops use to pick their specs (so warmup and serving agree on keys).
#pragma once
#include <string>
#include <vector>

#include "jit/kernel_spec.h"

namespace mlajit {

struct ModelConfig {
    std::string name = "deepseek-v3.2";
    int heads = 128;     // attention heads before tensor parallelism
    int kv_lora = 512;   // latent (compressed KV) width
    int d_nope = 128;
    int d_rope = 64;
    int d_v = 128;
    int topk = 2048;
};

// Presets by name ("deepseek-v3.2"); throws Error(INVALID_ARGUMENT) listing the known names.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();
// Throws Error(UNSUPPORTED) if the kernels are not written for these dims.
void check_model_supported(const ModelConfig& m);

// Unique specs for the model at each TP degree (local heads = heads / tp) and arch.
std::vector<KernelSpec> model_variants(const ModelConfig& m, const std::vector<int>& tp_degrees, const std::vector<Arch>& archs);

// A cold NVRTC compile's rough CPU seconds for `s` (NVRTC 13.0, sm_90a, the 2-core dev machine; docs/PERF.md,
// "Cold NVRTC compile"), only for ordering: warmup starts the longest compiles first, so that its jobs do
// not end on one long kernel while the others wait.
double compile_cost_hint(const KernelSpec& s);

}  // namespace mlajit
