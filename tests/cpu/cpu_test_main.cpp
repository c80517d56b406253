// The CPU tests' main: they assert the plans, kernels and cache behaviour of mlajit's defaults, so a caller's
// tuning variable (MLAJIT_TIER=portable left in a shell, MLAJIT_MQA_TILE from a benchmark run) would fail dozens of
// them for no fault of the code. Every MLAJIT_* variable the library reads is cleared before the first test, except
// those that describe the machine (where the cache lives, which libraries to load, how loud to log); the tests that
// need a variable set it themselves (support/scoped_env.h). A note names whatever was cleared.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "config/env.h"

namespace {
bool describes_the_machine(const char* name) {
    for (const char* keep : {"MLAJIT_CACHE_DIR", "MLAJIT_LOG_LEVEL", "MLAJIT_CUDA_LIB", "MLAJIT_NVRTC_LIB", "MLAJIT_CUBLASLT_LIB"})
        if (std::strcmp(name, keep) == 0) return true;
    return false;
}
}  // namespace

int main(int argc, char** argv) {
    std::string cleared;
    for (const auto& var : mlajit::env_var_docs()) {
        if (describes_the_machine(var.name) || std::getenv(var.name) == nullptr) continue;
        cleared += cleared.empty() ? "" : ", ";
        cleared += std::string(var.name) + "=" + std::getenv(var.name);
        unsetenv(var.name);
    }
    if (!cleared.empty())
        std::fprintf(stderr, "mlajit_cpu_tests: cleared %s (the tests check mlajit's defaults and set what they need)\n",
                     cleared.c_str());
    mlajit::reload_config();
    doctest::Context context(argc, argv);
    return context.run();
}
