// The tile configurations each kernel template supports (mirroring the comment block at the top of
// each template), the default per arch and head count, and the validation of MLAJIT_*_TILE overrides.
// Specs built here are what the ops launch and what warmup precompiles: one source of truth.
#pragma once
#include <vector>

#include "jit/kernel_spec.h"

namespace mlajit {

// DeepSeek-V3.2's MLA dimensions (the only ones the kernels are written for today).
inline constexpr int kDimNope = 128, kDimRope = 64, kDimV = 128, kDimLatent = 512;
inline constexpr int kDimQkMha = kDimNope + kDimRope;   // 192
inline constexpr int kDimQkMqa = kDimLatent + kDimRope; // 576

// The Hopper tier (wgmma, TMA, warp specialization) runs on sm_90a unless MLAJIT_TIER=portable; every
// other arch runs the portable tier (mma.sync, sm_80 and newer). Each tier has its own kernel families,
// so its own cache keys.
bool use_hopper_tier(const Arch& arch);

struct MhaTile {
    int block_m, block_n, warps, stages;
};
struct MqaTile {
    int block_h, block_n, warps, stages;
};

const std::vector<MhaTile>& supported_mha_tiles();
const std::vector<MqaTile>& supported_mqa_tiles();

// The tile ops use: MLAJIT_MHA_TILE / MLAJIT_MQA_TILE if set (validated; Error(CONFIG) lists the supported
// ones), else the default for the arch (and, for MQA, the head count).
MhaTile mha_tile_for(const Arch& arch);
MqaTile mqa_tile_for(const Arch& arch, int num_heads);

KernelSpec mha_spec(const Arch& arch, const MhaTile& t, bool masked);
KernelSpec sparse_mqa_spec(const Arch& arch, const MqaTile& t);
KernelSpec topk_mask_spec(const Arch& arch);
KernelSpec paged_gather_spec(const Arch& arch);

int mha_smem_bytes(const KernelSpec& s);
int mha_threads(const KernelSpec& s);
int mqa_smem_bytes(const KernelSpec& s);
int mqa_threads(const KernelSpec& s);
int mask_rows_per_block(const KernelSpec& s);
int gather_rows_per_block(const KernelSpec& s);

}  // namespace mlajit
