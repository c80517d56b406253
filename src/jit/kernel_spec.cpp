#include "jit/kernel_spec.h"

#include <cctype>

#include "common/error.h"

namespace mlajit {

std::string Arch::name() const { return suffix ? fmt::format("sm_{}{}", sm, suffix) : fmt::format("sm_{}", sm); }

Arch Arch::parse(const std::string& s) {
    Arch a;
    size_t i = 3;
    bool ok = s.rfind("sm_", 0) == 0 && s.size() >= 5;
    // At most 5 digits: a longer number (the validation fuzz sends up to 30) would overflow int.
    while (ok && i < s.size() && std::isdigit((unsigned char)s[i])) {
        ok = i < 8;
        if (ok) a.sm = a.sm * 10 + (s[i++] - '0');
    }
    if (ok && i + 1 == s.size() && (s[i] == 'a' || s[i] == 'f')) a.suffix = s[i++];
    if (!ok || i != s.size() || a.sm < 10)
        fail_arg("'{}' is not a GPU arch: expected sm_<major><minor>[a|f], e.g. sm_90a or sm_80", s);
    if (a.sm < 80) fail(MLAJIT_ERROR_UNSUPPORTED, "arch {} is not supported: mlajit's kernels need sm_80 or newer (bf16 tensor cores)", s);
    return a;
}

Arch Arch::for_compute_capability(int major, int minor) {
    Arch a{major * 10 + minor, 0};
    if (major == 9 && minor == 0) a.suffix = 'a';  // wgmma/setmaxnreg exist only in the sm_90a target
    return a;
}

const FamilyInfo& family_info(Family f) {
    static const FamilyInfo infos[kNumFamilies] = {
        {Family::mha_fwd, "mha_fwd", "mha/sm80.cuh", "mlajit_mha_fwd",
         {"BLOCK_M", "BLOCK_N", "WARPS", "STAGES", "MASKED", "D_NOPE", "D_ROPE", "D_V", "UP_PROJ"}},
        {Family::sparse_mqa_fwd, "sparse_mqa_fwd", "sparse_mqa/sm80.cuh", "mlajit_sparse_mqa_fwd",
         {"BLOCK_H", "BLOCK_N", "WARPS", "STAGES", "D_LATENT", "D_ROPE", "KV_FP8"}},
        {Family::topk_mask, "topk_mask", "topk_mask/sm80.cuh", "mlajit_topk_mask", {"ROWS_PER_BLOCK"}},
        {Family::mha_fwd_sm90, "mha_fwd_sm90", "mha/sm90.cuh", "mlajit_mha_fwd_sm90",
         {"BLOCK_M", "BLOCK_N", "STAGES", "MASKED", "PINGPONG", "D_NOPE", "D_ROPE", "D_V"}},
        {Family::paged_gather, "paged_gather", "paged_gather/sm80.cuh", "mlajit_paged_gather", {"ROWS_PER_BLOCK", "KV_FP8"}},
        {Family::sparse_mqa_fwd_sm90, "sparse_mqa_fwd_sm90", "sparse_mqa/sm90.cuh", "mlajit_sparse_mqa_fwd_sm90",
         {"BLOCK_H", "BLOCK_N", "STAGES", "D_LATENT", "D_ROPE", "KV_FP8", "PERSIST"}},
        {Family::quantize_cache, "quantize_cache", "quantize_cache/sm80.cuh", "mlajit_quantize_cache", {"TOKENS_PER_BLOCK"}},
        {Family::gemm_sm90, "gemm_sm90", "gemm/sm90.cuh", "mlajit_gemm_sm90", {"BLOCK_M", "BLOCK_N", "STAGES", "B_NMAJOR", "K_TILES", "A_PAGED"}},
        {Family::sparse_mqa_fwd_sm90t, "sparse_mqa_fwd_sm90t", "sparse_mqa/sm90_t.cuh", "mlajit_sparse_mqa_fwd_sm90t",
         {"BLOCK_H", "BLOCK_N", "STAGES", "D_LATENT", "D_ROPE", "KV_FP8", "PERSIST"}},
        {Family::sparse_mqa_compact, "sparse_mqa_compact", "sparse_mqa/compact.cuh", "mlajit_sparse_mqa_compact",
         {"COMPACT_THREADS", "COMPACT_MAXW", "KV_FP8"}},
    };
    return infos[(int)f];
}

Family family_from_name(const std::string& name) {
    for (int i = 0; i < kNumFamilies; ++i)
        if (name == family_info((Family)i).name) return (Family)i;
    std::string known;
    for (int i = 0; i < kNumFamilies; ++i) known += fmt::format("{}{}", i ? ", " : "", family_info((Family)i).name);
    fail_arg("unknown kernel family '{}': expected one of {}", name, known);
}

std::string render_source(const KernelSpec& spec) {
    const auto& info = family_info(spec.family);
    std::string s = fmt::format("// mlajit specialization: {}\n", spec_name(spec));
    for (size_t i = 0; i < info.params.size(); ++i) s += fmt::format("constexpr int MJ_{} = {};\n", info.params[i], spec.p[i]);
    s += fmt::format("constexpr int MJ_ARCH = {};\n#include \"{}\"\n", spec.arch.sm, info.template_file);
    return s;
}

std::string spec_name(const KernelSpec& spec) {
    const auto& info = family_info(spec.family);
    std::string s = std::string(info.name) + "[";
    for (size_t i = 0; i < info.params.size(); ++i) s += fmt::format("{}{}={}", i ? "," : "", info.params[i], spec.p[i]);
    return s + "]@" + spec.arch.name();
}

}  // namespace mlajit
