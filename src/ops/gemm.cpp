#include "ops/gemm.h"

#include "common/error.h"
#include "common/log.h"
#include "cuda/driver_api.h"
#include "ops/gemm_sm90_maps.h"
#include "ops/kernel_configs.h"
#include "runtime/handle.h"

namespace mlajit {

GemmRunner::GemmRunner(Handle& h) : h_(h), jit_(use_jit_gemm(h.arch()) && driver().cuTensorMapEncodeTiled != nullptr) {
    if (use_jit_gemm(h.arch()) && !jit_)
        log().debug("the CUDA driver has no cuTensorMapEncodeTiled: the projections run on cuBLASLt");
}

void GemmRunner::run(const GemmDesc& g, void* workspace, size_t workspace_bytes, CUstream stream, const char* what) {
    if (g.m == 0 || g.n == 0 || g.batch == 0) return;
    if (jit_) {
        const char* why = gemm_sm90_refusal(g);
        if (!why) return run_jit(g, stream, what);
        log().debug("{} (M {}, N {}, K {}, batch {}) runs on cuBLASLt: {}", what, g.m, g.n, g.k, g.batch, why);
    }
    lt_runs_.fetch_add(1, std::memory_order_relaxed);
    h_.cublaslt_gemm().run(g, workspace, workspace_bytes, stream, what);
}

void GemmRunner::run_jit(const GemmDesc& g, CUstream stream, const char* what) {
    const GemmSm90Tile tile = gemm_sm90_tile(g, h_.sm_count());
    const KernelSpec spec = gemm_sm90_spec(h_.arch(), tile.block_m, tile.block_n, !g.b.transposed, gemm_sm90_k_tiles(g.k));
    GemmSm90Params p;
    const GemmSm90MapError e = encode_gemm_sm90(driver().cuTensorMapEncodeTiled, g, tile, p);
    if (e.map)
        cu_check(e.result, "cuTensorMapEncodeTiled",
                 fmt::format("encoding the TMA tensor map of {} for {} (M {}, N {}, K {}, batch {}; set MLAJIT_GEMM=cublaslt to run it "
                             "on cuBLASLt)", e.map, what, g.m, g.n, g.k, g.batch).c_str());
    const unsigned grid = unsigned(std::min<int64_t>(p.num_tiles, h_.sm_count()));
    jit_runs_.fetch_add(1, std::memory_order_relaxed);
    h_.launch(spec, Dim3{grid, 1, 1}, gemm_threads(spec), gemm_smem_bytes(spec), &p, stream);
}

size_t GemmRunner::cached_algos() {
    CublasLtGemm* lt = h_.cublaslt_gemm_if_ready();
    return lt ? lt->cached_algos() : 0;
}
size_t GemmRunner::evicted_algos() {
    CublasLtGemm* lt = h_.cublaslt_gemm_if_ready();
    return lt ? lt->evicted_algos() : 0;
}
GemmRunner::Counts GemmRunner::counts() {
    CublasLtGemm* lt = h_.cublaslt_gemm_if_ready();
    return lt ? lt->counts() : Counts{};
}

}  // namespace mlajit
