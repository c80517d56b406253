// GEMM harness (development aid, not part of the library): the Hopper-tier GEMM (kernels_src/gemm/sm90.cuh)
// against a float64 reference on sampled rows, poisoned outputs, and timed beside cuBLASLt in the same run
// at the one-call prefill's three projection shapes. Build: tools/dev/gemm/build.sh; run: harness [--quick].
#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/gemm_sm90_maps.h"

using mlajit::GemmDesc;
mlajit::GemmTensorMapEncodeFn gemm90_encode = nullptr;

#define DECL(n) extern "C" cudaError_t launch_##n(const GemmDesc*, int, cudaStream_t);
#define DECL_M(m) DECL(m##_n256_b0_t8) DECL(m##_n128_b0_t8) DECL(m##_n256_b1_t2) DECL(m##_n128_b1_t2)
DECL_M(m128) DECL_M(m64)

#define CK(x)                                                                                     \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
#define LT(x)                                                                               \
    do {                                                                                    \
        cublasStatus_t s_ = (x);                                                            \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                  \
            fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

static int g_sms = 132;

// bn / bm 0: the library's choice (gemm_sm90_tile).
static mlajit::GemmSm90Tile tile_of(const GemmDesc& g, int bn, int bm) {
    mlajit::GemmSm90Tile t = mlajit::gemm_sm90_tile(g, g_sms);
    if (bn) t.block_n = bn;
    if (bm) t.block_m = bm;
    return t;
}
static cudaError_t ours(const GemmDesc& g, int bn = 0, int bm = 0, cudaStream_t st = 0) {
    if (const char* why = mlajit::gemm_sm90_refusal(g)) {
        fprintf(stderr, "refused: %s\n", why);
        exit(1);
    }
    const mlajit::GemmSm90Tile t = tile_of(g, bn, bm);
    const int kt = mlajit::gemm_sm90_k_tiles(g.k);
    const int nm = g.b.transposed ? 0 : 1;
#define TRY(M, N, B, T) \
    if (t.block_m == M && t.block_n == N && nm == B && kt == T) return launch_m##M##_n##N##_b##B##_t##T(&g, g_sms, st);
    TRY(128, 256, 0, 8) TRY(128, 128, 0, 8) TRY(128, 256, 1, 2) TRY(128, 128, 1, 2)
    TRY(64, 256, 0, 8) TRY(64, 128, 0, 8) TRY(64, 256, 1, 2) TRY(64, 128, 1, 2)
    fprintf(stderr, "no harness variant for bm %d bn %d nmajor %d k-steps %d\n", t.block_m, t.block_n, nm, kt);
    exit(1);
}

// cuBLASLt with the same row-major translation as src/ops/gemm.cpp (C^T = B^T . A^T), heuristic's first choice.
struct Lt {
    cublasLtHandle_t h;
    void* ws;
    size_t ws_bytes = size_t(32) << 20;
    Lt() {
        LT(cublasLtCreate(&h));
        CK(cudaMalloc(&ws, ws_bytes));
    }
    struct Plan {
        cublasLtMatmulDesc_t d;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtMatmulAlgo_t algo;
    };
    static void layout(cublasLtMatrixLayout_t& l, int64_t rows, int64_t cols, int64_t ld, int batch, int64_t bs) {
        LT(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, rows, cols, ld));
        if (batch > 1) {
            int32_t c = batch;
            LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c, sizeof c));
            LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bs, sizeof bs));
        }
    }
    Plan plan(const GemmDesc& g) {
        Plan p;
        cublasOperation_t o1 = g.b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, o2 = CUBLAS_OP_N;
        LT(cublasLtMatmulDescCreate(&p.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        LT(cublasLtMatmulDescSetAttribute(p.d, CUBLASLT_MATMUL_DESC_TRANSA, &o1, sizeof o1));
        LT(cublasLtMatmulDescSetAttribute(p.d, CUBLASLT_MATMUL_DESC_TRANSB, &o2, sizeof o2));
        if (g.b.transposed) layout(p.la, g.k, g.n, g.b.ld, g.batch, g.b.batch_stride);
        else layout(p.la, g.n, g.k, g.b.ld, g.batch, g.b.batch_stride);
        layout(p.lb, g.k, g.m, g.a.ld, g.batch, g.a.batch_stride);
        layout(p.lc, g.n, g.m, g.ldc, g.batch, g.c_batch_stride);
        cublasLtMatmulPreference_t pref;
        LT(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t w = ws_bytes;
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof w));
        cublasLtMatmulHeuristicResult_t r{};
        int found = 0;
        LT(cublasLtMatmulAlgoGetHeuristic(h, p.d, p.la, p.lb, p.lc, p.lc, pref, 1, &r, &found));
        if (!found) {
            fprintf(stderr, "cuBLASLt: no algorithm\n");
            exit(1);
        }
        p.algo = r.algo;
        return p;
    }
    void run(const GemmDesc& g, const Plan& p) {
        const float one = 1.f, zero = 0.f;
        LT(cublasLtMatmul(h, p.d, &one, g.b.data, p.la, g.a.data, p.lb, &zero, g.c, p.lc, g.c, p.lc, &p.algo, ws, ws_bytes, 0));
    }
};

