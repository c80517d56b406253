#include "config/env.h"

#include <cstdlib>
#include <mutex>
#include <sstream>

#include "common/error.h"

namespace mlajit {

const std::vector<EnvVarDoc>& env_var_docs() {
    static const std::vector<EnvVarDoc> docs = {
        {"MLAJIT_CACHE_DIR", "$XDG_CACHE_HOME/mlajit or ~/.cache/mlajit", "root of the on-disk kernel cache"},
        {"MLAJIT_CACHE", "rw", "rw: read and write the disk cache; ro: read only; off: memory only"},
        {"MLAJIT_OFFLINE", "0", "1: never compile; a kernel missing from the cache is an error"},
        {"MLAJIT_LOG_LEVEL", "warn", "trace, debug, info, warn, error, off"},
        {"MLAJIT_NVRTC_FLAGS", "", "extra NVRTC options for every compile (part of the cache key)"},
        {"MLAJIT_KERNELS_DIR", "(embedded)", "read kernel templates from this folder instead of the embedded copy"},
        {"MLAJIT_DUMP_DIR", "", "write the specialized source, PTX and log of every compile here"},
        {"MLAJIT_ARCH", "(the GPU's)", "target arch, e.g. sm_90a, sm_80"},
        {"MLAJIT_MHA_TILE", "(per arch)", "MHA tile BLOCK_MxBLOCK_N, e.g. 128x64 or 64x64"},
        {"MLAJIT_MQA_TILE", "(per head count)", "sparse MQA tile BLOCK_HxBLOCK_N, e.g. 64x64"},
        {"MLAJIT_PATH", "auto", "auto, dense_mha, masked_mha, sparse_mqa: force the prefill path"},
        {"MLAJIT_TIER", "auto", "auto: Hopper tier (wgmma, TMA) on sm_90a, portable elsewhere; portable: mma.sync tier everywhere"},
        {"MLAJIT_GEMM", "auto", "auto: mlajit's own GEMM kernel for the projections on the Hopper tier (a paged bf16 cache's K/V up-projection reads the pages itself up to 16 heads, after a separate gather above), cuBLASLt elsewhere; cublaslt: cuBLASLt everywhere; fused: auto, the up-projection reading the pages at any head count; unfused: auto, always the separate gather"},
        {"MLAJIT_MQA_PERSIST", "1", "1: where the key-set pre-pass runs, the Hopper tier's 16-head sparse MQA kernel on the bf16 cache runs as a persistent grid (at most one block a SM, the same result bits; H100 at 8k through the library: 2.97-3.01 ms against 3.44, session 34); 0: one block a query token"},
        {"MLAJIT_MQA_PERSIST64", "0", "1: where the key-set pre-pass runs, the Hopper tier's 64-head sparse MQA kernel on the bf16 cache (32 heads and more) also runs as a persistent grid (sparse_mqa/sm90_persist.cuh: at most one block a SM taking (token, head block) items, the same result bits; development: not yet measured on a GPU, so off by default); 0: one block a token and head block"},
        {"MLAJIT_SMALL_STEP_KEYS", "64", "dense MHA steps of the one-call prefill whose requests have at most this many keys (and at most 64 new tokens) run as one launch: the MHA kernel computes its head's K/V up-projection itself; 0: always a separate up-projection GEMM"},
        {"MLAJIT_MASKED_MHA_MAX_SEQ", "(planner)", "masked MHA for requests with s_k up to this, sparse MQA above"},
        {"MLAJIT_PLAN_TABLE", "(cache)", "calibration table file for the planner"},
        {"MLAJIT_LOCK_TIMEOUT_MS", "120000", "how long to wait for another process compiling the same kernel"},
        {"MLAJIT_CUDA_LIB", "libcuda.so.1", "driver library to dlopen"},
        {"MLAJIT_NVRTC_LIB", "(search)", "NVRTC library to dlopen"},
        {"MLAJIT_CUBLASLT_LIB", "(search)", "cuBLASLt library to dlopen"},
    };
    return docs;
}

namespace {

[[noreturn]] void bad(const char* var, const std::string& value, const char* allowed) {
    fail(MLAJIT_ERROR_CONFIG, "environment variable {}='{}' is not valid: allowed values are {}. Fix or unset it.",
         var, value, allowed);
}

bool parse_bool(const char* var, const std::string& v) {
    if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
    if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
    bad(var, v, "1/true/yes/on or 0/false/no/off");
}

long parse_positive(const char* var, const std::string& v, long max) {
    char* end = nullptr;
    errno = 0;
    long x = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || x <= 0 || x > max)
        bad(var, v, fmt::format("a whole number from 1 to {}", max).c_str());
    return x;
}

TileOverride parse_tile(const char* var, const std::string& v) {
    auto x = v.find('x');
    if (x == std::string::npos) bad(var, v, "AxB with two whole numbers, e.g. 128x64");
    auto part = [&](const std::string& s) {
        char* end = nullptr;
        long n = std::strtol(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || n <= 0 || n > 1024) bad(var, v, "AxB with two whole numbers from 1 to 1024, e.g. 128x64");
        return (int)n;
    };
    TileOverride t;
    t.a = part(v.substr(0, x));
    t.b = part(v.substr(x + 1));
    return t;
}

std::vector<std::string> split_flags(const std::string& v) {
    std::vector<std::string> out;
    std::istringstream in(v);
    for (std::string f; in >> f;) out.push_back(f);
    return out;
}

std::optional<std::string> nonempty(const EnvLookup& getenv, const char* name) {
    auto v = getenv(name);
    if (v && v->empty()) return std::nullopt;
    return v;
}

}  // namespace

