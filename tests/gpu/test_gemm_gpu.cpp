// The projections' GEMM (ops/gemm.h) on the GPU: mlajit's own kernel on the Hopper tier (cuBLASLt elsewhere)
// at the one-call prefill's three shapes, odd token counts, batches of heads and strided layouts, against a
// float64 reference; outputs poisoned first, and C's padding and the row after the last must stay poisoned.
// A product the kernel cannot read (a base address off 16 bytes) must run on cuBLASLt, still right.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gpu_fixture.h"
#include "mlajit/mlajit.hpp"
#include "ops/gemm.h"
#include "ops/kernel_configs.h"
#include "ops/ops.h"
#include "reference/bf16.h"
#include "runtime/handle.h"

namespace mlajit::test {
namespace {

namespace R = mlajit::ref;

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = R::float_to_bf16(u(rng));
    return v;
}

// One projection-shaped product on device buffers sized from its strides. The descriptor's pointers are
// offsets (in elements) into the buffers until bind() sets them.
struct Case {
    const char* name;
    GemmDesc g;
    size_t a_off = 0, b_off = 0, c_off = 0;
};

size_t extent(int64_t rows, int64_t ld, int batch, int64_t bs, int64_t cols) {
    return size_t((batch - 1) * bs + (rows - 1) * ld + cols);
}

// kv_c [M, 576] . W_kv_b^T ([heads * 256, 512]) -> [M, heads * 256]
Case up_projection(int64_t m, int heads) {
    Case c{"K/V up-projection"};
    c.g.m = m;
    c.g.n = heads * 256;
    c.g.k = 512;
    c.g.a = {nullptr, 576, 0, false};
    c.g.b = {nullptr, 512, 0, true};
    c.g.ldc = c.g.n;
    return c;
}
// q_nope [M, heads, 128] . W_UK_h ([128, 512] rows of W_kv_b, head stride 256 rows) -> q [M, heads, 576][:512]
Case absorption(int64_t m, int heads) {
    Case c{"query absorption"};
    c.g.m = m;
    c.g.n = 512;
    c.g.k = 128;
    c.g.batch = heads;
    c.g.a = {nullptr, heads * 128, 128, false};
    c.g.b = {nullptr, 512, 256 * 512, false};
    c.g.ldc = heads * 576;
    c.g.c_batch_stride = 576;
    return c;
}
// latent [M, heads, 512] . W_UV_h^T ([128, 512] rows 128..255 of each head's W_kv_b block) -> out [M, heads, 128]
Case output_projection(int64_t m, int heads) {
    Case c{"output projection"};
    c.g.m = m;
    c.g.n = 128;
    c.g.k = 512;
    c.g.batch = heads;
    c.g.a = {nullptr, heads * 512, 512, false};
    c.g.b = {nullptr, 512, 256 * 512, true};
    c.b_off = 128 * 512;
    c.g.ldc = heads * 128;
    c.g.c_batch_stride = 128;
    return c;
}

// Runs c through the handle's GemmRunner on fresh random inputs and checks it. Tolerance per element:
// |got - ref| <= |ref| / 128 + 1e-3 (the bf16 output's rounding is at most |ref| * 2^-9; fp32 accumulation
// of 512 products of magnitude <= 1 adds ~1e-5).
void run_case(Gpu* G, Case c, uint32_t seed) {
    GemmDesc& g = c.g;
    CAPTURE(c.name);
    CAPTURE(g.m);
    CAPTURE(g.batch);
    const size_t na = c.a_off + extent(g.m, g.a.ld, g.batch, g.a.batch_stride, g.k);
    const size_t nb = c.b_off + (g.b.transposed ? extent(g.n, g.b.ld, g.batch, g.b.batch_stride, g.k)
                                                : extent(g.k, g.b.ld, g.batch, g.b.batch_stride, g.n));
    const size_t nc = c.c_off + extent(g.m + 1, g.ldc, g.batch, g.c_batch_stride, g.ldc);  // + a guard row
    const std::vector<uint16_t> ha = random_bf16(na, seed), hb = random_bf16(nb, seed + 1);
    DeviceBuffer<uint16_t> da(ha), db(hb), dc(nc);  // dc poisoned: 0xffff is a NaN
    g.a.data = da.get() + c.a_off;
    g.b.data = db.get() + c.b_off;
    g.c = dc.get() + c.c_off;
    {
        Handle& h = handle_of(G->handle);
        ScopedContext scope(h.context());
        DeviceBuffer<uint8_t> ws(kGemmWorkspaceBytes, 0);
        h.gemm().run(g, ws.get(), kGemmWorkspaceBytes, G->stream, c.name);
        MLAJIT_CU(cuStreamSynchronize(G->stream), "waiting for the GEMM");
    }
    const std::vector<uint16_t> hc = dc.download();
    std::mt19937 rng(seed + 2);
    int64_t bad = 0, poison = 0, checked = 0;
    double worst = 0;
    for (int b : {0, g.batch / 2, g.batch - 1}) {
        std::vector<int64_t> rows;
        if (g.m <= 40)
            for (int64_t r = 0; r < g.m; ++r) rows.push_back(r);
        else {
            rows = {0, 63, 64, 127, 128, g.m - 1};
            for (int i = 0; i < 10; ++i) rows.push_back(int64_t(rng() % g.m));
        }
        for (int64_t r : rows) {
            if (r >= g.m) continue;
            for (int64_t j = 0; j < g.n; j += (g.n > 1024 ? 7 : 1)) {
                double ref = 0;
                for (int64_t k = 0; k < g.k; ++k) {
                    const double av = R::bf16_to_double(ha[c.a_off + b * g.a.batch_stride + r * g.a.ld + k]);
                    const size_t bi = c.b_off + b * g.b.batch_stride + (g.b.transposed ? j * g.b.ld + k : k * g.b.ld + j);
                    ref += av * R::bf16_to_double(hb[bi]);
                }
                const double got = R::bf16_to_double(hc[c.c_off + b * g.c_batch_stride + r * g.ldc + j]);
                const double tol = std::fabs(ref) / 128 + 1e-3;
                const double err = std::fabs(got - ref);
                ++checked;
                if (!(err <= tol)) ++bad;
                worst = std::isfinite(err) ? std::max(worst, err / tol) : INFINITY;
            }
            // This entry's padding columns (ldc or the batch stride past N) stay poisoned.
            const int64_t row_end = g.batch > 1 && g.c_batch_stride < g.ldc ? g.c_batch_stride : g.ldc;
            for (int64_t j = g.n; j < row_end; ++j) poison += hc[c.c_off + b * g.c_batch_stride + r * g.ldc + j] != 0xffff;
        }
        // The row after the last (the guard row; for batch-outer layouts only after the last entry).
        if (g.batch == 1 || g.c_batch_stride < g.ldc || b == g.batch - 1)
            for (int64_t j = 0; j < g.n; ++j) poison += hc[c.c_off + b * g.c_batch_stride + g.m * g.ldc + j] != 0xffff;
    }
    MESSAGE(c.name << " M " << g.m << " N " << g.n << " K " << g.k << " batch " << g.batch << ": " << checked
                   << " values, worst err/tol " << worst);
    CHECK(bad == 0);
    CHECK(poison == 0);
}

}  // namespace

