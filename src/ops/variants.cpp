#include "ops/variants.h"

#include <algorithm>

#include "common/error.h"
#include "ops/kernel_configs.h"

namespace mlajit {

std::vector<std::string> model_preset_names() { return {"deepseek-v3.2", "deepseek-v3.2-tiny"}; }

ModelConfig model_preset(const std::string& name) {
    ModelConfig m;
    if (name == "deepseek-v3.2") return m;
    if (name == "deepseek-v3.2-tiny") {  // same dims, 16 heads: a quick preset for tests and CI
        m.name = name;
        m.heads = 16;
        return m;
    }
    std::string known;
    for (auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail_arg("unknown model preset '{}': known presets are {} (or give the dims explicitly)", name, known);
}

void check_model_supported(const ModelConfig& m) {
    if (m.kv_lora != kDimLatent || m.d_nope != kDimNope || m.d_rope != kDimRope || m.d_v != kDimV)
        fail(MLAJIT_ERROR_UNSUPPORTED,
             "model dims kv_lora={} nope={} rope={} v={} are not supported: the kernels are written for DeepSeek-V3.2's "
             "kv_lora=512 nope=128 rope=64 v=128", m.kv_lora, m.d_nope, m.d_rope, m.d_v);
    if (m.heads < 1 || m.heads > 128) fail_arg("heads must be in 1..128, got {}", m.heads);
    if (m.topk < 64 || m.topk > 4096 || m.topk % 64) fail_arg("topk must be a multiple of 64 in 64..4096, got {}", m.topk);
}

std::vector<KernelSpec> model_variants(const ModelConfig& m, const std::vector<int>& tp_degrees, const std::vector<Arch>& archs) {
    check_model_supported(m);
    std::vector<KernelSpec> out;
    auto add = [&](const KernelSpec& s) {
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    };
    for (const Arch& arch : archs) {
        add(topk_mask_spec(arch));
        add(paged_gather_spec(arch));
        add(paged_gather_spec(arch, true));  // the FP8 latent cache (fp8_ds_mla)
        add(quantize_cache_spec(arch));
        add(mha_spec_for(arch, false));  // the Hopper tier's kernels on sm_90a, the portable tier's elsewhere
        add(mha_spec_for(arch, true));
        add(mha_up_spec(arch));  // the one-call prefill's small dense steps (MLAJIT_SMALL_STEP_KEYS)
        add(mha_up_spec(arch, true));  // ... on the FP8 latent cache
        if (use_jit_gemm(arch))  // the projections' own GEMM (the Hopper tier; cuBLASLt elsewhere)
            for (const KernelSpec& g : prefill_gemm_specs(arch)) add(g);
        for (int tp : tp_degrees) {
            if (tp < 1 || m.heads % tp != 0) fail_arg("TP degree {} does not divide the model's {} heads", tp, m.heads);
            const KernelSpec mqa = sparse_mqa_spec(arch, mqa_tile_for(arch, m.heads / tp));
            add(mqa);
            if (auto ps = sparse_mqa_persistent_spec(mqa)) add(*ps);  // with the key-set pre-pass
            add(sparse_mqa_spec(arch, mqa_tile_for(arch, m.heads / tp, true), true));  // the FP8 latent cache
        }
        add(sparse_mqa_compact_spec(arch, m.topk, false));  // the key-set pre-pass (an op given a workspace, the one call)
        add(sparse_mqa_compact_spec(arch, m.topk, true));
    }
    return out;
}

double compile_cost_hint(const KernelSpec& s) {
    // Medians of mlajit-nvrtc-time on a quiet machine (seconds, 2026-12-04, docs/PERF.md); the portable
    // families on other archs are assumed to cost what they cost on sm_90a (mha_fwd: not measured).
    switch (s.family) {
        case Family::sparse_mqa_fwd_sm90: return s.p[5] ? 1.20 : 1.19;  // KV_FP8
        case Family::sparse_mqa_fwd_sm90t: return 0.74;                 // mlajit-warmup's own figure, 2026-12-05
        case Family::mha_fwd_sm90: return s.p[3] ? 0.75 : 0.61;         // MASKED
        case Family::sparse_mqa_fwd: return s.p[6] ? 0.72 : 0.62;       // KV_FP8
        case Family::mha_fwd: return 0.6;
        case Family::gemm_sm90: return s.p[0] == 128 && s.p[1] == 256 ? 0.3 : 0.15;
        case Family::topk_mask: return 0.2;
        case Family::quantize_cache: return 0.1;
        case Family::paged_gather: return 0.06;
        case Family::sparse_mqa_compact: return 0.2;  // not measured: a small kernel, as topk_mask
    }
    return 0.5;
}

}  // namespace mlajit
