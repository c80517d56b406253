#include "ops/kernel_configs.h"

#include "common/error.h"
#include "config/env.h"
#include "mlajit_abi.h"

namespace mlajit {

const std::vector<MhaTile>& supported_mha_tiles() {
    static const std::vector<MhaTile> t = {{128, 64, 8, 2}, {64, 64, 4, 2}};
    return t;
}

const std::vector<MqaTile>& supported_mqa_tiles() {
    static const std::vector<MqaTile> t = {{64, 64, 8, 2}, {32, 64, 4, 2}, {16, 64, 2, 2}, {64, 32, 8, 2}};
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
    const int want_h = num_heads <= 16 ? 16 : num_heads <= 32 ? 32 : 64;
    // sm_80-class parts have 163 KB of shared memory per block: the 64-key tile at 64 heads needs more.
    const int want_n = (arch.sm < 90 && want_h == 64) ? 32 : 64;
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

int mha_smem_bytes(const KernelSpec& s) { return mj_mha_smem_bytes(s.p[0], s.p[1], s.p[3], kDimQkMha, kDimV); }
int mha_threads(const KernelSpec& s) { return mj_mha_threads(s.p[2]); }
int mqa_smem_bytes(const KernelSpec& s) { return mj_mqa_smem_bytes(s.p[0], s.p[1], s.p[3], kDimQkMqa, kDimLatent); }
int mqa_threads(const KernelSpec& s) { return mj_mqa_threads(s.p[2]); }
int mask_rows_per_block(const KernelSpec& s) { return s.p[0]; }

}  // namespace mlajit
