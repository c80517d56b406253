#include "ops/kernel_configs.h"

#include <algorithm>
#include <limits>

#include "common/error.h"
#include "config/env.h"
#include "mlajit_abi.h"
#include "ops/gemm_sm90_maps.h"

namespace mlajit {

namespace {
constexpr bool kMhaSm90PingPong = true;
}  // namespace

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

std::vector<MqaTile> supported_mqa_fp8_tiles(const Arch& arch) {
    // The portable kernel's FP8 form keeps one bf16 K tile and a ring of raw 656-byte rows (sm80.cuh):
    // 64 x 64 does not fit any arch; the rest where mj_mqa_smem_bytes_fp8 fits the arch's per-block limit
    // (the same limits the kernel static_asserts). The first row that matches an override wins.
    static const MqaTile all[] = {{64, 32, 8, 2}, {64, 32, 8, 3}, {32, 64, 8, 2}, {32, 32, 8, 2},
                                  {16, 32, 8, 2}, {16, 64, 8, 2}, {16, 32, 8, 3}, {16, 32, 8, 4}};
    const int limit = arch.sm >= 90 ? 232448 : 166912;
    std::vector<MqaTile> t;
    for (const MqaTile& m : all)
        if (mj_mqa_smem_bytes_fp8(m.block_h, m.block_n, m.stages) <= limit) t.push_back(m);
    return t;
}

namespace {
std::string list_mha() {
    std::string s;
    for (auto& t : supported_mha_tiles()) s += fmt::format("{}{}x{}", s.empty() ? "" : ", ", t.block_m, t.block_n);
    return s;
}
std::string list_mqa(const std::vector<MqaTile>& tiles) {
    std::string s;
    for (auto& t : tiles) s += fmt::format("{}{}x{}", s.empty() ? "" : ", ", t.block_h, t.block_n);
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

MqaTile mqa_tile_for(const Arch& arch, int num_heads, bool kv_fp8) {
    // Hopper tier, above 16 heads: the 64-head wgmma kernel (sparse_mqa/sm90.cuh). At 32 heads it pads 2x and still
    // beats the portable 32-head tile (H200, 8k: 5.5 against 7.5 ms) and ties with the keys-as-M kernel's 32-head form
    // (H100: 5.00 against 5.01-5.06 ms).
    // bf16 cache at <= 16 heads: the keys-as-M kernel (sparse_mqa/sm90_t.cuh), which pads nothing: 4.50 ms against
    // 4.96 for the 64-head kernel and 5.33 for the portable 16 x 32 tile (H100, 8k, topk 2048, paged;
    // docs/perf_mqa_notes.md, "Hopper tier for 16 and 32 heads").
    // FP8 cache at <= 16 heads: the same keys-as-M kernel, its 16 producer warps dequantizing each tile to the bf16 values
    // the contract names (sparse_mqa/sm90_f8_staged.cuh): 4.71 ms against 5.55 for session 25's register producer and
    // ~7.0 for the portable FP8 16 x 32 tile (H100, 8k, topk 2048, paged; the bf16 kernel 4.15-4.23). The scale-folding
    // body (sparse_mqa/sm90_t_fp8.cuh, development switch MJ_MQA90T8_FOLD, 5.81 ms) does not round e4m3 * scale to bf16
    // as the contract says (docs/PERF.md).
    if (use_hopper_tier(arch) && !config().mqa_tile.set()) return num_heads <= 16 ? kMqaHopperTile16 : kMqaHopperTile;
    const auto& o = config().mqa_tile;
    const std::vector<MqaTile> tiles = kv_fp8 ? supported_mqa_fp8_tiles(arch) : supported_mqa_tiles();
    if (o.set()) {
        for (auto& t : tiles)
            if (t.block_h == o.a && t.block_n == o.b) return t;
        fail(MLAJIT_ERROR_CONFIG, "MLAJIT_MQA_TILE={}x{} is not a tile the sparse MQA kernel supports{}: use one of {}", o.a, o.b,
             kv_fp8 ? fmt::format(" on the FP8 latent cache on {}", arch.name()) : std::string(), list_mqa(tiles));
    }
    // Pad heads only up to the next tile of 16/32/64: at TP8 (16 local heads) a 64-head tile would do 4x
    // the work. Measured on the H200 (docs/perf_mqa_notes.md): 64x64 at h > 32, 32x64 at 16 < h <= 32,
    // 16x32 at h <= 16 (two blocks per SM). sm_80-class parts (163 KiB per block) take 32-key tiles.
    // FP8: 64 heads take 32-key tiles (64 x 64 does not fit with the raw ring).
    const int want_h = num_heads <= 16 ? 16 : num_heads <= 32 ? 32 : 64;
    const int want_n = want_h == 16 || arch.sm < 90 || (kv_fp8 && want_h == 64) ? 32 : 64;
    for (auto& t : tiles)
        if (t.block_h == want_h && t.block_n == want_n) return t;
    return tiles[0];
}

KernelSpec mha_spec(const Arch& arch, const MhaTile& t, bool masked) {
    KernelSpec s;
    s.family = Family::mha_fwd;
    s.arch = arch;
    s.p = {t.block_m, t.block_n, t.warps, t.stages, masked ? 1 : 0, kDimNope, kDimRope, kDimV};
    return s;
}

KernelSpec mha_up_spec(const Arch& arch, bool kv_fp8) {
    // The arch's portable tile (MLAJIT_MHA_TILE applies where the portable tier is the arch's tier; the Hopper
    // tier's 128x128 is not a tile of this template, so the portable default there).
    KernelSpec s = mha_spec(arch, use_hopper_tier(arch) ? supported_mha_tiles()[0] : mha_tile_for(arch), false);
    s.p[8] = kv_fp8 ? 2 : 1;  // UP_PROJ: latent rows in bf16, or the FP8 cache's rows
    return s;
}

KernelSpec mha_sm90_spec(const Arch& arch, bool masked, bool pingpong) {
    KernelSpec s;
    s.family = Family::mha_fwd_sm90;
    s.arch = arch;
    s.p = {128, 128, 2, masked ? 1 : 0, pingpong ? 1 : 0, kDimNope, kDimRope, kDimV};
    return s;
}

KernelSpec mha_spec_for(const Arch& arch, bool masked) {
    if (!use_hopper_tier(arch)) return mha_spec(arch, mha_tile_for(arch), masked);
    const auto& o = config().mha_tile;
    if (o.set() && !(o.a == 128 && o.b == 128))
        fail(MLAJIT_ERROR_CONFIG, "MLAJIT_MHA_TILE={}x{}: the Hopper tier of MHA on {} has only the 128x128 tile; set "
             "MLAJIT_TIER=portable to use the portable tier's tiles ({})", o.a, o.b, arch.name(), list_mha());
    // Ping-pong of the two consumer warpgroups' GEMM issue: measured on the H200 (docs/perf_mha_notes.md).
    return mha_sm90_spec(arch, masked, kMhaSm90PingPong);
}

KernelSpec sparse_mqa_spec(const Arch& arch, const MqaTile& t, bool kv_fp8) {
    KernelSpec s;
    s.arch = arch;
    if (t.warps == kMqaHopperWarps) {  // the Hopper tier: 64 heads (sm90.cuh), 16 heads (sm90_t.cuh)
        s.family = t.block_h == 64 ? Family::sparse_mqa_fwd_sm90 : Family::sparse_mqa_fwd_sm90t;
        s.p = {t.block_h, t.block_n, t.stages, kDimLatent, kDimRope, kv_fp8 ? 1 : 0};
        return s;
    }
    s.family = Family::sparse_mqa_fwd;
    s.p = {t.block_h, t.block_n, t.warps, t.stages, kDimLatent, kDimRope, kv_fp8 ? 1 : 0};
    return s;
}

std::optional<KernelSpec> sparse_mqa_persistent_spec(const KernelSpec& s) {
    // The keys-as-M kernel's persistent grid: bf16 cache, 16 heads (sparse_mqa/sm90_t_persist.cuh, its ring across tokens with
    // warpgroup 0 merging alone). H100, 8k, 16 heads, the same bits: the kernel in the harness 2.766 against 3.08 ms a block a
    // token; through the library, with the pre-pass, 2.97-3.01 ms since its producer takes 32-bit shared addresses (3.26-3.27
    // before; one block a token 3.44; docs/PERF.md "Session 34").
    // The 64-head kernel's (sparse_mqa/sm90_persist.cuh, items of a token and head block, schedule 1's bits): only with
    // MLAJIT_MQA_PERSIST64=1 until a GPU has measured it.
    const bool keys_as_m = s.family == Family::sparse_mqa_fwd_sm90t && s.p[0] == 16 && config().mqa_persist;
    const bool heads_as_m = s.family == Family::sparse_mqa_fwd_sm90 && config().mqa_persist64;
    if (!(keys_as_m || heads_as_m) || s.p[5] != 0) return std::nullopt;
    KernelSpec p = s;
    p.p[6] = 1;
    return p;
}

KernelSpec sparse_mqa_compact_spec(const Arch& arch, int width, bool kv_fp8) {
    KernelSpec s;
    s.family = Family::sparse_mqa_compact;
    s.arch = arch;
    s.p = {mj_mqa_compact_threads(width), mj_mqa_compact_maxw(width), kv_fp8 ? 1 : 0};
    return s;
}

KernelSpec topk_mask_spec(const Arch& arch) {
    KernelSpec s;
    s.family = Family::topk_mask;
    s.arch = arch;
    s.p = {4};
    return s;
}

KernelSpec paged_gather_spec(const Arch& arch, bool kv_fp8) {
    KernelSpec s;
    s.family = Family::paged_gather;
    s.arch = arch;
    s.p = {16, kv_fp8 ? 1 : 0};
    return s;
}

KernelSpec quantize_cache_spec(const Arch& arch) {
    KernelSpec s;
    s.family = Family::quantize_cache;
    s.arch = arch;
    s.p = {8};  // 8 warps, one token each: a memory-bound writer, any count that fills the SMs will do
    return s;
}

KernelSpec gemm_sm90_spec(const Arch& arch, int block_m, int block_n, bool b_nmajor, int k_tiles, bool a_paged) {
    KernelSpec s;
    s.family = Family::gemm_sm90;
    s.arch = arch;
    s.p = {block_m, block_n, gemm_sm90_stages(block_m, block_n), b_nmajor ? 1 : 0, k_tiles, a_paged ? 1 : 0};
    return s;
}

bool use_jit_gemm(const Arch& arch) { return use_hopper_tier(arch) && config().gemm != GemmChoice::cublaslt; }
int64_t fused_paged_max_heads(const Arch& arch) {
    if (!use_jit_gemm(arch) || config().gemm == GemmChoice::unfused) return 0;
    return config().gemm == GemmChoice::fused ? std::numeric_limits<int64_t>::max() : kFusedPagedAutoMaxHeads;
}

std::vector<KernelSpec> prefill_gemm_specs(const Arch& arch) {
    std::vector<KernelSpec> out;
    for (int bm : {128, 64})
        for (int bn : {256, 128}) {
            out.push_back(gemm_sm90_spec(arch, bm, bn, false, gemm_sm90_k_tiles(kDimLatent)));  // up- and output projection
            out.push_back(gemm_sm90_spec(arch, bm, bn, true, gemm_sm90_k_tiles(kDimNope)));     // query absorption
            if (fused_paged_max_heads(arch) > 0)  // the up-projection gathering its rows out of a paged bf16 cache
                out.push_back(gemm_sm90_spec(arch, bm, bn, false, gemm_sm90_k_tiles(kDimLatent), true));
        }
    return out;
}

int gemm_smem_bytes(const KernelSpec& s) { return mj_gemm90_smem_bytes(s.p[0], s.p[1], s.p[2]); }
int gemm_threads(const KernelSpec&) { return mj_gemm90_threads(); }

// The Hopper tier's kernel (kernels_src/mha/sm90.cuh), when masked, stages the mask words of each key stage
// in shared memory: 128 rows x 4 words x 2 stages on top of the dense layout (the kernel asserts 4096).
constexpr int kMha90MaskStageBytes = 4096;

int mha_smem_bytes(const KernelSpec& s) {
    if (s.family == Family::mha_fwd_sm90)
        return mj_mha90_smem_bytes(s.p[0], s.p[1], s.p[2], kDimQkMha, kDimV) + (s.p[3] ? kMha90MaskStageBytes : 0);
    const int attention = mj_mha_smem_bytes(s.p[0], s.p[1], s.p[3], kDimQkMha, kDimV);
    return s.p[8] ? std::max(attention, mj_mha_up_smem_bytes()) : attention;  // UP_PROJ reuses it first
}
int mha_threads(const KernelSpec& s) {
    if (s.family == Family::mha_fwd_sm90) return mj_mha90_threads(s.p[0]);
    return mj_mha_threads(s.p[2]);
}
int mqa_smem_bytes(const KernelSpec& s) {
    if (s.family == Family::sparse_mqa_fwd_sm90) return mj_mqa90_smem_bytes();
    if (s.family == Family::sparse_mqa_fwd_sm90t)  // the FP8 cache: plus its producer's raw rings
        return mj_mqa90t_smem_bytes(s.p[0], s.p[1], s.p[2], s.p[5], s.p[6]);
    if (s.p[6] != 0) return mj_mqa_smem_bytes_fp8(s.p[0], s.p[1], s.p[3]);  // KV_FP8
    return mj_mqa_smem_bytes(s.p[0], s.p[1], s.p[3], kDimQkMqa, kDimLatent);
}
int mqa_threads(const KernelSpec& s) {
    if (s.family == Family::sparse_mqa_fwd_sm90t) return mj_mqa90t_threads(s.p[5]);  // KV_FP8: 16 producer warps
    if (s.family == Family::sparse_mqa_fwd_sm90) return mj_mqa90_threads();
    return mj_mqa_threads(s.p[2]);
}
int mask_rows_per_block(const KernelSpec& s) { return s.p[0]; }
int gather_rows_per_block(const KernelSpec& s) { return s.p[0]; }
int quantize_tokens_per_block(const KernelSpec& s) { return s.p[0]; }

}  // namespace mlajit
