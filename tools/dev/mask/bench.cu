// tools/dev/mask: the top-k mask build's variants (wrap.cu objects) checked and timed side by side, with a
// read-only and a copy kernel over the same bytes as the bandwidth reference. Built and run by build_run.sh.
//
// Inputs: DSA-like causal top-k indices (row i of a request: min(topk, i + 1) distinct keys of [0, i] in
// random order, then -1), fresh per run (the seed is printed). Output poisoned with 0xA5 before every
// checked launch; every word compared with a CPU build. Timing: 3 warm-ups, median of 20 launches, rotating
// 3 copies of the inputs (one copy of the S 8k indices is 64 MiB, more than the L2).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "mlajit_abi.h"

#define CK(x)                                                                                              \
    do {                                                                                                   \
        cudaError_t e_ = (x);                                                                              \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            exit(2);                                                                                       \
        }                                                                                                  \
    } while (0)

typedef cudaError_t (*mask_fn)(const TopkMaskParams*, cudaStream_t);
#define DECL(n) extern "C" cudaError_t launch_##n(const TopkMaskParams*, cudaStream_t);
#ifdef WITH_OLD
#define OLD(X) X(old4)
#else
#define OLD(X)
#endif
#define VARIANTS(X) X(r1) X(r2) X(r4) X(r8) OLD(X)
VARIANTS(DECL)
struct Variant {
    const char* name;
    mask_fn fn;
};
#define ENTRY(n) {#n, launch_##n},
static const Variant kVariants[] = {VARIANTS(ENTRY)};

__global__ void read_kernel(const int4* __restrict__ src, size_t n, int* sink) {
    int acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int4 v = src[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7fffffff) sink[0] = acc;  // keeps the loads; never true for these inputs in practice
}
__global__ void copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}

struct Case {
    std::vector<int> s_q, s_k;  // per request
    int topk;
    int64_t idx_stride, mask_words;
    std::vector<int> cu_q, cu_k;
    int total_q = 0, max_q = 0, max_k = 0;
};

static Case make_case(std::vector<int> sq, std::vector<int> sk, int topk, int pad) {
    Case c;
    c.s_q = sq;
    c.s_k = sk;
    c.topk = topk;
    c.idx_stride = topk + pad;
    c.cu_q = {0};
    c.cu_k = {0};
    for (size_t b = 0; b < sq.size(); ++b) {
        c.cu_q.push_back(c.cu_q.back() + sq[b]);
        c.cu_k.push_back(c.cu_k.back() + sk[b]);
        c.max_q = std::max(c.max_q, sq[b]);
        c.max_k = std::max(c.max_k, sk[b]);
    }
    c.total_q = c.cu_q.back();
    c.mask_words = ((c.max_k + 127) / 128) * 4;  // mlajit_topk_mask_words
    return c;
}

static std::vector<int> make_indices(const Case& c, std::mt19937_64& rng) {
    std::vector<int> idx((size_t)c.total_q * c.idx_stride, -7);  // pads: garbage the kernel must not read as keys
    std::vector<int> pool;
    for (size_t b = 0; b < c.s_q.size(); ++b) {
        const int sq = c.s_q[b], sk = c.s_k[b];
        pool.resize(sk);
        for (int i = 0; i < sq; ++i) {
            const int pos = sk - sq + i;  // bottom-right causal: the row's own key position
            const int n = std::min(c.topk, pos + 1);
            for (int j = 0; j <= pos; ++j) pool[j] = j;
            for (int j = 0; j < n; ++j) std::swap(pool[j], pool[j + rng() % (pos + 1 - j)]);  // partial shuffle
            int* row = &idx[(size_t)(c.cu_q[b] + i) * c.idx_stride];
            for (int j = 0; j < c.topk; ++j) row[j] = j < n ? pool[j] : -1;
        }
    }
    return idx;
}

static std::vector<uint32_t> cpu_mask(const Case& c, const std::vector<int>& idx) {
    std::vector<uint32_t> m((size_t)c.total_q * c.mask_words, 0u);
    for (size_t b = 0; b < c.s_q.size(); ++b)
        for (int t = c.cu_q[b]; t < c.cu_q[b + 1]; ++t)
            for (int j = 0; j < c.topk; ++j) {
                const int x = idx[(size_t)t * c.idx_stride + j];
                if (x >= 0 && x < c.s_k[b]) m[(size_t)t * c.mask_words + (x >> 5)] |= 1u << (x & 31);
            }
    return m;
}

struct Dev {
    int* idx[3] = {};
    uint32_t* mask[3] = {};
    int *cu_q = nullptr, *cu_k = nullptr;
};

static TopkMaskParams params(const Case& c, const Dev& d, int set) {
    TopkMaskParams p{};
    p.indices = d.idx[set];
    p.idx_stride_tok = c.idx_stride;
    p.mask = d.mask[set];
    p.mask_stride_row = c.mask_words;
    p.cu_seqlens_q = d.cu_q;
    p.cu_seqlens_k = d.cu_k;
    p.batch = (int)c.s_q.size();
    p.topk = c.topk;
    p.max_seqlen_q = c.max_q;
    return p;
}

