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

int64_t GemmRunner::fused_paged_max_heads() const { return jit_ ? mlajit::fused_paged_max_heads(h_.arch()) : 0; }

void GemmRunner::run_paged(const GemmDesc& g, const GemmPagedA& pa, CUstream stream, const char* what) {
    if (g.m == 0 || g.n == 0) return;
    const char* why = !jit_ ? "the Hopper-tier GEMM is not in use"
                      : g.k != 512 || !g.b.transposed || g.batch != 1 ? "only the up-projection (K 512, B [N, K], batch 1) reads pages"
                      : gemm_sm90_paged_refusal(g, pa);
    if (why) fail(MLAJIT_ERROR_INTERNAL, "{} cannot gather its rows out of the pages: {}", what, why);
    run_jit(g, stream, what, &pa);
}

void GemmRunner::run_jit(const GemmDesc& g0, CUstream stream, const char* what, const GemmPagedA* pa) {
    GemmDesc g = g0;
    if (pa) g.a = {pa->pages, pa->tok_stride, 0, false};  // tm_a is encoded (any legal map) but never read
    const GemmSm90Tile tile = gemm_sm90_tile(g, h_.sm_count());
    const KernelSpec spec = gemm_sm90_spec(h_.arch(), tile.block_m, tile.block_n, !g.b.transposed, gemm_sm90_k_tiles(g.k), pa != nullptr);
    GemmSm90Params p;
    const GemmSm90MapError e = encode_gemm_sm90(driver().cuTensorMapEncodeTiled, g, tile, p);
    if (pa) set_gemm_sm90_paged(g, *pa, p);
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
