#include "ops/kernel_configs.h"

#include "common/error.h"
#include "config/env.h"
#include "mlajit_abi.h"

namespace mlajit {

bool use_hopper_tier(const Arch& arch) {
    return arch.sm == 90 && arch.suffix == 'a' && config().tier != TierChoice::portable;
}

const std::vector<MhaTile>& supported_mha_tiles() {
    // Mirrors the table at the top of kernels_src/mha/sm80.cuh. The first is the default: on the H200 it
    // was fastest or within 3% at dense 4k/8k and masked 8k (docs/perf_mha_notes.md), and its 64-row
    // blocks give short sequences and few heads more blocks. 128x128 needs 212 KiB of shared memory
    // (sm_90-class parts only).
    static const std::vector<MhaTile> t = {{64, 64, 4, 2}, {128, 64, 8, 2}, {64, 32, 4, 2}, {128, 128, 8, 2}};
    return t;
}

const std::vector<MqaTile>& supported_mqa_tiles() {
    // Mirrors the table at the top of kernels_src/sparse_mqa/sm80.cuh (an override BLOCK_HxBLOCK_N takes
    // the first row that matches). Shared memory decides which fit sm_80 (163 KiB per block).
    static const std::vector<MqaTile> t = {{64, 64, 8, 2}, {64, 32, 8, 2}, {64, 32, 8, 3}, {32, 64, 8, 2}, {32, 32, 8, 2},
                                           {16, 32, 8, 2}, {16, 64, 8, 2}, {16, 32, 8, 3}, {16, 32, 8, 4}};
    return t;
}

namespace {
std::string list_mha() {
    std::string s;
    for (auto& t : supported_mha_tiles()) s += fmt::format("{}{}x{}", s.empty() ? "" : ", ", t.block_m, t.block_n);
    return s;
}
std::string list_mqa() {
    std::string s;
    for (auto& t : supported_mqa_tiles()) s += fmt::format("{}{}x{}", s.empty() ? "" : ", ", t.block_h, t.block_n);
    return s;
}
}  // namespace

MhaTile mha_tile_for(const Arch& arch) {
    const auto& o = config().mha_tile;
    if (o.set()) {
        for (auto& t : supported_mha_tiles())
            if (t.block_m == o.a && t.block_n == o.b) return t;
        fail(MLAJIT_ERROR_CONFIG, "MLAJIT_MHA_TILE={}x{} is not a tile the MHA kernel supports: use one of {}", o.a, o.b, list_mha());
    }
    (void)arch;
    return supported_mha_tiles()[0];
}

MqaTile mqa_tile_for(const Arch& arch, int num_heads) {
    const auto& o = config().mqa_tile;
    if (o.set()) {
        for (auto& t : supported_mqa_tiles())
            if (t.block_h == o.a && t.block_n == o.b) return t;
        fail(MLAJIT_ERROR_CONFIG, "MLAJIT_MQA_TILE={}x{} is not a tile the sparse MQA kernel supports: use one of {}", o.a, o.b,
             list_mqa());
    }
    // Pad heads only up to the next tile of 16/32/64: at TP8 (16 local heads) a 64-head tile would do 4x
    // the work. Measured on the H200 (docs/perf_mqa_notes.md): 64x64 at h > 32, 32x64 at 16 < h <= 32,
    // 16x32 at h <= 16 (two blocks per SM). sm_80-class parts (163 KiB per block) take 32-key tiles.
    const int want_h = num_heads <= 16 ? 16 : num_heads <= 32 ? 32 : 64;
    const int want_n = want_h == 16 || arch.sm < 90 ? 32 : 64;
    for (auto& t : supported_mqa_tiles())
        if (t.block_h == want_h && t.block_n == want_n) return t;
    return supported_mqa_tiles()[0];
}

KernelSpec mha_spec(const Arch& arch, const MhaTile& t, bool masked) {
    KernelSpec s;
    s.family = Family::mha_fwd;
    s.arch = arch;
    s.p = {t.block_m, t.block_n, t.warps, t.stages, masked ? 1 : 0, kDimNope, kDimRope, kDimV};
    return s;
}

KernelSpec sparse_mqa_spec(const Arch& arch, const MqaTile& t) {
    KernelSpec s;
    s.family = Family::sparse_mqa_fwd;
    s.arch = arch;
    s.p = {t.block_h, t.block_n, t.warps, t.stages, kDimLatent, kDimRope};
    return s;
}

KernelSpec topk_mask_spec(const Arch& arch) {
    KernelSpec s;
    s.family = Family::topk_mask;
    s.arch = arch;
    s.p = {4};
    return s;
}

KernelSpec paged_gather_spec(const Arch& arch) {
    KernelSpec s;
    s.family = Family::paged_gather;
    s.arch = arch;
    s.p = {16};
    return s;
}

int mha_smem_bytes(const KernelSpec& s) { return mj_mha_smem_bytes(s.p[0], s.p[1], s.p[3], kDimQkMha, kDimV); }
int mha_threads(const KernelSpec& s) { return mj_mha_threads(s.p[2]); }
int mqa_smem_bytes(const KernelSpec& s) { return mj_mqa_smem_bytes(s.p[0], s.p[1], s.p[3], kDimQkMqa, kDimLatent); }
int mqa_threads(const KernelSpec& s) { return mj_mqa_threads(s.p[2]); }
int mask_rows_per_block(const KernelSpec& s) { return s.p[0]; }
int gather_rows_per_block(const KernelSpec& s) { return s.p[0]; }

}  // namespace mlajit