__global__ void fill_random(unsigned short* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned x = (unsigned)i * 2654435761u ^ seed;
        x ^= x >> 15;
        x *= 2246822519u;
        x ^= x >> 13;
        x *= 3266489917u;
        x ^= x >> 16;
        const float f = ((x & 0xffffff) / 16777216.f) * 2.f - 1.f;
        unsigned u;
        memcpy(&u, &f, 4);
        p[i] = (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
}
static void rand_fill(void* p, size_t n, unsigned seed) {
    fill_random<<<1024, 256>>>((unsigned short*)p, n, seed);
    CK(cudaGetLastError());
}
static double bf(unsigned short v) {
    unsigned u = (unsigned)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Buffers of one product: A, B, C sized from the descriptor's strides (+ one poisoned guard row of C).
struct Bufs {
    void *a, *b, *c;
    size_t na, nb, nc;
};
static size_t extent(int64_t rows, int64_t ld, int batch, int64_t bs, int64_t cols) {
    return (size_t)((batch - 1) * bs + (rows - 1) * ld + cols);
}

static int g_fail = 0;

// Checks sampled rows of every batch entry against float64, and that C outside [M, N] of each entry kept
// its poison (the guard row after the last row, the padding columns of the sampled rows).
static void check(const char* name, const GemmDesc& g, int bn, int bm = 0) {
    const size_t nc = extent(g.m + 1, g.ldc, g.batch, g.c_batch_stride, g.ldc);
    CK(cudaMemset(g.c, 0xff, nc * 2));  // 0xffff: a NaN, never a product of finite inputs
    CK(ours(g, bn, bm));
    CK(cudaDeviceSynchronize());
    std::vector<unsigned short> hc(nc);
    CK(cudaMemcpy(hc.data(), g.c, nc * 2, cudaMemcpyDeviceToHost));
    const size_t na = extent(g.m, g.a.ld, g.batch, g.a.batch_stride, g.k);
    const size_t nb = g.b.transposed ? extent(g.n, g.b.ld, g.batch, g.b.batch_stride, g.k) : extent(g.k, g.b.ld, g.batch, g.b.batch_stride, g.n);
    std::vector<unsigned short> ha(na), hb(nb);
    CK(cudaMemcpy(ha.data(), g.a.data, na * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), g.b.data, nb * 2, cudaMemcpyDeviceToHost));
    std::mt19937 rng(7);
    double worst = 0;
    long bad = 0, checked = 0, poison_bad = 0;
    const int bsample = std::min(g.batch, 4);
    for (int bi = 0; bi < bsample; ++bi) {
        const int b = bi == bsample - 1 ? g.batch - 1 : bi;
        std::vector<int64_t> rows;
        if (g.m <= 48) for (int64_t r = 0; r < g.m; ++r) rows.push_back(r);
        else {
            rows = {0, g.m - 1, std::min<int64_t>(63, g.m - 1), std::min<int64_t>(64, g.m - 1), std::min<int64_t>(127, g.m - 1), std::min<int64_t>(128, g.m - 1)};
            for (int i = 0; i < 24; ++i) rows.push_back(rng() % g.m);
        }
        const int64_t ncols = std::min<int64_t>(g.n, 4096);
        for (int64_t r : rows) {
            for (int64_t jj = 0; jj < ncols; ++jj) {
                const int64_t j = g.n <= 4096 ? jj : (int64_t)(rng() % g.n);
                double ref = 0;
                for (int64_t k = 0; k < g.k; ++k) {
                    const double av = bf(ha[b * g.a.batch_stride + r * g.a.ld + k]);
                    const double bv = g.b.transposed ? bf(hb[b * g.b.batch_stride + j * g.b.ld + k]) : bf(hb[b * g.b.batch_stride + k * g.b.ld + j]);
                    ref += av * bv;
                }
                const double got = bf(hc[b * g.c_batch_stride + r * g.ldc + j]);
                const double err = std::fabs(got - ref);
                const double tol = std::fabs(ref) / 128.0 + 1e-3;  // bf16 output rounding (2^-9 relative) with margin
                ++checked;
                if (!(err <= tol)) ++bad;
                if (std::isfinite(err)) worst = std::max(worst, err / tol);
                else worst = 1e30;
            }
            const int64_t row_end = g.batch > 1 && g.c_batch_stride < g.ldc ? g.c_batch_stride : g.ldc;  // this entry's padding
            for (int64_t j = g.n; j < row_end && j < g.n + 8; ++j)
                if (hc[b * g.c_batch_stride + r * g.ldc + j] != 0xffff) ++poison_bad;
        }
    }
    // The guard row after the last batch entry's last row must be untouched (the store clips M).
    if (g.batch == 1 || g.c_batch_stride < g.ldc || g.c_batch_stride > g.ldc * g.m)
        for (int b : {0, g.batch - 1})
            for (int64_t j = 0; j < g.n; ++j) {
                const size_t at = b * g.c_batch_stride + g.m * g.ldc + j;
                if (at < nc && hc[at] != 0xffff) ++poison_bad;
            }
    const bool ok = bad == 0 && poison_bad == 0;
    if (!ok) ++g_fail;
    const mlajit::GemmSm90Tile t = tile_of(g, bn, bm);
    printf("CHECK %-34s M=%-6lld N=%-6lld K=%-4lld batch=%-4d tile %dx%d: %s (%ld values, %ld outside tolerance, worst err/tol %.3f, "
           "%ld poison overwritten)\n",
           name, (long long)g.m, (long long)g.n, (long long)g.k, g.batch, t.block_m, t.block_n, ok ? "PASS" : "FAIL",
           checked, bad, worst, poison_bad);
}

static float time_ms(const std::function<void()>& f, int iters) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) f();
    CK(cudaEventRecord(e0));
    for (int i = 0; i < iters; ++i) f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / iters;
}

