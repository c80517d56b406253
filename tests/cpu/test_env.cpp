// Environment parsing: every variable's good values parse, bad ones are rejected with a message that
// names the variable and the allowed values.
#include <doctest/doctest.h>

#include <map>

#include "common/error.h"
#include "config/env.h"

using namespace mlajit;

namespace {
EnvLookup env(std::map<std::string, std::string> vars) {
    return [vars](const char* name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

std::string error_of(std::map<std::string, std::string> vars) {
    try {
        parse_config(env(std::move(vars)));
    } catch (const Error& e) {
        CHECK(e.status() == MLAJIT_ERROR_CONFIG);
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("env: defaults with an empty environment") {
    Config c = parse_config(env({}));
    CHECK(c.cache_mode == CacheMode::rw);
    CHECK_FALSE(c.offline);
    CHECK(c.path == PathChoice::auto_);
    CHECK(c.nvrtc_flags.empty());
    CHECK(c.lock_timeout_ms == 120000);
    CHECK_FALSE(c.arch.has_value());
}

TEST_CASE("env: good values parse") {
    Config c = parse_config(env({{"MLAJIT_CACHE", "ro"},
                                 {"MLAJIT_OFFLINE", "1"},
                                 {"MLAJIT_LOG_LEVEL", "debug"},
                                 {"MLAJIT_NVRTC_FLAGS", "  -DFOO=1   --maxrregcount=128 "},
                                 {"MLAJIT_ARCH", "sm_90a"},
                                 {"MLAJIT_MHA_TILE", "64x64"},
                                 {"MLAJIT_PATH", "masked_mha"},
                                 {"MLAJIT_TIER", "portable"},
                                 {"MLAJIT_MASKED_MHA_MAX_SEQ", "12288"},
                                 {"MLAJIT_LOCK_TIMEOUT_MS", "500"}}));
    CHECK(c.cache_mode == CacheMode::ro);
    CHECK(c.offline);
    CHECK(c.log_level == spdlog::level::debug);
    REQUIRE(c.nvrtc_flags.size() == 2);
    CHECK(c.nvrtc_flags[0] == "-DFOO=1");
    CHECK(c.nvrtc_flags[1] == "--maxrregcount=128");
    CHECK(*c.arch == "sm_90a");
    CHECK(c.mha_tile.a == 64);
    CHECK(c.mha_tile.b == 64);
    CHECK(c.path == PathChoice::masked_mha);
    CHECK(c.tier == TierChoice::portable);
    CHECK(*c.masked_mha_max_seq == 12288);
    CHECK(c.lock_timeout_ms == 500);
}

TEST_CASE("env: MLAJIT_SMALL_STEP_KEYS, 0 turns the one-launch small steps off") {
    CHECK(parse_config(env({})).small_step_keys == 64);
    CHECK(parse_config(env({{"MLAJIT_SMALL_STEP_KEYS", "0"}})).small_step_keys == 0);
    CHECK(parse_config(env({{"MLAJIT_SMALL_STEP_KEYS", "512"}})).small_step_keys == 512);
    CHECK_THROWS(parse_config(env({{"MLAJIT_SMALL_STEP_KEYS", "65537"}})));
}

TEST_CASE("env: MLAJIT_MQA_PERSIST, on by default, 0 turns the persistent sparse MQA grid off") {
    CHECK(parse_config(env({})).mqa_persist);
    CHECK_FALSE(parse_config(env({{"MLAJIT_MQA_PERSIST", "0"}})).mqa_persist);
    CHECK(parse_config(env({{"MLAJIT_MQA_PERSIST", "1"}})).mqa_persist);
    CHECK_THROWS(parse_config(env({{"MLAJIT_MQA_PERSIST", "sometimes"}})));
}

TEST_CASE("env: MLAJIT_MQA_PERSIST64, off by default, 1 turns the 64-head kernel's persistent grid on") {
    CHECK_FALSE(parse_config(env({})).mqa_persist64);
    CHECK(parse_config(env({{"MLAJIT_MQA_PERSIST64", "1"}})).mqa_persist64);
    CHECK_FALSE(parse_config(env({{"MLAJIT_MQA_PERSIST64", "0"}})).mqa_persist64);
    CHECK(parse_config(env({{"MLAJIT_MQA_PERSIST64", "1"}})).mqa_persist);  // independent of MLAJIT_MQA_PERSIST
    CHECK_THROWS(parse_config(env({{"MLAJIT_MQA_PERSIST64", "often"}})));
}

TEST_CASE("env: bad values name the variable and the allowed values") {
    struct Case {
        const char* var;
        const char* value;
        const char* allowed_fragment;
    };
    for (Case k : {Case{"MLAJIT_CACHE", "readonly", "rw, ro, off"}, Case{"MLAJIT_OFFLINE", "maybe", "1/true"},
                   Case{"MLAJIT_MQA_PERSIST", "2", "1/true"}, Case{"MLAJIT_MQA_PERSIST64", "yes please", "1/true"},
                   Case{"MLAJIT_LOG_LEVEL", "loud", "trace, debug"}, Case{"MLAJIT_ARCH", "hopper", "sm_90a"},
                   Case{"MLAJIT_ARCH", "sm_90x", "sm_<major>"}, Case{"MLAJIT_MHA_TILE", "128", "AxB"},
                   Case{"MLAJIT_MQA_TILE", "64xq", "whole number"}, Case{"MLAJIT_PATH", "fast", "sparse_mqa"},
                   Case{"MLAJIT_TIER", "hopper", "auto, portable"},
                   Case{"MLAJIT_MASKED_MHA_MAX_SEQ", "-5", "whole number"},
                   Case{"MLAJIT_LOCK_TIMEOUT_MS", "1e3", "whole number"},
                   Case{"MLAJIT_SMALL_STEP_KEYS", "-1", "whole number"}}) {
        CAPTURE(k.var);
        CAPTURE(k.value);
        std::string msg = error_of({{k.var, k.value}});
        CHECK(msg.find(k.var) != std::string::npos);
        CHECK(msg.find(std::string("'") + k.value + "'") != std::string::npos);
        CHECK(msg.find(k.allowed_fragment) != std::string::npos);
    }
}

TEST_CASE("env: cache root precedence") {
    CHECK(default_cache_root_from(parse_config(env({{"MLAJIT_CACHE_DIR", "/a"}, {"XDG_CACHE_HOME", "/b"}, {"HOME", "/c"}}))) == "/a");
    CHECK(default_cache_root_from(parse_config(env({{"XDG_CACHE_HOME", "/b"}, {"HOME", "/c"}}))) == "/b/mlajit");
    CHECK(default_cache_root_from(parse_config(env({{"HOME", "/c"}}))) == "/c/.cache/mlajit");
}

TEST_CASE("env: every variable read is documented") {
    // The docs table is what README and `mlajit-warmup env` show: a variable missing there is a defect.
    std::vector<std::string> read;
    parse_config([&](const char* name) -> std::optional<std::string> {
        read.push_back(name);
        return std::nullopt;
    });
    for (auto& name : read) {
        if (name == "HOME" || name == "XDG_CACHE_HOME") continue;
        bool found = false;
        for (auto& d : env_var_docs()) found = found || name == d.name;
        CAPTURE(name);
        CHECK(found);
    }
}

TEST_CASE("env: MLAJIT_GEMM picks the projections' GEMM (fused / unfused: the paged up-projection reads the pages / a copy)") {
    CHECK(parse_config(env({})).gemm == GemmChoice::auto_);
    CHECK(parse_config(env({{"MLAJIT_GEMM", "cublaslt"}})).gemm == GemmChoice::cublaslt);
    CHECK(parse_config(env({{"MLAJIT_GEMM", "fused"}})).gemm == GemmChoice::fused);
    CHECK(parse_config(env({{"MLAJIT_GEMM", "unfused"}})).gemm == GemmChoice::unfused);
    CHECK_THROWS(parse_config(env({{"MLAJIT_GEMM", "gather"}})));
}
