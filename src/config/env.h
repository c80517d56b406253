// The one place that reads environment variables. Each variable is in README's table with its default.
// parse_config() is pure (it takes a lookup function), so tests drive it with any environment.
#pragma once
#include <spdlog/common.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jit/disk_cache.h"  // CacheMode

namespace mlajit {

enum class PathChoice { auto_, dense_mha, masked_mha, sparse_mqa };
// Which kernel tier runs: auto = the Hopper tier (wgmma/TMA) on sm_90a, the portable tier (mma.sync)
// elsewhere; portable forces the portable tier everywhere (how both tiers stay tested on one H200).
enum class TierChoice { auto_, portable };
// Which GEMM serves the one-call prefill's projections: auto = mlajit's own (NVRTC-compiled) kernel on the
// Hopper tier, cuBLASLt elsewhere; cublaslt = cuBLASLt everywhere.
// A paged bf16 cache's K/V up-projection, with mlajit's kernel: either it reads its rows straight out of
// the pages (the GEMM's A_PAGED variant, issue 15; the workspace keeps k_pe [keys, 64] instead of a
// [keys, 576] copy) or the paged_gather kernel copies them first. auto: the former up to
// kFusedPagedAutoMaxHeads heads (ops/kernel_configs.h: measured faster there, slower at 128 heads;
// docs/PERF.md); fused: the former at any head count; unfused: always the copy.
enum class GemmChoice { auto_, cublaslt, fused, unfused };

struct TileOverride {
    int a = 0, b = 0;  // MHA: BLOCK_M x BLOCK_N; MQA: BLOCK_H x BLOCK_N
    bool set() const { return a > 0; }
};

struct Config {
    std::optional<std::filesystem::path> cache_dir;  // MLAJIT_CACHE_DIR (else XDG_CACHE_HOME, HOME)
    std::optional<std::filesystem::path> xdg_cache_home;
    std::optional<std::filesystem::path> home;
    CacheMode cache_mode = CacheMode::rw;             // MLAJIT_CACHE
    bool offline = false;                             // MLAJIT_OFFLINE
    spdlog::level::level_enum log_level = spdlog::level::warn;  // MLAJIT_LOG_LEVEL
    std::vector<std::string> nvrtc_flags;             // MLAJIT_NVRTC_FLAGS
    std::optional<std::filesystem::path> kernels_dir; // MLAJIT_KERNELS_DIR
    std::optional<std::filesystem::path> dump_dir;    // MLAJIT_DUMP_DIR
    std::optional<std::string> arch;                  // MLAJIT_ARCH
    TileOverride mha_tile;                            // MLAJIT_MHA_TILE
    TileOverride mqa_tile;                            // MLAJIT_MQA_TILE
    PathChoice path = PathChoice::auto_;              // MLAJIT_PATH
    TierChoice tier = TierChoice::auto_;              // MLAJIT_TIER
    GemmChoice gemm = GemmChoice::auto_;              // MLAJIT_GEMM
    int small_step_keys = 64;                        // MLAJIT_SMALL_STEP_KEYS (0: off)
    bool mqa_persist = true;                          // MLAJIT_MQA_PERSIST
    bool mqa_persist64 = false;                       // MLAJIT_MQA_PERSIST64
    std::optional<long> masked_mha_max_seq;           // MLAJIT_MASKED_MHA_MAX_SEQ
    std::optional<std::filesystem::path> plan_table;  // MLAJIT_PLAN_TABLE
    int lock_timeout_ms = 120000;                     // MLAJIT_LOCK_TIMEOUT_MS
    std::optional<std::string> cuda_lib;              // MLAJIT_CUDA_LIB
    std::optional<std::string> nvrtc_lib;             // MLAJIT_NVRTC_LIB
    std::optional<std::string> cublaslt_lib;          // MLAJIT_CUBLASLT_LIB
};

struct EnvVarDoc {
    const char* name;
    const char* default_value;
    const char* meaning;
};
// Every variable mlajit reads, for `mlajit-warmup env` and the README table.
const std::vector<EnvVarDoc>& env_var_docs();

using EnvLookup = std::function<std::optional<std::string>(const char*)>;
// Throws Error(MLAJIT_ERROR_CONFIG) naming the variable, its value and the allowed values.
Config parse_config(const EnvLookup& getenv);

// The process configuration, parsed once on first use from the real environment.
const Config& config();
// Re-reads the environment (tests and the CLI, which may set variables from flags before first use).
void reload_config();

std::filesystem::path default_cache_root_from(const Config& c);
const char* cache_mode_name(CacheMode m);
const char* path_choice_name(PathChoice p);
const char* tier_choice_name(TierChoice t);

}  // namespace mlajit