struct Row {
    std::string name;
    double ms_ours, ms_lt, tf_ours, tf_lt;
};
static std::vector<Row> g_rows;

static void bench(const char* name, const GemmDesc& g, Lt& lt, int bn = 0, int bm = 0) {
    const double flop = 2.0 * g.m * g.n * g.k * g.batch;
    const int iters = flop > 1e11 ? 10 : flop > 1e9 ? 50 : 200;
    auto plan = lt.plan(g);
    const float mo = time_ms([&] { CK(ours(g, bn, bm)); }, iters);
    const float ml = time_ms([&] { lt.run(g, plan); }, iters);
    CK(cudaDeviceSynchronize());
    char buf[160];
    const mlajit::GemmSm90Tile t = tile_of(g, bn, bm);
    snprintf(buf, sizeof buf, "%s %dx%d", name, t.block_m, t.block_n);
    g_rows.push_back({buf, mo, ml, flop / mo / 1e9, flop / ml / 1e9});
}

// The three projections of the one-call prefill (src/ops/mla_prefill_op.cpp), on buffers shaped like theirs.
struct Shapes {
    void *kvc, *w, *up, *qn, *qm, *lat, *out;
};
static GemmDesc up_proj(const Shapes& s, int64_t m, int heads) {  // kv_c [M, 576] . W_kv_b^T -> [M, heads*256]
    GemmDesc g;
    g.m = m;
    g.n = heads * 256;
    g.k = 512;
    g.a = {s.kvc, 576, 0, false};
    g.b = {s.w, 512, 0, true};
    g.c = s.up;
    g.ldc = g.n;
    return g;
}
static GemmDesc absorb(const Shapes& s, int64_t m, int heads) {  // q_nope [M, h, 128] . W_UK_h -> q [M, h, 576][:512]
    GemmDesc g;
    g.m = m;
    g.n = 512;
    g.k = 128;
    g.batch = heads;
    g.a = {s.qn, heads * 128, 128, false};
    g.b = {s.w, 512, 256 * 512, false};
    g.c = s.qm;
    g.ldc = heads * 576;
    g.c_batch_stride = 576;
    return g;
}
static GemmDesc out_proj(const Shapes& s, int64_t m, int heads) {  // latent [M, h, 512] . W_UV_h^T -> out [M, h, 128]
    GemmDesc g;
    g.m = m;
    g.n = 128;
    g.k = 512;
    g.batch = heads;
    g.a = {s.lat, heads * 512, 512, false};
    g.b = {(char*)s.w + 128 * 512 * 2, 512, 256 * 512, true};
    g.c = s.out;
    g.ldc = heads * 128;
    g.c_batch_stride = 128;
    return g;
}

