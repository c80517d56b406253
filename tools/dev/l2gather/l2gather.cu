// The L2 gather ceiling: how fast can an H100 / H200 read whole latent rows picked at random from an L2-resident
// cache, with nothing else running? The sparse MQA kernels at 16 and 32 heads are bound by their gather (docs/PERF.md),
// so this says how close to the hardware they are and what issue 13's 16-head goal needs.
// Rows as the benchmark's 8k case draws them: s_kv = 8192 keys, 8192 query tokens x 2048 indices, 1/8 of them -1.
// Kernels (each reads every valid row once; results folded into one word per thread so nothing is optimized away):
//   ldg    : a warp reads a row with 16-byte loads (lanes over the row's chunks), W warps per block, blocks fill the GPU
//   ldg2   : the same with two rows in flight per warp (loads of row i + 1 issued before row i is folded)
//   bulk   : one cp.async.bulk a row into a shared-memory ring (mbarrier transaction counts), R rows in flight a block;
//            thread 0 reads a batch's indices one after another and issues every copy (that form, not a bulk ceiling)
// Usage: l2gather [row_bytes (1152)] [reps (5)]. Prints ms and TB/s of valid rows for each kernel and occupancy.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

__global__ void fill_rows(uint4* kv, long long n16) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += (long long)gridDim.x * blockDim.x)
        kv[i] = make_uint4((unsigned)i, (unsigned)(i * 3), (unsigned)(i * 5), (unsigned)(i * 7));
}

// Fresh indices: a splitmix hash of (token, slot, seed); 1 in 8 slots -1.
__global__ void fill_idx(int* idx, long long n, int s_kv, unsigned seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = (unsigned long long)i + 0x9e3779b97f4a7c15ull * (seed + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        idx[i] = (z & 7) == 0 ? -1 : (int)((z >> 3) % (unsigned long long)s_kv);
    }
}