TEST_CASE("gpu: projection GEMM (JIT kernel on Hopper) at odd M, batches of heads and strided layouts vs float64") {
    MLAJIT_REQUIRE_GPU();
    GemmRunner& gemm = handle_of(G->handle).gemm();
    const int64_t jit0 = gemm.jit_runs(), lt0 = gemm.cublaslt_runs();
    uint32_t seed = 100;
    int runs = 0;
    for (int64_t m : {1, 17, 64, 100, 1037}) {
        run_case(G, up_projection(m, 16), seed += 10);
        run_case(G, absorption(m, 16), seed += 10);
        run_case(G, output_projection(m, 16), seed += 10);
        runs += 3;
    }
    // 128 heads: the widest up-projection (N 32768) and the batch of 128 heads.
    run_case(G, up_projection(333, 128), seed += 10);
    run_case(G, absorption(200, 128), seed += 10);
    run_case(G, output_projection(129, 128), seed += 10);
    runs += 3;
    {  // strided everything: a padded C, an A with a longer row, both off the buffers' starts (16-byte aligned)
        Case c = up_projection(999, 16);
        c.g.ldc = c.g.n + 64;
        c.g.a.ld = 1152;
        c.a_off = 8;
        c.c_off = 24;
        run_case(G, c, seed += 10);
        ++runs;
    }
    if (gemm.jit()) {
        CHECK(gemm.jit_runs() - jit0 == runs);
        CHECK(gemm.cublaslt_runs() == lt0);
    } else {
        CHECK(gemm.cublaslt_runs() - lt0 == runs);
    }
}

TEST_CASE("gpu: projection GEMM: a product the JIT kernel cannot read (base off 16 bytes) runs on cuBLASLt, right") {
    MLAJIT_REQUIRE_GPU();
    GemmRunner& gemm = handle_of(G->handle).gemm();
    const int64_t jit0 = gemm.jit_runs(), lt0 = gemm.cublaslt_runs();
    Case c = output_projection(77, 4);
    c.a_off = 2;  // 4 bytes: TMA needs 16
    run_case(G, c, 7);
    CHECK(gemm.jit_runs() == jit0);
    CHECK(gemm.cublaslt_runs() - lt0 == 1);
}

