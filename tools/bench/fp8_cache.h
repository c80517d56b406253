// mlajit-bench --kv fp8: the one-call prefill on the engine's FP8 latent cache (fp8_ds_mla) against the
// same call on the bf16 paged cache and against "the engine's way" (a separate upconvert pass of every
// cached token into a bf16 workspace, then the bf16 prefill), timed in one run with the copy ceiling.
#pragma once
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/driver_api.h"
#include "mlajit/mlajit.h"

namespace mlajit::tools {

struct Fp8BenchOptions {
    std::vector<int64_t> heads{16};
    int64_t batch = 8, s_q = 1024, s_k = 1024 + 32768, topk = 2048, block_size = 64;
    int reps = 10;
};
// Prints a table to stderr and CSV rows to `csv`; returns false if a check failed.
bool run_fp8_cache_bench(const Fp8BenchOptions& o, mlajit_handle h, CUstream st, const std::string& gpu, std::FILE* csv);

}  // namespace mlajit::tools