int main(int argc, char** argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    CK(cudaFree(0));
    CK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib) gemm90_encode = (mlajit::GemmTensorMapEncodeFn)dlsym(lib, "cuTensorMapEncodeTiled");
    if (!gemm90_encode) {
        fprintf(stderr, "no cuTensorMapEncodeTiled\n");
        return 1;
    }
    const int64_t MMAX = 8192 + 1, H = 128;
    Shapes s;
    auto alloc = [](void** p, size_t elems, unsigned seed) {
        CK(cudaMalloc(p, elems * 2));
        rand_fill(*p, elems, seed);
    };
    alloc(&s.kvc, MMAX * 576, 1);
    alloc(&s.w, H * 256 * 512, 2);
    alloc(&s.qn, MMAX * H * 128, 3);
    alloc(&s.lat, MMAX * H * 512, 4);
    alloc(&s.up, (MMAX + 1) * H * 256, 0);
    alloc(&s.qm, (MMAX + 1) * H * 576, 0);
    alloc(&s.out, (MMAX + 1) * H * 128, 0);
    CK(cudaDeviceSynchronize());

    // ---- correctness: odd M, batch, strided ld, both tile widths ----
    for (int64_t m : {1, 17, 100, 1000, 1337}) {
        check("up-projection h16", up_proj(s, m, 16), 0);
        check("absorption h16", absorb(s, m, 16), 0);
        check("output projection h16", out_proj(s, m, 16), 0);
    }
    for (int bn : {128, 256}) {
        check("up-projection h16 M=50 bm64", up_proj(s, 50, 16), bn, 64);
        check("absorption h16 M=33 bm64", absorb(s, 33, 16), bn, 64);
        check("up-projection h16 M=200 bm64", up_proj(s, 200, 16), bn, 64);
        check("up-projection h128", up_proj(s, 1000, 128), bn);
        check("absorption h128", absorb(s, 777, 128), bn);
    }
    check("output projection h16 M=40 bm64", out_proj(s, 40, 16), 128, 64);
    check("up-projection h128 M8192", up_proj(s, 8192, 128), 0);
    check("absorption h128 M8192", absorb(s, 8192, 128), 0);
    check("output projection h128 M8192", out_proj(s, 8192, 128), 0);
    {  // a padded C (ldc > N) and an A with a larger ld: strided everything
        GemmDesc g = up_proj(s, 999, 16);
        g.ldc = g.n + 64;
        g.a.ld = 1152;
        check("up-projection h16 ldc+64 lda1152", g, 0);
    }
    if (quick) return g_fail ? 1 : 0;

    // ---- timing beside cuBLASLt ----
    Lt lt;
    for (int hh : {128, 16})
        for (int64_t m : {8192, 1000, 16}) {
            char n[64];
            snprintf(n, sizeof n, "(a) up M=%lld N=%d", (long long)m, hh * 256);
            bench(n, up_proj(s, m, hh), lt);
        }
    bench("(a) up M=8192 N=32768", up_proj(s, 8192, 128), lt, 128);
    bench("(a) up M=16 N=32768", up_proj(s, 16, 128), lt, 256, 64);
    bench("(a) up M=16 N=32768", up_proj(s, 16, 128), lt, 128, 128);
    bench("(a) up M=16 N=4096", up_proj(s, 16, 16), lt, 128, 128);
    bench("(a) up M=64 N=32768", up_proj(s, 64, 128), lt);
    bench("(a) up M=100 N=32768", up_proj(s, 100, 128), lt);
    for (int hh : {128, 16}) {
        char n[64];
        snprintf(n, sizeof n, "(b) absorb M=8192 h=%d", hh);
        bench(n, absorb(s, 8192, hh), lt);
        bench(n, absorb(s, 8192, hh), lt, hh == 128 ? 128 : 256);
        snprintf(n, sizeof n, "(c) outproj M=8192 h=%d", hh);
        bench(n, out_proj(s, 8192, hh), lt);
    }
    bench("(b) absorb M=16 h=128", absorb(s, 16, 128), lt);
    bench("(b) absorb M=16 h=128", absorb(s, 16, 128), lt, 256, 64);
    bench("(b) absorb M=16 h=128", absorb(s, 16, 128), lt, 256, 128);
    bench("(c) outproj M=16 h=128", out_proj(s, 16, 128), lt);
    bench("(c) outproj M=16 h=128", out_proj(s, 16, 128), lt, 128, 128);
    bench("(b) absorb M=16 h=16", absorb(s, 16, 16), lt);
    bench("(c) outproj M=16 h=16", out_proj(s, 16, 16), lt);
    bench("(b) absorb M=1000 h=128", absorb(s, 1000, 128), lt);
    bench("(c) outproj M=1000 h=128", out_proj(s, 1000, 128), lt);
    printf("\n%-36s %10s %10s %9s %9s %8s\n", "shape", "ours ms", "cublasLt", "ours TF", "Lt TF", "Lt/ours");
    for (auto& r : g_rows)
        printf("%-36s %10.4f %10.4f %9.1f %9.1f %8.3f\n", r.name.c_str(), r.ms_ours, r.ms_lt, r.tf_ours, r.tf_lt, r.ms_lt / r.ms_ours);
    printf("SUMMARY checks %s\n", g_fail ? "FAILED" : "passed");
    return g_fail ? 1 : 0;
}