// A warp per row, NROW rows in flight a warp: row16 16-byte chunks a row, three passes of 32 lanes (the last one masked).
template <int NROW>
__global__ void gather_ldg(const uint4* __restrict__ kv, const int* __restrict__ idx, long long n, int row16,
                           unsigned* sink) {
    const int lane = threadIdx.x & 31;
    const long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    unsigned acc = 0;
    for (long long r = warp * NROW; r < n; r += nwarps * NROW) {
        uint4 v[NROW][3];
#pragma unroll
        for (int j = 0; j < NROW; ++j) {
            const int k = r + j < n ? __ldg(idx + r + j) : -1;
#pragma unroll
            for (int c = 0; c < 3; ++c) {
                const int ch = lane + 32 * c;
                v[j][c] = k >= 0 && ch < row16 ? __ldcg(kv + (long long)k * row16 + ch) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int j = 0; j < NROW; ++j)
#pragma unroll
            for (int c = 0; c < 3; ++c) acc ^= v[j][c].x ^ v[j][c].y ^ v[j][c].z ^ v[j][c].w;
    }
    if (acc == 0x12345678u) sink[0] = acc;  // practically never: keeps the loads
}

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// One cp.async.bulk a row, issued by lane 0 of warp 0 into a ring of RING row slots (each row_bytes rounded to 16),
// grouped in batches of B rows per mbarrier; the block waits for a batch before reusing its slots. Reads back one
// word a row so the copies count.
template <int RING, int B>
__global__ void gather_bulk(const unsigned char* __restrict__ kv, const int* __restrict__ idx, long long n, int row_bytes,
                            unsigned* sink) {
    extern __shared__ __align__(128) unsigned char sm[];
    constexpr int kBatches = RING / B;
    __shared__ __align__(8) unsigned long long bar[kBatches];
    const int tid = threadIdx.x;
    if (tid == 0)
        for (int b = 0; b < kBatches; ++b) asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(smem_u32(&bar[b])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    const long long per_block = (n + gridDim.x - 1) / gridDim.x;
    const long long r0 = blockIdx.x * per_block, r1 = min(n, r0 + per_block);
    const long long nb = (r1 - r0 + B - 1) / B;  // batches of this block
    unsigned acc = 0;
    auto issue = [&](long long batch) {  // thread 0 only
        const int slot = (int)(batch % kBatches);
        const long long rb = r0 + batch * B;
        int bytes = 0;
        int keys[B];
        for (int j = 0; j < B; ++j) {
            keys[j] = rb + j < r1 ? idx[rb + j] : -1;
            if (keys[j] >= 0) bytes += row_bytes;
        }
        const unsigned b = smem_u32(&bar[slot]);
        asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
        for (int j = 0; j < B; ++j)
            if (keys[j] >= 0)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                                 smem_u32(sm + (slot * B + j) * row_bytes)),
                             "l"(kv + (long long)keys[j] * row_bytes), "r"(row_bytes), "r"(b)
                             : "memory");
    };
    if (tid == 0)
        for (long long b = 0; b < nb && b < kBatches; ++b) issue(b);
    for (long long b = 0; b < nb; ++b) {
        const int slot = (int)(b % kBatches);
        const unsigned bb = smem_u32(&bar[slot]);
        const unsigned parity = (unsigned)((b / kBatches) & 1);
        unsigned done = 0;
        while (!done)
            asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                         : "=r"(done) : "r"(bb), "r"(parity) : "memory");
        if (tid < B) acc ^= *(const unsigned*)(sm + (slot * B + tid) * row_bytes);
        __syncthreads();  // everyone read the slot before it is refilled
        if (tid == 0 && b + kBatches < nb) issue(b + kBatches);
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

template <class F>
static float time_ms(F launch, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    launch(); CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(a)); launch(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main(int argc, char** argv) {
    const int row_bytes = argc > 1 ? atoi(argv[1]) : 1152;
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (row_bytes % 16 != 0 || row_bytes > 1536) { printf("row_bytes must be a multiple of 16, <= 1536\n"); return 2; }
    const int s_kv = 8192, tokens = 8192, topk = 2048;
    const long long n = (long long)tokens * topk;
    int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    unsigned char* kv; int* idx; unsigned* sink;
    CK(cudaMalloc(&kv, (size_t)s_kv * row_bytes)); CK(cudaMalloc(&idx, n * 4)); CK(cudaMalloc(&sink, 4));
    fill_rows<<<1024, 256>>>((uint4*)kv, (long long)s_kv * row_bytes / 16);
    fill_idx<<<4096, 256>>>(idx, n, s_kv, (unsigned)time(nullptr));
    CK(cudaDeviceSynchronize());
    std::vector<int> h(n); CK(cudaMemcpy(h.data(), idx, n * 4, cudaMemcpyDeviceToHost));
    long long valid = 0; for (long long i = 0; i < n; ++i) valid += h[i] >= 0;
    const double bytes = (double)valid * row_bytes;
    printf("%s, %d SMs, L2 %d MB; rows %d bytes, %lld valid of %lld (%.3f), cache %.1f MB, %.2f GB gathered\n", prop.name, sms,
           prop.l2CacheSize >> 20, row_bytes, valid, n, (double)valid / n, s_kv * row_bytes / 1e6, bytes / 1e9);
    printf("%-28s %10s %10s\n", "kernel", "ms", "TB/s");
    auto report = [&](const char* name, float ms) { printf("%-28s %10.3f %10.2f\n", name, ms, bytes / ms / 1e9); };
    const int row16 = row_bytes / 16;
    for (int warps : {8, 16, 32}) {
        for (int per_sm : {1, 2, 4, 8}) {
            if (warps * per_sm > 64) continue;
            const int grid = sms * per_sm;
            char name[64];
            snprintf(name, sizeof name, "ldg %2d warps x %d/SM", warps, per_sm);
            report(name, time_ms([&] { gather_ldg<1><<<grid, warps * 32>>>((const uint4*)kv, idx, n, row16, sink); }, reps));
            snprintf(name, sizeof name, "ldg2 %2d warps x %d/SM", warps, per_sm);
            report(name, time_ms([&] { gather_ldg<2><<<grid, warps * 32>>>((const uint4*)kv, idx, n, row16, sink); }, reps));
        }
    }
    auto bulk = [&](auto kern, int ring, int per_sm, const char* tag) {
        const int smem = ring * row_bytes;
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        char name[64];
        snprintf(name, sizeof name, "bulk %s x %d/SM", tag, per_sm);
        report(name, time_ms([&] { kern<<<sms * per_sm, 128, smem>>>(kv, idx, n, row_bytes, sink); }, reps));
    };
    bulk(gather_bulk<128, 16>, 128, 1, "ring 128 b16");
    bulk(gather_bulk<64, 16>, 64, 2, "ring 64 b16");
    bulk(gather_bulk<32, 8>, 32, 4, "ring 32 b8");
    bulk(gather_bulk<128, 32>, 128, 1, "ring 128 b32");
    // Contiguous rows (the same bytes, consecutive keys): what the gather would take without the scatter.
    std::vector<int> seq(n); for (long long i = 0; i < n; ++i) seq[i] = h[i] < 0 ? -1 : (int)(i % s_kv);
    CK(cudaMemcpy(idx, seq.data(), n * 4, cudaMemcpyHostToDevice));
    report("ldg 32 warps x 2/SM, seq", time_ms([&] { gather_ldg<1><<<sms * 2, 1024>>>((const uint4*)kv, idx, n, row16, sink); }, reps));
    CK(cudaFree(kv)); CK(cudaFree(idx)); CK(cudaFree(sink));
    return 0;
}