template <typename F>
static float median_ms(F&& launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) launch(i);
    std::vector<float> t;
    for (int i = 0; i < 20; ++i) {
        CK(cudaEventRecord(a));
        launch(i);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main() {
    const uint64_t seed = (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
    printf("maskbench seed %llu\n", (unsigned long long)seed);
    std::mt19937_64 rng(seed);
    bool all_ok = true;
    struct Row {
        std::string what;
        float ms;
        double gbs;
    };
    std::vector<Row> table;
    // Checked cases: the perf shapes, a varlen batch with a padded (unaligned: 4-byte loads) index row,
    // prefix context (s_k > s_q), a row longer than one pass at 8 rows (chunked), topk not a multiple of 4.
    struct Spec {
        std::vector<int> sq, sk;
        int topk, pad;
        bool perf;
    };
    const Spec specs[] = {
        {{8192}, {8192}, 2048, 0, true},
        {{16384}, {16384}, 2048, 0, true},
        {{32768}, {32768}, 2048, 0, true},
        {{37, 1, 300, 129}, {37, 5000, 900, 129}, 2048, 3, false},
        {{5, 77}, {70000, 40000}, 1030, 0, false},
        {{64}, {3000}, 2046, 2, false},
    };
    for (const Spec& s : specs) {
        Case c = make_case(s.sq, s.sk, s.topk, s.pad);
        const int sets = s.perf ? 3 : 1;
        Dev d;
        const size_t idx_bytes = (size_t)c.total_q * c.idx_stride * 4, mask_bytes = (size_t)c.total_q * c.mask_words * 4;
        std::vector<int> idx = make_indices(c, rng);
        std::vector<uint32_t> want = cpu_mask(c, idx);
        for (int i = 0; i < sets; ++i) {
            CK(cudaMalloc(&d.idx[i], idx_bytes));
            CK(cudaMalloc(&d.mask[i], mask_bytes));
            CK(cudaMemcpy(d.idx[i], idx.data(), idx_bytes, cudaMemcpyHostToDevice));
        }
        CK(cudaMalloc(&d.cu_q, c.cu_q.size() * 4));
        CK(cudaMalloc(&d.cu_k, c.cu_k.size() * 4));
        CK(cudaMemcpy(d.cu_q, c.cu_q.data(), c.cu_q.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d.cu_k, c.cu_k.data(), c.cu_k.size() * 4, cudaMemcpyHostToDevice));
        std::string shape = "b" + std::to_string(c.s_q.size()) + " s_q " + std::to_string(c.max_q) + " s_k " +
                            std::to_string(c.max_k) + " topk " + std::to_string(c.topk) + (s.pad ? " padded" : "");
        std::vector<uint32_t> got(want.size());
        for (const Variant& v : kVariants) {
            CK(cudaMemset(d.mask[0], 0xA5, mask_bytes));
            TopkMaskParams p = params(c, d, 0);
            CK(v.fn(&p, 0));
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(got.data(), d.mask[0], mask_bytes, cudaMemcpyDeviceToHost));
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < got.size(); ++i)
                if (got[i] != want[i] && bad++ == 0) first = i;
            if (bad) {
                all_ok = false;
                printf("FAIL %-6s %s: %zu of %zu words differ (first word %zu: got %08x want %08x)\n", v.name, shape.c_str(), bad,
                       got.size(), first, got[first], want[first]);
            }
            if (s.perf) {
                TopkMaskParams ps[3] = {params(c, d, 0), params(c, d, 1), params(c, d, 2)};
                const float ms = median_ms([&](int i) { CK(v.fn(&ps[i % 3], 0)); });
                table.push_back({std::string(v.name) + "  " + shape, ms, (idx_bytes + mask_bytes) / (ms * 1e6)});
            }
        }
        if (s.perf) {  // the bandwidth references over the same bytes
            int* sink;
            CK(cudaMalloc(&sink, 4));
            const size_t n4 = idx_bytes / 16;
            const float rd = median_ms([&](int i) { read_kernel<<<132 * 8, 256>>>((const int4*)d.idx[i % 3], n4, sink); });
            table.push_back({"read-only kernel (indices)  " + shape, rd, idx_bytes / (rd * 1e6)});
            int4* dst;
            CK(cudaMalloc(&dst, idx_bytes));
            const float cp = median_ms([&](int i) { copy_kernel<<<132 * 8, 256>>>((const int4*)d.idx[i % 3], dst, n4); });
            table.push_back({"copy kernel (indices, r+w)  " + shape, cp, 2.0 * idx_bytes / (cp * 1e6)});
            CK(cudaFree(dst));
            CK(cudaFree(sink));
        }
        for (int i = 0; i < sets; ++i) {
            CK(cudaFree(d.idx[i]));
            CK(cudaFree(d.mask[i]));
        }
        CK(cudaFree(d.cu_q));
        CK(cudaFree(d.cu_k));
        printf("checked %s: %s\n", shape.c_str(), all_ok ? "all variants ok" : "FAILURES above");
    }
    printf("\n%-52s %9s %9s\n", "variant / reference, shape", "ms", "GB/s");
    for (auto& r : table) printf("%-52s %9.4f %9.0f\n", r.what.c_str(), r.ms, r.gbs);
    printf("MASKBENCH %s\n", all_ok ? "ok" : "FAIL");
    return all_ok ? 0 : 1;
}