Config parse_config(const EnvLookup& getenv) {
    Config c;
    if (auto v = nonempty(getenv, "MLAJIT_CACHE_DIR")) c.cache_dir = *v;
    if (auto v = nonempty(getenv, "XDG_CACHE_HOME")) c.xdg_cache_home = *v;
    if (auto v = nonempty(getenv, "HOME")) c.home = *v;
    if (auto v = nonempty(getenv, "MLAJIT_CACHE")) {
        if (*v == "rw") c.cache_mode = CacheMode::rw;
        else if (*v == "ro") c.cache_mode = CacheMode::ro;
        else if (*v == "off") c.cache_mode = CacheMode::off;
        else bad("MLAJIT_CACHE", *v, "rw, ro, off");
    }
    if (auto v = getenv("MLAJIT_OFFLINE")) c.offline = parse_bool("MLAJIT_OFFLINE", *v);
    if (auto v = nonempty(getenv, "MLAJIT_LOG_LEVEL")) {
        auto lvl = spdlog::level::from_str(*v);
        // from_str maps unknown names to off: accept "off" only when spelled so.
        if (lvl == spdlog::level::off && *v != "off") bad("MLAJIT_LOG_LEVEL", *v, "trace, debug, info, warn, error, critical, off");
        c.log_level = lvl;
    }
    if (auto v = getenv("MLAJIT_NVRTC_FLAGS")) c.nvrtc_flags = split_flags(*v);
    if (auto v = nonempty(getenv, "MLAJIT_KERNELS_DIR")) c.kernels_dir = *v;
    if (auto v = nonempty(getenv, "MLAJIT_DUMP_DIR")) c.dump_dir = *v;
    if (auto v = nonempty(getenv, "MLAJIT_ARCH")) {
        // Validated for form here; whether NVRTC knows it is checked at compile time.
        const std::string& s = *v;
        bool ok = s.size() >= 5 && s.rfind("sm_", 0) == 0;
        size_t i = 3;
        while (ok && i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
        ok = ok && i > 4 && (i == s.size() || (i + 1 == s.size() && (s[i] == 'a' || s[i] == 'f')));
        if (!ok) bad("MLAJIT_ARCH", s, "sm_<major><minor>[a|f], e.g. sm_90a, sm_80");
        c.arch = s;
    }
    if (auto v = nonempty(getenv, "MLAJIT_MHA_TILE")) c.mha_tile = parse_tile("MLAJIT_MHA_TILE", *v);
    if (auto v = nonempty(getenv, "MLAJIT_MQA_TILE")) c.mqa_tile = parse_tile("MLAJIT_MQA_TILE", *v);
    if (auto v = nonempty(getenv, "MLAJIT_PATH")) {
        if (*v == "auto") c.path = PathChoice::auto_;
        else if (*v == "dense_mha") c.path = PathChoice::dense_mha;
        else if (*v == "masked_mha") c.path = PathChoice::masked_mha;
        else if (*v == "sparse_mqa") c.path = PathChoice::sparse_mqa;
        else bad("MLAJIT_PATH", *v, "auto, dense_mha, masked_mha, sparse_mqa");
    }
    if (auto v = nonempty(getenv, "MLAJIT_TIER")) {
        if (*v == "auto") c.tier = TierChoice::auto_;
        else if (*v == "portable") c.tier = TierChoice::portable;
        else bad("MLAJIT_TIER", *v, "auto, portable");
    }
    if (auto v = nonempty(getenv, "MLAJIT_GEMM")) {
        if (*v == "auto") c.gemm = GemmChoice::auto_;
        else if (*v == "cublaslt") c.gemm = GemmChoice::cublaslt;
        else if (*v == "fused") c.gemm = GemmChoice::fused;
        else if (*v == "unfused") c.gemm = GemmChoice::unfused;
        else bad("MLAJIT_GEMM", *v, "auto, cublaslt, fused, unfused");
    }
    if (auto v = getenv("MLAJIT_MQA_PERSIST")) c.mqa_persist = parse_bool("MLAJIT_MQA_PERSIST", *v);
    if (auto v = getenv("MLAJIT_MQA_PERSIST64")) c.mqa_persist64 = parse_bool("MLAJIT_MQA_PERSIST64", *v);
    if (auto v = nonempty(getenv, "MLAJIT_SMALL_STEP_KEYS"))
        c.small_step_keys = *v == "0" ? 0 : (int)parse_positive("MLAJIT_SMALL_STEP_KEYS", *v, 65536);
    if (auto v = nonempty(getenv, "MLAJIT_MASKED_MHA_MAX_SEQ"))
        c.masked_mha_max_seq = parse_positive("MLAJIT_MASKED_MHA_MAX_SEQ", *v, 1L << 30);
    if (auto v = nonempty(getenv, "MLAJIT_PLAN_TABLE")) c.plan_table = *v;
    if (auto v = nonempty(getenv, "MLAJIT_LOCK_TIMEOUT_MS"))
        c.lock_timeout_ms = (int)parse_positive("MLAJIT_LOCK_TIMEOUT_MS", *v, 3600L * 1000);
    if (auto v = nonempty(getenv, "MLAJIT_CUDA_LIB")) c.cuda_lib = *v;
    if (auto v = nonempty(getenv, "MLAJIT_NVRTC_LIB")) c.nvrtc_lib = *v;
    if (auto v = nonempty(getenv, "MLAJIT_CUBLASLT_LIB")) c.cublaslt_lib = *v;
    return c;
}

namespace {
std::mutex g_config_mutex;
// Every Config ever parsed stays alive: callers may hold a reference across reload_config().
std::vector<std::unique_ptr<Config>> g_configs;

std::optional<std::string> real_getenv(const char* name) {
    const char* v = std::getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
}
}  // namespace

const Config& config() {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    if (g_configs.empty()) g_configs.push_back(std::make_unique<Config>(parse_config(real_getenv)));
    return *g_configs.back();
}

void reload_config() {
    auto fresh = std::make_unique<Config>(parse_config(real_getenv));
    std::lock_guard<std::mutex> lock(g_config_mutex);
    g_configs.push_back(std::move(fresh));
}

std::filesystem::path default_cache_root_from(const Config& c) {
    if (auto root = default_cache_root(c.cache_dir, c.xdg_cache_home, c.home)) return *root;
    // No HOME at all (a bare service account): a per-machine folder rather than no cache.
    return std::filesystem::temp_directory_path() / "mlajit-cache";
}

const char* cache_mode_name(CacheMode m) {
    switch (m) {
        case CacheMode::rw: return "rw";
        case CacheMode::ro: return "ro";
        case CacheMode::off: return "off";
    }
    return "?";
}

const char* path_choice_name(PathChoice p) {
    switch (p) {
        case PathChoice::auto_: return "auto";
        case PathChoice::dense_mha: return "dense_mha";
        case PathChoice::masked_mha: return "masked_mha";
        case PathChoice::sparse_mqa: return "sparse_mqa";
    }
    return "?";
}

const char* tier_choice_name(TierChoice t) { return t == TierChoice::portable ? "portable" : "auto"; }

}  // namespace mlajit