// The paged-A up-projection (issue 15) beside the dense one on the same rows, and the unfused way (the
// paged_gather kernel, then the dense product): C bit-identical, k_pe rows copied, and each timed (median of
// 15 launches, events; FIGURE lines). One request of 8192 keys in shuffled pages of 64 and of 1.
TEST_CASE("gpu: projection GEMM: the up-projection reading the pages (A_PAGED) equals dense A; timings") {
    MLAJIT_REQUIRE_GPU();
    Handle& h = handle_of(G->handle);
    if (!h.gemm().jit()) {
        MESSAGE("skipped: the paged-A GEMM runs on the Hopper tier only");
        return;
    }
    ScopedContext scope(h.context());
    const int64_t M = 8192;
    std::mt19937 rng(11);
    for (int64_t heads : {16, 128})
        for (int64_t bs : {64, 1}) {
            CAPTURE(heads);
            CAPTURE(bs);
            const int64_t N = heads * 256, pages = (M + bs - 1) / bs, num_blocks = 2 * pages + 1;
            std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            std::vector<int32_t> table(perm.begin(), perm.begin() + pages), cu{0, int32_t(M)};
            const auto pool = random_bf16(size_t(num_blocks * bs * 576), uint32_t(bs + heads));
            std::vector<uint16_t> rows(size_t(M * 576));
            for (int64_t i = 0; i < M; ++i)
                std::copy_n(pool.begin() + (table[size_t(i / bs)] * bs + i % bs) * 576, 576, rows.begin() + i * 576);
            const auto w = random_bf16(size_t(N * 512), 5);
            DeviceBuffer<uint16_t> dpool(pool), drows(rows), dw(w), dc(size_t(M * N)), dcp(size_t(M * N)), dkpe(size_t(M * 64)),
                dgather(size_t(M * 576));
            DeviceBuffer<int32_t> dtable(table), dcu(cu);
            GemmDesc g;
            g.m = M;
            g.n = N;
            g.k = 512;
            g.a = {drows.get(), 576, 0, false};
            g.b = {dw.get(), 512, 0, true};
            g.c = dc.get();
            g.ldc = N;
            GemmPagedA pa;
            pa.pages = dpool.get();
            pa.page_stride = bs * 576;
            pa.tok_stride = 576;
            pa.block_table = dtable.get();
            pa.bt_stride = pages;
            pa.cu_seqlens_k = dcu.get();
            pa.nreq = 1;
            pa.block_size = int(bs);
            pa.num_blocks = int(num_blocks);
            pa.max_blocks = int(pages);
            pa.kpe_out = dkpe.get();
            GemmDesc gp = g;
            gp.c = dcp.get();
            GemmDesc gg = g;  // the unfused way: gathered rows, then the dense product
            gg.a = {dgather.get(), 576, 0, false};
            gg.c = dcp.get();
            PagedGather pg;
            pg.kv_cache = contiguous_tensor(dpool.get(), MLAJIT_BF16, {num_blocks, bs, 576});
            pg.block_table = contiguous_tensor(dtable.get(), MLAJIT_INT32, {1, pages});
            pg.cu_seqlens_k = dcu.get();
            pg.r0 = 0;
            pg.r1 = 1;
            pg.max_s_k = M;
            pg.dst = dgather.get();
            pg.dst_stride = 576;
            CUevent e0, e1;
            MLAJIT_CU(cuEventCreate(&e0, CU_EVENT_DEFAULT), "event");
            MLAJIT_CU(cuEventCreate(&e1, CU_EVENT_DEFAULT), "event");
            auto time = [&](auto&& launch) {
                for (int i = 0; i < 3; ++i) launch();
                std::vector<float> ms;
                for (int i = 0; i < 15; ++i) {
                    MLAJIT_CU(cuEventRecord(e0, G->stream), "event");
                    launch();
                    MLAJIT_CU(cuEventRecord(e1, G->stream), "event");
                    MLAJIT_CU(cuEventSynchronize(e1), "event");
                    float t = 0;
                    MLAJIT_CU(cuEventElapsedTime(&t, e0, e1), "event");
                    ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                return ms[ms.size() / 2];
            };
            const float t_dense = time([&] { h.gemm().run(g, nullptr, 0, G->stream, "dense up-projection"); });
            const float t_paged = time([&] { h.gemm().run_paged(gp, pa, G->stream, "paged up-projection"); });
            const auto c_dense = dc.download(), c_paged = dcp.download(), kpe = dkpe.download();
            const float t_gather = time([&] { paged_gather(h, pg, G->stream); });
            const float t_unfused = time([&] {
                paged_gather(h, pg, G->stream);
                h.gemm().run(gg, nullptr, 0, G->stream, "gathered up-projection");
            });
            MLAJIT_CU(cuEventDestroy(e0), "event");
            MLAJIT_CU(cuEventDestroy(e1), "event");
            int64_t diff = 0, kpe_diff = 0;
            for (size_t i = 0; i < c_dense.size(); ++i) diff += c_dense[i] != c_paged[i];
            for (int64_t i = 0; i < M; ++i)
                for (int64_t j = 0; j < 64; ++j) kpe_diff += kpe[size_t(i * 64 + j)] != rows[size_t(i * 576 + 512 + j)];
            CHECK(diff == 0);
            CHECK(kpe_diff == 0);
            MESSAGE("FIGURE up-projection M " << M << " N " << N << " block_size " << bs << ": dense A " << t_dense * 1e3
                                               << " us, A from the pages " << t_paged * 1e3 << " us (" << t_paged / t_dense
                                               << "x), gather alone " << t_gather * 1e3 << " us, gather + dense "
                                               << t_unfused * 1e3 << " us");
        }
}

}  // namespace mlajit::test
