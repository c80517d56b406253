// The tile configurations each kernel template supports (mirroring the comment block at the top of
// each template), the default per arch and head count, and the validation of MLAJIT_*_TILE overrides.
// Specs built here are what the ops launch and what warmup precompiles: one source of truth.
#pragma once
#include <cstdint>
#include <optional>
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

// The Hopper tier's sparse MQA kernels (3 warpgroups, 64-key tiles, 2 stages), marked by this warp count in an
// MqaTile: 64 heads selects family sparse_mqa_fwd_sm90 (heads as wgmma's M), 16 (and 32) heads family
// sparse_mqa_fwd_sm90t (keys as wgmma's M: the heads are not padded to 64; on the FP8 cache its producer dequantizes
// each tile, sparse_mqa/sm90_f8_producer.cuh).
inline constexpr int kMqaHopperWarps = 12;
inline constexpr MqaTile kMqaHopperTile{64, 64, kMqaHopperWarps, 2};
inline constexpr MqaTile kMqaHopperTile16{16, 64, kMqaHopperWarps, 2};

const std::vector<MhaTile>& supported_mha_tiles();
const std::vector<MqaTile>& supported_mqa_tiles();
// The portable tier's tiles for the FP8 latent cache (their shared memory, mj_mqa_smem_bytes_fp8, fits
// the arch: on sm_80-class parts the 16- and 32-key tiles only).
std::vector<MqaTile> supported_mqa_fp8_tiles(const Arch& arch);

// The tile ops use: MLAJIT_MHA_TILE / MLAJIT_MQA_TILE if set (validated; Error(CONFIG) lists the supported
// ones), else the default for the arch (and, for MQA, the head count).
MhaTile mha_tile_for(const Arch& arch);
// kv_fp8: the FP8 latent cache (fp8_ds_mla rows): the same Hopper-tier kernel, but portable tiles from
// supported_mqa_fp8_tiles.
MqaTile mqa_tile_for(const Arch& arch, int num_heads, bool kv_fp8 = false);

KernelSpec mha_spec(const Arch& arch, const MhaTile& t, bool masked);  // portable tier (mha_fwd)
// The portable MHA kernel with the fused K/V up-projection (UP_PROJ = 1, dense): the one-call prefill's small
// dense steps, on every arch (one launch instead of the up-projection GEMM + MHA). Requests of such a step
// need s_q <= its BLOCK_M (p[0]). kv_fp8: the latent rows come from the FP8 cache (dequantized in the kernel).
KernelSpec mha_up_spec(const Arch& arch, bool kv_fp8 = false);
// Hopper tier (mha_fwd_sm90): 128x128 tiles, 2 consumer warpgroups; ping-pong of their GEMM issue on/off.
KernelSpec mha_sm90_spec(const Arch& arch, bool masked, bool pingpong);
// The MHA kernel the ops launch on arch: the Hopper tier where use_hopper_tier(arch) (MLAJIT_MHA_TILE may
// only name its 128x128 tile there), else the portable tier with mha_tile_for(arch).
KernelSpec mha_spec_for(const Arch& arch, bool masked);
// kv_fp8 selects the kernels that read the FP8 latent cache (spec parameter KV_FP8: its own cache keys).
KernelSpec sparse_mqa_spec(const Arch& arch, const MqaTile& t, bool kv_fp8 = false);
// The persistent-grid form of a sparse MQA kernel where one exists (sm90_t.cuh at 16 heads, bf16 cache) unless
// MLAJIT_MQA_PERSIST=0: launched with min(tokens, SMs) blocks, only with the key-set pre-pass's list.
std::optional<KernelSpec> sparse_mqa_persistent_spec(const KernelSpec& s);
// The sparse MQA key-set pre-pass (sparse_mqa/compact.cuh) for index rows `width` wide (mj_mqa_compact_maxw /
// mj_mqa_compact_threads pick the specialization).
KernelSpec sparse_mqa_compact_spec(const Arch& arch, int width, bool kv_fp8);
KernelSpec topk_mask_spec(const Arch& arch);
// The paged gather for a cache format: bf16 pages (576 wide) or the FP8 cache (fp8_ds_mla, 656 bytes a row,
// dequantized to bf16 on the way).
KernelSpec paged_gather_spec(const Arch& arch, bool kv_fp8 = false);
KernelSpec quantize_cache_spec(const Arch& arch);
// The Hopper-tier GEMM (kernels_src/gemm/sm90.cuh) for a tile (block_m x block_n; the stages follow from it),
// B N-major or K-major, K in k_tiles 64-wide steps.
// a_paged: A's rows gathered out of the paged latent cache inside the kernel (the up-projection on a paged
// bf16 cache; K = 512, B K-major).
KernelSpec gemm_sm90_spec(const Arch& arch, int block_m, int block_n, bool b_nmajor, int k_tiles, bool a_paged = false);
// Whether the one-call prefill's projections run that kernel on arch: the Hopper tier, unless MLAJIT_GEMM=cublaslt.
bool use_jit_gemm(const Arch& arch);
// Up to how many heads the paged bf16 cache's up-projection gathers its rows inside that kernel (the paged-A
// variant) rather than after the separate paged_gather kernel, by default. The paged-A GEMM costs ~1.09x the
// dense one (H200, 8192 keys; docs/PERF.md, "The paged bf16 cache's up-projection reads the pages itself"),
// a cost that grows with N = heads x 256, while the gather's ~11 us does not: at 16 heads it won by 4-5 us
// (67 against 72), at 32 it tied (122-128 against 124-125), at 128 it lost by 25-30 us (443 against 418).
inline constexpr int64_t kFusedPagedAutoMaxHeads = 16;
// The most heads for which a paged bf16 cache's up-projection reads the pages itself on arch: 0 when never
// (not the Hopper tier, MLAJIT_GEMM=cublaslt or unfused), kFusedPagedAutoMaxHeads by default, any count with
// MLAJIT_GEMM=fused.
int64_t fused_paged_max_heads(const Arch& arch);
// Every GEMM kernel the one-call prefill's projections can launch (what warmup precompiles): the up-projection
// and output projection (K = 512, B K-major), the query absorption (K = 128, B N-major), each tile, and where
// fused_paged_max_heads > 0 the up-projection's paged-A variant, each tile.
std::vector<KernelSpec> prefill_gemm_specs(const Arch& arch);
int gemm_smem_bytes(const KernelSpec& s);
int gemm_threads(const KernelSpec& s);

int mha_smem_bytes(const KernelSpec& s);
int mha_threads(const KernelSpec& s);
int mqa_smem_bytes(const KernelSpec& s);
int mqa_threads(const KernelSpec& s);
int mask_rows_per_block(const KernelSpec& s);
int gather_rows_per_block(const KernelSpec& s);
int quantize_tokens_per_block(const KernelSpec& s);

}  // namespace mlajit
